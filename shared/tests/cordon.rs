//! Maintenance cordons (OME's `cordon: true`): which nodes a pass chooses, and the write made
//! after reading each node again.

use alfred::api::core::Node;
use alfred::config::Config;
use alfred::decision::MaintenanceCordon;
use alfred::execute::cordon::{CordonStep, step};
use alfred::model::Context;
use alfred::snapshot::Snapshot;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const NOW: i64 = 1_790_000_000;

fn now() -> Timestamp {
    Timestamp::from_second(NOW).unwrap()
}

fn config() -> Config {
    Config::parse(
        r#"
schemaVersion: 1
policies:
  nodeHealth:
    maintenance:
      triggers:
        - {name: a-label-only, label: {key: example.com/state, value: patching}}
        - {name: b-starts, label: {key: example.com/start-at, valueIsStartTime: true}, cordon: true}
        - {name: c-taint, taint: {key: example.com/swap}, cordon: true}
"#,
    )
    .unwrap()
}

fn node(name: &str, labels: Value, extra: Value) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            n[k] = v;
        }
    }
    n
}

fn cordons(nodes: Vec<Value>) -> Vec<MaintenanceCordon> {
    let text = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": nodes}))
        .unwrap();
    let snapshot = Snapshot::parse(&text).unwrap();
    let config = config();
    let ctx = Context::build(&snapshot, &config, now());
    alfred::decision::decide(&ctx).cordons
}

#[test]
fn a_pass_chooses_the_schedulable_nodes_a_cordon_trigger_matches() {
    let started = (NOW - 1).to_string();
    let got = cordons(vec![
        node("due", json!({"example.com/start-at": started}), json!({})),
        node(
            "not-yet",
            json!({"example.com/start-at": (NOW + 60).to_string()}),
            json!({}),
        ),
        node(
            "label-only",
            json!({"example.com/state": "patching"}),
            json!({}),
        ),
        node(
            "both",
            json!({"example.com/state": "patching", "example.com/start-at": "soon"}),
            json!({"spec": {"taints": [{"key": "example.com/swap", "effect": "NoSchedule"}]}}),
        ),
        node(
            "already-cordoned",
            json!({"example.com/start-at": started}),
            json!({"spec": {"unschedulable": true}}),
        ),
    ]);
    let got: Vec<(&str, &str)> = got
        .iter()
        .map(|c| (c.node.as_str(), c.rule.as_str()))
        .collect();
    // `both`: the first cordon rule by name; a start time that is not a number is due at once.
    assert_eq!(got, [("both", "b-starts"), ("due", "b-starts")]);
}

fn live(labels: Value, extra: Value) -> Node {
    serde_json::from_value(node("due", labels, extra)).unwrap()
}

fn planned() -> MaintenanceCordon {
    MaintenanceCordon {
        node: "due".into(),
        uid: "uid-due".into(),
        rule: "b-starts".into(),
    }
}

#[test]
fn the_node_read_again_decides_the_write() {
    let config = config();
    let due = json!({"example.com/start-at": (NOW - 1).to_string()});
    let at = |n: Option<&Node>| step(&planned(), n, "42", &config, now());
    assert_eq!(
        at(Some(&live(due.clone(), json!({})))),
        CordonStep::Write {
            patch: json!({"metadata": {"resourceVersion": "42",
                                       "annotations": {"alfred.ome.io/cordoned-for-maintenance": "b-starts"}},
                          "spec": {"unschedulable": true}}),
            rule: "b-starts".into(),
        }
    );
    assert_eq!(at(None), CordonStep::Skip("the node is gone"));
    let mut replaced = live(due.clone(), json!({}));
    replaced.metadata.uid = "uid-new".into();
    assert_eq!(
        at(Some(&replaced)),
        CordonStep::Skip("the node was replaced since the pass read it")
    );
    assert_eq!(
        at(Some(&live(
            due.clone(),
            json!({"spec": {"unschedulable": true}})
        ))),
        CordonStep::Skip("the node is already cordoned")
    );
    assert_eq!(
        at(Some(&live(
            due,
            json!({"metadata": {"name": "due", "uid": "uid-due", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
        ))),
        CordonStep::Skip("the node is being deleted")
    );
    // The maintenance moved later since the pass: no cordon.
    assert_eq!(
        at(Some(&live(
            json!({"example.com/start-at": (NOW + 3600).to_string()}),
            json!({})
        ))),
        CordonStep::Skip("no trigger asking for a cordon matches the node any more")
    );
}
