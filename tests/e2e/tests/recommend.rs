//! The decision pass against a real API server: recommend, explain and drain read live exactly
//! what they read from the demo file, with a fixed number of list calls; `--record` updates the
//! recommendations ConfigMap the way Alfred does.

use alfred_e2e::{Cluster, demo, demo_arg, stderr, stdout};
use serde_json::Value;

const NOW: &str = "2026-09-28T10:15:00Z";

fn data(cluster: &Cluster) -> serde_json::Map<String, Value> {
    let text = cluster.ok(&[
        "get",
        "configmap",
        "alfred-recommendations",
        "-n",
        "ome-system",
        "-o",
        "json",
    ]);
    let cm: Value = serde_json::from_str(&text).unwrap();
    cm["data"].as_object().cloned().unwrap_or_default()
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn recommend_explain_and_drain_live() {
    let cluster = Cluster::up("recommend");
    cluster.seed(&demo());

    let mark = cluster.audit_mark();
    let live = cluster.alfred(&["recommend", "-o", "json", "--now", NOW]);
    assert!(live.status.success(), "{}", stderr(&live));
    cluster.assert_one_read(mark);
    let from_file = cluster.alfred(&["recommend", "-o", "json", "--now", NOW, "-f", &demo_arg()]);
    // The same document, but for the node UIDs the API server gave the seeded nodes, and the
    // scheduler's cost, which replays the pods in creation order: the API server stamps them
    // as seeded, the file keeps the demo's times. What waits is the same.
    let without_uids = |text: String| {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        for record in doc["nodes"].as_object_mut().unwrap().values_mut() {
            record.as_object_mut().unwrap().remove("nodeUID");
        }
        let cost = doc.as_object_mut().unwrap().remove("schedulerCost");
        (doc, cost)
    };
    let (doc, cost) = without_uids(stdout(&live));
    let (file_doc, file_cost) = without_uids(stdout(&from_file));
    let waiting = |cost: &Option<Value>| cost.as_ref().map(|c| c["waitingGpus"].clone());
    assert_eq!(waiting(&cost), waiting(&file_cost));
    assert!(
        cost.is_some(),
        "GPU pods wait in the demo under the default profile"
    );
    if doc != file_doc {
        let (a, b) = (cluster.dir.join("live.json"), cluster.dir.join("file.json"));
        std::fs::write(&a, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        std::fs::write(&b, serde_json::to_string_pretty(&file_doc).unwrap()).unwrap();
        panic!(
            "live and file passes differ: diff {} {}",
            a.display(),
            b.display()
        );
    }
    let rows = doc["recommendations"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["reason"] == "NodeUnhealthy" && r["fromNode"] == "h100-03")
    );
    assert!(
        rows.iter()
            .any(|r| r["reason"] == "NodeMaintenance" && r["fromNode"] == "h100-05")
    );
    assert!(rows.iter().all(|r| r["outcome"] == "advisory"));

    for args in [
        vec!["explain", "chat/llama-70b-chat", "--now", NOW],
        vec!["drain", "h100-03", "-o", "json", "--now", NOW],
    ] {
        let live = cluster.alfred(&args);
        let mut with_file = args.clone();
        let path = demo_arg();
        with_file.extend(["-f", &path]);
        let file = cluster.alfred(&with_file);
        assert_eq!(
            live.status.code(),
            file.status.code(),
            "{args:?}: {}",
            stderr(&live)
        );
        assert_eq!(stdout(&live), stdout(&file), "{args:?}");
    }

    // --record needs the ConfigMap the chart creates; Alfred never creates it.
    let missing = cluster.alfred(&["recommend", "--record", "--now", NOW]);
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("ConfigMap alfred-recommendations is missing"),
        "{}",
        stderr(&missing)
    );

    cluster.ok(&[
        "create", "configmap", "alfred-recommendations", "-n", "ome-system",
        "--from-literal=owner-note=kept",
        "--from-literal=node.gone={\"nodeUID\":\"x\",\"state\":\"Unhealthy\",\"conditions\":[],\"maintenance\":{\"requested\":false,\"triggers\":[]},\"workloads\":[],\"omeGpuOccupantsPresent\":false,\"observedAt\":\"2026-09-28T09:00:00Z\"}",
    ]);
    let recorded = cluster.alfred(&["recommend", "--record", "--now", NOW]);
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    assert!(
        stderr(&recorded).contains("recorded into ConfigMap ome-system/alfred-recommendations")
    );
    let d = data(&cluster);
    assert_eq!(d["owner-note"], "kept", "other keys are kept");
    assert!(
        !d.contains_key("node.gone"),
        "a node no longer observed loses its record"
    );
    let cycle: Value = serde_json::from_str(d["last-cycle.json"].as_str().unwrap()).unwrap();
    assert_eq!(cycle["mode"], "recommend-only");
    assert_eq!(
        cycle["recommendations"].as_array().unwrap().len(),
        rows.len()
    );
    let h100_03: Value = serde_json::from_str(d["node.h100-03"].as_str().unwrap()).unwrap();
    assert_eq!(h100_03["state"], "Unhealthy");
    assert_eq!(h100_03["signaledAt"], NOW);
    let h100_05: Value = serde_json::from_str(d["node.h100-05"].as_str().unwrap()).unwrap();
    assert_eq!(
        h100_05["maintenance"]["triggers"],
        serde_json::json!(["os-patching"])
    );

    // A later pass keeps the episode's first stamp.
    let later = cluster.alfred(&["recommend", "--record", "--now", "2026-09-28T10:20:00Z"]);
    assert!(later.status.success(), "{}", stderr(&later));
    let h100_03: Value =
        serde_json::from_str(data(&cluster)["node.h100-03"].as_str().unwrap()).unwrap();
    assert_eq!(h100_03["signaledAt"], NOW);
    assert_eq!(h100_03["observedAt"], "2026-09-28T10:20:00Z");
}
