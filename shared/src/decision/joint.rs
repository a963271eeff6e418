//! Joint plans: when several Instances must leave the same nodes (an unhealthy node, a drain),
//! their new pods are placed together with the solver, so no two moves count on the same free
//! GPUs. Each moving pod starts in a stand-in for the node it leaves (its old pod keeps running
//! through the surge, so leaving frees nothing); a ToFreeSpec drains the stand-ins, capacity
//! holds on the real nodes at their free GPUs, and one dimension per Instance keeps its pods on
//! the nodes it may use. An Instance moves whole or not at all: one the solver places only in
//! part is set aside and the rest are planned again.

use std::collections::BTreeMap;

use super::surge::{self, NoRoom, SurgePlan};
use crate::model::context::Context;
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
        while !active.is_empty() {
            let solved = solve_group(ctx, instances, &active, options);
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
    options: &JointOptions,
) -> BTreeMap<usize, Placed> {
    let cluster = &ctx.cluster;
    let mut problem = Problem::new();
    let targets: BTreeMap<usize, Vec<usize>> = active
        .iter()
        .map(|&k| {
            let t = surge::targets(ctx, instances[k], &options.exclude, JOINT_TARGETS);
            (k, t)
        })
        .collect();
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
