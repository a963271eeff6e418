//! The read path against a real API server: a cluster seeded from the demo snapshot, read
//! live by `kubectl alfred`, written as a snapshot, and read back: the same picture each way.

use alfred_e2e::{Cluster, demo, demo_arg, stderr, stdout};

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn live_reads_equal_snapshot_reads() {
    let cluster = Cluster::up("read-path");
    cluster.seed(&demo());

    // Everything evaluated at the demo's capture time, so time-based states agree.
    const NOW: &str = "2026-09-28T10:15:00Z";
    let mark = cluster.audit_mark();
    let live = cluster.alfred(&["pools", "--now", NOW]);
    assert!(live.status.success(), "{}", stderr(&live));
    cluster.assert_one_read(mark);
    let from_demo = cluster.alfred(&["pools", "--now", NOW, "-f", &demo_arg()]);
    assert_eq!(
        stdout(&live),
        stdout(&from_demo),
        "the seeded cluster reads as the file it came from"
    );

    let snapshot = cluster.dir.join("snapshot.yaml");
    let out = cluster.alfred(&["snapshot"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&snapshot, &out.stdout).unwrap();
    // Discovery found no PodGroup CRD here; the snapshot keeps that for replays.
    assert!(
        stdout(&out).contains("podGroupResources: []"),
        "{}",
        stdout(&out)
            .lines()
            .filter(|l| l.contains("SnapshotInfo") || l.contains("podGroup"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let replayed = cluster.alfred(&["pools", "--now", NOW, "-f", &snapshot.display().to_string()]);
    assert_eq!(stdout(&live), stdout(&replayed));

    // Each reads live as it reads from the snapshot file; some must also show a line.
    for (args, shows) in [
        (
            vec!["rollout", "status", "chat/qwen3-8b-canary", "--now", NOW],
            None,
        ),
        (
            vec!["rollout", "status", "chat/qwen3-8b-a100", "--now", NOW],
            None,
        ),
        // A crash-looping pod: its container statuses come through the live read.
        (
            vec!["rollout", "status", "chat/mistral-chat", "--now", NOW],
            Some("Crash-loop repairs the next pass starts: Instance(s) 1"),
        ),
        (
            vec!["rollout", "plan", "chat/qwen3-8b-canary", "--now", NOW],
            None,
        ),
    ] {
        let live = cluster.alfred(&args);
        assert!(live.status.success(), "{}", stderr(&live));
        if let Some(line) = shows {
            assert!(stdout(&live).contains(line), "{}", stdout(&live));
        }
        let mut from_file = args.clone();
        let path = snapshot.display().to_string();
        from_file.extend(["-f", &path]);
        assert_eq!(
            stdout(&live),
            stdout(&cluster.alfred(&from_file)),
            "{args:?}"
        );
    }
}

/// Nodes and pods are read live as protobuf: on a real API server, the model they give equals
/// the model of the same objects as kubectl prints them in JSON, field for field, for objects
/// that set every field the model reads.
#[test]
#[ignore = "needs the local control plane: make e2e"]
fn protobuf_reads_equal_json_reads() {
    use alfred::snapshot::Snapshot;
    let cluster = Cluster::up("read-protobuf");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/every-read-field.yaml");
    cluster.seed(&fixture);
    // Deleted behind its finalizer: it stays, with a deletion timestamp.
    cluster.ok(&[
        "delete",
        "pod",
        "-n",
        "chat",
        "llama-engine-0-default-0",
        "--wait=false",
    ]);

    let live = cluster.alfred(&["snapshot", "-o", "json"]);
    assert!(live.status.success(), "{}", stderr(&live));
    let live = Snapshot::parse(&stdout(&live)).expect("the live snapshot reads");
    let printed = cluster.ok(&["get", "nodes,pods", "-A", "-o", "json"]);
    let printed = Snapshot::parse(&printed).expect("kubectl's JSON reads");
    assert_eq!((live.nodes.len(), live.pods.len()), (2, 2));
    assert_eq!(live.nodes, printed.nodes);
    assert_eq!(live.pods, printed.pods);
    let pod = &live.pods[0];
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert!(pod.spec.affinity.is_some() && !pod.spec.overhead.is_empty());
    assert!(pod.crash_looping());
}
