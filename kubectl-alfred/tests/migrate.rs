//! `kubectl alfred migrate --dry-run`, `status` and `journal` on the demo snapshot: the pass
//! that would run, with the journal the snapshot carries (none, one unresolved request, or a
//! malformed one).

use std::process::Command;

const DEMO: &str = "manifests/examples/demo-cluster.yaml";
const EXECUTE: &str = "manifests/examples/alfred-config-execute.yaml";
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn alfred(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(args)
        .current_dir(ROOT)
        .output()
        .expect("run kubectl-alfred");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The demo snapshot with a journal ConfigMap whose `state.json` is `state`.
fn demo_with_journal(name: &str, state: &str) -> String {
    let demo = std::fs::read_to_string(format!("{ROOT}/{DEMO}")).unwrap();
    let journal = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "alfred-dispatch-state", "namespace": "ome", "resourceVersion": "7"},
        "data": {"state.json": state}});
    let path = std::env::temp_dir().join(format!("alfred-{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, format!("{demo}\n---\n{journal}\n")).unwrap();
    path.display().to_string()
}

#[test]
fn a_dry_run_shows_the_one_request_it_would_send() {
    let (code, out, err) = alfred(&[
        "migrate",
        "--dry-run",
        "-f",
        DEMO,
        "--config",
        EXECUTE,
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let pass: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(pass["dryRun"], true);
    assert_eq!(pass["request"]["workload"], "research/deepseek-r1-distill");
    assert_eq!(pass["request"]["sent"], false);
    let payload: serde_json::Value =
        serde_json::from_str(pass["request"]["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["reason"], "NodeUnhealthy");
    assert_eq!(payload["from_node"], "h100-03");
    let rows = pass["recommendations"].as_array().unwrap();
    let withheld: Vec<&str> = rows
        .iter()
        .filter(|r| r["outcome"] == "withheld")
        .map(|r| r["dispatchReason"].as_str().unwrap())
        .collect();
    assert!(
        !withheld.is_empty() && withheld.iter().all(|r| *r == "SerialDispatchLimit"),
        "{withheld:?}"
    );

    let (_, table, _) = alfred(&["migrate", "--dry-run", "-f", DEMO, "--config", EXECUTE]);
    assert!(table.contains("would-submit"), "{table}");
    assert!(table.contains("Dry run: would add to InferenceService research/deepseek-r1-distill"));
    // In recommend-only mode the admitted moves are withheld.
    let (_, table, _) = alfred(&["migrate", "--dry-run", "-f", DEMO]);
    assert!(
        table.contains("Nothing is sent this pass: ExecutionDisabled"),
        "{table}"
    );
}

#[test]
fn a_snapshot_is_read_only() {
    let (code, _, err) = alfred(&["migrate", "-f", DEMO, "--config", EXECUTE]);
    assert_eq!(code, Some(1));
    assert!(err.contains("with -f it only runs with --dry-run"), "{err}");
}

#[test]
fn the_journal_in_the_snapshot_holds_the_pass_back() {
    let entry = serde_json::json!({"uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "workload": {"Namespace": "chat", "Name": "mistral-chat"}, "workloadUID": "isvc-uid-chat-mistral-chat",
        "irName": "mistral-chat-engine", "irUID": "irep-uid-chat-mistral-chat-engine", "component": "engine",
        "instance": 0, "fromNode": "h100-06", "payload": "{}", "sourceFingerprint": "ab",
        "createdAt": "2026-09-28T10:14:30Z", "phase": "submitted", "reason": "RequestSubmitted"});
    let state = serde_json::json!({"version": "v1", "entries": [entry]}).to_string();
    let file = demo_with_journal("unresolved", &state);
    let (code, out, err) = alfred(&["migrate", "--dry-run", "-f", &file, "--config", EXECUTE]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Nothing is sent this pass: UnresolvedRequest (request 7c9e6679-7425-40de-944b-e07fc1f90ae7 for chat/mistral-chat is submitted"), "{out}");
    assert!(
        out.contains("migration-dispatch"),
        "the request's own row: {out}"
    );
    let (_, list, _) = alfred(&["journal", "list", "-f", &file]);
    assert!(
        list.contains("7c9e6679-7425-40de-944b-e07fc1f90ae7") && list.contains("submitted"),
        "{list}"
    );
    let (_, status, _) = alfred(&["status", "-f", &file, "--config", EXECUTE]);
    assert!(
        status.contains("Alfred's unresolved requests: 1"),
        "{status}"
    );
    assert!(
        status.contains("1 in flight of maxInFlightMigrations 3"),
        "{status}"
    );

    let broken = demo_with_journal("broken", r#"{"version":"v1","entries":null}"#);
    let (code, out, err) = alfred(&["migrate", "--dry-run", "-f", &broken, "--config", EXECUTE]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Nothing is sent this pass: JournalUnavailable (dispatch journal alfred-dispatch-state/state.json is unusable:"), "{out}");
    let (code, _, err) = alfred(&["journal", "list", "-f", &broken]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is unusable"), "{err}");
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(broken);
}

#[test]
fn recommend_shows_requests_left_from_execute_mode() {
    let entry = serde_json::json!({"uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "workload": {"Namespace": "chat", "Name": "mistral-chat"}, "workloadUID": "isvc-uid-chat-mistral-chat",
        "irName": "mistral-chat-engine", "irUID": "irep-uid-chat-mistral-chat-engine", "component": "engine",
        "instance": 0, "fromNode": "h100-06", "payload": "{}", "sourceFingerprint": "ab",
        "createdAt": "2026-09-28T10:14:30Z", "phase": "prepared"});
    let state = serde_json::json!({"version": "v1", "entries": [entry]}).to_string();
    let file = demo_with_journal("recommend", &state);
    let (code, out, err) = alfred(&["recommend", "-f", &file, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = doc["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["policy"] == "migration-dispatch")
        .expect("the journal's request is shown");
    assert_eq!(row["outcome"], "withheld");
    assert_eq!(row["dispatchStatus"], "withheld");
    assert_eq!(row["dispatchReason"], "ExecutionDisabled");
    assert_eq!(row["requestUUID"], "7c9e6679-7425-40de-944b-e07fc1f90ae7");
    let (_, table, _) = alfred(&["recommend", "-f", &file]);
    assert!(table.contains("ExecutionDisabled"), "{table}");
    let _ = std::fs::remove_file(file);
}
