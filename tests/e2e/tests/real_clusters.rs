//! Objects as a real OME control plane stores them: a cluster whose OME predates OMENative (no
//! InferenceReplica kind), and a namespaced ServingRuntime that shadows the ClusterServingRuntime
//! of the same name. The demo the clusters are seeded from stores one component's rows as
//! ColumnarV2, so every live read here decodes that form from a real API server.

use std::path::PathBuf;

use alfred_e2e::{Cluster, demo, stderr, stdout};
use serde_json::Value;

const NOW: &str = "2026-09-28T10:15:00Z";

/// The demo without the objects of `kinds`, written into the cluster's run directory.
fn demo_without(cluster: &Cluster, kinds: &[&str]) -> PathBuf {
    use serde::Deserialize as _;
    let text = std::fs::read_to_string(demo()).unwrap();
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let object = Value::deserialize(doc).unwrap();
        if !kinds.iter().any(|k| object["kind"] == *k) {
            docs.push(serde_yaml_ng::to_string(&object).unwrap());
        }
    }
    let path = cluster.dir.join("demo-subset.yaml");
    std::fs::write(&path, docs.join("---\n")).unwrap();
    path
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn a_cluster_without_inference_replicas_still_reads() {
    let cluster = Cluster::up_without_replicas("no-replicas");
    cluster.seed(&demo_without(&cluster, &["InferenceReplica"]));
    let why = "this cluster serves no InferenceReplica";

    let pools = cluster.alfred(&["pools", "--now", NOW]);
    assert!(pools.status.success(), "{}", stderr(&pools));
    assert!(stdout(&pools).contains("POOL NVIDIA-H100-80GB-HBM3"));

    let out = cluster.alfred(&["recommend", "-o", "json", "--now", NOW]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches(why).count(),
        1,
        "said once: {}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = doc["recommendations"].as_array().unwrap();
    // Node health still finds its nodes; no OMENative Instance can be observed, so a component
    // on a node being left gets one component-wide row and the others none; RawDeployment
    // advice is unchanged.
    assert!(rows.iter().any(|r| r["fromNode"] == "h100-03"));
    assert!(
        rows.iter()
            .any(|r| r["workload"] == "research/deepseek-r1-distill"
                && r["instance"] == -1
                && r["advisoryReason"] == "OMENativeObservationInvalid")
    );
    assert!(rows.iter().all(|r| r["workload"] != "chat/llama-70b-chat"));
    assert!(
        rows.iter()
            .any(|r| r["workload"] == "legacy/llama-70b-legacy"
                && r["advisoryReason"] == "RawDeploymentMigrationUnsupported")
    );
    assert!(
        rows.iter().all(|r| !r["advisoryReason"].is_null()),
        "every row is advice"
    );

    let explain = cluster.alfred(&["explain", "chat/llama-70b-chat", "--now", NOW]);
    assert!(explain.status.success(), "{}", stderr(&explain));
    assert!(
        stdout(&explain).contains("the cluster serves no InferenceReplica"),
        "{}",
        stdout(&explain)
    );
    let drain = cluster.alfred(&["drain", "h100-03", "--now", NOW]);
    assert!(stdout(&drain).contains("h100-03"), "{}", stderr(&drain));

    // A snapshot keeps what the cluster did not serve, so a replay says the same.
    let snapshot = cluster.dir.join("snapshot.yaml");
    let out = cluster.alfred(&["snapshot"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&snapshot, &out.stdout).unwrap();
    let replay = cluster.alfred(&[
        "recommend",
        "-o",
        "json",
        "--now",
        NOW,
        "-f",
        &snapshot.display().to_string(),
    ]);
    assert!(stderr(&replay).contains(why), "{}", stderr(&replay));
    let live = cluster.alfred(&["recommend", "-o", "json", "--now", NOW]);
    let strip = |text: String| {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc.as_object_mut().unwrap().remove("nodes");
        doc
    };
    assert_eq!(strip(stdout(&live)), strip(stdout(&replay)));
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn a_namespaced_runtime_shadows_the_cluster_runtime() {
    let cluster = Cluster::up("runtime-shadow");
    cluster.seed(&demo());
    // The API server defaults the references' kinds, as OME's CRDs do.
    let stored = cluster.ok(&[
        "get",
        "isvc",
        "qwen3-8b-chat",
        "-n",
        "chat",
        "-o",
        "jsonpath={.spec.runtime.kind}",
    ]);
    assert_eq!(stored, "ClusterServingRuntime");
    // Its rows are stored column-wise.
    let encoding = cluster.ok(&[
        "get",
        "irep",
        "qwen3-8b-chat-engine",
        "-n",
        "chat",
        "-o",
        "jsonpath={.status.instanceStatusEncoding}",
    ]);
    assert_eq!(encoding, "ColumnarV2");

    let plan = |cluster: &Cluster| {
        let out = cluster.alfred(&[
            "rollout",
            "plan",
            "chat/qwen3-8b-chat",
            "--image",
            "ome-container=docker.io/lmsysorg/sglang:v0.5.4-cu129",
            "--now",
            NOW,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let before = plan(&cluster);
    assert!(
        before.contains("SurgeThenDrain (runtime)")
            && before.contains("runtime: ClusterServingRuntime srt-sglang"),
        "{before}"
    );
    let out = cluster.apply(
        r#"{"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime",
            "metadata": {"name": "srt-sglang", "namespace": "chat"},
            "spec": {"engineConfig": {"lifecycle": {"updateStrategy": {
                "type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}}}}}"#,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let after = plan(&cluster);
    assert!(
        after.contains("RecreatePod (runtime)")
            && after.contains("maxUnavailable 2 (runtime)")
            && after.contains("runtime: ServingRuntime chat/srt-sglang"),
        "{after}"
    );
    assert!(
        after.contains("Wave 1: Instance(s) 0 (recreate), 1 (recreate)"),
        "{after}"
    );
}
