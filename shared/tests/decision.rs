//! The decision pass, checked against figures worked by hand from the spec's formulas
//! (alfred-policies.md "The score formulas"; alfred-reference.md §5).

mod common;

use common::*;

use alfred::config::Config;
use alfred::decision::{
    AdvisoryReason, CandidateReason, Decision, PolicyName, Recommendation, node_record_key,
};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const V1: &str = "migration: {apiVersion: v1}\n";

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn assert_close(what: &str, got: f64, want: f64) {
    assert!(close(got, want), "{what}: got {got}, want {want}");
}

fn row<'d>(
    d: &'d Decision,
    policy: PolicyName,
    workload: &str,
    instance: i32,
) -> &'d Recommendation {
    d.recommendations
        .iter()
        .find(|r| {
            r.row.policy == policy && r.row.workload == workload && r.row.instance == instance
        })
        .unwrap_or_else(|| {
            panic!(
                "no {policy:?} row for {workload}/{instance}: {:#?}",
                d.recommendations
            )
        })
}

fn defrag<'d>(d: &'d Decision, workload: &str, instance: i32) -> &'d Recommendation {
    row(d, PolicyName::Defragmentation, workload, instance)
}

/// n1 holds a (4 GPUs) and b (2); n2 holds c (2). Free: n1 2, n2 6.
fn two_nodes() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "b", &[("n1", 2)])
        .omenative("team", "c", &[("n2", 2)])
}

#[test]
fn every_score_term_by_hand() {
    let d = two_nodes().decide(V1);
    let p = &d.pools[0];
    // Demand 4 GPUs of size 4, 4 of size 2: share 0, .5, .5, 0; weight .7 * share + .3 * prior.
    let weights: Vec<f64> = p.sizes.iter().map(|s| s.weight).collect();
    for (got, want) in weights.iter().zip([0.03, 0.38, 0.41, 0.18]) {
        assert_close("weight", *got, want);
    }
    // Free 2 + 6 = 8: slots 8, 4, 1, 0, so frag(4) = 1 - 4/8, frag(8) = 1.
    let frag: Vec<f64> = p.sizes.iter().map(|s| s.observed_frag).collect();
    assert_eq!(frag, vec![0.0, 0.0, 0.5, 1.0]);
    assert_close("observed", p.observed, 0.41 * 0.5 + 0.18);
    // The repack puts everything on n1 and leaves n2 empty: nothing fragmented.
    assert_eq!(
        p.sizes.iter().map(|s| s.best_slots).collect::<Vec<_>>(),
        vec![8, 4, 2, 1]
    );
    assert_close("best", p.best, 0.0);
    assert_close("reclaimable", p.reclaimable, 0.385);
    assert_close("pending pressure", p.pending_pressure, 0.0);
    assert_close("score", p.score, 0.385);
    assert!(p.execution_open && !p.advisory_open);
    assert_eq!(
        (p.free_gpus, p.largest_free_block, p.movable_instances),
        (8, 6, 3)
    );
}

#[test]
fn consolidation_that_frees_a_whole_node_ranks_first() {
    let d = two_nodes().decide(V1);
    // c onto n1 empties n2: benefit .385, score .385 - .15.
    let c = defrag(&d, "team/c", 0);
    assert_close("c benefit", c.benefit.unwrap(), 0.385);
    assert_close("c score", c.row.score, 0.235);
    assert_eq!(c.row.hint_targets, vec!["n1"]);
    assert_eq!(
        c.row.advisory_reason,
        Some(AdvisoryReason::SimulationRecommendOnly)
    );
    // b onto n2 leaves 4 + 4 free: frag(4) = 0, benefit .205.
    let b = defrag(&d, "team/b", 0);
    assert_close("b score", b.row.score, 0.205 - 0.15);
    // a onto n2 only swaps the holes: no benefit, advice.
    let a = defrag(&d, "team/a", 0);
    assert_close("a benefit", a.benefit.unwrap(), 0.0);
    assert_eq!(
        a.row.advisory_reason,
        Some(AdvisoryReason::NonExecutableObservedFragmentation)
    );
    let order: Vec<&str> = d
        .recommendations
        .iter()
        .map(|r| r.row.workload.as_str())
        .collect();
    assert_eq!(order, vec!["team/c", "team/b", "team/a"]);
    assert!(
        d.recommendations
            .iter()
            .all(|r| r.row.outcome == alfred::decision::RowOutcome::Advisory)
    );
}

#[test]
fn the_cost_at_each_aggressiveness() {
    for (level, cost) in [
        ("conservative", 0.225),
        ("balanced", 0.15),
        ("aggressive", 0.075),
    ] {
        let config = format!("{V1}policies: {{defragmentation: {{aggressiveness: {level}}}}}\n");
        let d = two_nodes().decide(&config);
        let b = defrag(&d, "team/b", 0);
        assert_close(level, b.cost.unwrap(), cost);
        let executable = 0.205 - cost > 0.0;
        assert_eq!(
            b.row.advisory_reason == Some(AdvisoryReason::SimulationRecommendOnly),
            executable,
            "{level}"
        );
        assert_close(level, b.row.score, 0.205 - cost);
    }
}

#[test]
fn a_pending_eight_gpu_pod_that_fits_only_after_a_repack() {
    let d = two_nodes()
        .pending("team", "big-0", 8, 30, "big")
        .decide(V1);
    let p = &d.pools[0];
    // Demand now 16: weights .03, .205, .235, .53; observed .235 * .5 + .53.
    assert_close("observed", p.observed, 0.6475);
    let urgency = 1.0 - (-1.0f64).exp();
    assert_close("pending pressure", p.pending_pressure, urgency);
    assert_close("score", p.score, 1.0 - (1.0 - 0.6475) * (1.0 - urgency));
    assert_eq!(p.repackable_pending.len(), 1);
    // c's move empties n2 for it: an emergency, score doubled.
    let c = defrag(&d, "team/c", 0);
    assert!(c.row.emergency);
    assert_close("c score", c.row.score, (0.6475 - 0.15) * 2.0);
    assert!(
        !defrag(&d, "team/b", 0).row.emergency,
        "b's move leaves no 8-GPU hole"
    );
}

#[test]
fn emergency_needs_age_and_namespace_or_tenant_group() {
    let other = |minutes| two_nodes().pending("other", "big-0", 8, minutes, "big");
    // Another namespace, no tenant group: no emergency.
    assert!(!defrag(&other(30).decide(V1), "team/c", 0).row.emergency);
    // The same tenant group on both InferenceServices: an emergency.
    let grouped = |minutes| {
        other(minutes)
            .annotate("c", "alfred.ome.io/tenant-group", "g")
            .omenative("other", "big", &[])
            .annotate("big", "alfred.ome.io/tenant-group", "g")
    };
    assert!(defrag(&grouped(30).decide(V1), "team/c", 0).row.emergency);
    // ... unless cross-tenant optimization is off.
    let d = grouped(30).decide(&format!("{V1}allowCrossTenantOptimization: false\n"));
    assert!(!defrag(&d, "team/c", 0).row.emergency);
    // Exactly the emergency age is not older than it.
    assert!(!defrag(&grouped(10).decide(V1), "team/c", 0).row.emergency);
    assert!(defrag(&grouped(11).decide(V1), "team/c", 0).row.emergency);
}

#[test]
fn capacity_shortage_is_not_fragmentation() {
    // One free GPU in the whole pool and an 8-GPU pod waiting: no repack can seat it.
    let d = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 8)])
        .omenative("team", "b", &[("n2", 7)])
        .pending("team", "big-0", 8, 60, "big")
        .decide(V1);
    let p = &d.pools[0];
    assert_close("score", p.score, 0.0);
    assert!(p.repackable_pending.is_empty());
    assert!(!p.execution_open);
    // frag(2), frag(4), frag(8) are 1 with one GPU free: observed fragmentation is high, so
    // the Instances get advice that no move fixes it.
    assert!(p.advisory_open);
    assert_eq!(
        defrag(&d, "team/b", 0).row.advisory_reason,
        Some(AdvisoryReason::NonExecutableObservedFragmentation)
    );
}

#[test]
fn a_pool_without_fragmentation_gets_no_rows() {
    let d = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 8)])
        .decide(V1);
    let p = &d.pools[0];
    assert_close("observed", p.observed, 0.0);
    assert!(!p.execution_open && !p.advisory_open);
    assert!(d.recommendations.is_empty());
}

#[test]
fn pools_are_kept_apart() {
    // An empty node of another product is no target, and its free GPUs are not this pool's.
    let d = two_nodes()
        .node("x1", 8)
        .label("x1", "nvidia.com/gpu.product", "A100")
        .decide(V1);
    assert_eq!(d.pools.len(), 2);
    let h100 = d.pools.iter().find(|p| p.pool == PRODUCT).unwrap();
    assert_eq!(h100.free_gpus, 8);
    assert_close("score", h100.score, 0.385);
    let a100 = d.pools.iter().find(|p| p.pool == "A100").unwrap();
    assert_close("a100 score", a100.score, 0.0);
    for r in &d.recommendations {
        assert!(!r.placement_targets.contains(&"x1".to_string()), "{r:?}");
    }
}

#[test]
fn spot_boosts_and_overrides() {
    let spot = || two_nodes().label("n2", "node.kubernetes.io/preemptible", "true");
    let open = "spotPolicy: {avoidAsTarget: false}\n";
    // c leaves a preemptible node: x1.25.
    let d = spot().decide(&format!("{V1}{open}"));
    assert_close("boosted", defrag(&d, "team/c", 0).row.score, 0.235 * 1.25);
    // `ignore` opts out of the boost.
    let d = spot()
        .annotate("c", "alfred.ome.io/spot-policy", "ignore")
        .decide(&format!("{V1}{open}"));
    assert_close("ignored", defrag(&d, "team/c", 0).row.score, 0.235);
    // Without preferAsSource only `migrate` boosts.
    let d = spot().decide(&format!(
        "{V1}spotPolicy: {{avoidAsTarget: false, preferAsSource: false}}\n"
    ));
    assert_close("not preferred", defrag(&d, "team/c", 0).row.score, 0.235);
    let d = spot()
        .annotate("c", "alfred.ome.io/spot-policy", "migrate")
        .decide(&format!(
            "{V1}spotPolicy: {{avoidAsTarget: false, preferAsSource: false}}\n"
        ));
    assert_close("migrate", defrag(&d, "team/c", 0).row.score, 0.235 * 1.25);
    // `avoid` keeps b off the preemptible node even when the cluster allows it: no target.
    let d = spot()
        .annotate("b", "alfred.ome.io/spot-policy", "avoid")
        .decide(&format!("{V1}{open}"));
    assert_eq!(
        defrag(&d, "team/b", 0).row.advisory_reason,
        Some(AdvisoryReason::NoSurgeHeadroom)
    );
    // By default a preemptible node is no bin: its free GPUs leave the score.
    let d = spot().decide(V1);
    assert_eq!(d.pools[0].free_gpus, 2);
}

#[test]
fn maintenance_windows_at_their_boundaries() {
    use alfred::decision::window_open;
    let config = Config::parse(
        "schemaVersion: 1\nmaintenanceWindows:\n- days: [Sat]\n  start: \"01:00\"\n  end: \"05:00\"\n",
    )
    .unwrap();
    let open = |t: &str| window_open(&config.maintenance_windows, t.parse().unwrap());
    assert!(!open("2026-09-26T00:59:59Z"));
    assert!(open("2026-09-26T01:00:00Z"), "start is inclusive");
    assert!(open("2026-09-26T04:59:59Z"));
    assert!(!open("2026-09-26T05:00:00Z"), "end is exclusive");
    assert!(!open("2026-09-28T02:00:00Z"), "Monday is not a window day");
    assert!(
        window_open(&[], "2026-09-28T02:00:00Z".parse().unwrap()),
        "no windows: always open"
    );

    let windows = "maintenanceWindows: [{days: [Sat], start: \"01:00\", end: \"05:00\"}]\n";
    // Closed: the moves go, the advice stays.
    let d = two_nodes().decide(&format!("{V1}{windows}"));
    assert_eq!(d.dropped_outside_window, 2);
    assert_eq!(d.recommendations.len(), 1);
    assert_eq!(d.recommendations[0].row.workload, "team/a");
    // Open on Saturday at 01:00.
    let d = two_nodes()
        .at("2026-10-03T01:00:00Z")
        .decide(&format!("{V1}{windows}"));
    assert_eq!((d.dropped_outside_window, d.recommendations.len()), (0, 3));
    // An emergency goes through a closed window.
    let d = two_nodes()
        .pending("team", "big-0", 8, 30, "big")
        .decide(&format!("{V1}{windows}"));
    let c = defrag(&d, "team/c", 0);
    assert!(
        c.row.emergency && c.row.advisory_reason == Some(AdvisoryReason::SimulationRecommendOnly)
    );
    // (b's move, worth .235 * .5 against .15 with the pending pod's demand, is advice anyway.)
    assert_eq!(d.dropped_outside_window, 0);
}

/// The reason a lone Instance of `w` gets, unhealthy node aside.
fn reason_of(w: World, config: &str) -> Option<AdvisoryReason> {
    defrag(&w.decide(config), "team/a", 0).row.advisory_reason
}

fn eligible() -> World {
    // Free: n1 2, n2 2. Moving a (2 GPUs) to n2 opens a 4-GPU block on n1.
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 2)])
        .omenative("team", "b", &[("n1", 4)])
        .omenative("team", "c", &[("n2", 6)])
}

#[test]
fn every_eligibility_reason_in_order() {
    use AdvisoryReason::*;
    assert_eq!(reason_of(eligible(), V1), Some(SimulationRecommendOnly));
    assert_eq!(reason_of(eligible(), ""), Some(OMENativeUnavailable));
    let ir = "a-engine";
    let cases: Vec<(&str, World, &str, AdvisoryReason)> = vec![
        ("no such model", eligible().edit("InferenceService", "a", |i| i["spec"]["model"]["name"] = json!("gone")), V1, ModelUnresolved),
        ("migration surface off", eligible(), "migration: {apiVersion: v1}\nomenativeMigrationEnabled: false\n", MigrationSurfaceDisabled),
        ("opted out", eligible().annotate("a", "alfred.ome.io/movable", "false"), V1, OMENativeStateIneligible),
        ("defaultMovable false", eligible(), "migration: {apiVersion: v1}\ndefaultMovable: false\n", OMENativeStateIneligible),
        ("malformed request", eligible().annotate("a", "ome.io/migration-request-v1-1b4e28ba-2fa1-11d2-883f-0016d3cca427", "{\"schemaVersion\":\"v1\",\"component\":\"engine\",\"instance\":7,\"from_node\":\"n1\"}"), V1, OMENativeStateIneligible),
        ("request waiting", eligible().annotate("a", "ome.io/migration-request-v1-1b4e28ba-2fa1-11d2-883f-0016d3cca427", "{\"schemaVersion\":\"v1\",\"component\":\"engine\",\"instance\":0,\"from_node\":\"n1\"}"), V1, OMENativeStateIneligible),
        ("paused", eligible().edit("InferenceReplica", ir, |r| r["spec"]["paused"] = json!(true)), V1, OMENativeStateIneligible),
        ("policy Never", eligible().edit("InferenceService", "a", |i| i["spec"]["engine"]["lifecycle"] = json!({"migrationPolicy": {"mode": "Never"}})), V1, OMENativeStateIneligible),
        ("scaling", eligible().edit("InferenceReplica", ir, |r| r["status"]["readyReplicas"] = json!(0)), V1, OMENativeStateIneligible),
        ("rollout", eligible().edit("InferenceReplica", ir, |r| r["status"]["updateRevision"] = json!("r2")), V1, OMENativeStateIneligible),
        ("no row", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"] = json!([])), V1, OMENativeObservationInvalid),
        ("not admitted", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"][0]["admitted"] = json!(false)), V1, OMENativeStateIneligible),
        ("restarting", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"][0]["phase"] = json!("Restarting")), V1, OMENativeStateIneligible),
        ("operation", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"][0]["operation"] = json!({"type": "Restart"})), V1, OMENativeStateIneligible),
        ("pod not serving", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"][0]["servingPodCount"] = json!(0)), V1, OMENativeStateIneligible),
        ("old revision", eligible().edit("InferenceReplica", ir, |r| r["status"]["instanceStatuses"][0]["runningRevision"] = json!("r0")), V1, OMENativeStateIneligible),
        ("pod not Ready", eligible().edit("Pod", "a-engine-0-default-0", |p| p["status"]["conditions"][0]["status"] = json!("False")), V1, OMENativeStateIneligible),
        ("pod terminating", eligible().edit("Pod", "a-engine-0-default-0", |p| p["metadata"]["deletionTimestamp"] = json!(ago(1))), V1, OMENativeStateIneligible),
        ("recently migrated", eligible().edit("InferenceReplica", ir, |r| r["status"]["migrations"] = json!([{"requestUUID": "u", "trigger": "Manual", "sourceInstance": 0, "phase": "Completed", "startedAt": ago(20), "completedAt": ago(15)}])), V1, OMENativeStateIneligible),
    ];
    for (what, world, config, want) in cases {
        assert_eq!(reason_of(world, config), Some(want), "{what}");
    }
    // The workload cooldown ends: 30 minutes by default, the annotation overrides it.
    let migrated = |minutes| {
        eligible().edit("InferenceReplica", ir, |r| {
            r["status"]["migrations"] = json!([{"requestUUID": "u", "trigger": "Manual", "sourceInstance": 0,
                "phase": "Completed", "startedAt": ago(minutes + 5), "completedAt": ago(minutes)}])
        })
    };
    assert_eq!(
        reason_of(migrated(30), V1),
        Some(AdvisoryReason::SimulationRecommendOnly)
    );
    assert_eq!(
        reason_of(
            migrated(15).annotate("a", "alfred.ome.io/cooldown-minutes", "10"),
            V1
        ),
        Some(AdvisoryReason::SimulationRecommendOnly)
    );
    // An unparsable override is ignored at plan time: the default 30 minutes applies.
    assert_eq!(
        reason_of(
            migrated(15).annotate("a", "alfred.ome.io/cooldown-minutes", "soon"),
            V1
        ),
        Some(AdvisoryReason::OMENativeStateIneligible)
    );
    // An InferenceReplica missing altogether, or stale: no Instance is resolved from the pods'
    // labels, so the pass has nothing of `a` to judge, and plans nothing for it.
    let mut missing = eligible();
    missing
        .items
        .retain(|i| !(i["kind"] == "InferenceReplica" && i["metadata"]["name"] == ir));
    let stale = eligible().edit("InferenceReplica", ir, |r| {
        r["metadata"]["generation"] = json!(2)
    });
    for (what, w, why) in [
        ("missing", missing, "no InferenceReplica serves it"),
        (
            "stale",
            stale,
            "status is stale (status.observedGeneration 1 < metadata.generation 2)",
        ),
    ] {
        let d = w.decide(V1);
        assert!(
            d.recommendations.iter().all(|r| r.row.workload != "team/a"),
            "{what}: {:?}",
            d.recommendations
        );
        w.with_ctx(V1, |ctx| {
            let a = ctx.cluster.workload("team/a").unwrap();
            let c = &ctx.cluster.components[a.components[0]];
            assert!(c.instances.is_empty(), "{what}");
            let text = c.unobservable.as_ref().unwrap().to_string();
            assert!(text.contains(why), "{what}: {text}");
        });
    }
}

#[test]
fn volumes_pin_or_place_the_model() {
    let on_claim = |modes: Value, affinity: Option<Value>| {
        let mut w = eligible().edit("InferenceService", "a", |i| {
            i["spec"]["model"] = json!({"name": "ft", "kind": "BaseModel"})
        });
        w.items.push(json!({"apiVersion": "ome.io/v1beta1", "kind": "BaseModel",
            "metadata": {"name": "ft", "namespace": "team"}, "spec": {"storage": {"storageUri": "pvc://claim/ft"}}}));
        w.items
            .push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "claim", "namespace": "team"},
            "spec": {"accessModes": modes, "volumeName": "pv"}}));
        let mut pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv"},
            "spec": {"accessModes": ["ReadOnlyMany"]}});
        if let Some(a) = affinity {
            pv["spec"]["nodeAffinity"] = a;
        }
        w.items.push(pv);
        w
    };
    assert_eq!(
        reason_of(on_claim(json!(["ReadWriteOnce"]), None), V1),
        Some(AdvisoryReason::VolumePinned)
    );
    assert_eq!(
        reason_of(on_claim(json!(["ReadWriteOncePod"]), None), V1),
        Some(AdvisoryReason::VolumePinned)
    );
    assert_eq!(
        reason_of(on_claim(json!(["ReadOnlyMany"]), None), V1),
        Some(AdvisoryReason::SimulationRecommendOnly)
    );
    // A volume reachable only from n1: a has nowhere to go.
    let only_n1 = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}});
    let w = on_claim(json!(["ReadOnlyMany"]), Some(only_n1))
        .label("n1", "kubernetes.io/hostname", "n1")
        .label("n2", "kubernetes.io/hostname", "n2");
    assert_eq!(reason_of(w, V1), Some(AdvisoryReason::NoSurgeHeadroom));
    // A per-node model: only nodes where the agent reports it Ready.
    let w = eligible().label("n2", "models.ome.io/clusterbasemodel.m", "Updating");
    assert_eq!(reason_of(w, V1), Some(AdvisoryReason::NoSurgeHeadroom));
}

#[test]
fn raw_and_lws_workloads_are_advice() {
    let mut w = eligible();
    // RawDeployment by the InferenceService; OMENative only through its runtime still counts as Raw.
    w.items.push(json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
        "metadata": {"name": "rt"}, "spec": {"engineConfig": {"annotations": {"ome.io/deploymentMode": "OMENative"}}}}));
    w.items.push(
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "raw", "namespace": "team"},
        "spec": {"model": {"name": "m"}, "runtime": {"name": "rt"}, "engine": {"minReplicas": 1}}}),
    );
    w.items.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "raw-engine-abc", "namespace": "team",
            "labels": {"ome.io/inferenceservice": "raw", "component": "engine"}},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}}));
    w.items.push(json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "lws", "namespace": "team"},
        "spec": {"model": {"name": "m"}, "engine": {"annotations": {"ome.io/deploymentMode": "MultiNode"},
                                                    "leader": {}, "worker": {"size": 1}}}}));
    w.items.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lws-engine-0", "namespace": "team",
            "labels": {"ome.io/inferenceservice": "lws", "component": "engine",
                       "leaderworkerset.sigs.k8s.io/group-index": "0"}},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}}));
    let d = w.clone().decide(V1);
    assert_eq!(
        defrag(&d, "team/raw", 0).row.advisory_reason,
        Some(AdvisoryReason::RawDeploymentMigrationUnsupported)
    );
    let lws = defrag(&d, "team/lws", -1);
    assert_eq!(
        lws.row.advisory_reason,
        Some(AdvisoryReason::LWSMigrationUnsupported)
    );
    assert_eq!(lws.row.from_node, "n2");
    // LWS rows can be turned off; an opted-out Raw workload gets none either.
    let d = w
        .annotate("raw", "alfred.ome.io/movable", "false")
        .decide(&format!("{V1}lwsRecommendationsEnabled: false\n"));
    assert!(d.recommendations.iter().all(|r| r.row.workload == "team/a"
        || r.row.workload == "team/b"
        || r.row.workload == "team/c"));
}

/// u is unhealthy and holds x (4 GPUs) and y (4 GPUs); t1 has 4 free, t2 6.
fn evacuation(t2_free: i64) -> World {
    World::new()
        .node("u", 8)
        .node("t1", 8)
        .node("t2", 8)
        .unhealthy("u")
        .omenative("team", "x", &[("u", 4)])
        .omenative("team", "y", &[("u", 4)])
        .omenative("team", "fill1", &[("t1", 4)])
        .omenative("team", "fill2", &[("t2", 8 - t2_free)])
}

#[test]
fn a_joint_evacuation_never_counts_the_same_gpus_twice() {
    // Alone, each fits the fullest node t1; together they need t1 and t2.
    let d = evacuation(6).decide(V1);
    let x = row(&d, PolicyName::Nodehealth, "team/x", 0);
    let y = row(&d, PolicyName::Nodehealth, "team/y", 0);
    assert_eq!(x.row.reason, CandidateReason::NodeUnhealthy);
    assert_eq!(x.placement_targets, vec!["t1", "t2"]);
    let mut hints = vec![x.row.hint_targets[0].clone(), y.row.hint_targets[0].clone()];
    hints.sort();
    assert_eq!(hints, vec!["t1", "t2"], "{x:?} {y:?}");
    // Room for only one: the other is told its GPUs are taken.
    let d = evacuation(2).decide(V1);
    let rows: Vec<&Recommendation> = ["team/x", "team/y"]
        .iter()
        .map(|w| row(&d, PolicyName::Nodehealth, w, 0))
        .collect();
    assert_eq!(
        rows.iter()
            .filter(|r| r.row.hint_targets == vec!["t1"])
            .count(),
        1
    );
    let stuck = rows.iter().find(|r| r.row.hint_targets.is_empty()).unwrap();
    assert_eq!(
        stuck.row.advisory_reason,
        Some(AdvisoryReason::NoSurgeHeadroom)
    );
    assert!(
        stuck.detail.contains("taken by the other moves"),
        "{}",
        stuck.detail
    );
}

#[test]
fn node_health_rows_records_and_signal_only() {
    let w = evacuation(6)
        .annotate("x", "alfred.ome.io/priority", "0.9")
        .node("m", 8)
        .label("m", "maint", "now")
        .omenative("team", "z", &[("m", 2)]);
    let config = format!(
        "{V1}policies: {{nodeHealth: {{maintenance: {{triggers: [{{name: patch, label: {{key: maint}}}}]}}}}}}\n"
    );
    let d = w.clone().decide(&config);
    let health: Vec<(&str, CandidateReason, f64)> = d
        .recommendations
        .iter()
        .filter(|r| r.row.policy == PolicyName::Nodehealth)
        .map(|r| (r.row.workload.as_str(), r.row.reason, r.row.score))
        .collect();
    // Unhealthy first, then by priority; maintenance after.
    assert_eq!(
        health,
        vec![
            ("team/x", CandidateReason::NodeUnhealthy, 0.9),
            ("team/y", CandidateReason::NodeUnhealthy, 0.5),
            ("team/z", CandidateReason::NodeMaintenance, 0.5),
        ]
    );
    let u = &d.nodes["node.u"];
    assert_eq!(u.state, "Unhealthy");
    assert_eq!(u.workloads, vec!["team/x", "team/y"]);
    assert!(u.ome_gpu_occupants_present && !u.maintenance.requested);
    let m = &d.nodes["node.m"];
    assert_eq!(
        (m.state.as_str(), m.maintenance.triggers.clone()),
        ("Clear", vec!["patch".to_string()])
    );
    assert!(!d.nodes.contains_key("node.t1"));
    // Nothing lands on the maintenance node.
    assert!(
        d.recommendations
            .iter()
            .all(|r| !r.placement_targets.contains(&"m".into()))
    );
    // signalOnly: the records, no moves.
    let d = w.decide(&format!(
        "{V1}policies: {{nodeHealth: {{signalOnly: true, maintenance: {{triggers: [{{name: patch, label: {{key: maint}}}}]}}}}}}\n"
    ));
    assert!(
        d.recommendations
            .iter()
            .all(|r| r.row.policy != PolicyName::Nodehealth)
    );
    assert_eq!(d.nodes.len(), 2);
}

#[test]
fn unknown_and_suspect_nodes_take_nothing_and_keep_their_instances() {
    let d = two_nodes()
        .edit("Node", "n2", |n| {
            n["status"]["conditions"][1]["status"] = json!("Unknown")
        })
        .decide(V1);
    assert_eq!(d.nodes["node.n2"].state, "Unknown");
    assert!(
        d.recommendations
            .iter()
            .all(|r| r.row.policy == PolicyName::Defragmentation)
    );
    // n2 is no bin now: only n1's 2 free GPUs count, and nothing may target n2.
    assert_eq!(d.pools[0].free_gpus, 2);
    assert!(
        d.recommendations
            .iter()
            .all(|r| !r.placement_targets.contains(&"n2".into()))
    );
    let d = two_nodes()
        .edit("Node", "n2", |n| {
            n["status"]["conditions"][1]["lastTransitionTime"] = json!(ago(10))
        })
        .decide(V1);
    let n2 = &d.nodes["node.n2"];
    assert_eq!(n2.state, "Suspect");
    assert_eq!(
        n2.suspect_until.unwrap().to_string(),
        "2026-09-28T10:35:00Z"
    );
}

#[test]
fn orphan_pods_on_a_node_being_left() {
    let mut w = evacuation(6);
    w.items.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "namespace": "team",
            "labels": {"ome.io/inferenceservice": "x", "component": "engine"}},
        "spec": {"nodeName": "u", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}}));
    let d = w.decide(V1);
    let orphan = row(&d, PolicyName::Nodehealth, "team/x", -1);
    assert_eq!(
        orphan.row.advisory_reason,
        Some(AdvisoryReason::OMENativeObservationInvalid)
    );
    assert!(orphan.detail.contains("stray"));
}

#[test]
fn rows_serialize_in_the_last_cycle_schema() {
    let d = two_nodes().decide(V1);
    let mut c = serde_json::to_value(&defrag(&d, "team/c", 0).row).unwrap();
    let scheduling = c.as_object_mut().unwrap().remove("scheduling").unwrap();
    assert_eq!(scheduling["status"], "Feasible");
    assert_eq!(
        scheduling["placements"],
        json!([{"pod": "c-engine-0-default-0", "node": "n1"}])
    );
    assert_eq!(
        c,
        json!({"workload": "team/c", "component": "engine", "instance": 0, "policy": "defragmentation",
               "reason": "Fragmentation", "outcome": "advisory", "advisoryReason": "SimulationRecommendOnly",
               "fromNode": "n2", "hintTargets": ["n1"], "score": c["score"]})
    );
    // score is always present, even at 0.
    let d = two_nodes().decide("");
    let a = serde_json::to_value(&defrag(&d, "team/a", 0).row).unwrap();
    assert_eq!(a["score"], json!(0.0));
    assert_eq!(a["advisoryReason"], json!("OMENativeUnavailable"));
}

#[test]
fn node_record_keys() {
    assert_eq!(node_record_key("gpu-1"), "node.gpu-1");
    let long = "a".repeat(250);
    let key = node_record_key(&long);
    assert_eq!(key.len(), 253);
    assert!(key.starts_with("node-hash.aaa"));
    assert_ne!(
        node_record_key(&"a".repeat(251)),
        key,
        "the hash tells long names apart"
    );
}

fn drain_of(
    w: &World,
    config: &str,
    nodes: &[&str],
    goal: Option<alfred::solver::ToFreeFormula>,
) -> alfred::decision::drain::DrainReport {
    use alfred::decision::drain::{DrainOptions, drain};
    let options = DrainOptions {
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        count_pods: false,
        goal,
    };
    w.with_ctx(config, |ctx| drain(ctx, &options).unwrap())
}

#[test]
fn drains_plan_jointly_and_say_which_nodes_empty() {
    // d1 holds x (4), d2 holds y (2) and z (2); t has 4 free, and nothing may land on d1 or d2.
    let w = World::new()
        .node("d1", 8)
        .node("d2", 8)
        .node("t", 8)
        .omenative("team", "x", &[("d1", 4)])
        .omenative("team", "y", &[("d2", 2)])
        .omenative("team", "z", &[("d2", 2)])
        .omenative("team", "fill", &[("t", 4)]);
    // Migration API or not, a drain plans (the command says how the moves would run).
    let r = drain_of(&w, "", &["d1", "d2"], None);
    let moved: i64 = r
        .moves
        .iter()
        .filter(|m| !m.placements.is_empty())
        .map(|m| m.gpus)
        .sum();
    assert_eq!(moved, 4, "t takes 4 GPUs, no more: {r:#?}");
    assert!(
        r.moves
            .iter()
            .all(|m| m.placements.iter().all(|p| p.node == "t"))
    );
    assert!(!r.complete);
    assert!(
        r.moves
            .iter()
            .filter(|m| m.placements.is_empty())
            .all(|m| m.reason == Some(AdvisoryReason::NoSurgeHeadroom))
    );
    // With room for everything, both nodes empty.
    let r = drain_of(&w.clone().node("t2", 8), "", &["d1", "d2"], None);
    assert!(r.complete, "{r:#?}");
    // As a goal emptying whole nodes: one node empties, the other keeps its Instances.
    let r = drain_of(
        &w,
        "",
        &["d1", "d2"],
        Some(alfred::solver::ToFreeFormula::MinimizeOccupiedContainers),
    );
    assert_eq!(r.nodes.iter().filter(|n| n.emptied).count(), 1, "{r:#?}");
    // A node that does not exist is named.
    let options = alfred::decision::drain::DrainOptions {
        nodes: vec!["nope".into()],
        ..Default::default()
    };
    let err = w.with_ctx("", |ctx| {
        alfred::decision::drain::drain(ctx, &options)
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("node nope is not in the cluster"), "{err}");
}

#[test]
fn drains_land_only_where_the_scheduler_would_place_the_pods() {
    // d holds x and y (2 GPUs, 22 CPUs each). t1 has 4 GPUs free but 23 CPUs (95 less 44
    // for fill, 28 for a daemon): room for one of them. t2 has 3 free behind an untolerated
    // taint; t3 is empty. GPUs alone would put both on t1 (the fullest with room).
    let w = World::new()
        .node("d", 8)
        .node("t1", 8)
        .node("t2", 8)
        .omenative("team", "x", &[("d", 2)])
        .omenative("team", "y", &[("d", 2)])
        .omenative("team", "fill", &[("t1", 4)])
        .omenative("team", "other", &[("t2", 5)])
        .cpu_pod("t1", "28", json!({}))
        .taint("t2");
    let with_room = w.clone().node("t3", 8);
    let r = drain_of(&with_room, "", &["d"], None);
    assert!(r.complete, "{r:#?}");
    let mut targets: Vec<&str> = r
        .moves
        .iter()
        .flat_map(|m| m.placements.iter().map(|p| p.node.as_str()))
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        vec!["t1", "t3"],
        "one on t1, none behind the taint: {r:#?}"
    );
    // Without t3: one moves to t1; the other finds t1's CPUs taken and t2 tainted.
    let r = drain_of(&w, "", &["d"], None);
    let stayed: Vec<&str> = r
        .moves
        .iter()
        .filter(|m| m.placements.is_empty())
        .map(|m| m.detail.as_str())
        .collect();
    assert_eq!(stayed.len(), 1, "{r:#?}");
    assert!(
        stayed[0].contains("taken by the other moves"),
        "{}",
        stayed[0]
    );
    // Without t1's CPUs either, the fullest node's refusal is named: t2's taint.
    let busy = w.edit("Pod", "daemon-t1", |p| {
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("50")
    });
    let r = drain_of(&busy, "", &["d"], None);
    assert!(r.moves.iter().all(|m| m.placements.is_empty()), "{r:#?}");
    assert!(
        r.moves[0].detail.contains(
            "its pod x-engine-0-default-0 passes kube-scheduler's filters on no node with GPU room for it (on t2, the fullest: node(s) had untolerated taint(s))"
        ),
        "{}",
        r.moves[0].detail
    );
}

#[test]
fn explain_lists_every_check_and_the_pass_rows() {
    use alfred::decision::decide;
    use alfred::decision::explain::{Selector, explain};
    assert!(Selector::parse("team").is_err());
    assert!(
        Selector::parse("team/a/gpu")
            .unwrap_err()
            .to_string()
            .contains("not engine, decoder or router")
    );
    assert!(Selector::parse("team/a/engine/-1").is_err());
    let w = eligible().annotate("a", "alfred.ome.io/movable", "false");
    w.with_ctx(V1, |ctx| {
        let decision = decide(ctx);

        let e = explain(ctx, &decision, &Selector::parse("team/a").unwrap()).unwrap();
        assert_eq!(e.len(), 1);
        let failed: Vec<&str> = e[0]
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.check)
            .collect();
        assert_eq!(failed, vec!["movable"]);
        assert_eq!(e[0].checks.last().unwrap().check, "surge headroom");
        assert_eq!(e[0].targets[0].node, "n2");
        assert_eq!(
            e[0].recommendations[0].advisory_reason,
            Some(AdvisoryReason::OMENativeStateIneligible)
        );
        let missing = explain(ctx, &decision, &Selector::parse("team/gone").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("no InferenceService team/gone"),
            "{missing}"
        );
        let no_index = explain(ctx, &decision, &Selector::parse("team/a/engine/5").unwrap())
            .unwrap_err()
            .to_string();
        assert!(no_index.contains("has no Instance 5"), "{no_index}");
    });
}

#[test]
fn recording_keeps_other_keys_and_carries_episode_stamps() {
    use alfred::decision::NodeRecord;
    use alfred::decision::record::{carry_episode, updated_data};
    let at = |t: &str| -> Timestamp { t.parse().unwrap() };
    let record = |state: &str, occupied: bool, requested: bool, observed: &str| -> NodeRecord {
        serde_json::from_value(json!({"nodeUID": "u1", "state": state, "conditions": [],
            "maintenance": {"requested": requested, "triggers": if requested { vec!["patch"] } else { vec![] }},
            "workloads": [], "omeGpuOccupantsPresent": occupied, "observedAt": observed}))
        .unwrap()
    };
    // Repair: signalled when first seen, drained a pass later once no OME GPU pod is left.
    let first = carry_episode(
        record("Unhealthy", true, false, "2026-09-28T10:00:00Z"),
        None,
    );
    assert_eq!(
        (first.signaled_at, first.drained_at),
        (Some(at("2026-09-28T10:00:00Z")), None)
    );
    let empty = carry_episode(
        record("Unhealthy", false, false, "2026-09-28T10:05:00Z"),
        Some(&first),
    );
    assert_eq!(
        empty.signaled_at, first.signaled_at,
        "the episode's first stamp stays"
    );
    assert_eq!(empty.drained_at, Some(at("2026-09-28T10:05:00Z")));
    let later = carry_episode(
        record("Unhealthy", false, false, "2026-09-28T10:10:00Z"),
        Some(&empty),
    );
    assert_eq!(later.drained_at, empty.drained_at);
    // Unknown clears the drained stamp; occupants returning do too; Clear ends the episode.
    let unknown = carry_episode(
        record("Unknown", false, false, "2026-09-28T10:15:00Z"),
        Some(&later),
    );
    assert_eq!(
        (unknown.signaled_at, unknown.drained_at),
        (first.signaled_at, None)
    );
    let back = carry_episode(
        record("Unhealthy", true, false, "2026-09-28T10:20:00Z"),
        Some(&later),
    );
    assert_eq!(back.drained_at, None);
    let clear = carry_episode(
        record("Clear", false, false, "2026-09-28T10:25:00Z"),
        Some(&later),
    );
    assert_eq!((clear.signaled_at, clear.drained_at), (None, None));
    // A new node under the same name starts fresh.
    let mut other = record("Unhealthy", false, false, "2026-09-28T10:05:00Z");
    other.node_uid = "u2".into();
    let fresh = carry_episode(other, Some(&first));
    assert_eq!(
        (fresh.signaled_at, fresh.drained_at),
        (Some(at("2026-09-28T10:05:00Z")), None)
    );
    // Maintenance: requested, then drained, then no longer requested.
    let m1 = carry_episode(record("Clear", true, true, "2026-09-28T10:00:00Z"), None);
    assert_eq!(
        (m1.maintenance_requested_at, m1.maintenance_drained_at),
        (Some(at("2026-09-28T10:00:00Z")), None)
    );
    let m2 = carry_episode(
        record("Clear", false, true, "2026-09-28T10:05:00Z"),
        Some(&m1),
    );
    assert_eq!(m2.maintenance_drained_at, Some(at("2026-09-28T10:05:00Z")));
    let m3 = carry_episode(
        record("Clear", false, false, "2026-09-28T10:10:00Z"),
        Some(&m2),
    );
    assert_eq!(
        (m3.maintenance_requested_at, m3.maintenance_drained_at),
        (None, None)
    );

    // The ConfigMap's data: this pass's document, stale records gone, newer ones and other keys kept.
    let d = evacuation(6).decide(V1);
    let as_text = |r: &NodeRecord| serde_json::to_string(r).unwrap();
    let existing: std::collections::BTreeMap<String, String> = [
        ("owner-note".to_string(), "kept".to_string()),
        (
            "node.gone".to_string(),
            as_text(&record("Unhealthy", false, false, "2026-09-28T09:00:00Z")),
        ),
        (
            "node.newer".to_string(),
            as_text(&record("Unhealthy", false, false, "2026-09-28T11:00:00Z")),
        ),
    ]
    .into();
    let rows: Vec<_> = d.recommendations.iter().map(|r| r.row.clone()).collect();
    let updated = updated_data(
        &existing,
        &rows,
        &d.nodes,
        "recommend-only",
        NOW.parse().unwrap(),
    );
    let data = &updated.data;
    // The stamp set in this pass fires its event; the next pass, reading it back, does not.
    let fired: Vec<(&str, &str)> = updated
        .events
        .iter()
        .map(|e| (e.node.as_str(), e.reason.as_str()))
        .collect();
    assert!(fired.contains(&("u", "NodeRepairNeeded")), "{fired:?}");
    assert!(updated.events.iter().any(|e| e.message
        == "node u has an observed health concern; repair investigation requested"
        && e.warning));
    let again = updated_data(
        data,
        &rows,
        &d.nodes,
        "recommend-only",
        NOW.parse().unwrap(),
    );
    assert!(
        again.events.iter().all(|e| e.node != "u"),
        "{:?}",
        again.events
    );
    assert_eq!(data["owner-note"], "kept");
    assert!(!data.contains_key("node.gone"));
    assert!(
        data.contains_key("node.newer"),
        "written from a newer observation: kept"
    );
    let u: NodeRecord = serde_json::from_str(&data["node.u"]).unwrap();
    assert_eq!(u.signaled_at, Some(NOW.parse().unwrap()));
    let cycle: Value = serde_json::from_str(&data["last-cycle.json"]).unwrap();
    assert_eq!(cycle["timestamp"], NOW);
    assert_eq!(
        cycle["recommendations"].as_array().unwrap().len(),
        d.recommendations.len()
    );
    // No rows: `recommendations` is null.
    let quiet = World::new().node("n1", 8).decide("");
    let data = updated_data(
        &Default::default(),
        &[],
        &quiet.nodes,
        "recommend-only",
        NOW.parse().unwrap(),
    )
    .data;
    let cycle: Value = serde_json::from_str(&data["last-cycle.json"]).unwrap();
    assert_eq!(cycle["recommendations"], Value::Null);
}

/// The GPUs of a pod written into the world.
fn pod_gpus(w: &World, pod: &str) -> i64 {
    let item = w
        .items
        .iter()
        .find(|i| i["kind"] == "Pod" && i["metadata"]["name"] == pod)
        .unwrap();
    item["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// On random clusters: node-health moves planned together never count the same free GPUs
    /// twice nor land on a node that takes nothing; every move names targets only in its pool;
    /// a move's benefit computed from the changed bins equals a full recount.
    #[test]
    fn plans_never_overcommit_and_benefits_add_up(
        nodes in proptest::collection::vec((0i64..8, proptest::bool::weighted(0.25)), 2..7),
        instances in proptest::collection::vec((0usize..7, 0usize..3), 1..14),
    ) {
        let mut w = World::new();
        for (k, _) in nodes.iter().enumerate() {
            w = w.node(&format!("n{k}"), 8);
        }
        for (k, &(_, unhealthy)) in nodes.iter().enumerate() {
            if unhealthy {
                w = w.unhealthy(&format!("n{k}"));
            }
        }
        let mut used = vec![0i64; nodes.len()];
        for (k, &(node, size)) in instances.iter().enumerate() {
            let node = node % nodes.len();
            let gpus = [1, 2, 4][size];
            if used[node] + gpus > 8 {
                continue;
            }
            used[node] += gpus;
            w = w.omenative("team", &format!("w{k}"), &[(&format!("n{node}"), gpus)]);
        }
        let d = w.decide(V1);
        let free = |name: &str| {
            let k: usize = name[1..].parse().unwrap();
            8 - used[k]
        };
        let mut landed = vec![0i64; nodes.len()];
        for r in d.recommendations.iter().filter(|r| r.row.policy == PolicyName::Nodehealth) {
            for (pod, node) in &r.planned {
                let k: usize = node[1..].parse().unwrap();
                proptest::prop_assert!(!nodes[k].1, "{pod} planned onto unhealthy {node}");
                let gpus = pod_gpus(&w, pod);
                landed[k] += gpus;
            }
        }
        for (k, &l) in landed.iter().enumerate() {
            proptest::prop_assert!(l <= free(&format!("n{k}")), "n{k}: {l} GPUs planned, {} free", free(&format!("n{k}")));
        }
        // The incremental benefit equals a full recount of the pool's bins.
        let pool = &d.pools[0];
        for r in d.recommendations.iter().filter(|r| r.benefit.is_some()) {
            let mut bins: Vec<(i64, i64)> = pool.bins.iter().map(|b| (b.capacity, b.free)).collect();
            for (pod, node) in &r.planned {
                let gpus = pod_gpus(&w, pod);
                if let Some(b) = pool.bins.iter().position(|b| &b.node == node) {
                    bins[b].1 -= gpus;
                }
                if let Some(b) = pool.bins.iter().position(|b| b.node == r.row.from_node) {
                    bins[b].1 = (bins[b].1 + gpus).min(bins[b].0);
                }
            }
            let full = pool.observed - pool.measure.fragmentation(&bins);
            proptest::prop_assert!(close(full, r.benefit.unwrap()), "{} vs {:?}", full, r.benefit);
        }
    }
}

#[test]
fn rows_carry_their_simulation_up_to_the_budget() {
    // Ten single-GPU Instances on n1, room on n2: ten rows, eight simulated.
    let mut w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "big", &[("n2", 4)]);
    for k in 0..6 {
        w = w.omenative("team", &format!("s{k}"), &[("n1", 1)]);
    }
    w = w.omenative("team", "m", &[("n2", 1), ("n2", 1), ("n2", 1)]);
    let d = w.decide(V1);
    let simulated: Vec<&alfred::decision::Scheduling> = d
        .recommendations
        .iter()
        .filter_map(|r| r.row.scheduling.as_ref())
        .collect();
    assert_eq!(simulated.len(), d.recommendations.len());
    assert_eq!(
        simulated
            .iter()
            .filter(|s| s.reason.as_str() == "SimulationBudgetExceeded")
            .count(),
        d.recommendations.len() - 8
    );
    let mut feasible = 0;
    for r in d.recommendations.iter().take(8) {
        let s = r.row.scheduling.as_ref().unwrap();
        assert_eq!(s.scheduler_name, "default-scheduler");
        assert_eq!(s.snapshot_time, Some(NOW.parse().unwrap()));
        match (s.status.as_str(), s.reason.as_str()) {
            ("Feasible", "PlacementFound") => feasible += 1,
            // The 4-GPU Instance: no other node has 4 free.
            ("Infeasible", "NoFeasiblePlacement") => assert_eq!(r.row.workload, "team/big"),
            other => panic!("{other:?}"),
        }
        assert!(
            s.placements.iter().all(|p| p.node != r.row.from_node),
            "a move never lands on its source: {r:?}"
        );
    }
    assert!(feasible >= 6);
}

#[test]
fn a_move_no_profile_can_simulate_names_the_selection_failure() {
    // c's pod asks for a scheduler Alfred has no profile for.
    let w = two_nodes().edit("Pod", "c-engine-0-default-0", |p| {
        p["spec"]["schedulerName"] = json!("volcano")
    });
    let d = w.decide(V1);
    let c = defrag(&d, "team/c", 0);
    assert_eq!(
        c.row.advisory_reason,
        Some(AdvisoryReason::ProfileNotConfigured)
    );
    assert!(c.detail.contains("cannot be simulated"), "{}", c.detail);
    let row: Value = serde_json::to_value(&c.row).unwrap();
    assert_eq!(row["advisoryReason"], "ProfileNotConfigured");
    assert_eq!(row["scheduling"]["reason"], "ProfileNotConfigured");
}

/// A two-pod Instance with its leader on a maintenance node and its worker on an Unhealthy
/// one: one row, ranked by the worse reason (NodeUnhealthy leaves from the Unhealthy node).
#[test]
fn a_gang_on_an_unhealthy_and_a_maintenance_node_leaves_as_unhealthy() {
    let w = World::new()
        .node("a-maint", 8)
        .node("z-bad", 8)
        .node("t", 8)
        .label("a-maint", "maint", "now")
        .unhealthy("z-bad")
        .omenative("team", "g", &[("a-maint", 2)]);
    let mut worker = w.items.iter().find(|i| i["kind"] == "Pod").unwrap().clone();
    worker["metadata"]["name"] = json!("g-engine-0-worker-0");
    worker["metadata"]["labels"]["ome.io/runner"] = json!("worker");
    worker["spec"]["nodeName"] = json!("z-bad");
    let mut w = w.edit("InferenceReplica", "g-engine", |ir| {
        ir["spec"]["runners"] = json!([{"name": "leader"}, {"name": "worker", "size": 1}]);
        let row = &mut ir["status"]["instanceStatuses"][0];
        for count in ["podCount", "servingPodCount", "availablePodCount"] {
            row[count] = json!(2);
        }
    });
    w.items.push(worker);
    let config = format!(
        "{V1}policies: {{nodeHealth: {{maintenance: {{triggers: [{{name: patch, label: {{key: maint}}}}]}}}}}}\n"
    );
    let d = w.decide(&config);
    let rows: Vec<&Recommendation> = d
        .recommendations
        .iter()
        .filter(|r| r.row.policy == PolicyName::Nodehealth)
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].row.reason, CandidateReason::NodeUnhealthy);
    assert_eq!(rows[0].row.from_node, "z-bad");
    assert!(
        rows[0]
            .detail
            .starts_with("z-bad is Unhealthy: move it to t."),
        "{}",
        rows[0].detail
    );
}

/// A model name too long for a label key: OME's model agent labels nodes with the truncated
/// key, and the model is found there; a BaseModel in the namespace wins over the
/// ClusterBaseModel of the same name whatever the reference's `kind` says.
#[test]
fn models_are_found_by_the_label_keys_ome_writes() {
    use alfred::api::model::{cluster_model_label, namespaced_model_label};
    use alfred::model::access::ModelAccess;
    let long = "meta-llama-3-1-405b-instruct-fp8-dynami"; // 39 characters
    assert_eq!(long.len(), 39);
    let key = cluster_model_label(long);
    assert_ne!(key, format!("models.ome.io/clusterbasemodel.{long}"));
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .label("n2", &key, "Ready")
        .omenative("team", "x", &[("n1", 2)])
        .edit("InferenceService", "x", |i| {
            i["spec"]["model"] = json!({"name": long, "kind": "ClusterBaseModel"})
        });
    let mut w = w;
    w.items.push(
        json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
        "metadata": {"name": long}, "spec": {"storage": {"storageUri": "hf://org/long"}}}),
    );
    w.with_ctx(V1, |ctx| {
        assert_eq!(
            ctx.access[0],
            ModelAccess::NodesLabelled { key: key.clone() }
        );
        let n2 = ctx.cluster.node_index("n2").unwrap();
        let n1 = ctx.cluster.node_index("n1").unwrap();
        assert!(ctx.model_allows(0, n2) && !ctx.model_allows(0, n1));
    });
    // A BaseModel of that name in the namespace is the one OME uses.
    w.items
        .push(json!({"apiVersion": "ome.io/v1beta1", "kind": "BaseModel",
        "metadata": {"name": long, "namespace": "team"},
        "spec": {"storage": {"storageUri": "hf://team/long"}}}));
    w.with_ctx(V1, |ctx| {
        assert_eq!(
            ctx.access[0],
            ModelAccess::NodesLabelled {
                key: namespaced_model_label("team", long)
            }
        );
    });
}

/// OME's TPU slices are not modelled: an Instance whose pods hold TPU chips is never planned
/// away, only advised about (`AcceleratorPlacementUnmodeled`, as OME's Alfred answers).
#[test]
fn an_instance_holding_tpu_chips_stays_advice() {
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "tpu", &[("n1", 0)])
        .omenative("team", "gpu", &[("n1", 2)])
        .edit("Pod", "tpu-engine-0-default-0", |p| {
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"google.com/tpu": "4"}})
        })
        .unhealthy("n1");
    let d = w.decide(V1);
    let tpu = row(&d, PolicyName::Nodehealth, "team/tpu", 0);
    assert_eq!(
        tpu.row.advisory_reason,
        Some(AdvisoryReason::AcceleratorPlacementUnmodeled)
    );
    assert!(tpu.row.target.is_empty(), "{:?}", tpu.row);
    // Its GPU neighbour is planned as usual (advice only because execution is off).
    let gpu = row(&d, PolicyName::Nodehealth, "team/gpu", 0);
    assert_eq!(gpu.row.hint_targets, vec!["n2"]);
    assert_eq!(
        gpu.row.advisory_reason,
        Some(AdvisoryReason::SimulationRecommendOnly)
    );
}
