//! The soak's objects as OME and its users create them (the shapes `churn_bench` reads, in
//! `shared/examples/common/trace.rs`): GPU nodes whose kubelet KWOK plays, an OMENative
//! InferenceService per whole-GPU task with its InferenceReplica and one engine pod per
//! Instance, and a plain pod per GPU-sharing task.

use serde_json::{Value, json};

use crate::schedule::{Node, Task};

pub const NAMESPACE: &str = "trace";
pub const MODEL: &str = "trace-model";
/// The annotation KWOK reads a pod's time to Ready from (its model's load time).
pub const LOAD_DELAY: &str = "pod-ready.stage.kwok.x-k8s.io/delay";
/// The revision hash every Instance runs (the soak never updates a template).
pub const REVISION_HASH: &str = "7b4c2e19";

/// A node as its kubelet and the GPU health checker report it: up since `up` (long before the
/// soak, so no recovery is recent), its last heartbeat `now`.
pub fn node(n: &Node, up: &str, now: &str) -> Value {
    let resources = json!({"cpu": format!("{}m", n.cpu_milli), "memory": format!("{}Mi", n.memory_mib),
        "nvidia.com/gpu": n.gpus.to_string(), "pods": "110"});
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": now,
            "lastTransitionTime": up})
    };
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n.name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": n.name, "nvidia.com/gpu.product": n.model,
                "nvidia.com/gpu.count": n.gpus.to_string(),
                format!("models.ome.io/clusterbasemodel.{MODEL}"): "Ready"}},
        "status": {"capacity": resources, "allocatable": resources,
            "conditions": [condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
                condition("GpuUnhealthy", "False", "GpuHealthy")],
            "nodeInfo": {"kubeletVersion": "v1.34.1-kwok", "containerRuntimeVersion": "kwok",
                "operatingSystem": "linux", "architecture": "amd64"}}})
}

/// A moment as the API server writes times: RFC 3339 in whole seconds.
pub fn stamp(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn model() -> Value {
    json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
        "metadata": {"name": MODEL}, "spec": {"storage": {"storageUri": "hf://trace/model"}}})
}

pub fn service(task: &Task) -> Value {
    json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": task.name(), "namespace": NAMESPACE},
        "spec": {"deploymentMode": "OMENative", "model": {"name": MODEL, "kind": "ClusterBaseModel"},
            "engine": {"minReplicas": 1, "maxReplicas": 1}}})
}

pub fn replica(task: &Task, service_uid: &str) -> Value {
    json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
        "metadata": {"name": replica_name(&task.name()), "namespace": NAMESPACE,
            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                "name": task.name(), "uid": service_uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"component": "engine", "parentRef": {"name": task.name()}, "replicas": 1,
            "runners": [{"name": "default"}]}})
}

pub fn replica_name(service: &str) -> String {
    format!("{service}-engine")
}

pub fn revision(service: &str) -> String {
    format!("{service}-engine-{REVISION_HASH}")
}

/// The engine pod of Instance `index`, unbound (kube-scheduler places it), preferring `hints`.
/// It turns Ready `load_ms` after it starts and drains for `drain_seconds` when deleted.
pub fn engine_pod(
    task: &Task,
    index: i32,
    load_ms: u64,
    drain_seconds: i64,
    hints: &[String],
) -> Value {
    let service = task.name();
    let mut pod = plain_pod(task, load_ms, drain_seconds);
    pod["metadata"]["name"] = json!(pod_name(&service, index));
    pod["metadata"]["labels"] = json!({"ome.io/inferenceservice": service, "component": "engine",
        "ome.io/managed-by": "OMENative", "ome.io/instance-index": index.to_string(),
        "ome.io/instance-incarnation": "1", "ome.io/runner": "default", "ome.io/pod-ordinal": "0",
        "ome.io/revision-hash": REVISION_HASH});
    pod["spec"]["nodeSelector"] =
        json!({format!("models.ome.io/clusterbasemodel.{MODEL}"): "Ready"});
    pod["spec"]["readinessGates"] = json!([{"conditionType": "ome.io/serving"}]);
    if !hints.is_empty() {
        // Preferred, as OME turns a request's hints into the surge's node affinity.
        let mut spec = alfred::api::core::PodSpec::default();
        alfred::simulate::prefer_nodes(&mut spec, hints);
        let terms = serde_json::to_value(&spec.affinity).expect("affinity is JSON")["nodeAffinity"]
            ["preferredDuringSchedulingIgnoredDuringExecution"]
            .clone();
        pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
            terms;
    }
    pod
}

pub fn pod_name(service: &str, index: i32) -> String {
    format!("{service}-engine-{index}-default-0")
}

/// A GPU-sharing task's pod (not OME's): the task's resources and GPU models.
pub fn plain_pod(task: &Task, load_ms: u64, drain_seconds: i64) -> Value {
    let gpus = task.gpus.to_string();
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(&task.name(), 0), "namespace": NAMESPACE,
            "annotations": {LOAD_DELAY: format!("{load_ms}ms")}},
        "spec": {"schedulerName": "default-scheduler", "terminationGracePeriodSeconds": drain_seconds,
            "containers": [{"name": "main", "image": "trace/task:1",
                "resources": {"requests": {"cpu": format!("{}m", task.cpu_milli),
                        "memory": format!("{}Mi", task.memory_mib), "nvidia.com/gpu": gpus},
                    "limits": {"nvidia.com/gpu": gpus}}}]}});
    if !task.gpu_models.is_empty() {
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product",
                "operator": "In", "values": task.gpu_models}]}]}}});
    }
    pod
}

/// A pod of the start state: bound to its node, running and Ready since `since` (RFC 3339),
/// with the status a kubelet wrote (KWOK then leaves it as it is).
pub fn running(mut pod: Value, node: &str, since: &str, ip: &str) -> Value {
    pod["spec"]["nodeName"] = json!(node);
    let mut conditions = vec![];
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        conditions.push(json!({"type": kind, "status": "True", "lastTransitionTime": since}));
    }
    if pod["spec"]["readinessGates"].is_array() {
        conditions
            .push(json!({"type": "ome.io/serving", "status": "True", "lastTransitionTime": since}));
    }
    pod["status"] = json!({"phase": "Running", "startTime": since, "hostIP": "10.1.0.1",
        "podIP": ip, "conditions": conditions,
        "containerStatuses": [{"name": "main", "image": "trace/task:1", "ready": true,
            "started": true, "restartCount": 0, "state": {"running": {"startedAt": since}}}]});
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(gpus: i64, models: &[&str]) -> Task {
        Task {
            task: 7,
            gpus,
            whole: true,
            cpu_milli: 8000,
            memory_mib: 65536,
            gpu_models: models.iter().map(|m| m.to_string()).collect(),
            runs_ms: 1000,
            node: None,
            ran_ms: 0,
            at_ms: 0,
        }
    }

    #[test]
    fn a_surge_prefers_the_hinted_nodes_and_keeps_the_models_it_needs() {
        let pod = engine_pod(&task(4, &["V100"]), 1, 30_000, 20, &["node-a".into()]);
        assert_eq!(pod["metadata"]["name"], "task-00007-engine-1-default-0");
        assert_eq!(pod["metadata"]["labels"]["ome.io/instance-index"], "1");
        assert_eq!(pod["metadata"]["annotations"][LOAD_DELAY], "30000ms");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 20);
        let affinity = &pod["spec"]["affinity"]["nodeAffinity"];
        let required = &affinity["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
            "V100"
        );
        let preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"].to_string();
        assert!(preferred.contains("node-a"), "{preferred}");
    }

    #[test]
    fn a_running_pod_has_what_a_kubelet_reports() {
        let pod = running(
            engine_pod(&task(1, &[]), 0, 1, 1, &[]),
            "n1",
            "2026-01-01T00:00:00Z",
            "10.2.0.3",
        );
        assert_eq!(pod["spec"]["nodeName"], "n1");
        assert_eq!(pod["status"]["phase"], "Running");
        let gates: Vec<_> = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "ome.io/serving")
            .collect();
        assert_eq!(gates.len(), 1);
    }
}
