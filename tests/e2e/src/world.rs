//! An OME world for the execute-mode tests: GPU nodes, OMENative workloads (InferenceService,
//! InferenceReplica owned by it, one engine pod), Alfred's ConfigMaps and guard, and the OME
//! controller's part (taking a request, finishing it), played through `kubectl`.

use serde_json::{Value, json};

use crate::Cluster;

pub const LONG_AGO: &str = "2026-01-01T00:00:00Z";

pub const PREFIX: &str = "ome.io/migration-request-v1-";

pub fn node(name: &str, unhealthy: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "H100",
            "models.ome.io/clusterbasemodel.m": "Ready"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "pods": "110", "cpu": "64", "memory": "512Gi"},
            "capacity": {"nvidia.com/gpu": "8", "pods": "110", "cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LONG_AGO},
                {"type": "GpuUnhealthy", "status": if unhealthy { "True" } else { "False" },
                 "lastTransitionTime": LONG_AGO}]}})
}

pub fn pod(isvc: &str, node: &str, gpus: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{isvc}-engine-0-default-0"), "namespace": "team",
            "labels": {"ome.io/inferenceservice": isvc, "component": "engine",
                "ome.io/instance-index": "0", "ome.io/runner": "default"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "engine:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()},
                "requests": {"cpu": (gpus * 7).to_string(), "memory": format!("{}Gi", gpus * 60)}}}]},
        "status": {"phase": "Running", "startTime": LONG_AGO,
            "conditions": [{"type": "Ready", "status": "True"}]}})
}

pub fn workload(isvc: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": isvc, "namespace": "team"},
            "spec": {"deploymentMode": "OMENative", "model": {"name": "m"},
                "engine": {"minReplicas": 1, "maxReplicas": 1}}}),
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": format!("{isvc}-engine"), "namespace": "team"},
            "spec": {"component": "engine", "parentRef": {"name": isvc}, "replicas": 1,
                "runners": [{"name": "default"}]},
            "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1,
                "servingReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                "updatedReadyReplicas": 1, "currentRevision": "r1", "updateRevision": "r1",
                "instanceStatuses": [{"index": 0, "phase": "Ready", "runningRevision": "r1",
                    "podCount": 1, "servingPodCount": 1,
                    "availablePodCount": 1, "admitted": true}]}}),
    ]
}

/// A file of `manifests/rbac/`.
pub fn rbac(file: &str) -> String {
    format!("{}/../../manifests/rbac/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// Seeds the objects, the model, the empty journal and recommendations ConfigMaps in `ome`,
/// the migration guard, and the OMENative workloads `isvcs` (their InferenceService and InferenceReplica), then points each InferenceReplica's owner at its InferenceService's real
/// UID, as OME's controller owns them.
pub fn seed_world(cluster: &Cluster, mut objects: Vec<Value>, isvcs: &[&str]) {
    // The model, and the ConfigMaps the chart creates in Alfred's namespace.
    objects.extend([
        json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel", "metadata": {"name": "m"},
            "spec": {"storage": {"storageUri": "hf://org/m"}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-dispatch-state", "namespace": "ome"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-recommendations", "namespace": "ome"}}),
    ]);
    for isvc in isvcs {
        objects.extend(workload(isvc));
    }
    let file = cluster.dir.join("world.yaml");
    let text: Vec<String> = objects.iter().map(Value::to_string).collect();
    std::fs::write(&file, text.join("\n---\n")).unwrap();
    cluster.seed(&file);
    // The guard on migrate's writes, without which execute mode sends nothing.
    cluster.ok(&["apply", "-f", &rbac("migration-guard.yaml")]);
    for &isvc in isvcs {
        let uid = cluster.ok(&[
            "get",
            "isvc",
            isvc,
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        let owner = json!({"metadata": {"ownerReferences": [{"apiVersion": "ome.io/v1beta1",
            "kind": "InferenceService", "name": isvc, "uid": uid, "controller": true}]}});
        cluster.ok(&[
            "patch",
            "inferencereplica",
            &format!("{isvc}-engine"),
            "-n",
            "team",
            "--type",
            "merge",
            "-p",
            &owner.to_string(),
        ]);
    }
}

/// A key of the journal ConfigMap as stored (empty when it holds none).
pub fn journal_key(cluster: &Cluster, key: &str) -> String {
    let path = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
    cluster.ok(&[
        "get",
        "configmap",
        "alfred-dispatch-state",
        "-n",
        "ome",
        "-o",
        &path,
    ])
}

/// The journal's `state.json` as stored (empty when none is).
pub fn journal_text(cluster: &Cluster) -> String {
    journal_key(cluster, "state.json")
}

pub fn journal(cluster: &Cluster) -> Value {
    let text = journal_text(cluster);
    if text.trim().is_empty() {
        json!({"version": "v1", "entries": []})
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

/// Request annotations on the InferenceService, as (uuid, payload).
pub fn requests(cluster: &Cluster, isvc: &str) -> Vec<(String, String)> {
    let text = cluster.ok(&["get", "isvc", isvc, "-n", "team", "-o", "json"]);
    let v: Value = serde_json::from_str(&text).unwrap();
    v["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.strip_prefix(PREFIX)?.to_string(), v.as_str()?.to_string())))
        .collect()
}

pub fn now() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The OME controller takes the request: the annotation goes, a status row appears.
pub fn ome_accepts(cluster: &Cluster, isvc: &str, uuid: &str, from: &str) {
    cluster.ok(&[
        "annotate",
        "isvc",
        isvc,
        "-n",
        "team",
        &format!("{PREFIX}{uuid}-"),
    ]);
    set_migration(
        cluster,
        isvc,
        json!({"requestUUID": uuid, "trigger": "Manual",
        "sourceInstance": 0, "fromNode": from, "phase": "Accepted", "startedAt": now(),
        "deadline": "2099-01-01T00:00:00Z"}),
    );
}

pub fn set_migration(cluster: &Cluster, isvc: &str, row: Value) {
    patch_status(
        cluster,
        &format!("{isvc}-engine"),
        json!({"migrations": [row]}),
    );
}

/// Merges `status` into an InferenceReplica's status, as OME's controller writes it.
pub fn patch_status(cluster: &Cluster, replica: &str, status: Value) {
    let patch = json!({ "status": status });
    cluster.ok(&[
        "patch",
        "inferencereplica",
        replica,
        "-n",
        "team",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
}

/// Creates a pod with its status, as the kubelet reports it.
pub fn run_pod(cluster: &Cluster, pod: Value) {
    let file = cluster.dir.join("pod.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    cluster.ok(&["create", "-f", &file.display().to_string()]);
    cluster.ok(&[
        "replace",
        "--subresource=status",
        "-f",
        &file.display().to_string(),
    ]);
}

/// OME finishes the request: its row completes and the Instance's pod is replaced by `moved`.
pub fn ome_completes(cluster: &Cluster, isvc: &str, uuid: &str, from: &str, moved: Value) {
    set_migration(
        cluster,
        isvc,
        json!({"requestUUID": uuid, "trigger": "Manual",
        "sourceInstance": 0, "fromNode": from, "phase": "Completed", "startedAt": now(),
        "completedAt": now(), "deadline": "2099-01-01T00:00:00Z"}),
    );
    cluster.ok(&[
        "delete",
        "pod",
        &format!("{isvc}-engine-0-default-0"),
        "-n",
        "team",
        "--grace-period=0",
        "--force",
    ]);
    run_pod(cluster, moved);
}
