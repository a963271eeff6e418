//! Fewest-move consolidation plans: the moves that make waiting GPU demand placeable, safe to
//! stop after any step, never a move that helps nothing, and the best within a move budget.

mod common;

use alfred::decision::consolidate::{self, ConsolidationPlan};
use alfred::reasons::AdvisoryReason;
use common::World;
use proptest::prelude::*;

const V1: &str = "migration: {apiVersion: v1}\n";

fn plan_of(w: &World, max_moves: Option<usize>) -> ConsolidationPlan {
    w.with_ctx(V1, |ctx| {
        let movable = alfred::decision::movable(ctx);
        consolidate::plan(ctx, &movable, max_moves)
    })
}

/// Each step as "workload to targets".
fn moves_of(plan: &ConsolidationPlan) -> Vec<String> {
    plan.steps
        .iter()
        .map(|s| format!("{} to {}", s.workload, s.to.join(",")))
        .collect()
}

#[test]
fn one_move_frees_the_node_an_eight_gpu_pod_waits_for() {
    // a: one 1-GPU Instance (7 free); b: 6 of 8 used; c: 7 of 8 used. An 8-GPU pod waits.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .omenative("team", "small", &[("a", 1)])
        .omenative("team", "mid", &[("b", 4), ("b", 2)])
        .omenative("team", "full", &[("c", 4), ("c", 2), ("c", 1)])
        .pending("team", "big-0", 8, 20, "big");
    let plan = plan_of(&w, None);
    assert_eq!(plan.steps.len(), 1, "{:?}", plan.steps);
    let step = &plan.steps[0];
    assert_eq!(
        (
            step.workload.as_str(),
            step.from.clone(),
            step.to.clone(),
            step.frees.as_str()
        ),
        (
            "team/small",
            vec!["a".to_string()],
            vec!["c".to_string()],
            "a"
        ),
        "best fit: onto the fullest node with room"
    );
    assert_eq!(
        (plan.before().pending_gpus, plan.after().pending_gpus),
        (0, 8)
    );
    assert_eq!(plan.after().whole_free_nodes, 1);
    assert_eq!(plan.curve.len(), 2);
}

#[test]
fn nothing_waits_nothing_moves() {
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .omenative("team", "x", &[("a", 1), ("b", 1)]);
    let plan = plan_of(&w, None);
    assert!(plan.steps.is_empty());
    assert_eq!(plan.pending_gpus_total, 0);
    // A pod that fits now needs no move either.
    let plan = plan_of(&w.pending("team", "p", 4, 5, "p"), None);
    assert!(plan.steps.is_empty());
    assert_eq!(plan.before().pending_gpus, 4);
}

#[test]
fn a_pod_larger_than_any_room_moves_a_smaller_one_first() {
    // An 8-GPU pod waits. Freeing a moves its 4-GPU Instance, and no node has 4 free: b's
    // 2-GPU Instance moves onto another node's 2 free first, then the 4 fits on b.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .node("d", 8)
        .omenative("team", "four", &[("a", 4)])
        .omenative("team", "fill-a", &[("a", 2)])
        .omenative("team", "two", &[("b", 2)])
        .omenative("team", "pinned", &[("b", 4), ("c", 6), ("d", 6)])
        .annotate("fill-a", "alfred.ome.io/movable", "false")
        .annotate("pinned", "alfred.ome.io/movable", "false")
        .pending("team", "big-0", 8, 20, "big");
    // fill-a cannot move, so a cannot be emptied, and nothing else frees 8.
    let plan = plan_of(&w, None);
    assert!(plan.steps.is_empty(), "{:?}", plan.steps);
    let plan = plan_of(&w.annotate("fill-a", "alfred.ome.io/movable", "true"), None);
    let moved: Vec<(&str, &str)> = plan
        .steps
        .iter()
        .map(|s| (s.workload.as_str(), s.to[0].as_str()))
        .collect();
    assert_eq!(plan.after().pending_gpus, 8, "{moved:?}");
    assert_eq!(moved.len(), 3, "{moved:?}");
    // The chained move comes before the move it makes room for.
    let two = moved.iter().position(|m| m.0 == "team/two").unwrap();
    let four = moved.iter().position(|m| m == &("team/four", "b")).unwrap();
    assert!(two < four, "{moved:?}");
}

#[test]
fn a_node_that_could_be_emptied_is_not_spoiled_for_a_smaller_pod() {
    // An 8-GPU and a 4-GPU pod wait. Moving one 2-GPU Instance makes 4 free on a or on b; only
    // a can be emptied (b holds GPUs that stay), so the 4-GPU pod goes to b, and a is emptied
    // whole for the 8-GPU pod, its Instances landing on the nodes that stay busy.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .node("d", 8)
        .node("e", 8)
        .node("f", 8)
        .omenative("team", "a-two", &[("a", 2)])
        .omenative("team", "a-two-more", &[("a", 2)])
        .omenative("team", "a-one", &[("a", 1)])
        .omenative("team", "a-one-more", &[("a", 1)])
        .omenative("team", "b-two", &[("b", 2)])
        .omenative(
            "team",
            "pinned",
            &[("b", 4), ("c", 6), ("d", 6), ("e", 6), ("f", 6)],
        )
        .annotate("pinned", "alfred.ome.io/movable", "false")
        .pending("team", "big-0", 8, 20, "big")
        .pending("team", "half-0", 4, 20, "half");
    let plan = plan_of(&w, None);
    let moved: Vec<(&str, &str)> = plan
        .steps
        .iter()
        .map(|s| (s.workload.as_str(), s.to[0].as_str()))
        .collect();
    assert_eq!(plan.after().pending_gpus, 12, "{moved:?}");
    assert_eq!(moved.len(), 5, "{moved:?}");
    assert!(moved.iter().all(|m| m.1 != "a"), "{moved:?}");
    assert_eq!(plan.after().whole_free_nodes, 1);
}

#[test]
fn a_node_every_waiting_pod_needs_is_not_landed_on_while_one_more_move_makes_room() {
    // Two 8-GPU pods wait, and two nodes could be emptied for them: p (a 4-GPU and a 1-GPU
    // Instance) and q (four 1-GPU Instances, 4 free). Only q has 4 GPUs free; r (4 pinned, 3
    // free) has them once its 1-GPU Instance moves. Landing p's 4-GPU Instance on q seats one
    // pod in two moves and spoils q for good; one more move seats both.
    let mut w = World::new();
    for n in ["p", "q", "r", "s", "t", "u"] {
        w = w.node(n, 8);
    }
    let w = w
        .omenative("team", "p-four", &[("p", 4)])
        .omenative("team", "p-one", &[("p", 1)])
        .omenative("team", "q-one-0", &[("q", 1)])
        .omenative("team", "q-one-1", &[("q", 1)])
        .omenative("team", "q-one-2", &[("q", 1)])
        .omenative("team", "q-one-3", &[("q", 1)])
        .omenative("team", "r-one", &[("r", 1)])
        .omenative("team", "pinned", &[("r", 4), ("s", 5), ("t", 6), ("u", 6)])
        .annotate("pinned", "alfred.ome.io/movable", "false")
        .pending("team", "big-0", 8, 20, "big");
    let target_of = |plan: &ConsolidationPlan, workload: &str| {
        let step = plan.steps.iter().find(|s| s.workload == workload);
        step.map(|s| s.to.join(","))
    };
    // One pod waits: q is not needed, so the cheapest room is taken.
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", moves_of(&plan));
    assert_eq!(plan.steps.len(), 2, "{:?}", moves_of(&plan));
    assert_eq!(target_of(&plan, "team/p-four").as_deref(), Some("q"));
    // Two wait: both p and q are needed whole.
    let plan = plan_of(&w.pending("team", "big-1", 8, 20, "big"), None);
    let moves = moves_of(&plan);
    assert_eq!(plan.after().pending_gpus, 16, "{moves:?}");
    assert_eq!(plan.after().whole_free_nodes, 2, "{moves:?}");
    assert_eq!(moves.len(), 7, "{moves:?}");
    let r_one = moves
        .iter()
        .position(|m| m.starts_with("team/r-one to "))
        .unwrap();
    let p_four = moves.iter().position(|m| m == "team/p-four to r").unwrap();
    assert!(r_one < p_four, "{moves:?}");
}

/// A random cluster: 3-6 nodes of 4 or 8 GPUs (some without the model) holding single-pod
/// Instances of 1, 2 or 4 GPUs (some not movable), and 1-4 pending pods of 1, 2, 4 or 8 GPUs.
fn world() -> impl Strategy<Value = World> {
    let instance = (
        0..6usize,
        prop::sample::select(vec![1i64, 2, 4]),
        any::<bool>(),
    );
    (
        prop::collection::vec(
            (
                prop::sample::select(vec![4i64, 8]),
                prop::bool::weighted(0.8),
            ),
            3..7,
        ),
        prop::collection::vec(instance, 1..24),
        prop::collection::vec(prop::sample::select(vec![1i64, 2, 4, 8]), 1..5),
    )
        .prop_map(|(nodes, instances, pending)| {
            let mut w = World::new();
            let mut used = vec![0i64; nodes.len()];
            for (n, &(gpus, has_model)) in nodes.iter().enumerate() {
                w = w.node(&format!("n{n}"), gpus);
                if !has_model {
                    w = w.edit("Node", &format!("n{n}"), |node| {
                        node["metadata"]["labels"]
                            .as_object_mut()
                            .unwrap()
                            .remove(MODEL_READY);
                    });
                }
            }
            for (k, (node, gpus, movable)) in instances.into_iter().enumerate() {
                let node = node % nodes.len();
                if used[node] + gpus > nodes[node].0 {
                    continue;
                }
                used[node] += gpus;
                let name = format!("w{k}");
                w = w.omenative("team", &name, &[(&format!("n{node}"), gpus)]);
                if !movable {
                    w = w.annotate(&name, "alfred.ome.io/movable", "false");
                }
            }
            for (k, gpus) in pending.into_iter().enumerate() {
                w = w.pending("team", &format!("p{k}"), gpus, 10 + k as i64, "waiting");
            }
            w
        })
}

const MODEL_READY: &str = "models.ome.io/clusterbasemodel.m";

/// Replays a plan on the nodes' free GPUs: every move's pods land where there is room beside
/// everything running, on a node of the cluster other than the one they leave, that takes new
/// pods, holds the model and is in the Instance's pool.
fn replay_is_safe(w: &World, plan: &ConsolidationPlan) -> Result<(), TestCaseError> {
    w.with_ctx(V1, |ctx| {
        let cluster = &ctx.cluster;
        let mut free: Vec<i64> = cluster.nodes.iter().map(|n| n.gpu_free).collect();
        for s in &plan.steps {
            prop_assert_eq!(s.to.len(), 1, "single-pod Instances");
            let to = cluster.node_index(&s.to[0]).unwrap();
            let from = cluster.node_index(&s.from[0]).unwrap();
            prop_assert_ne!(to, from);
            prop_assert!(free[to] >= s.gpus, "step {:?} lands without room", s);
            prop_assert!(cluster.nodes[to].is_bin(true));
            prop_assert!(cluster.nodes[to].node.metadata.label(MODEL_READY).is_some());
            prop_assert_eq!(&cluster.nodes[to].pool, &cluster.nodes[from].pool);
            free[to] -= s.gpus;
            free[from] += s.gpus;
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_prefix_is_safe_and_every_action_helps(w in world()) {
        let plan = plan_of(&w, None);
        replay_is_safe(&w, &plan)?;
        // Each action (a point of the curve) makes more placeable than the one before.
        for pair in plan.curve.windows(2) {
            prop_assert!(pair[1].pending_gpus > pair[0].pending_gpus, "{:?}", plan.curve);
            prop_assert!(pair[1].moves > pair[0].moves);
        }
        prop_assert_eq!(plan.curve.last().unwrap().moves, plan.steps.len());
        // An Instance moves at most once, and only movable ones move.
        let mut seen = std::collections::BTreeSet::new();
        for s in &plan.steps {
            prop_assert!(seen.insert((s.workload.clone(), s.instance)), "{:?}", s);
        }
        let movable = w.with_ctx(V1, alfred::decision::movable);
        w.with_ctx(V1, |ctx| {
            for s in &plan.steps {
                let i = ctx.cluster.instance_of(&s.workload, s.component, s.instance).unwrap();
                prop_assert!(movable[i], "{} is not movable", s.workload);
            }
            Ok(())
        })?;
        // The plan's end is what a fresh placement of the pending pods finds on its nodes.
        prop_assert!(plan.after().pending_gpus <= plan.pending_gpus_total);
    }

    #[test]
    fn a_move_budget_is_never_worse_than_the_full_plans_first_moves(w in world(), n in 0..6usize) {
        let full = plan_of(&w, None);
        let limited = plan_of(&w, Some(n));
        prop_assert!(limited.steps.len() <= n);
        replay_is_safe(&w, &limited)?;
        // What the full plan has made placeable after its first n moves (whole actions only).
        let prefix = full
            .curve
            .iter()
            .filter(|p| p.moves <= n)
            .map(|p| p.pending_gpus)
            .max()
            .unwrap_or(0);
        prop_assert!(
            limited.after().pending_gpus >= prefix,
            "{} moves: {:?} against {:?}", n, limited.curve, full.curve
        );
    }
}

#[test]
fn placeable_counts_largest_first_best_fit() {
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .omenative("team", "x", &[("a", 4), ("b", 6)])
        .pending("team", "p4", 4, 5, "p")
        .pending("team", "p2", 2, 5, "p")
        .pending("team", "p3", 3, 5, "p");
    w.with_ctx(V1, |ctx| {
        let free: Vec<i64> = ctx.cluster.nodes.iter().map(|n| n.gpu_free).collect();
        let movable = alfred::decision::movable(ctx);
        let p = consolidate::placeable(ctx, &movable, &free);
        // a has 4 free, b 2: the 4 takes a, the 3 fits nowhere, the 2 takes b.
        assert_eq!((p.pending_gpus, p.pending_pods), (6, 2));
        assert_eq!(p.unplaced, vec![3]);
        assert_eq!(p.whole_free_nodes, 0);
        let p = consolidate::placeable(ctx, &movable, &[8, 8]);
        assert_eq!((p.pending_gpus, p.whole_free_nodes), (9, 2));
    });
}

#[test]
fn following_the_plan_values_its_next_step_at_the_whole_plan() {
    // Beyond the reference (`followPlan`): one move alone is worth less than its cost,
    // emptying a is not.
    let w = common::consolidation();
    let rows = |follow: bool| {
        let decision = w.decide(&format!(
            "{V1}policies: {{defragmentation: {{followPlan: {follow}}}}}\n"
        ));
        decision
            .recommendations
            .into_iter()
            .filter(|r| r.row.workload.starts_with("team/x"))
            .map(|r| (r.row.workload.clone(), r))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let reference = rows(false);
    for r in reference.values() {
        assert!(r.row.score <= 0.0, "{}: {}", r.row.workload, r.detail);
    }
    let followed = rows(true);
    let next = &followed["team/x1"];
    assert!(
        next.benefit.unwrap() > reference["team/x1"].benefit.unwrap() && next.row.score > 0.0,
        "{}",
        next.detail
    );
    assert_eq!(next.row.hint_targets[0], "c", "where the plan lands it");
    assert!(
        next.detail.contains("consolidation plan's 3 moves"),
        "{}",
        next.detail
    );
    // The plan's later steps keep their single-move rows.
    assert_eq!(followed["team/x2"].row, reference["team/x2"].row);
}

#[test]
fn a_move_lands_only_where_the_scheduler_would_place_its_pods() {
    // a: one 1-GPU Instance; b: 2 GPUs free (best fit); c: 3 free. An 8-GPU pod waits for a.
    let base = || {
        World::new()
            .node("a", 8)
            .node("b", 8)
            .node("c", 8)
            .omenative("team", "small", &[("a", 1)])
            .omenative("team", "mid", &[("b", 6)])
            .omenative("team", "other", &[("c", 5)])
            .pending("team", "big-0", 8, 20, "big")
    };
    let target = |w: &World| {
        let plan = plan_of(w, None);
        assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
        plan.steps
            .iter()
            .map(|s| s.to.join(","))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        target(&base()),
        vec!["b"],
        "best fit when every filter passes"
    );
    let tainted = base().taint("b");
    assert_eq!(target(&tainted), vec!["c"], "an untolerated taint");
    // b's 95 CPUs: 66 for mid, 25 for a daemon; small's 11 do not fit.
    let busy = base().cpu_pod("b", "25", serde_json::json!({}));
    assert_eq!(target(&busy), vec!["c"], "too little CPU");
    let repelled = base().cpu_pod("b", "1", serde_json::json!({"app": "small"}))
        .edit("Pod", "small-engine-0-default-0", |p| {
            p["spec"]["affinity"] = serde_json::json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "small"}}, "topologyKey": "kubernetes.io/hostname"}]}})
        });
    assert_eq!(target(&repelled), vec!["c"], "required anti-affinity");
    // With no node the filters allow, nothing moves.
    let nowhere = busy.edit("Node", "c", |n| {
        n["spec"]["unschedulable"] = serde_json::json!(true)
    });
    let plan = plan_of(&nowhere, None);
    assert!(plan.steps.is_empty(), "{:?}", plan.steps);
}

#[test]
fn room_for_a_larger_pod_is_made_until_its_cpu_fits_too() {
    // An 8-GPU pod waits for a (big: 4 GPUs, 44 CPUs; one: 1 GPU). No node has 4 GPUs free;
    // b has 3 free and five 1-GPU Instances, but with its 10-CPU daemon it only has CPU for
    // big once two of them have left (41 CPUs free after one, 52 after two). c and d take
    // the small pods (2 and 1 GPUs free).
    let mut w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .node("d", 8)
        .omenative("team", "big", &[("a", 4)])
        .omenative("team", "one", &[("a", 1)])
        .omenative("team", "other", &[("c", 6)])
        .omenative("team", "other2", &[("d", 7)])
        .pending("team", "wait-0", 8, 20, "wait");
    for k in 0..5 {
        w = w.omenative("team", &format!("b{k}"), &[("b", 1)]);
    }
    let w = w.cpu_pod("b", "10", serde_json::json!({}));
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
    let big = plan
        .steps
        .iter()
        .find(|s| s.workload == "team/big")
        .expect("big moves");
    assert_eq!(big.to, vec!["b"]);
    let off_b = plan.steps.iter().filter(|s| s.from == vec!["b"]).count();
    assert_eq!(off_b, 2, "{:?}", plan.steps);
    assert_eq!(plan.steps.len(), 4, "{:?}", plan.steps);
}

#[test]
fn an_instance_as_large_but_lighter_makes_way_where_only_cpu_is_short() {
    // An 8-GPU pod waits for a (small: 1 GPU, 11 CPUs). b and c have a GPU free each but
    // only 8 CPUs (b: mid's 66, light's 4, a 17-CPU daemon; c: other's 77, a 10-CPU daemon).
    // light, as large in GPUs but needing 4 CPUs, moves to c and leaves b 12 CPUs for small.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .omenative("team", "small", &[("a", 1)])
        .omenative("team", "mid", &[("b", 6)])
        .omenative("team", "light", &[("b", 1)])
        .omenative("team", "other", &[("c", 7)])
        .edit("Pod", "light-engine-0-default-0", |p| {
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = serde_json::json!("4")
        })
        .cpu_pod("b", "17", serde_json::json!({}))
        .cpu_pod("c", "10", serde_json::json!({}))
        .pending("team", "wait-0", 8, 20, "wait");
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
    assert_eq!(moves_of(&plan), ["team/light to c", "team/small to b"]);
}

#[test]
fn a_smaller_pod_waits_while_the_pool_has_room_for_a_larger_one_alone() {
    // 8 GPUs free in all (a 3, b 2, c 3); an 8-GPU pod and a 4-GPU pod wait. Moving s0 off a
    // (pinned GPUs keep a from ever being empty) seats the 4-GPU pod in one move, but leaves
    // 4 free GPUs for good. The 8-GPU pod is what the room can hold: c's five singles move
    // onto a and b.
    let mut w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .omenative("team", "pin-a", &[("a", 3)])
        .omenative("team", "pin-b", &[("b", 6)])
        .annotate("pin-a", "alfred.ome.io/movable", "false")
        .annotate("pin-b", "alfred.ome.io/movable", "false");
    for (k, node) in ["a", "a", "c", "c", "c", "c", "c"].iter().enumerate() {
        w = w.omenative("team", &format!("s{k}"), &[(node, 1)]);
    }
    let w = w
        .pending("team", "large-0", 8, 20, "large")
        .pending("team", "small-0", 4, 20, "small");
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
    assert_eq!(plan.steps.len(), 5, "{:?}", plan.steps);
    assert!(
        plan.steps.iter().all(|s| s.frees == "c"),
        "{:?}",
        plan.steps
    );
}

#[test]
fn a_cpu_short_node_takes_two_pods_once_a_heavier_one_swaps_out() {
    // An 8-GPU pod waits for a (p and q: 1 GPU, 11 CPUs each). b and c have a GPU free each;
    // b only 8 CPUs (x there needs 14), c 14. Best fit puts p on c and leaves q nowhere. Moving
    // x to c first frees 22 CPUs and 2 GPUs on b: both p and q fit there.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .omenative("team", "p", &[("a", 1)])
        .omenative("team", "q", &[("a", 1)])
        .omenative("team", "fill-b", &[("b", 6)])
        .omenative("team", "x", &[("b", 1)])
        .omenative("team", "fill-c", &[("c", 7)])
        .annotate("fill-b", "alfred.ome.io/movable", "false")
        .annotate("fill-c", "alfred.ome.io/movable", "false")
        .edit("Pod", "x-engine-0-default-0", |p| {
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = serde_json::json!("14")
        })
        .cpu_pod("b", "7", serde_json::json!({}))
        .cpu_pod("c", "4", serde_json::json!({}))
        .pending("team", "wait-0", 8, 20, "wait");
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
    assert_eq!(
        moves_of(&plan),
        ["team/x to c", "team/p to b", "team/q to b"]
    );
}

#[test]
fn an_instance_in_the_way_gets_its_room_from_one_more_move() {
    // An 8-GPU pod waits for a (p: 1 GPU, 11 CPUs, 200 GiB). b, c and d have a GPU free each.
    // p fits only on b, once x (14 CPUs) leaves it; x fits only on c, once y (4 CPUs) leaves
    // it; y fits on d. c never holds p (its daemon's memory), d holds neither p nor x.
    let cpu = |cpu: &'static str| {
        move |p: &mut serde_json::Value| {
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = serde_json::json!(cpu)
        }
    };
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .node("d", 8)
        .omenative("team", "p", &[("a", 1)])
        .omenative("team", "fill-b", &[("b", 6)])
        .omenative("team", "x", &[("b", 1)])
        .omenative("team", "fill-c", &[("c", 6)])
        .omenative("team", "y", &[("c", 1)])
        .omenative("team", "fill-d", &[("d", 7)])
        .annotate("fill-b", "alfred.ome.io/movable", "false")
        .annotate("fill-c", "alfred.ome.io/movable", "false")
        .annotate("fill-d", "alfred.ome.io/movable", "false")
        .edit("Pod", "p-engine-0-default-0", |p| {
            p["spec"]["containers"][0]["resources"]["requests"]["memory"] =
                serde_json::json!("200Gi")
        })
        .edit("Pod", "x-engine-0-default-0", cpu("14"))
        .edit("Pod", "y-engine-0-default-0", cpu("4"))
        .cpu_pod("b", "10", serde_json::json!({}))
        .cpu_pod("c", "14", serde_json::json!({}))
        .edit("Pod", "daemon-c", |p| {
            p["spec"]["containers"][0]["resources"]["requests"]["memory"] =
                serde_json::json!("100Gi")
        })
        .cpu_pod("d", "10", serde_json::json!({}))
        .pending("team", "wait-0", 8, 20, "wait");
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", plan.steps);
    assert_eq!(
        moves_of(&plan),
        ["team/y to d", "team/x to c", "team/p to b"]
    );
}

#[test]
fn room_for_a_larger_pod_is_made_in_one_move_where_one_will_do() {
    // An 8-GPU pod waits for a, whose 4-GPU Instance needs a node with 4 free. No node has them:
    // 70 nodes with 2 free give 4 by moving two 1-GPU Instances out, and b, the last the scan
    // meets among equal room, by moving its one 2-GPU Instance. One move makes the room, not two.
    let mut w = World::new()
        .node("a", 8)
        .omenative("team", "four", &[("a", 4)])
        .node("b", 8)
        .omenative("team", "two", &[("b", 2)]);
    let mut pinned = vec!["b".to_string()];
    for k in 0..70 {
        let n = format!("n{k:02}");
        w = w
            .node(&n, 8)
            .omenative("team", &format!("one-{k:02}"), &[(&n, 1), (&n, 1)]);
        pinned.push(n);
    }
    let places: Vec<(&str, i64)> = pinned.iter().map(|n| (n.as_str(), 4)).collect();
    let w = w
        .omenative("team", "pinned", &places)
        .annotate("pinned", "alfred.ome.io/movable", "false")
        .pending("team", "big-0", 8, 20, "big");
    let plan = plan_of(&w, None);
    assert_eq!(plan.after().pending_gpus, 8, "{:?}", moves_of(&plan));
    let moves = moves_of(&plan);
    assert_eq!(moves.len(), 2, "{moves:?}");
    assert!(moves[0].starts_with("team/two to n"), "{moves:?}");
    assert_eq!(moves[1], "team/four to b");
}

/// Instance `x` of the consolidation case arrived on a by a move off `from` that started
/// `minutes` ago (a Completed row on its InferenceReplica, as OME keeps it).
fn moved_in(w: World, x: &str, from: &str, minutes: i64) -> World {
    w.edit("InferenceReplica", &format!("{x}-engine"), |r| {
        r["status"]["migrations"] = serde_json::json!([{
            "requestUUID": "u-1", "trigger": "Manual", "sourceInstance": 1, "surgeInstance": 0,
            "fromNode": from, "phase": "Completed", "startedAt": common::ago(minutes),
            "deadline": common::ago(minutes - 30), "completedAt": common::ago(minutes - 2)}]);
    })
}

#[test]
fn no_move_is_undone() {
    // Emptying a takes x1-x3 onto b (2 GPUs free) and c (1 free).
    let plan = plan_of(&common::consolidation(), None);
    assert_eq!(plan.steps.len(), 3, "{:?}", moves_of(&plan));
    let target_of = |plan: &ConsolidationPlan, workload: &str| {
        let step = plan.steps.iter().find(|s| s.workload == workload);
        step.map(|s| s.to.join(","))
    };
    // x1 left b three hours ago: it does not go back there, the others do.
    let plan = plan_of(&moved_in(common::consolidation(), "x1", "b", 180), None);
    assert_eq!(plan.steps.len(), 3, "{:?}", moves_of(&plan));
    assert_eq!(target_of(&plan, "team/x1").as_deref(), Some("c"));
    // Nor does a row list b among x1's targets after the plan's own (the re-check's
    // simulation places the surge among them); without that move it is listed.
    let targets = |w: World| {
        w.with_ctx(V1, |ctx| {
            let rows = alfred::decision::plan(ctx).recommendations;
            let x1 = rows
                .iter()
                .find(|r| r.row.workload == "team/x1")
                .expect("a row for x1");
            x1.placement_targets.clone()
        })
    };
    let b = "b".to_string();
    assert!(targets(common::consolidation()).contains(&b));
    let after = targets(moved_in(common::consolidation(), "x1", "b", 180));
    assert!(!after.is_empty() && !after.contains(&b), "{after:?}");
    // A day later it may.
    let plan = plan_of(&moved_in(common::consolidation(), "x1", "b", 25 * 60), None);
    assert_eq!(plan.steps.len(), 3, "{:?}", moves_of(&plan));
    // Moved within the hour (past the workload cooldown): it stays, so a cannot be emptied
    // and nothing is planned.
    let plan = plan_of(&moved_in(common::consolidation(), "x1", "b", 50), None);
    assert!(plan.steps.is_empty(), "{:?}", moves_of(&plan));
    // Nor does a single move take it: its row is advice until the hour is out.
    let why_not = |w: World| {
        w.with_ctx(V1, |ctx| {
            let rows = alfred::decision::plan(ctx).recommendations;
            let x1 = rows.iter().find(|r| r.row.workload == "team/x1");
            x1.map(|r| (r.row.advisory_reason, r.detail.clone()))
        })
    };
    let (reason, detail) = why_not(moved_in(common::consolidation(), "x1", "b", 50)).unwrap();
    assert_eq!(reason, Some(AdvisoryReason::OMENativeStateIneligible));
    assert!(detail.contains("within the hour"), "{detail}");
    let (reason, _) = why_not(moved_in(common::consolidation(), "x1", "b", 70)).unwrap();
    assert_ne!(reason, Some(AdvisoryReason::OMENativeStateIneligible));
    // A row for another Instance of the component says nothing about this one.
    let other = common::consolidation().edit("InferenceReplica", "x1-engine", |r| {
        r["status"]["migrations"] = serde_json::json!([{
            "requestUUID": "u-1", "trigger": "Manual", "sourceInstance": 0, "surgeInstance": 3,
            "fromNode": "b", "phase": "Completed", "startedAt": common::ago(50),
            "deadline": common::ago(20), "completedAt": common::ago(48)}]);
    });
    assert_eq!(plan_of(&other, None).steps.len(), 3);
}
