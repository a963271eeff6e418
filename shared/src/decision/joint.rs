//! Joint plans: when several Instances must leave the same nodes (an unhealthy node, a drain),
//! their new pods are placed together with the solver, so no two moves count on the same free
//! GPUs. Each moving pod starts in a stand-in for the node it leaves (its old pod keeps running
//! through the surge, so leaving frees nothing); a ToFreeSpec constraint drains the stand-ins,
//! capacity holds on the real nodes at their free GPUs, and one dimension per Instance keeps
//! its pods on the nodes it may use. An Instance moves whole or not at all: one the solver
//! cannot place entirely is set aside and the rest are planned again.

use std::collections::BTreeMap;

use super::context::Context;
use super::surge::{self, SurgePlan};
use crate::solver::{
    CapacitySpec, Options, Policy, Problem, Spec, ToFreeFormula, ToFreeSpec, Unlimited, solve,
};

/// Room the reach dimensions never run out of on allowed nodes.
const OPEN: f64 = 1e9;

/// The candidate nodes per Instance the solver weighs: more than one plan lists, so moves off
/// the same nodes can spread further than the fullest few.
const JOINT_TARGETS: usize = 64;

/// Plans the Instances' moves together; one result per Instance, in the given order.
pub fn plan_together(ctx: &Context<'_, '_>, instances: &[usize]) -> Vec<Result<SurgePlan, String>> {
    let mut results: Vec<Option<Result<SurgePlan, String>>> = vec![None; instances.len()];
    // Pools never share GPUs: plan each apart.
    let mut by_pool: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (k, &i) in instances.iter().enumerate() {
        match ctx.cluster.instances[i].pool.as_deref() {
            Some(pool) => by_pool.entry(pool.to_string()).or_default().push(k),
            None => results[k] = Some(Err("its GPU pods are not all in one pool".into())),
        }
    }
    for members in by_pool.values() {
        let mut active: Vec<usize> = Vec::new();
        for &k in members {
            let i = instances[k];
            let targets = surge::targets(ctx, i, surge::LISTED_TARGETS);
            let pods = surge::gpu_pods(ctx, i);
            if pods.is_empty() {
                results[k] = Some(Ok(SurgePlan {
                    targets,
                    placements: Vec::new(),
                }));
            } else if let Err(why) = surge::plan(ctx, i) {
                // It does not fit even alone.
                results[k] = Some(Err(why));
            } else {
                active.push(k);
            }
        }
        while !active.is_empty() {
            let planned = solve_group(ctx, instances, &active);
            let failed: Vec<usize> = active
                .iter()
                .copied()
                .filter(|k| planned[k].is_none())
                .collect();
            if failed.is_empty() {
                for k in active.drain(..) {
                    results[k] = planned.get(&k).cloned().flatten().map(Ok);
                }
                break;
            }
            // Set aside the largest Instance that did not fit whole, then plan the rest again.
            let worst = *failed
                .iter()
                .max_by_key(|&&k| {
                    (
                        ctx.cluster.instances[instances[k]].gpus,
                        std::cmp::Reverse(k),
                    )
                })
                .expect("non-empty");
            results[worst] = Some(Err(
                "the free GPUs it needs are taken by the other moves planned off the same nodes"
                    .into(),
            ));
            active.retain(|&k| k != worst);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not planned".into())))
        .collect()
}

/// One solve over the active Instances; the plan of each Instance placed whole.
fn solve_group(
    ctx: &Context<'_, '_>,
    instances: &[usize],
    active: &[usize],
) -> BTreeMap<usize, Option<SurgePlan>> {
    let cluster = ctx.cluster;
    let mut problem = Problem::new();
    let targets: BTreeMap<usize, Vec<usize>> = active
        .iter()
        .map(|&k| (k, surge::targets(ctx, instances[k], JOINT_TARGETS)))
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
            let source = match leaving.get(node) {
                Some(&c) => c,
                None => {
                    let c = problem
                        .add_container(&format!("{node} (leaving)"))
                        .expect("stand-in names are unique");
                    leaving.insert(node, c);
                    c
                }
            };
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
    problem.add_constraint(
        Spec::ToFree(ToFreeSpec {
            name: "nodes being left".into(),
            containers: leaving.values().copied().collect(),
            dimension: Some(gpu),
            formula: ToFreeFormula::MinimizeTotalUtilization,
        }),
        Policy::Default,
    );
    let node_of: BTreeMap<usize, usize> = real.iter().map(|(&n, &id)| (id, n)).collect();
    let mut plans: BTreeMap<usize, Option<SurgePlan>> = active
        .iter()
        .map(|&k| {
            (
                k,
                Some(SurgePlan {
                    targets: targets[&k].clone(),
                    placements: Vec::new(),
                }),
            )
        })
        .collect();
    let solution = match solve(&problem, &Options::default(), &Unlimited) {
        Ok(s) => s,
        Err(_) => return active.iter().map(|&k| (k, None)).collect(),
    };
    for (o, &(k, p)) in objects.iter().enumerate() {
        let entry = plans.get_mut(&k).expect("active");
        match node_of.get(&solution.assignment[o]) {
            Some(&n) => {
                if let Some(plan) = entry {
                    plan.placements.push((p, n));
                }
            }
            None => *entry = None,
        }
    }
    plans
}
