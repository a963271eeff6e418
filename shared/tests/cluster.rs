//! The cluster model: GPU accounting, pools, node states, Instance joining, deployment modes.

use alfred::api::ComponentKind;
use alfred::api::core::PodSpec;
use alfred::config::Config;
use alfred::mode::{self, DeploymentMode, ModeSource};
use alfred::model::cluster::Cluster;
use alfred::model::health::HealthState;
use alfred::model::requests::pod_gpus;
use alfred::snapshot::Snapshot;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

const NOW: &str = "2026-09-28T10:15:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn spec(value: serde_json::Value) -> PodSpec {
    serde_json::from_value(value).unwrap()
}

fn gpu(limits: Option<i64>, requests: Option<i64>) -> serde_json::Value {
    let mut r = json!({});
    if let Some(l) = limits {
        r["limits"] = json!({"nvidia.com/gpu": l.to_string()});
    }
    if let Some(q) = requests {
        r["requests"] = json!({"nvidia.com/gpu": q.to_string()});
    }
    r
}

#[test]
fn gpu_accounting_limits_requests_and_init_containers() {
    let c = |res: serde_json::Value| json!({"name": "c", "resources": res});
    // Limit wins over request; a request alone counts.
    assert_eq!(
        pod_gpus(&spec(json!({"containers": [c(gpu(Some(2), Some(1)))]}))),
        2
    );
    assert_eq!(
        pod_gpus(&spec(json!({"containers": [c(gpu(None, Some(3)))]}))),
        3
    );
    assert_eq!(
        pod_gpus(&spec(
            json!({"containers": [c(gpu(Some(1), None)), c(gpu(Some(2), None))]})
        )),
        3
    );
    // A regular init container bigger than the app containers sets the pod's GPUs.
    let s =
        json!({"initContainers": [c(gpu(Some(4), None))], "containers": [c(gpu(Some(1), None))]});
    assert_eq!(pod_gpus(&spec(s)), 4);
    // A sidecar (restartPolicy Always) runs beside the app containers: they add up.
    let mut sidecar = c(gpu(Some(1), None));
    sidecar["restartPolicy"] = json!("Always");
    let s = json!({"initContainers": [sidecar.clone()], "containers": [c(gpu(Some(2), None))]});
    assert_eq!(pod_gpus(&spec(s)), 3);
    // A regular init container after a sidecar runs next to it: 1 + 3 = 4 beats 1 + 2.
    let s = json!({"initContainers": [sidecar, c(gpu(Some(3), None))], "containers": [c(gpu(Some(2), None))]});
    assert_eq!(pod_gpus(&spec(s)), 4);
    // No GPUs at all.
    assert_eq!(
        pod_gpus(&spec(
            json!({"containers": [c(json!({"limits": {"cpu": "2"}}))]})
        )),
        0
    );
}

#[test]
fn gpu_resource_names() {
    let one = |name: &str| {
        pod_gpus(&spec(
            json!({"containers": [{"name": "c", "resources": {"limits": {name: "2"}}}]}),
        ))
    };
    assert_eq!(one("nvidia.com/gpu"), 2);
    assert_eq!(one("amd.com/gpu"), 2);
    assert_eq!(one("nvidia.com/mig-3g.40gb"), 2);
    assert_eq!(one("gpu.intel.com/i915"), 2);
    assert_eq!(one("gpu.intel.com/memory.max"), 0);
    assert_eq!(one("example.com/fpga"), 0);
}

fn node(name: &str, gpus: i64, labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
           "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()},
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(
    ns: &str,
    name: &str,
    node: Option<&str>,
    gpus: i64,
    labels: serde_json::Value,
) -> serde_json::Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "creationTimestamp": "2026-09-28T09:00:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    } else {
        p["status"] = json!({"phase": "Pending"});
    }
    p
}

fn snapshot(items: Vec<serde_json::Value>) -> Snapshot {
    Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
        .unwrap()
}

#[test]
fn free_gpus_count_bound_non_terminal_pods_and_terminating_ones() {
    let mut terminating = pod("a", "t", Some("n1"), 2, json!({}));
    terminating["metadata"]["deletionTimestamp"] = json!("2026-09-28T10:14:00Z");
    let mut done = pod("a", "d", Some("n1"), 4, json!({}));
    done["status"]["phase"] = json!("Succeeded");
    let mut failed = pod("a", "f", Some("n1"), 4, json!({}));
    failed["status"]["phase"] = json!("Failed");
    let s = snapshot(vec![
        node("n1", 8, json!({"nvidia.com/gpu.product": "H100"})),
        pod("a", "p", Some("n1"), 3, json!({})),
        terminating,
        done,
        failed,
        // Over-committed node: free floors at 0.
        node("n2", 2, json!({"nvidia.com/gpu.product": "H100"})),
        pod("a", "big", Some("n2"), 4, json!({})),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let n1 = c.node("n1").unwrap();
    assert_eq!((n1.gpu_total, n1.gpu_used, n1.gpu_free), (8, 5, 3));
    assert_eq!(c.node("n2").unwrap().gpu_free, 0);
}

#[test]
fn node_total_is_the_largest_gpu_resource() {
    let s = snapshot(vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "mig"},
        "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2", "cpu": "64"}}}),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let n = c.node("mig").unwrap();
    assert_eq!(
        (n.gpu_resource.as_deref(), n.gpu_total),
        (Some("nvidia.com/mig-1g.10gb"), 7)
    );
    assert_eq!(c.pools[0].name, "nvidia.com/mig-1g.10gb");
}

#[test]
fn pools_by_product_with_adoption_and_fallbacks() {
    let shape = |product: Option<&str>| {
        let mut l = json!({"node.kubernetes.io/instance-type": "p5.48xlarge"});
        if let Some(p) = product {
            l["nvidia.com/gpu.product"] = json!(p);
        }
        l
    };
    let s = snapshot(vec![
        node("a", 8, shape(Some("H100"))),
        node("b", 8, shape(None)), // same shape as a: adopts H100
        node(
            "c",
            8,
            json!({"node.kubernetes.io/instance-type": "g6.48xlarge"}),
        ), // no product anywhere for this shape
        node("d", 4, json!({})),   // nothing: the GPU resource name
        node("cpu", 0, json!({})), // no GPUs: no pool
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let pool_of = |n: &str| c.node(n).unwrap().pool.clone();
    assert_eq!(pool_of("a").as_deref(), Some("H100"));
    assert_eq!(pool_of("b").as_deref(), Some("H100"));
    assert_eq!(pool_of("c").as_deref(), Some("g6.48xlarge"));
    assert_eq!(pool_of("d").as_deref(), Some("nvidia.com/gpu"));
    assert_eq!(pool_of("cpu"), None);
    let names: Vec<&str> = c.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["H100", "g6.48xlarge", "nvidia.com/gpu"]);
}

#[test]
fn adoption_needs_agreement() {
    let s = snapshot(vec![
        node("a", 8, json!({"nvidia.com/gpu.product": "H100"})),
        node("b", 8, json!({"nvidia.com/gpu.product": "H200"})),
        node("c", 8, json!({})),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    assert_eq!(c.node("c").unwrap().pool.as_deref(), Some("nvidia.com/gpu"));
}

#[test]
fn node_states_cordon_scale_down_preemptible() {
    let mut cordoned = node("c", 8, json!({}));
    cordoned["spec"] = json!({"unschedulable": true});
    let mut scale_down = node("s", 8, json!({}));
    scale_down["spec"] =
        json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]});
    let s = snapshot(vec![
        cordoned,
        scale_down,
        node(
            "spot",
            8,
            json!({"cloud.google.com/gke-preemptible": "true"}),
        ),
        node(
            "notspot",
            8,
            json!({"node.kubernetes.io/preemptible": "false"}),
        ),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    assert!(c.node("c").unwrap().cordoned && c.node("c").unwrap().unavailable_as_target());
    assert!(c.node("s").unwrap().scale_down_marked && c.node("s").unwrap().unavailable_as_target());
    assert!(
        c.node("spot").unwrap().preemptible && !c.node("spot").unwrap().unavailable_as_target()
    );
    assert!(!c.node("notspot").unwrap().preemptible);
}

fn node_with_conditions(name: &str, conditions: serde_json::Value) -> serde_json::Value {
    let mut n = node(
        name,
        8,
        json!({"maintenance.example.com/state": "patching"}),
    );
    n["status"]["conditions"] = conditions;
    n
}

#[test]
fn health_states_worst_wins() {
    let cond = |t: &str, s: &str, ltt: Option<&str>| {
        let mut c = json!({"type": t, "status": s});
        if let Some(ltt) = ltt {
            c["lastTransitionTime"] = json!(ltt);
        }
        c
    };
    let s = snapshot(vec![
        node_with_conditions("clear-none", json!([])),
        node_with_conditions(
            "clear-old",
            json!([cond("GpuUnhealthy", "False", Some("2026-09-28T09:00:00Z"))]),
        ),
        node_with_conditions(
            "suspect",
            json!([cond("GpuUnhealthy", "False", Some("2026-09-28T10:00:00Z"))]),
        ),
        node_with_conditions(
            "edge",
            json!([cond("GpuUnhealthy", "False", Some("2026-09-28T09:45:00Z"))]),
        ),
        node_with_conditions(
            "unknown-status",
            json!([cond("GpuUnhealthy", "Unknown", None)]),
        ),
        node_with_conditions(
            "unknown-no-time",
            json!([cond("GpuUnhealthy", "False", None)]),
        ),
        node_with_conditions(
            "unhealthy",
            json!([
                cond("GpuUnhealthy", "True", None),
                cond("Xid", "Unknown", None)
            ]),
        ),
        node_with_conditions(
            "other-condition",
            json!([cond("DiskPressure", "True", None)]),
        ),
    ]);
    let mut config = Config::default();
    config.node_health.trigger_conditions = vec!["GpuUnhealthy".into(), "Xid".into()];
    let c = Cluster::build(&s, &config, now());
    let state = |n: &str| c.node(n).unwrap().health.state;
    assert_eq!(state("clear-none"), HealthState::Clear);
    assert_eq!(state("clear-old"), HealthState::Clear);
    assert_eq!(state("suspect"), HealthState::Suspect);
    assert_eq!(
        c.node("suspect").unwrap().health.suspect_until,
        Some("2026-09-28T10:30:00Z".parse().unwrap())
    );
    // Exactly the window's length ago: no longer suspect (now < ltt + window fails).
    assert_eq!(state("edge"), HealthState::Clear);
    assert_eq!(state("unknown-status"), HealthState::Unknown);
    assert_eq!(state("unknown-no-time"), HealthState::Unknown);
    assert_eq!(state("unhealthy"), HealthState::Unhealthy);
    assert_eq!(state("other-condition"), HealthState::Clear);
}

#[test]
fn maintenance_triggers_by_condition_label_and_taint() {
    let config = Config::parse(
        r#"
schemaVersion: 1
policies:
  nodeHealth:
    maintenance:
      triggers:
        - {name: by-label, label: {key: maintenance.example.com/state, value: patching}}
        - {name: by-any-label, label: {key: example.com/drain}}
        - {name: by-empty-label, label: {key: example.com/empty, value: ""}}
        - {name: by-taint, taint: {key: example.com/swap, effect: NoSchedule}}
        - {name: by-taint-value, taint: {key: example.com/swap2, value: "yes"}}
        - {name: by-condition, condition: {type: example.com/Drain, status: "True"}}
"#,
    )
    .unwrap();
    let mut n = node(
        "all",
        8,
        json!({"maintenance.example.com/state": "patching", "example.com/drain": "x",
                                     "example.com/empty": ""}),
    );
    n["spec"] = json!({"taints": [{"key": "example.com/swap", "effect": "NoSchedule"},
                                  {"key": "example.com/swap2", "value": "yes", "effect": "NoExecute"}]});
    n["status"]["conditions"] = json!([{"type": "example.com/Drain", "status": "True"}]);
    let mut none = node(
        "none",
        8,
        json!({"maintenance.example.com/state": "done", "example.com/empty": "x"}),
    );
    none["spec"] = json!({"taints": [{"key": "example.com/swap", "effect": "NoExecute"},
                                     {"key": "example.com/swap2", "value": "no", "effect": "NoExecute"}]});
    none["status"]["conditions"] = json!([{"type": "example.com/Drain", "status": "False"}]);
    let s = snapshot(vec![n, none]);
    let c = Cluster::build(&s, &config, now());
    assert_eq!(
        c.node("all").unwrap().maintenance,
        vec![
            "by-any-label",
            "by-condition",
            "by-empty-label",
            "by-label",
            "by-taint",
            "by-taint-value"
        ]
    );
    assert!(c.node("none").unwrap().maintenance.is_empty());
    assert!(c.node("all").unwrap().unavailable_as_target());
}

#[test]
fn a_start_time_label_matches_from_its_second_on_and_a_non_number_at_once() {
    let config = Config::parse(
        r#"
schemaVersion: 1
policies:
  nodeHealth:
    maintenance:
      triggers:
        - {name: starts, label: {key: example.com/start-at, valueIsStartTime: true}}
"#,
    )
    .unwrap();
    let at = now().as_second();
    let labelled =
        |name: &str, value: String| node(name, 8, json!({ "example.com/start-at": value }));
    let s = snapshot(vec![
        labelled("past", (at - 1).to_string()),
        labelled("exactly-now", at.to_string()),
        labelled("future", (at + 1).to_string()),
        labelled("far-future", i64::MAX.to_string()),
        labelled("signed", format!("+{}", at - 60)),
        labelled("negative", "-5".into()),
        labelled("not-a-number", "tomorrow".into()),
        labelled("overflow", "99999999999999999999".into()),
        labelled("empty", String::new()),
        node("unlabelled", 8, json!({})),
    ]);
    let c = Cluster::build(&s, &config, now());
    let requested = |n: &str| !c.node(n).unwrap().maintenance.is_empty();
    for n in [
        "past",
        "exactly-now",
        "signed",
        "negative",
        "not-a-number",
        "overflow",
        "empty",
    ] {
        assert!(requested(n), "{n} should be under maintenance");
    }
    for n in ["future", "far-future", "unlabelled"] {
        assert!(!requested(n), "{n} should not be under maintenance yet");
    }
    // The same node a second later.
    let later = Cluster::build(&s, &config, Timestamp::from_second(at + 1).unwrap());
    assert!(!later.node("future").unwrap().maintenance.is_empty());
}

fn isvc(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn ome_labels(isvc: &str, index: i32, runner: &str) -> serde_json::Value {
    json!({"ome.io/inferenceservice": isvc, "component": "engine", "ome.io/instance-index": index.to_string(),
           "ome.io/runner": runner})
}

#[test]
fn instances_join_pods_and_replica_rows() {
    let s = snapshot(vec![
        node("n1", 8, json!({})),
        node("n2", 8, json!({})),
        isvc(
            "prod",
            "chat",
            json!({"deploymentMode": "OMENative", "engine": {}}),
        ),
        pod(
            "prod",
            "chat-engine-0-default-0",
            Some("n1"),
            2,
            ome_labels("chat", 0, "default"),
        ),
        pod(
            "prod",
            "chat-engine-1-default-1",
            Some("n2"),
            2,
            ome_labels("chat", 1, "default"),
        ),
        pod(
            "prod",
            "chat-engine-stray",
            Some("n2"),
            1,
            json!({"ome.io/inferenceservice": "chat", "component": "engine"}),
        ),
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
               "metadata": {"name": "chat-engine", "namespace": "prod"},
               "spec": {"component": "engine", "replicas": 3},
               "status": {"instanceStatuses": [{"index": 0, "phase": "Ready"}, {"index": 1, "phase": "Ready"},
                                               {"index": 2, "phase": "Creating"}]}}),
        // Leader and worker of one multi-pod Instance.
        isvc(
            "prod",
            "big",
            json!({"engine": {"leader": {}, "worker": {"size": 1}}}),
        ),
        pod(
            "prod",
            "big-engine-0-leader-0",
            Some("n1"),
            4,
            ome_labels("big", 0, "leader"),
        ),
        pod(
            "prod",
            "big-engine-0-worker-0",
            Some("n2"),
            4,
            ome_labels("big", 0, "worker"),
        ),
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
               "metadata": {"name": "big-engine", "namespace": "prod", "generation": 1, "uid": "uid-big-engine",
                            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                                 "name": "big", "uid": "uid-big", "controller": true,
                                                 "blockOwnerDeletion": true}]},
               "spec": {"component": "engine", "parentRef": {"name": "big"},
                        "runners": [{"name": "leader", "size": 1}, {"name": "worker", "size": 1}]},
               "status": {"observedGeneration": 1, "instanceStatuses": [{"index": 0, "phase": "Ready"}]}}),
        // RawDeployment: one Instance per pod, by pod name.
        isvc("prod", "raw", json!({"engine": {}})),
        pod(
            "prod",
            "raw-engine-b",
            Some("n2"),
            1,
            json!({"serving.ome.io/inferenceservice": "raw", "component": "engine"}),
        ),
        pod(
            "prod",
            "raw-engine-a",
            Some("n1"),
            1,
            json!({"ome.io/inferenceservice": "raw", "component": "engine"}),
        ),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let keys: Vec<&str> = c.workloads.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(keys, vec!["prod/big", "prod/chat", "prod/raw"]);

    let chat = &c.components[c.workload("prod/chat").unwrap().components[0]];
    assert_eq!(
        (chat.kind, chat.mode),
        (ComponentKind::Engine, DeploymentMode::OmeNative)
    );
    assert!(chat.replica.is_some());
    let idx: Vec<(i32, usize, bool)> = chat
        .instances
        .iter()
        .map(|&i| {
            (
                c.instances[i].index,
                c.instances[i].pods.len(),
                c.instances[i].row.is_some(),
            )
        })
        .collect();
    assert_eq!(idx, vec![(0, 1, true), (1, 1, true), (2, 0, true)]);
    assert_eq!(
        chat.unjoined_pods.len(),
        1,
        "a pod without an instance index is reported, not guessed"
    );

    let big = &c.components[c.workload("prod/big").unwrap().components[0]];
    assert_eq!(big.mode, DeploymentMode::OmeNative);
    assert_eq!(big.instances.len(), 1);
    let inst = &c.instances[big.instances[0]];
    assert_eq!((inst.pods.len(), inst.gpus), (2, 8));
    assert_eq!(inst.nodes, vec!["n1", "n2"]);
    assert_eq!(
        inst.primary_node.as_deref(),
        Some("n1"),
        "equal GPUs: the name breaks the tie"
    );

    let raw = &c.components[c.workload("prod/raw").unwrap().components[0]];
    assert_eq!(raw.mode, DeploymentMode::RawDeployment);
    let raw_pods: Vec<(i32, &str)> = raw
        .instances
        .iter()
        .map(|&i| (c.instances[i].index, c.pods[c.instances[i].pods[0]].name))
        .collect();
    assert_eq!(raw_pods, vec![(0, "raw-engine-a"), (1, "raw-engine-b")]);
}

#[test]
fn pending_pods_and_their_pools() {
    let mut scheduled_false = pod("a", "waiting", None, 8, json!({}));
    scheduled_false["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-09-28T10:00:00Z"}]);
    scheduled_false["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.product": "A100"});
    let mut deleting = pod("a", "deleting", None, 8, json!({}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-09-28T10:10:00Z");
    let s = snapshot(vec![
        node("h", 8, json!({"nvidia.com/gpu.product": "H100"})),
        node("a", 8, json!({"nvidia.com/gpu.product": "A100"})),
        scheduled_false,
        pod("a", "anywhere", None, 2, json!({})),
        pod("a", "cpu-only", None, 0, json!({})),
        deleting,
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let pending: Vec<(&str, Option<&str>, f64)> = c
        .pending
        .iter()
        .map(|p| (c.pods[p.pod].name, p.pool.as_deref(), p.age_minutes(c.now)))
        .collect();
    assert_eq!(
        pending,
        vec![("waiting", Some("A100"), 15.0), ("anywhere", None, 75.0)]
    );
}

#[test]
fn migrations_in_flight_from_annotations_and_replica_rows() {
    let mut chat = isvc(
        "prod",
        "chat",
        json!({"deploymentMode": "OMENative", "engine": {}}),
    );
    chat["metadata"]["annotations"] =
        json!({"ome.io/migration-request-v1-7c9e6679-7425-40de-944b-e07fc1f90ae7": "{}"});
    let s = snapshot(vec![
        chat,
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
               "metadata": {"name": "chat-engine", "namespace": "prod"},
               "spec": {"component": "engine", "parentRef": {"name": "chat"}},
               "status": {"migrations": [
                   {"requestUUID": "a", "trigger": "Manual", "sourceInstance": 0, "phase": "SurgePending", "fromNode": "n1"},
                   {"requestUUID": "b", "trigger": "Manual", "sourceInstance": 1, "phase": "Completed"}]}}),
    ]);
    let config = Config::default();
    let c = Cluster::build(&s, &config, now());
    let ids: Vec<(&str, bool)> = c
        .migrations
        .iter()
        .map(|m| (m.uuid.as_str(), m.requested))
        .collect();
    assert_eq!(
        ids,
        vec![("7c9e6679-7425-40de-944b-e07fc1f90ae7", true), ("a", false)]
    );
}

#[test]
fn deployment_mode_resolution_order() {
    let spec = |v: serde_json::Value| -> alfred::api::InferenceServiceSpec {
        serde_json::from_value(v).unwrap()
    };
    let runtime: alfred::api::runtime::RuntimeFields = serde_json::from_value(
        json!({"engineConfig": {"annotations": {"ome.io/deploymentMode": "OMENative"}}}),
    )
    .unwrap();
    let e = ComponentKind::Engine;
    // (1) the component annotation beats everything.
    let s = spec(
        json!({"deploymentMode": "OMENative", "engine": {"annotations": {"ome.io/deploymentMode": "MultiNode"}}}),
    );
    assert_eq!(
        mode::resolve(&s, e, Some(&runtime)),
        (DeploymentMode::MultiNode, ModeSource::ComponentAnnotation)
    );
    // An unknown annotation value is skipped.
    let s = spec(
        json!({"deploymentMode": "RawDeployment", "engine": {"annotations": {"ome.io/deploymentMode": "Serverless"}}}),
    );
    assert_eq!(
        mode::resolve(&s, e, None),
        (
            DeploymentMode::RawDeployment,
            ModeSource::SpecDeploymentMode
        )
    );
    // The runtime's annotation counts for OME, not for Alfred.
    let s = spec(json!({"engine": {}}));
    assert_eq!(
        mode::resolve(&s, e, Some(&runtime)),
        (DeploymentMode::OmeNative, ModeSource::RuntimeAnnotation)
    );
    assert_eq!(mode::alfred_mode(&s, e), DeploymentMode::RawDeployment);
    // (2) spec.deploymentMode.
    let s = spec(json!({"deploymentMode": "OMENative", "engine": {}}));
    assert_eq!(
        mode::resolve(&s, e, None),
        (DeploymentMode::OmeNative, ModeSource::SpecDeploymentMode)
    );
    // (3) leader/worker on engine or decoder, not router.
    let s = spec(json!({"engine": {"worker": {"size": 2}}, "router": {"leader": {}}}));
    assert_eq!(
        mode::resolve(&s, e, None),
        (DeploymentMode::OmeNative, ModeSource::LeaderWorker)
    );
    assert_eq!(
        mode::resolve(&s, ComponentKind::Router, None),
        (DeploymentMode::RawDeployment, ModeSource::Fallback)
    );
    // (4) RawDeployment.
    let s = spec(json!({"engine": {}}));
    assert_eq!(
        mode::resolve(&s, e, None),
        (DeploymentMode::RawDeployment, ModeSource::Fallback)
    );
}

#[test]
fn the_demo_cluster_pools() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/examples/demo-cluster.yaml"
    ))
    .unwrap();
    let s = Snapshot::parse(&text).unwrap();
    let config = alfred::config::Config::parse(
        s.config_map("alfred-config")
            .unwrap()
            .data
            .as_ref()
            .unwrap()["config.yaml"]
            .as_str(),
    )
    .unwrap();
    let now = s.info.as_ref().unwrap().captured_at;
    let c = Cluster::build(&s, &config, now);
    let reports = alfred::pools::pool_reports(&c, true);
    let summary: Vec<(&str, i64, i64, i64, i64)> = reports
        .iter()
        .map(|p| {
            (
                p.pool.as_str(),
                p.totals.gpus,
                p.totals.free,
                p.totals.schedulable_free,
                p.totals.largest_free_block,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("NVIDIA-A100-SXM4-80GB", 48, 13, 8, 5),
            ("NVIDIA-H100-80GB-HBM3", 64, 16, 11, 4)
        ]
    );
    let h100 = &reports[1];
    let markers = |n: &str| {
        h100.nodes
            .iter()
            .find(|r| r.name == n)
            .unwrap()
            .markers
            .clone()
    };
    assert_eq!(markers("h100-03"), vec!["unhealthy"]);
    assert_eq!(markers("h100-05"), vec!["maintenance:os-patching"]);
    assert_eq!(markers("h100-06"), vec!["suspect"]);
    assert_eq!(markers("h100-07"), vec!["cordoned"]);
    assert_eq!(c.pending.len(), 3);
    assert!(c.workloads.len() >= 20);
}

#[test]
fn every_workload_is_found_by_its_key_whatever_its_namespace_sorts_like() {
    // `chat-prod/...` sorts before `chat/...` as a string but after it by namespace, and an
    // InferenceService without a namespace is keyed `default/...`.
    let isvc = |namespace: Option<&str>, name: &str| {
        let mut metadata = json!({"name": name});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": metadata,
               "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 1}}})
    };
    let items = json!([
        isvc(Some("chat"), "b"),
        isvc(Some("chat-prod"), "a"),
        isvc(Some("chat"), "a"),
        isvc(Some("chat.x"), "a"),
        isvc(None, "z"),
        isvc(Some("ab"), "a"),
        isvc(Some("a"), "b"),
    ]);
    let snapshot =
        Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
            .unwrap();
    let config = Config::default();
    let cluster = Cluster::build(&snapshot, &config, now());
    for key in [
        "chat/a",
        "chat/b",
        "chat-prod/a",
        "chat.x/a",
        "default/z",
        "ab/a",
        "a/b",
    ] {
        let w = cluster
            .workload(key)
            .unwrap_or_else(|| panic!("{key} not found"));
        assert_eq!(w.key, key);
    }
    assert!(cluster.workload("chat/c").is_none());
    assert!(cluster.workload("nonsense").is_none());
}

#[test]
fn early_ticks_fire_on_the_signal_they_name() {
    use alfred::config::EarlyTick::{NodeConditionChange, NodeMaintenanceChange};
    use alfred::model::health::NodeSignals;
    let config = Config::parse(
        "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: patch, label: {key: example.com/state}}]}}}\n",
    )
    .unwrap();
    let nodes = |values: Vec<serde_json::Value>| -> Vec<std::sync::Arc<alfred::api::core::Node>> {
        values
            .into_iter()
            .map(|v| std::sync::Arc::new(serde_json::from_value(v).unwrap()))
            .collect()
    };
    let healthy = node("a", 8, json!({}));
    let mut sick = healthy.clone();
    sick["status"]["conditions"] = json!([{"type": "GpuUnhealthy", "status": "True"}]);
    let mut heartbeat = healthy.clone();
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2026-09-28T10:14:00Z");
    let mut not_ready = healthy.clone();
    not_ready["status"]["conditions"][0]["status"] = json!("False");
    let patching = node("a", 8, json!({"example.com/state": "x"}));
    let observe = |v| NodeSignals::observe(&nodes(v), &config, now());
    let before = observe(vec![healthy.clone()]);
    let both = [NodeConditionChange, NodeMaintenanceChange];
    assert_eq!(before.changed(&observe(vec![healthy.clone()]), &both), None);
    assert_eq!(
        before.changed(&observe(vec![sick.clone()]), &both),
        Some((NodeConditionChange, "a".into()))
    );
    // Any condition's status counts (Ready too), a heartbeat does not, nor a signal whose
    // tick is off.
    assert_eq!(
        before.changed(&observe(vec![not_ready]), &both),
        Some((NodeConditionChange, "a".into()))
    );
    assert_eq!(before.changed(&observe(vec![heartbeat]), &both), None);
    assert_eq!(
        before.changed(&observe(vec![sick]), &[NodeMaintenanceChange]),
        None
    );
    assert_eq!(
        before.changed(&observe(vec![patching.clone()]), &both),
        Some((NodeMaintenanceChange, "a".into()))
    );
    // A node that comes or goes is no event.
    let mut new_patching = patching;
    new_patching["metadata"]["name"] = json!("b");
    assert_eq!(
        before.changed(&observe(vec![healthy, new_patching]), &both),
        None
    );
    assert_eq!(before.changed(&observe(vec![]), &both), None);
}
