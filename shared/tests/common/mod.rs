//! A small cluster written object by object, shared by the integration tests of the decision
//! pass and of execute mode.
#![allow(dead_code)]

use alfred::config::Config;
use alfred::decision::Decision;
use alfred::snapshot::Snapshot;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

pub const NOW: &str = "2026-09-28T10:15:00Z";
pub const PRODUCT: &str = "H100";

/// A small cluster written object by object.
#[derive(Clone, Debug)]
pub struct World {
    pub items: Vec<Value>,
    pub now: String,
}

pub fn ago(minutes: i64) -> String {
    let t: Timestamp = NOW.parse().unwrap();
    (t - k8s_openapi::jiff::SignedDuration::from_mins(minutes)).to_string()
}

/// An engine container's resources as the API server stores them: its GPUs as limits and
/// (copied by defaulting) requests, with the CPU and memory that go with them.
pub fn engine_resources(gpus: i64) -> Value {
    json!({"limits": {"nvidia.com/gpu": gpus.to_string()},
           "requests": {"cpu": (gpus * 11).to_string(), "memory": format!("{}Gi", gpus * 120),
                        "nvidia.com/gpu": gpus.to_string()}})
}

/// The migration guard as kube-apiserver v1.34.4 returned it after `kubectl apply -f
/// manifests/rbac/migration-guard.yaml`: the policy and its binding.
pub fn installed_guard() -> Vec<Value> {
    let list: Value = serde_json::from_str(include_str!("../data/guard/installed.json")).unwrap();
    list["items"].as_array().unwrap().clone()
}

impl World {
    /// A cluster with the model `m` and the migration guard installed.
    pub fn new() -> World {
        let mut items = vec![
            json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
            "metadata": {"name": "m"}, "spec": {"storage": {"storageUri": "hf://org/m"}}}),
        ];
        items.extend(installed_guard());
        World {
            items,
            now: NOW.into(),
        }
    }

    pub fn node(mut self, name: &str, gpus: i64) -> World {
        self.items.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {
                "kubernetes.io/hostname": name, "nvidia.com/gpu.product": PRODUCT, "models.ome.io/clusterbasemodel.m": "Ready"}},
            "status": {"capacity": {"cpu": "96", "memory": "1056000000Ki", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                "allocatable": {"cpu": "95", "memory": "1048000000Ki", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                "conditions": [{"type": "Ready", "status": "True"},
                               {"type": "GpuUnhealthy", "status": "False", "lastTransitionTime": ago(600)}]}}));
        self
    }

    pub fn edit(mut self, kind: &str, name: &str, f: impl FnOnce(&mut Value)) -> World {
        let item = self
            .items
            .iter_mut()
            .find(|i| i["kind"] == kind && i["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"));
        f(item);
        self
    }

    pub fn label(self, node: &str, key: &str, value: &str) -> World {
        self.edit("Node", node, |n| {
            n["metadata"]["labels"][key] = json!(value)
        })
    }

    /// A `dedicated=infra:NoSchedule` taint on the node.
    pub fn taint(self, node: &str) -> World {
        self.edit(
            "Node",
            node,
            |n| {
                n["spec"]["taints"] =
                    json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
            },
        )
    }

    /// A pod of no Instance bound to a node, asking for CPU only (a system daemon, a batch job).
    pub fn cpu_pod(mut self, node: &str, cpu: &str, labels: Value) -> World {
        self.items.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("daemon-{node}"), "namespace": "team", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}));
        self
    }

    pub fn unhealthy(self, node: &str) -> World {
        self.edit(
            "Node",
            node,
            |n| {
                n["status"]["conditions"][1] =
                    json!({"type": "GpuUnhealthy", "status": "True", "lastTransitionTime": ago(5)})
            },
        )
    }

    /// An OMENative InferenceService `ns/name` with one single-pod Instance per placement.
    pub fn omenative(mut self, ns: &str, name: &str, placements: &[(&str, i64)]) -> World {
        let n = placements.len();
        self.items.push(
            json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                "resourceVersion": "1", "generation": 1, "creationTimestamp": ago(310)},
            "spec": {"deploymentMode": "OMENative", "model": {"name": "m", "kind": "ClusterBaseModel"},
                     "engine": {"minReplicas": n, "maxReplicas": n}}}),
        );
        let mut rows = Vec::new();
        for (i, (node, gpus)) in placements.iter().enumerate() {
            self.items.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-engine-{i}-default-0"), "namespace": ns,
                    "creationTimestamp": ago(300),
                    "labels": {"ome.io/inferenceservice": name, "component": "engine",
                               "ome.io/managed-by": "OMENative", "ome.io/instance-index": i.to_string(),
                               "ome.io/instance-incarnation": "1", "ome.io/runner": "default",
                               "ome.io/pod-ordinal": "0"},
                    "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                        "name": format!("{name}-engine"), "uid": format!("uid-{name}-engine"),
                        "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": engine_resources(*gpus)}]},
                "status": {"phase": "Running", "startTime": ago(300),
                    "conditions": [{"type": "Ready", "status": "True"}]}}));
            rows.push(
                json!({"index": i, "phase": "Ready", "runningRevision": "r1", "podCount": 1,
                "servingPodCount": 1, "availablePodCount": 1, "admitted": true}),
            );
        }
        self.items.push(json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": format!("{name}-engine"), "namespace": ns, "generation": 1,
                "uid": format!("uid-{name}-engine"), "creationTimestamp": ago(310),
                "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                    "name": name, "uid": format!("uid-{name}"), "controller": true}]},
            "spec": {"component": "engine", "parentRef": {"name": name}, "replicas": n,
                     "runners": [{"name": "default"}]},
            "status": {"observedGeneration": 1, "replicas": n, "readyReplicas": n, "servingReplicas": n,
                "availableReplicas": n, "updatedReplicas": n, "updatedReadyReplicas": n,
                "currentRevision": "r1", "updateRevision": "r1", "instanceStatuses": rows}}));
        self
    }

    pub fn annotate(self, name: &str, key: &str, value: &str) -> World {
        self.edit("InferenceService", name, |i| {
            i["metadata"]["annotations"][key] = json!(value)
        })
    }

    pub fn pending(mut self, ns: &str, name: &str, gpus: i64, minutes: i64, isvc: &str) -> World {
        self.items.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": ago(minutes),
                "labels": {"ome.io/inferenceservice": isvc, "component": "engine"}},
            "spec": {"containers": [{"name": "c", "resources": engine_resources(gpus)}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "lastTransitionTime": ago(minutes)}]}}));
        self
    }

    pub fn at(mut self, now: &str) -> World {
        self.now = now.into();
        self
    }

    /// Runs `f` on the decision context of this world under `config` (after `schemaVersion`).
    pub fn with_ctx<R>(&self, config: &str, f: impl FnOnce(&alfred::model::Context) -> R) -> R {
        let snapshot = Snapshot::parse(
            &json!({"apiVersion": "v1", "kind": "List", "items": self.items}).to_string(),
        )
        .unwrap();
        let config = Config::parse(&format!("schemaVersion: 1\n{config}")).unwrap();
        f(&alfred::model::Context::build(
            &snapshot,
            &config,
            self.now.parse().unwrap(),
        ))
    }

    pub fn decide(&self, config: &str) -> Decision {
        self.with_ctx(config, alfred::decision::decide)
    }

    /// Sets ConfigMap `name` (namespace `ome`) to hold `config.yaml: text`.
    pub fn config_map(mut self, name: &str, text: &str) -> World {
        self.items
            .retain(|i| !(i["kind"] == "ConfigMap" && i["metadata"]["name"] == name));
        self.items
            .push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ome"}, "data": {"config.yaml": text}}));
        self
    }
}

/// An 8-GPU pod has waited an hour; node a holds three 1-GPU Instances (x1-x3), b and c GPUs
/// of an Instance that never moves. No single move lowers the pool's fragmentation by more
/// than its cost, but emptying a (three moves) does: the case for following the plan.
pub fn consolidation() -> World {
    World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .omenative("team", "x1", &[("a", 1)])
        .omenative("team", "x2", &[("a", 1)])
        .omenative("team", "x3", &[("a", 1)])
        .omenative("team", "pinned", &[("b", 6), ("c", 7)])
        .annotate("pinned", "alfred.ome.io/movable", "false")
        .pending("team", "big-0", 8, 60, "big")
}
