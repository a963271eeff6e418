//! `kubectl alfred rollout plan|status` on the demo snapshot, as users run them.

use std::process::Command;

const DEMO: &str = "manifests/examples/demo-cluster.yaml";

fn alfred(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run kubectl-alfred");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn status_shows_the_hold_and_what_to_do() {
    let (ok, out, err) = alfred(&["rollout", "status", "chat/qwen3-8b-canary", "-f", DEMO]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "Rollout hold: gate Budget: per-Component surge budget 0 exhausted (would become 1)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("what to do: the budget the strategy reads is 0"),
        "{out}"
    );
    assert!(out.contains("maxSurge 0 (InferenceService)"), "{out}");
}

#[test]
fn plan_of_a_staged_rollout_stops_at_the_partition() {
    let (ok, out, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-a100",
        "-f",
        DEMO,
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["partitionHeld"], serde_json::json!([0]));
    assert_eq!(r["waves"], serde_json::json!([]));
    assert_eq!(
        r["stops"],
        "partition 1 keeps Instance(s) 0 on the prior revision"
    );
    assert_eq!(r["strategy"]["type"]["value"], "RecreatePod");
    assert_eq!(
        r["strategy"]["maxUnavailable"]["source"],
        "InferenceService"
    );
    assert!(
        r["staged"]
            .as_str()
            .unwrap()
            .starts_with("Staged at partition 1: 1/2 Instances on qwen3-8b-a100-engine-")
    );
}

#[test]
fn plan_an_image_change_in_waves() {
    // Three single-pod Instances under the runtime's SurgeThenDrain with maxSurge 1: one wave each.
    let (ok, out, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-chat",
        "--image",
        "ome-container=sglang:v0.5.4",
        "-f",
        DEMO,
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("SurgeThenDrain (runtime)"), "{out}");
    for wave in 0..3 {
        let line = format!(
            "Wave {}: Instance(s) {wave} (surge (new pod at ordinal 1))",
            wave + 1
        );
        assert!(out.contains(&line), "{line} missing from {out}");
    }
    assert!(out.contains("Every Instance reaches the target."), "{out}");
}

#[test]
fn errors_name_what_is_wrong() {
    let (ok, _, err) = alfred(&["rollout", "status", "chat/nope", "-f", DEMO]);
    assert!(!ok);
    assert!(
        err.contains("InferenceService chat/nope is not in the cluster"),
        "{err}"
    );
    let (ok, _, err) = alfred(&["rollout", "status", "legacy/llama-70b-legacy", "-f", DEMO]);
    assert!(!ok);
    assert!(err.contains("runs as RawDeployment"), "{err}");
    let (ok, _, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-chat",
        "--image",
        "nope",
        "-f",
        DEMO,
    ]);
    assert!(!ok);
    assert!(err.contains("give CONTAINER=IMAGE"), "{err}");
    // A container the component's pods do not have: an error naming the real ones, not a plan.
    let (ok, out, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-chat",
        "--image",
        "typo=evil:latest",
        "-f",
        DEMO,
    ]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains(
            "the engine pods of chat/qwen3-8b-chat have no container \"typo\"; their containers are: ome-container"
        ),
        "{err}"
    );
}

#[test]
fn plan_an_edited_inference_service() {
    let dir = std::env::temp_dir().join(format!("alfred-rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let edited = |engine: &str| {
        format!(
            "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {{name: qwen3-8b-chat, namespace: chat}}\n\
             spec:\n  deploymentMode: OMENative\n  model: {{name: qwen3-8b}}\n  runtime: {{name: srt-sglang, kind: ClusterServingRuntime}}\n  engine:\n{engine}"
        )
    };
    // A strategy edit changes no pod: no rollout.
    let strategy = dir.join("strategy.yaml");
    std::fs::write(&strategy, edited("    minReplicas: 3\n    maxReplicas: 3\n    lifecycle: {updateStrategy: {type: RecreatePod}}\n")).unwrap();
    let (ok, out, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-chat",
        "--change",
        strategy.to_str().unwrap(),
        "-f",
        DEMO,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("The change leaves the engine pod template as it is: it starts no rollout"),
        "{out}"
    );
    // An environment variable is a template change: every Instance moves, one wave each.
    let env = dir.join("env.yaml");
    std::fs::write(&env, edited("    minReplicas: 3\n    maxReplicas: 3\n    runner: {name: ome-container, env: [{name: LOG_LEVEL, value: debug}]}\n")).unwrap();
    let (ok, out, err) = alfred(&[
        "rollout",
        "plan",
        "chat/qwen3-8b-chat",
        "--change",
        env.to_str().unwrap(),
        "-f",
        DEMO,
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["waves"].as_array().unwrap().len(), 3);
    assert_eq!(r["targetRevision"], "qwen3-8b-chat-engine-<new>");
    // The edited file must hold the InferenceService named on the command line.
    let (ok, _, err) = alfred(&[
        "rollout",
        "plan",
        "chat/other",
        "--change",
        env.to_str().unwrap(),
        "-f",
        DEMO,
    ]);
    assert!(!ok);
    assert!(
        err.contains("holds no InferenceService chat/other"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// An empty file, a file of only `---`, or empty standard input is an error, not an empty
/// cluster with nothing to do.
#[test]
fn an_empty_snapshot_is_an_error() {
    let dir = std::env::temp_dir().join(format!("alfred-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in [
        ("empty.yaml", ""),
        ("dashes.yaml", "---\n---\n"),
        ("blank.json", "  \n"),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        let (ok, _, err) = alfred(&["pools", "-f", &path.display().to_string()]);
        assert!(!ok, "{file}");
        assert!(err.contains("no objects in"), "{file}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(["recommend", "-f", "-"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no objects in standard input"));
}

/// `--now` past what a timestamp holds is out of range, not malformed; a malformed one says
/// what a time looks like.
#[test]
fn now_out_of_range_is_told_apart_from_malformed() {
    let demo = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/examples/demo-cluster.yaml"
    );
    let (ok, _, err) = alfred(&["pools", "-f", demo, "--now", "9999-12-31T23:59:59Z"]);
    assert!(!ok);
    assert!(
        err.contains("--now \"9999-12-31T23:59:59Z\" is out of range: times run from"),
        "{err}"
    );
    let (ok, _, err) = alfred(&["pools", "-f", demo, "--now", "yesterday"]);
    assert!(!ok);
    assert!(
        err.contains("is not an RFC 3339 time such as 2026-09-28T10:15:00Z"),
        "{err}"
    );
}

/// A file past the documented size is refused before it is read (a sparse 3 GiB file here).
#[test]
fn a_file_past_the_size_limit_is_refused_unread() {
    let dir = std::env::temp_dir().join(format!("alfred-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.yaml");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let started = std::time::Instant::now();
    let (ok, _, err) = alfred(&["pools", "-f", &path.display().to_string()]);
    assert!(!ok);
    assert!(
        err.contains("is larger than 2 GiB, the most Alfred reads"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).unwrap();
}
