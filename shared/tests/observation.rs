//! Alfred abstains when the observation of a component is unsure (model/observation.rs): an
//! InferenceReplica missing, duplicated, stale or unreadable gives the component no Instance,
//! and a malformed object costs only its own component. Every case holds for both forms a real
//! API server may store the rows in (the plain list and ColumnarV2).

mod common;

use alfred::api::columnar::InstanceStatusColumns;
use alfred::api::component::ComponentKind;
use alfred::api::replica::InstanceStatus;
use alfred::decision::explain::{self, Selector};
use alfred::decision::{AdvisoryReason, CandidateReason, Decision, Recommendation};
use alfred::model::observation::Unobservable;
use alfred::rollout::report;
use common::World;
use serde_json::{Value, json};

const V1: &str = "migration: {apiVersion: v1}\n";

/// Three single-Instance workloads; n1, where a runs, is Unhealthy, so a must leave it.
fn world() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .node("n3", 8)
        .omenative("team", "a", &[("n1", 2)])
        .omenative("team", "b", &[("n1", 4)])
        .omenative("team", "c", &[("n2", 2)])
        .unhealthy("n1")
}

/// The same Instances with every InferenceReplica's rows stored as ColumnarV2.
fn columnar(mut w: World) -> World {
    for item in w
        .items
        .iter_mut()
        .filter(|i| i["kind"] == "InferenceReplica")
    {
        let status = &mut item["status"];
        let rows: Vec<InstanceStatus> =
            serde_json::from_value(status["instanceStatuses"].take()).unwrap();
        status.as_object_mut().unwrap().remove("instanceStatuses");
        status["instanceStatusEncoding"] = json!("ColumnarV2");
        status["instanceStatusColumns"] =
            serde_json::to_value(InstanceStatusColumns::encode(&rows)).unwrap();
    }
    w
}

/// Both stored forms of a world, named.
fn both_forms(w: World) -> [(&'static str, World); 2] {
    [("DenseV1", w.clone()), ("ColumnarV2", columnar(w))]
}

fn rows_of<'d>(d: &'d Decision, workload: &str) -> Vec<&'d Recommendation> {
    d.recommendations
        .iter()
        .filter(|r| r.row.workload == workload)
        .collect()
}

/// Team/a's component cannot be observed: no Instance, one component-wide node-health row with
/// no target, scored at the workload's priority and naming `why`; b and c are decided as usual.
fn assert_abstains_for_a(form: &str, w: &World, why: &str) {
    w.with_ctx(V1, |ctx| {
        let a = ctx.cluster.workload("team/a").unwrap();
        let c = &ctx.cluster.components[a.components[0]];
        assert!(
            c.instances.is_empty(),
            "{form}: no Instance from pod labels"
        );
        let text = c.unobservable.as_ref().map(|u| u.to_string());
        assert!(
            text.as_deref().is_some_and(|t| t.contains(why)),
            "{form}: {text:?}"
        );
    });
    let d = w.decide(V1);
    let a = rows_of(&d, "team/a");
    assert_eq!(a.len(), 1, "{form}: {a:#?}");
    let row = &a[0].row;
    assert_eq!(
        (
            row.instance,
            row.reason,
            row.advisory_reason,
            row.from_node.as_str()
        ),
        (
            -1,
            CandidateReason::NodeUnhealthy,
            Some(AdvisoryReason::OMENativeObservationInvalid),
            "n1"
        ),
        "{form}"
    );
    assert!(
        row.hint_targets.is_empty() && row.target.is_empty(),
        "{form}"
    );
    assert_eq!((row.score, a[0].footprint), (0.5, 0), "{form}");
    assert!(a[0].detail.contains(why), "{form}: {}", a[0].detail);
    // b on the same node still gets its move planned; c is left be.
    let b = rows_of(&d, "team/b");
    assert_eq!(b.len(), 1, "{form}: {b:#?}");
    assert_eq!(b[0].row.instance, 0, "{form}");
    assert!(!b[0].row.hint_targets.is_empty(), "{form}");
}

#[test]
fn a_duplicated_replica_gives_no_instance_and_no_target() {
    for (form, w) in both_forms(world()) {
        let mut second = w
            .items
            .iter()
            .find(|i| i["kind"] == "InferenceReplica" && i["metadata"]["name"] == "a-engine")
            .unwrap()
            .clone();
        second["metadata"]["name"] = json!("a-engine-x");
        second["metadata"]["uid"] = json!("uid-a-engine-x");
        let mut w = w;
        w.items.push(second);
        assert_abstains_for_a(
            form,
            &w,
            "2 InferenceReplicas claim it (a-engine, a-engine-x)",
        );
    }
}

#[test]
fn a_missing_replica_gives_no_instance() {
    let mut w = world();
    w.items
        .retain(|i| !(i["kind"] == "InferenceReplica" && i["metadata"]["name"] == "a-engine"));
    assert_abstains_for_a(
        "no replica",
        &w,
        "no InferenceReplica serves it (none in team has spec.parentRef.name a and spec.component engine)",
    );
}

#[test]
fn a_stale_replica_gives_no_instance() {
    for (form, w) in both_forms(world()) {
        let w = w.edit("InferenceReplica", "a-engine", |r| {
            r["metadata"]["generation"] = json!(3)
        });
        assert_abstains_for_a(
            form,
            &w,
            "InferenceReplica a-engine status is stale (status.observedGeneration 1 < metadata.generation 3)",
        );
    }
}

#[test]
fn maintenance_abstains_the_same_way() {
    for (form, w) in both_forms(world()) {
        let w = w
            .edit("Node", "n1", |n| {
                n["status"]["conditions"][1]["status"] = json!("False")
            })
            .label("n1", "maintenance.ome.io/requested", "true")
            .edit("InferenceReplica", "a-engine", |r| {
                r["metadata"]["generation"] = json!(2)
            });
        let config = format!(
            "{V1}policies:\n  nodeHealth:\n    maintenance:\n      triggers:\n      - {{name: planned, label: {{key: maintenance.ome.io/requested, value: \"true\"}}}}\n"
        );
        let d = w.decide(&config);
        let a = rows_of(&d, "team/a");
        assert_eq!(a.len(), 1, "{form}: {a:#?}");
        assert_eq!(
            (a[0].row.instance, a[0].row.reason, a[0].row.advisory_reason),
            (
                -1,
                CandidateReason::NodeMaintenance,
                Some(AdvisoryReason::OMENativeObservationInvalid)
            ),
            "{form}"
        );
    }
}

/// OME's own tools refuse more than 10,000 rows, whichever way they are stored.
#[test]
fn one_bound_for_both_stored_forms() {
    let many: Vec<Value> = (0..10_001)
        .map(|i| json!({"index": i, "phase": "Ready", "podCount": 1}))
        .collect();
    let w = world().edit("InferenceReplica", "a-engine", |r| {
        r["status"]["instanceStatuses"] = json!(many)
    });
    for (form, w) in both_forms(w) {
        w.with_ctx(V1, |ctx| {
            let a = ctx.cluster.workload("team/a").unwrap();
            let c = &ctx.cluster.components[a.components[0]];
            assert!(c.instances.is_empty(), "{form}");
            assert!(
                matches!(c.unobservable, Some(Unobservable::RowsUnreadable { .. })),
                "{form}: {:?}",
                c.unobservable
            );
            let text = c.unobservable.as_ref().unwrap().to_string();
            assert!(
                text.contains("10000") || text.contains("10,000"),
                "{form}: {text}"
            );
        });
    }
    // A repeated index is two rows for one Instance: which is true cannot be told.
    let w = world().edit("InferenceReplica", "a-engine", |r| {
        let row = r["status"]["instanceStatuses"][0].clone();
        r["status"]["instanceStatuses"] = json!([row.clone(), row]);
    });
    assert_abstains_for_a(
        "repeated index",
        &w,
        "status.instanceStatuses[1].index: 0 is held by an earlier row too",
    );
}

/// A row missing a field OME's CRD requires costs its component, in either form, and every
/// other component is still decided.
#[test]
fn a_malformed_row_costs_its_component_in_either_form() {
    let dense = world().edit("InferenceReplica", "a-engine", |r| {
        r["status"]["instanceStatuses"][0]["operation"] = json!({"id": "op-1", "step": "Surge"})
    });
    assert_abstains_for_a(
        "DenseV1",
        &dense,
        "InferenceReplica a-engine cannot be read: field status.instanceStatuses[0].operation: missing field `type`",
    );
    let columns = columnar(world()).edit("InferenceReplica", "a-engine", |r| {
        r["status"]["instanceStatusColumns"]["entries"] =
            json!([{"index": 0, "operation": {"id": "op-1", "step": "Surge"}}])
    });
    assert_abstains_for_a(
        "ColumnarV2",
        &columns,
        "status.instanceStatusColumns.entries[0].operation: missing field `type`",
    );
    // Both forms give the same pass.
    let rows = |d: Decision| -> Vec<_> { d.recommendations.into_iter().map(|r| r.row).collect() };
    assert_eq!(rows(dense.decide(V1)), rows(columns.decide(V1)));
}

/// An InferenceService that cannot be read is no workload; its pods still hold their GPUs,
/// and on a node being left they give the component-wide row naming the field.
#[test]
fn an_unreadable_inference_service_costs_only_itself() {
    let w = world().edit("InferenceService", "a", |i| {
        i["spec"]["engine"]["minReplicas"] = json!("one")
    });
    w.with_ctx(V1, |ctx| {
        assert!(ctx.cluster.workload("team/a").is_none());
        let n1 = ctx.cluster.node("n1").unwrap();
        assert_eq!(n1.gpu_used, 6, "a's pod still holds its GPUs");
        let e = explain::explain(
            ctx,
            &alfred::decision::decide(ctx),
            &Selector::parse("team/a").unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("InferenceService team/a cannot be read (field spec.engine.minReplicas: invalid type: string \"one\""),
            "{e}"
        );
    });
    let d = w.decide(V1);
    let a = rows_of(&d, "team/a");
    assert_eq!(a.len(), 1, "{a:#?}");
    assert_eq!(a[0].row.instance, -1);
    assert!(
        a[0].detail
            .contains("InferenceService team/a cannot be read (field spec.engine.minReplicas"),
        "{}",
        a[0].detail
    );
    assert_eq!(rows_of(&d, "team/b").len(), 1);
}

#[test]
fn explain_and_rollout_say_why_no_instance_can_be_resolved() {
    let w = world().edit("InferenceReplica", "a-engine", |r| {
        r["metadata"]["generation"] = json!(2)
    });
    w.with_ctx(V1, |ctx| {
        let d = alfred::decision::decide(ctx);
        let out = explain::explain(ctx, &d, &Selector::parse("team/a/engine").unwrap()).unwrap();
        assert_eq!(out.len(), 1);
        let e = &out[0];
        assert_eq!((e.instance, e.gpus), (-1, 2));
        assert_eq!(e.nodes[0].node, "n1");
        assert!(e.targets.is_empty() && e.scheduling.is_none());
        assert_eq!(e.checks.len(), 1);
        assert_eq!(
            e.checks[0].reason,
            Some(AdvisoryReason::OMENativeObservationInvalid)
        );
        assert!(
            e.checks[0].detail.starts_with(
                "no Instance can be resolved: InferenceReplica a-engine status is stale"
            ),
            "{}",
            e.checks[0].detail
        );
        assert_eq!(e.recommendations.len(), 1);
        assert_eq!(e.recommendations[0].instance, -1);
        let r = report::report(ctx, "team/a", Some(ComponentKind::Engine), None)
            .unwrap_err()
            .to_string();
        assert!(
            r.starts_with(
                "team/a engine cannot be observed: InferenceReplica a-engine status is stale"
            ),
            "{r}"
        );
    });
}

/// A node record lists the workloads of the OME pods holding GPUs there: not a 0-GPU pod's,
/// and a pod controlled by an InferenceReplica counts for that replica's InferenceService.
/// One whose owner cannot be resolved still occupies the node, under no name.
#[test]
fn node_records_count_what_occupies_gpus() {
    let pod = |name: &str, gpus: i64, labels: Value, owner: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "labels": labels,
                "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                    "name": owner, "uid": format!("uid-{owner}"), "controller": true}]},
            "spec": {"nodeName": "n3", "containers": [{"name": "c",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let only_gpu_pods = |mut w: World| {
        // c's router-like helper holds no GPU: its workload is not an occupant.
        w.items.push(pod(
            "c-helper",
            0,
            json!({"ome.io/inferenceservice": "c", "component": "engine"}),
            "c-engine",
        ));
        w.unhealthy("n3")
    };
    let d = only_gpu_pods(world()).decide(V1);
    let n3 = &d.nodes["node.n3"];
    assert!(
        n3.workloads.is_empty() && !n3.ome_gpu_occupants_present,
        "{n3:?}"
    );

    // A GPU pod with OME's identity whose InferenceReplica is gone, and one without labels
    // whose InferenceReplica names its parent.
    let mut w = only_gpu_pods(world());
    w.items.push(pod(
        "orphan-engine-0-default-0",
        1,
        json!({"ome.io/managed-by": "OMENative", "ome.io/instance-index": "0"}),
        "gone-engine",
    ));
    let d = w.decide(V1);
    let n3 = &d.nodes["node.n3"];
    assert!(n3.ome_gpu_occupants_present, "{n3:?}");
    assert!(n3.workloads.is_empty(), "no name is invented: {n3:?}");
    w.items.push(pod("unlabelled", 1, json!({}), "c-engine"));
    let d = w.decide(V1);
    assert_eq!(d.nodes["node.n3"].workloads, vec!["team/c"]);
}

/// Draining a node never counts it empty while pods of a component no Instance holds run there.
#[test]
fn a_drain_keeps_what_it_cannot_observe() {
    use alfred::decision::drain::{DrainOptions, drain};
    for (form, w) in both_forms(world()) {
        let w = w.edit("InferenceReplica", "a-engine", |r| {
            r["metadata"]["generation"] = json!(2)
        });
        w.with_ctx(V1, |ctx| {
            let options = DrainOptions {
                nodes: vec!["n1".into()],
                ..DrainOptions::default()
            };
            let report = drain(ctx, &options).unwrap();
            assert!(!report.complete, "{form}: {report:#?}");
            assert!(!report.nodes[0].emptied, "{form}");
            let a = report.moves.iter().find(|m| m.workload == "team/a").unwrap();
            assert_eq!((a.instance, a.gpus), (-1, 2), "{form}");
            assert!(a.placements.is_empty(), "{form}");
            assert_eq!(a.reason, Some(AdvisoryReason::OMENativeObservationInvalid));
            assert!(
                a.detail.starts_with("cannot move: no Instance can be resolved: InferenceReplica a-engine status is stale"),
                "{form}: {}",
                a.detail
            );
            let b = report.moves.iter().find(|m| m.workload == "team/b").unwrap();
            assert!(!b.placements.is_empty(), "{form}: b still moves");
        });
    }
}
