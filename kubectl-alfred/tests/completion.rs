//! `kubectl-alfred __complete` (what `kubectl_complete-alfred` runs for kubectl) on the demo
//! snapshot, and the `completion` scripts for running the plugin directly.

use std::process::Command;

const DEMO: &str = "manifests/examples/demo-cluster.yaml";
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const BIN: &str = env!("CARGO_BIN_EXE_kubectl-alfred");

/// The candidates (descriptions dropped) and the directive; stderr must stay empty.
fn complete(words: &[&str]) -> (Vec<String>, String) {
    let out = Command::new(BIN)
        .arg("__complete")
        .args(words)
        .current_dir(ROOT)
        // No cluster: a live read must fail quietly.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run kubectl-alfred");
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let directive = lines.pop().expect("a directive line");
    let names = lines
        .iter()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    (names, directive)
}

#[test]
fn objects_come_from_the_file_the_command_would_read() {
    let (workloads, directive) = complete(&["explain", "-f", DEMO, "research/q"]);
    assert_eq!(directive, ":4");
    assert_eq!(workloads, ["research/qwen3-8b-eval"]);
    // The same under --filename=FILE, and for the component and Instance levels.
    let file = format!("--filename={DEMO}");
    let (components, _) = complete(&["explain", &file, "chat/mistral-chat/"]);
    assert_eq!(components, ["chat/mistral-chat/engine"]);
    let (instances, _) = complete(&["simulate", "-f", DEMO, "chat/mistral-chat/engine/"]);
    assert!(
        !instances.is_empty(),
        "the replica's rows, whichever form they are stored in"
    );
    assert!(
        instances
            .iter()
            .all(|i| i.starts_with("chat/mistral-chat/engine/"))
    );
    let (nodes, _) = complete(&["drain", "-f", DEMO, "a100-0"]);
    assert!(
        !nodes.is_empty() && nodes.iter().all(|n| n.starts_with("a100-0")),
        "{nodes:?}"
    );
    let (excluded, _) = complete(&[
        "simulate",
        "-f",
        DEMO,
        "x/y/engine/0",
        "--exclude-node",
        "h100-0",
    ]);
    assert!(excluded.iter().all(|n| n.starts_with("h100-0")) && !excluded.is_empty());
}

#[test]
fn request_uuids_come_from_the_journal() {
    let demo = std::fs::read_to_string(format!("{ROOT}/{DEMO}")).unwrap();
    let entry = serde_json::json!({"uuid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "workload": {"Namespace": "chat", "Name": "mistral-chat"}, "workloadUID": "u1",
        "irName": "mistral-chat-engine", "irUID": "u2", "component": "engine",
        "instance": 0, "fromNode": "h100-06", "payload": "{}", "sourceFingerprint": "ab",
        "createdAt": "2026-09-28T10:14:30Z", "phase": "stalled", "reason": "OwnerUnavailable"});
    let state = serde_json::json!({"version": "v1", "entries": [entry]}).to_string();
    let journal = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "alfred-dispatch-state", "namespace": "ome", "resourceVersion": "7"},
        "data": {"state.json": state}});
    let path = std::env::temp_dir().join(format!("alfred-complete-{}.yaml", std::process::id()));
    std::fs::write(&path, format!("{demo}\n---\n{journal}\n")).unwrap();
    let file = path.display().to_string();
    for command in ["show", "resolve"] {
        let (uuids, _) = complete(&["journal", command, "-f", &file, ""]);
        assert_eq!(uuids, ["7c9e6679-7425-40de-944b-e07fc1f90ae7"]);
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn commands_flags_and_values_come_from_the_definitions() {
    let (all, _) = complete(&[""]);
    for command in [
        "recommend",
        "explain",
        "drain",
        "rollout",
        "migrate",
        "journal",
        "completion",
    ] {
        assert!(all.contains(&command.to_string()), "{command}: {all:?}");
    }
    assert!(
        !all.iter().any(|c| c.starts_with("__")),
        "hidden modes stay hidden"
    );
    assert_eq!(complete(&["rollout", ""]).0, ["plan", "status", "help"]);
    assert_eq!(complete(&["-o", "j"]).0, ["json"]);
    assert_eq!(complete(&["recommend", "--output=y"]).0, ["--output=yaml"]);
    let (flags, _) = complete(&["drain", "--g"]);
    assert_eq!(flags, ["--goal"]);
    assert_eq!(
        complete(&["drain", "--goal", "--formula", ""]).0,
        ["total", "occupied"]
    );
    assert_eq!(
        complete(&["rollout", "status", "x/y", "--component", "d"]).0,
        ["decoder"]
    );
    assert_eq!(complete(&["completion", ""]).0, ["bash", "fish", "zsh"]);
    // File arguments are the shell's to complete.
    assert_eq!(complete(&["--config", ""]), (vec![], ":0".to_string()));
    // `-f -` (standard input) is not read while completing; odd lines complete nothing.
    assert_eq!(
        complete(&["explain", "-f", "-", "ch"]),
        (vec![], ":4".to_string())
    );
    assert_eq!(complete(&[]), (vec![], ":4".to_string()));
    assert_eq!(
        complete(&["no-such-command", "x"]),
        (vec![], ":4".to_string())
    );
    // Without -f the cluster is asked; none is reachable here, so nothing, quietly.
    assert_eq!(complete(&["explain", "ch"]), (vec![], ":4".to_string()));
}

#[test]
fn the_bash_script_completes_through_the_plugin() {
    let script = Command::new(BIN)
        .args(["completion", "bash"])
        .output()
        .unwrap();
    let script = String::from_utf8(script.stdout).unwrap();
    let dir = std::path::Path::new(BIN).parent().unwrap();
    // The function as bash runs it on a tab after `kubectl-alfred explain -f DEMO chat/mistral-c`.
    let run = format!(
        "{script}\nCOMP_WORDS=(kubectl-alfred explain -f {DEMO} chat/mistral-c); COMP_CWORD=4\n_kubectl_alfred\nprintf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let out = Command::new("bash")
        .args(["-c", &run])
        .current_dir(ROOT)
        .env(
            "PATH",
            format!("{}:{}", dir.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "chat/mistral-chat\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for shell in ["zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completion", shell])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("kubectl-alfred __complete"),
            "{shell}: {text}"
        );
    }
}
