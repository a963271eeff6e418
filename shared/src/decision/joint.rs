//! Joint plans: when several Instances must leave the same nodes (an unhealthy node, a drain),
//! their new pods are placed together with the solver, so no two moves count on the same free
//! GPUs. Each moving pod starts in a stand-in for the node it leaves (its old pod keeps running
//! through the surge, so leaving frees nothing); a ToFreeSpec drains the stand-ins, capacity
//! holds on the real nodes at their free GPUs, and one dimension per Instance keeps its pods on
//! the nodes it may use. An Instance moves whole or not at all: one the solver places only in
//! part is set aside and the rest are planned again. `filtered`: targets are nodes where
//! kube-scheduler's filters admit the pods (CPU, memory, taints, affinity, ...), and the solved
//! moves are replayed one after another as surges; a target the filters refuse once earlier
//! moves have landed is taken from that Instance and the group is solved again.

use std::collections::{BTreeMap, BTreeSet};

use super::surge::{self, NoRoom, SurgePlan};
use crate::model::context::Context;
use crate::simulate::Surges;
use crate::solver::{
    CapacitySpec, Options, Policy, Problem, Spec, ToFreeFormula, ToFreeSpec, Unlimited, solve,
};

/// Room the reach dimensions never run out of on allowed nodes.
const OPEN: f64 = 1e9;

/// The candidate nodes per Instance the solver weighs: more than one plan lists, so moves off
/// the same nodes can spread further than the fullest few.
const JOINT_TARGETS: usize = 64;

#[derive(Clone, Debug, Default)]
pub struct JointOptions {
    /// Nodes that take nothing (the nodes being drained), by index.
    pub exclude: Vec<usize>,
    /// Drive the stand-ins' pod count to zero instead of their GPUs (they differ only in goals).
    pub count_pods: bool,
    /// Emptying is a goal with this formula rather than a constraint: with
    /// `MinimizeOccupiedContainers`, as many whole nodes as room allows.
    pub goal: Option<ToFreeFormula>,
    /// Targets must pass kube-scheduler's filters and the moves are replayed as surges (a
    /// drain). Off, nodes are weighed by GPUs alone, as the reference's move planning does for
    /// health evacuations, whose moves the dispatch simulates one at a time.
    pub filtered: bool,
}

/// Plans the Instances' moves together; one result per Instance, in the given order.
pub fn plan_together(
    ctx: &Context<'_>,
    instances: &[usize],
    options: &JointOptions,
) -> Vec<Result<SurgePlan, NoRoom>> {
    let mut results: Vec<Option<Result<SurgePlan, NoRoom>>> = vec![None; instances.len()];
    // Pools never share GPUs: plan each apart.
    let mut by_pool: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (k, &i) in instances.iter().enumerate() {
        match ctx.cluster.instances[i].pool.as_deref() {
            Some(pool) => by_pool.entry(pool.to_string()).or_default().push(k),
            None => results[k] = Some(Err(NoRoom::SplitPools)),
        }
    }
    // The cluster as it stands, for the filters: replays undo their moves.
    let mut surges = options.filtered.then(|| Surges::new(ctx));
    for members in by_pool.values() {
        let mut active: Vec<usize> = Vec::new();
        for &k in members {
            // One that does not fit even alone needs no solver to say so.
            match surge::plan(ctx, instances[k], &options.exclude) {
                Err(why) => results[k] = Some(Err(why)),
                Ok(plan) if plan.placements.is_empty() => results[k] = Some(Ok(plan)),
                Ok(_) => active.push(k),
            }
        }
        // (member, node) pairs the filters refused when the solved moves were replayed.
        let mut refused: BTreeSet<(usize, usize)> = BTreeSet::new();
        while !active.is_empty() {
            let targets: BTreeMap<usize, Vec<usize>> = active
                .iter()
                .map(|&k| {
                    let allowed = |n| !refused.contains(&(k, n));
                    let targets = match &surges {
                        Some(s) => {
                            admitted_targets(ctx, s, instances[k], &options.exclude, allowed)
                        }
                        None => surge::targets(ctx, instances[k], &options.exclude, JOINT_TARGETS),
                    };
                    (k, targets)
                })
                .collect();
            let blocked: Vec<usize> = active
                .iter()
                .copied()
                .filter(|k| targets[k].is_empty())
                .collect();
            if !blocked.is_empty() {
                for &k in &blocked {
                    let why = match &surges {
                        Some(s) if !refused.iter().any(|&(r, _)| r == k) => {
                            why_refused(ctx, s, instances[k], &options.exclude)
                        }
                        _ => NoRoom::Taken,
                    };
                    results[k] = Some(Err(why));
                }
                active.retain(|k| !blocked.contains(k));
                continue;
            }
            let solved = solve_group(ctx, instances, &active, &targets, options);
            let partial: Vec<usize> = active
                .iter()
                .copied()
                .filter(|k| matches!(solved[k], Placed::Partly))
                .collect();
            let stuck: Vec<usize> = if options.goal.is_some() {
                partial
            } else {
                // As a constraint, staying put is failing too.
                active
                    .iter()
                    .copied()
                    .filter(|k| !matches!(solved[k], Placed::Whole(_)))
                    .collect()
            };
            if stuck.is_empty() {
                let refusal = surges
                    .as_mut()
                    .and_then(|s| first_refused(s, &active, &solved));
                if let Some(pair) = refusal {
                    refused.insert(pair);
                    continue;
                }
                for k in active.drain(..) {
                    results[k] = Some(match &solved[&k] {
                        Placed::Whole(plan) => Ok(plan.clone()),
                        _ => Err(NoRoom::Stays),
                    });
                }
                break;
            }
            // Set aside the largest Instance that did not fit whole, then plan the rest again.
            let worst = *stuck
                .iter()
                .max_by_key(|&&k| {
                    (
                        ctx.cluster.instances[instances[k]].gpus,
                        std::cmp::Reverse(k),
                    )
                })
                .expect("non-empty");
            results[worst] = Some(Err(NoRoom::Taken));
            active.retain(|&k| k != worst);
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every Instance gets a result"))
        .collect()
}

/// The Instance's candidate targets (fullest first) where the filters that do not depend on
/// other pods admit every GPU pod and one of them has the CPU, memory and pod room.
fn admitted_targets(
    ctx: &Context<'_>,
    surges: &Surges<'_, '_>,
    instance: usize,
    exclude: &[usize],
    allowed: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let pods = surge::gpu_pods(ctx, instance);
    surge::candidates(ctx, instance, exclude)
        .filter(|&n| {
            allowed(n)
                && pods.iter().all(|&p| surges.allows(p, n))
                && pods.iter().any(|&p| surges.has_room(p, n, &[]))
        })
        .take(JOINT_TARGETS)
        .collect()
}

/// Why no node with GPU room admits the Instance: the filter refusing it on the fullest.
fn why_refused(
    ctx: &Context<'_>,
    surges: &Surges<'_, '_>,
    instance: usize,
    exclude: &[usize],
) -> NoRoom {
    let cluster = &ctx.cluster;
    let pods = surge::gpu_pods(ctx, instance);
    surge::candidates(ctx, instance, exclude)
        .find_map(|n| {
            pods.iter().find_map(|&p| {
                surges.refusal(p, n).map(|why| NoRoom::Refused {
                    pod: cluster.pods[p].name.to_string(),
                    node: cluster.nodes[n].name.to_string(),
                    reasons: why.reasons().join(", "),
                })
            })
        })
        .unwrap_or(NoRoom::Taken)
}

/// Replays the solved moves one after another as surges: the first (member, target) the
/// filters refuse on the cluster as the earlier moves leave it. The cluster is left as found.
fn first_refused(
    surges: &mut Surges<'_, '_>,
    active: &[usize],
    solved: &BTreeMap<usize, Placed>,
) -> Option<(usize, usize)> {
    // (each move made, where its pods ran before), to undo.
    let mut made: Vec<(&SurgePlan, Vec<usize>)> = Vec::new();
    let mut refused = None;
    for &k in active {
        let Placed::Whole(plan) = &solved[&k] else {
            continue;
        };
        // A pod not running yet has no old place to replay the move from.
        let from: Option<Vec<usize>> = plan
            .placements
            .iter()
            .map(|&(p, _)| surges.node_of(p))
            .collect();
        let Some(from) = from else {
            continue;
        };
        match surges.try_move(&plan.placements) {
            Ok(()) => made.push((plan, from)),
            Err((pod, _)) => {
                refused = plan
                    .placements
                    .iter()
                    .find(|&&(p, _)| p == pod)
                    .map(|&(_, n)| (k, n));
                break;
            }
        }
    }
    for (plan, from) in made.into_iter().rev() {
        surges.undo(&plan.placements, &from);
    }
    refused
}

enum Placed {
    Whole(SurgePlan),
    Partly,
    Stays,
}

/// One solve over the active Instances.
fn solve_group(
    ctx: &Context<'_>,
    instances: &[usize],
    active: &[usize],
    targets: &BTreeMap<usize, Vec<usize>>,
    options: &JointOptions,
) -> BTreeMap<usize, Placed> {
    let cluster = &ctx.cluster;
    let mut problem = Problem::new();
    // Real nodes: every node some Instance may use, at its free GPUs.
    let mut real: BTreeMap<usize, usize> = BTreeMap::new();
    for &n in targets.values().flatten() {
        if let std::collections::btree_map::Entry::Vacant(e) = real.entry(n) {
            e.insert(
                problem
                    .add_container(cluster.nodes[n].name)
                    .expect("node names are unique"),
            );
        }
    }
    let gpu = problem
        .add_dimension("gpu", 0.0, Some(0.0))
        .expect("fresh problem");
    for (&n, &id) in &real {
        problem.set_capacity(gpu, id, cluster.nodes[n].gpu_free as f64);
    }
    // Stand-ins for the nodes being left, holding the moving pods.
    let mut leaving: BTreeMap<&str, usize> = BTreeMap::new();
    let mut objects: Vec<(usize, usize)> = Vec::new(); // (k, pod)
    let mut load: BTreeMap<usize, f64> = BTreeMap::new();
    for &k in active {
        for p in surge::gpu_pods(ctx, instances[k]) {
            let pod = &cluster.pods[p];
            let node = pod.node.unwrap_or("(unbound)");
            let source = *leaving.entry(node).or_insert_with(|| {
                problem
                    .add_container(&format!("{node} (leaving)"))
                    .expect("stand-in names are unique")
            });
            let object = problem
                .add_object(&format!("{}/{}", pod.namespace, pod.name), source)
                .expect("pod names are unique");
            problem.set_value(gpu, object, pod.gpus as f64);
            *load.entry(source).or_default() += pod.gpus as f64;
            objects.push((k, p));
        }
    }
    for (&c, &l) in &load {
        problem.set_capacity(gpu, c, l);
    }
    problem.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: gpu,
            limit: None,
        }),
        Policy::Default,
    );
    // Reach: Instance k's pods only on its own targets.
    for &k in active {
        let reach = problem
            .add_dimension(&format!("reach-{k}"), 0.0, Some(OPEN))
            .expect("fresh name");
        for (o, &(owner, _)) in objects.iter().enumerate() {
            if owner == k {
                problem.set_value(reach, o, 1.0);
            }
        }
        for (&n, &id) in &real {
            if !targets[&k].contains(&n) {
                problem.set_capacity(reach, id, 0.0);
            }
        }
        problem.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: reach,
                limit: None,
            }),
            Policy::Default,
        );
    }
    let to_free = |formula| {
        Spec::ToFree(ToFreeSpec {
            name: "nodes being left".into(),
            containers: leaving.values().copied().collect(),
            dimension: (!options.count_pods).then_some(gpu),
            formula,
        })
    };
    match options.goal {
        None => problem.add_constraint(to_free(ToFreeFormula::default()), Policy::Default),
        Some(formula) => problem.add_goal(to_free(formula), 0, 1.0),
    }
    let node_of: BTreeMap<usize, usize> = real.iter().map(|(&n, &id)| (id, n)).collect();
    let Ok(solution) = solve(&problem, &Options::default(), &Unlimited) else {
        return active.iter().map(|&k| (k, Placed::Stays)).collect();
    };
    let mut placements: BTreeMap<usize, (Vec<(usize, usize)>, usize)> = BTreeMap::new();
    for (o, &(k, p)) in objects.iter().enumerate() {
        let entry = placements.entry(k).or_default();
        match node_of.get(&solution.assignment[o]) {
            Some(&n) => entry.0.push((p, n)),
            None => entry.1 += 1,
        }
    }
    active
        .iter()
        .map(|&k| {
            let (moved, stayed) = placements.remove(&k).unwrap_or_default();
            let placed = match (moved.is_empty(), stayed) {
                (false, 0) => Placed::Whole(SurgePlan {
                    targets: targets[&k]
                        .iter()
                        .copied()
                        .take(surge::LISTED_TARGETS)
                        .collect(),
                    placements: moved,
                }),
                (true, _) => Placed::Stays,
                (false, _) => Placed::Partly,
            };
            (k, placed)
        })
        .collect()
}
