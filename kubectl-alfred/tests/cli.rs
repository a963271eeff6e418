//! What every command shares: `version`, and colour only where a person reads a terminal.

use std::process::Command;

const DEMO: &str = "manifests/examples/demo-cluster.yaml";
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn alfred(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(args)
        .current_dir(ROOT)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .envs(env.iter().copied())
        .output()
        .expect("run kubectl-alfred");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn version_names_the_plugin_and_reads_no_cluster_with_a_file() {
    let (text, _) = alfred(&["version", "-f", DEMO], &[]);
    assert_eq!(
        text,
        format!(
            "kubectl-alfred {}\ncluster: not read (-f reads a snapshot file)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    let (json, _) = alfred(&["version", "-f", DEMO, "-o", "json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["plugin"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["cluster"]["state"], "notRead");
    // No cluster configured: said, not an error.
    let (text, _) = alfred(&["version"], &[("KUBECONFIG", "/nonexistent/kubeconfig")]);
    assert!(
        text.contains("not reachable: no cluster configured"),
        "{text}"
    );
}

#[test]
fn colour_only_on_request_and_never_with_no_color() {
    let args = ["recommend", "-f", DEMO];
    let (piped, stderr) = alfred(&args, &[]);
    assert!(
        !piped.contains('\x1b') && !stderr.contains('\x1b'),
        "a pipe gets plain text"
    );
    let (forced, _) = alfred(&args, &[("CLICOLOR_FORCE", "1")]);
    assert!(forced.contains("\x1b[31mUnhealthy\x1b[0m"), "{forced}");
    assert!(forced.contains("\x1b[33mSuspect until"), "{forced}");
    // Colour never moves a column: without the escapes the table is the plain one.
    assert_eq!(
        forced
            .replace("\x1b[31m", "")
            .replace("\x1b[33m", "")
            .replace("\x1b[0m", ""),
        piped
    );
    let (no_color, _) = alfred(&args, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert_eq!(no_color, piped);
    let (json, _) = alfred(
        &["recommend", "-f", DEMO, "-o", "json"],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(!json.contains('\x1b'), "JSON is never coloured");
}
