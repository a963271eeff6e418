//! Completion through kubectl itself: `kubectl __complete alfred ...` is what the shell runs
//! on a tab; kubectl finds `kubectl_complete-alfred` on PATH and passes the words on. Objects
//! come from `-f FILE` when given, else from the cluster.

use alfred_e2e::{Cluster, demo, demo_arg, stderr, stdout};

/// The candidates (without descriptions) and the directive of one completion.
fn complete(cluster: &Cluster, words: &[&str]) -> (Vec<String>, String) {
    let mut args = vec!["__complete", "alfred"];
    args.extend_from_slice(words);
    let out = cluster.kubectl(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("error"),
        "completion printed an error: {}",
        stderr(&out)
    );
    let text = stdout(&out);
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let directive = lines.pop().expect("a directive line");
    let candidates = lines
        .into_iter()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect();
    (candidates, directive)
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn kubectl_completes_the_plugin_from_a_file_and_from_the_cluster() {
    let cluster = Cluster::up("completion");
    cluster.seed(&demo());
    let demo = demo_arg();

    let (from_file, directive) = complete(&cluster, &["explain", "-f", &demo, "ch"]);
    assert_eq!(directive, ":4", "objects are not file names");
    assert!(
        from_file.contains(&"chat/qwen3-8b-canary".to_string()),
        "{from_file:?}"
    );
    assert!(
        from_file.iter().all(|c| c.starts_with("chat/")),
        "{from_file:?}"
    );
    // The cluster seeded from the same file completes the same names.
    let (live, _) = complete(&cluster, &["explain", "ch"]);
    assert_eq!(live, from_file);

    let (instances, _) = complete(&cluster, &["simulate", "chat/qwen3-8b-canary/engine/"]);
    assert_eq!(
        instances,
        [
            "chat/qwen3-8b-canary/engine/0",
            "chat/qwen3-8b-canary/engine/1"
        ]
    );
    let (rollout, _) = complete(
        &cluster,
        &["rollout", "status", "-f", &demo, "chat/mistral-c"],
    );
    assert_eq!(rollout, ["chat/mistral-chat"]);
    let (nodes, _) = complete(&cluster, &["drain", "h100-01", "h100-0"]);
    assert!(nodes.contains(&"h100-02".to_string()), "{nodes:?}");
    assert!(
        !nodes.contains(&"h100-01".to_string()),
        "a node already named is not offered"
    );

    let (commands, _) = complete(&cluster, &["ro"]);
    assert_eq!(commands, ["rollout"]);
    let (formats, _) = complete(&cluster, &["recommend", "-o", ""]);
    assert_eq!(formats, ["table", "wide", "json", "yaml"]);
    let (contexts, _) = complete(&cluster, &["pools", "--context", ""]);
    let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    assert!(!contexts.is_empty(), "the kubeconfig's contexts");
    assert!(
        contexts.iter().all(|c| kubeconfig.contains(c.as_str())),
        "{contexts:?}"
    );
    // A file argument leaves the completion to the shell's file names.
    assert_eq!(
        complete(&cluster, &["pools", "-f", ""]),
        (vec![], ":0".to_string())
    );
    // On a terminal a live read shows its progress on stderr and states are coloured; in a
    // pipe (every other call here) neither.
    let piped = cluster.alfred(&["recommend"]);
    assert!(!stderr(&piped).contains("reading the cluster") && !stdout(&piped).contains('\x1b'));
    let out = std::process::Command::new("script")
        .args(["-qec", "kubectl alfred recommend", "/dev/null"])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", cluster.path())
        .env_remove("NO_COLOR")
        .output()
        .expect("script runs the command on a terminal");
    let seen = stdout(&out);
    assert!(
        seen.contains("reading the cluster: ") && seen.contains("lists, "),
        "{seen}"
    );
    assert!(seen.contains("\x1b[31mUnhealthy\x1b[0m"), "{seen}");

    // An unreadable source completes nothing, quietly.
    let (none, directive) = complete(&cluster, &["explain", "-f", "/nonexistent.yaml", ""]);
    assert!(none.is_empty() && directive == ":4");
}
