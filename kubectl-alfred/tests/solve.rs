//! `kubectl alfred solve` as users run it: the built binary on problem files.

use std::io::Write;
use std::process::{Command, Stdio};

fn alfred(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl-alfred");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_drain_makes_room_and_reports_json() {
    let (ok, out, err) = alfred(
        &[
            "solve",
            "-f",
            "manifests/examples/solve-drain.yaml",
            "-o",
            "json",
        ],
        None,
    );
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["assignment"]["llama-405b"], "gpu-03");
    let moves = r["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 4);
    assert_eq!(
        moves[3],
        serde_json::json!({"object": "llama-405b", "from": "gpu-04", "to": "gpu-03"})
    );
    assert_eq!(
        r["assignment"]["guard-a"], "gpu-05",
        "the affinity goal picks its destination"
    );
    assert_eq!(r["broken"], serde_json::json!({"initial": 1, "final": 0}));
    assert_eq!(r["unmovable"], serde_json::json!([]));
}

#[test]
fn the_table_lists_moves_in_order() {
    let (ok, out, err) = alfred(
        &["solve", "-f", "manifests/examples/solve-drain.yaml"],
        None,
    );
    assert!(ok, "{err}");
    assert!(
        out.starts_with("NoImprovingMove after 4 moves in "),
        "{out}"
    );
    let llama = out.lines().find(|l| l.contains("llama-405b")).unwrap();
    assert_eq!(
        llama.split_whitespace().collect::<Vec<_>>(),
        ["4", "llama-405b", "gpu-04", "gpu-03"]
    );
}

#[test]
fn problems_read_from_stdin_and_errors_name_the_file() {
    let (ok, out, _) = alfred(
        &["solve", "-f", "-", "-o", "yaml"],
        Some("assignment: {h0: [a], h1: []}\nconstraints: [{toFree: {containers: [h0]}}]\n"),
    );
    assert!(ok);
    assert!(out.contains("endReason: Optimal"), "{out}");

    let (ok, _, err) = alfred(
        &["solve", "-f", "-"],
        Some("assignment: {h0: [a]}\ngoals: [{pinned: {objects: [a]}}]\n"),
    );
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "error: standard input: pinned is a constraint, not a goal"
    );

    let (ok, _, err) = alfred(&["solve"], None);
    assert!(!ok);
    assert!(err.contains("solve needs a problem file"), "{err}");
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    use std::io::{BufRead, BufReader};
    // 4,000 moves: more output than a pipe holds, so the write meets a closed pipe.
    let objects: Vec<String> = (0..4000).map(|i| format!("task-{i}")).collect();
    let problem = format!(
        "assignment: {{h0: [{}], h1: []}}\nconstraints: [{{toFree: {{containers: [h0]}}}}]\n",
        objects.join(", ")
    );
    let path = std::env::temp_dir().join(format!("alfred-solve-pipe-{}.yaml", std::process::id()));
    std::fs::write(&path, problem).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(["solve", "-f", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    std::fs::remove_file(&path).ok();
    assert!(first.starts_with("Optimal after 4000 moves"), "{first}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
