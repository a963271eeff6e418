//! The rollout report on a small snapshot: waves after updates in flight finish.

use alfred::config::Config;
use alfred::model::Context;
use alfred::rollout::report::{RolloutReport, report};
use alfred::snapshot::Snapshot;
use serde_json::{Value, json};

/// An Instance row, Ready and serving one pod on `chat-engine-aaaaaaaa`, with `patch` applied.
fn row(index: i32, patch: Value) -> Value {
    let mut r = json!({"index": index, "phase": "Ready", "runningRevision": "chat-engine-aaaaaaaa",
        "podCount": 1, "servingPodCount": 1, "activeOrdinal": 0});
    for (k, v) in patch.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

fn snapshot(items: Value) -> Snapshot {
    Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
        .unwrap()
}

/// The report on `prod/chat`'s engine.
fn report_on(snapshot: &Snapshot) -> RolloutReport {
    let config = Config::default();
    let ctx = Context::build(snapshot, &config, "2026-09-28T10:15:00Z".parse().unwrap());
    report(&ctx, "prod/chat", None, None).unwrap()
}

#[test]
fn a_hold_cleared_by_updates_in_flight_is_not_a_stop() {
    let updating = json!({"phase": "Updating", "servingPodCount": 0, "operation": {"type": "Update", "step": "Drain"}});
    let items = json!([
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
         "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 4,
            "lifecycle": {"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": "50%"}}}}}},
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "metadata": {"name": "chat-engine", "namespace": "prod"},
         "spec": {"component": "engine", "parentRef": {"name": "chat"}, "replicas": 4, "runners": [{"name": "default"}]},
         "status": {"currentRevision": "chat-engine-aaaaaaaa", "updateRevision": "chat-engine-bbbbbbbb",
            "instanceStatuses": [row(0, updating.clone()), row(1, updating), row(2, json!({})), row(3, json!({}))]}}
    ]);
    let r = report_on(&snapshot(items));
    assert_eq!(r.in_flight, vec![0, 1]);
    assert_eq!(r.budget, Some(2));
    let waves: Vec<Vec<i32>> = r
        .waves
        .iter()
        .map(|w| w.iter().map(|s| s.index).collect())
        .collect();
    assert_eq!(
        waves,
        vec![vec![2, 3]],
        "2 and 3 start once 0 and 1 are through"
    );
    assert_eq!(r.stops, None);
}

#[test]
fn a_surge_without_room_is_predicted_pending_by_the_simulator() {
    let node = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let pod = |i: i32, node: &str, gpus: i64| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("chat-engine-{i}-default-0"), "namespace": "prod",
            "labels": {"ome.io/inferenceservice": "chat", "component": "engine", "ome.io/instance-index": i.to_string(), "ome.io/runner": "default"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}})
    };
    let world = |spare: bool| {
        let mut nodes = vec![node("n1"), node("n2")];
        if spare {
            nodes.push(node("n3"));
        }
        let items = json!([
            nodes, pod(0, "n1", 6), pod(1, "n2", 6),
            {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
             "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 2,
                "lifecycle": {"updateStrategy": {"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 2}}}}}},
            {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "metadata": {"name": "chat-engine", "namespace": "prod"},
             "spec": {"component": "engine", "parentRef": {"name": "chat"}, "replicas": 2, "runners": [{"name": "default"}]},
             "status": {"currentRevision": "chat-engine-aaaaaaaa", "updateRevision": "chat-engine-bbbbbbbb",
                "instanceStatuses": [row(0, json!({})), row(1, json!({}))]}}
        ]);
        let mut flat: Vec<Value> = items[0].as_array().unwrap().clone();
        flat.extend(items.as_array().unwrap()[1..].iter().cloned());
        snapshot(Value::Array(flat))
    };
    // n1 and n2 each have 2 GPUs free: neither 6-GPU surge pod fits.
    let r = report_on(&world(false));
    let surge = r.surge.expect("a surge wave");
    assert!(surge.placed.is_empty());
    assert_eq!(surge.pending.len(), 2);
    assert_eq!(surge.pending[0].0, 0);
    assert!(
        surge.pending[0]
            .1
            .contains("0/2 nodes are available: 2 Insufficient nvidia.com/gpu"),
        "{:?}",
        surge.pending
    );
    // An empty n3 takes the first surge pod; what it takes is gone for the second.
    let surge = report_on(&world(true)).surge.unwrap();
    assert_eq!(
        surge.placed,
        vec![(0, "chat-engine-0-default-0".to_string(), "n3".to_string())]
    );
    assert_eq!(
        surge.pending.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![1]
    );
}

#[test]
fn crash_loops_and_restarts_are_read_from_the_pods() {
    // Steady on one revision, RecreatePod with maxUnavailable 1 (2 of 4 Instances at 25%
    // rounds up to 1). Instance 1 is recreating; Instance 2's container crash-loops.
    let pod = |i: i32, status: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("chat-engine-{i}-default-0"), "namespace": "prod",
            "labels": {"ome.io/inferenceservice": "chat", "component": "engine", "ome.io/instance-index": i.to_string(), "ome.io/runner": "default"}},
        "spec": {"containers": [{"name": "c"}]},
        "status": status})
    };
    let crash_loop = json!({"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 7,
        "ready": false, "image": "sglang:v1", "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}}}]});
    let items = json!([
        pod(0, json!({"phase": "Running"})), pod(2, crash_loop),
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
         "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 4,
            "lifecycle": {"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": "25%"}}}}}},
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "metadata": {"name": "chat-engine", "namespace": "prod"},
         "spec": {"component": "engine", "parentRef": {"name": "chat"}, "replicas": 4, "runners": [{"name": "default"}]},
         "status": {"currentRevision": "chat-engine-aaaaaaaa", "updateRevision": "chat-engine-aaaaaaaa",
            "retryBlocks": [{"targetRevision": "chat-engine-cccccccc", "state": "Held", "attemptsStarted": 3,
                "reason": "ImagePullBackOff"}],
            "instanceStatuses": [row(0, json!({})),
                row(1, json!({"phase": "Restarting", "servingPodCount": 0, "operation": {"type": "Restart", "step": "Drain"}})),
                row(2, json!({"servingPodCount": 0})), row(3, json!({}))]}}
    ]);
    let r = report_on(&snapshot(items));
    assert!(r.repairs.is_empty());
    // An earlier revision that used up its attempts: the warning OME recorded for it.
    assert_eq!(
        r.retry_held,
        vec![
            "InferenceReplica prod/chat-engine component=engine update to revision chat-engine-cccccccc held after 3 failed attempt(s) (last failure: ImagePullBackOff); publish a corrected revision or raise lifecycle.updateRetry limits"
        ]
    );
    assert_eq!(
        r.repairs_held,
        vec![
            "OMENative component=engine instance=2 crash-loop repair held by Budget: per-Component unavailability budget 1 exhausted (would become 2)"
        ]
    );
}

#[test]
fn an_in_place_update_that_lost_its_pod_is_finished_as_a_recreate() {
    let pod = |i: i32| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("chat-engine-{i}-default-0"), "namespace": "prod",
            "labels": {"ome.io/inferenceservice": "chat", "component": "engine", "ome.io/instance-index": i.to_string(), "ome.io/runner": "default"}},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    };
    let in_place = json!({"phase": "Updating", "servingPodCount": 0,
        "operation": {"type": "Update", "step": "InPlace", "targetRevision": "chat-engine-bbbbbbbb"}});
    let items = json!([
        pod(0),
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
         "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 2,
            "lifecycle": {"updateStrategy": {"type": "InPlaceIfPossible", "rollingUpdate": {"maxUnavailable": 2}}}}}},
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "metadata": {"name": "chat-engine", "namespace": "prod"},
         "spec": {"component": "engine", "parentRef": {"name": "chat"}, "replicas": 2, "runners": [{"name": "default"}]},
         "status": {"currentRevision": "chat-engine-aaaaaaaa", "updateRevision": "chat-engine-bbbbbbbb",
            "instanceStatuses": [row(0, in_place.clone()), row(1, in_place)]}}
    ]);
    let r = report_on(&snapshot(items));
    // Instance 0's pod is being patched; Instance 1's is gone.
    assert_eq!(r.in_flight, vec![0, 1]);
    assert_eq!(
        r.in_place_lost,
        vec![
            "OMENative component=engine instance=1 lost the pod its in-place update to revision chat-engine-bbbbbbbb was patching; recreating instead"
        ]
    );
}

/// A budget that is neither a count nor a percent names its object, field path and value,
/// wherever it is written.
#[test]
fn a_bad_budget_names_where_it_is_written() {
    let replica = json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "metadata": {"name": "chat-engine", "namespace": "prod"},
         "spec": {"component": "engine", "parentRef": {"name": "chat"}, "replicas": 2, "runners": [{"name": "default"}]},
         "status": {"currentRevision": "chat-engine-aaaaaaaa", "instanceStatuses": [row(0, json!({})), row(1, json!({}))]}});
    let error = |items: Value| {
        let snapshot = snapshot(items);
        let config = Config::default();
        let ctx = Context::build(&snapshot, &config, "2026-09-28T10:15:00Z".parse().unwrap());
        match report(&ctx, "prod/chat", None, None) {
            Ok(_) => panic!("a bad budget was planned with"),
            Err(e) => e.to_string(),
        }
    };
    let in_isvc = error(json!([
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
         "spec": {"deploymentMode": "OMENative", "engine": {"minReplicas": 2,
            "lifecycle": {"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": "0"}}}}}},
        replica.clone()
    ]));
    assert_eq!(
        in_isvc,
        "InferenceService prod/chat, field spec.engine.lifecycle.updateStrategy.rollingUpdate.maxUnavailable: \"0\" must be an integer count or a percent string like \"25%\""
    );
    let in_runtime = error(json!([
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": "prod"},
         "spec": {"deploymentMode": "OMENative", "runtime": {"name": "vllm", "kind": "ClusterServingRuntime"}, "engine": {"minReplicas": 2}}},
        {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": "vllm"},
         "spec": {"engineConfig": {"lifecycle": {"updateStrategy": {"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": "x%"}}}}}},
        replica
    ]));
    assert_eq!(
        in_runtime,
        "ClusterServingRuntime vllm, field spec.engineConfig.lifecycle.updateStrategy.rollingUpdate.maxSurge: \"x%\" has a malformed percent value"
    );
}
