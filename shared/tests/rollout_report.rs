//! The rollout report on a small snapshot: waves after updates in flight finish.

use alfred::cluster::Cluster;
use alfred::config::Config;
use alfred::rollout_report::report;
use alfred::snapshot::Snapshot;
use serde_json::json;

#[test]
fn a_hold_cleared_by_updates_in_flight_is_not_a_stop() {
    let row = |index: i32, patch: serde_json::Value| {
        let mut r = json!({"index": index, "phase": "Ready", "runningRevision": "chat-engine-aaaaaaaa",
            "podCount": 1, "servingPodCount": 1, "activeOrdinal": 0});
        for (k, v) in patch.as_object().unwrap() {
            r[k] = v.clone();
        }
        r
    };
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
    let snapshot =
        Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
            .unwrap();
    let config = Config::default();
    let cluster = Cluster::build(&snapshot, &config, "2026-09-28T10:15:00Z".parse().unwrap());
    let r = report(&cluster, &snapshot, "prod/chat", None, None).unwrap();
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
