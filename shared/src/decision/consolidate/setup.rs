//! The planner's starting state: the movable Instances, the pending pods grouped by the nodes
//! they may use, the pools, and the room index.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::jiff::SignedDuration;
use rustc_hash::{FxHashMap, FxHashSet};

use super::pools::pools_holding;
use super::{Movable, MovablePod, Need, Planner, shape_key};
use crate::decision::surge;
use crate::model::context::Context;
use crate::simulate::filters::fixed_on;
use crate::simulate::{Request, Surges};

impl<'a, 's> Planner<'a, 's> {
    pub(super) fn new(ctx: &'a Context<'s>, movable: &[bool]) -> Self {
        let cluster = &ctx.cluster;
        let nodes = cluster.nodes.len();
        let avoid = ctx.config.spot_policy.avoid_as_target;
        let host: Vec<bool> = cluster
            .nodes
            .iter()
            .map(|n| n.gpu_total > 0 && !n.unavailable_as_target())
            .collect();
        let target: Vec<bool> = cluster
            .nodes
            .iter()
            .map(|n| n.gpu_total > 0 && n.is_bin(avoid))
            .collect();
        let Movables {
            movables,
            on_node,
            refused,
        } = movables(ctx, movable, &target);
        let surges = Surges::new(ctx);
        let Pending { needs, classes } = pending(ctx, &surges, &host, &movables);
        let Pools {
            node_pool,
            pool_nodes,
        } = pools(ctx, &target);
        let class_room = class_room(ctx, &classes, &pool_nodes);
        let mut by_constraint: Vec<usize> = (0..needs.len()).collect();
        by_constraint.sort_by_key(|&k| {
            let Need { gpus, class, .. } = needs[k];
            let pools = pools_holding(&class_room[class], gpus).count();
            (std::cmp::Reverse(gpus), pools, k)
        });
        let (signature, signatures) = signatures(nodes, &classes);
        let Fits {
            shape_of,
            shapes,
            fit_of,
        } = fits(ctx, &surges, &movables);
        let mut fixed: Vec<i64> = cluster.nodes.iter().map(|n| n.gpu_used).collect();
        for p in movables.iter().flat_map(|m| &m.pods) {
            fixed[p.node] -= p.gpus;
        }
        let pool_count = pool_nodes.len();
        let mut planner = Planner {
            ctx,
            surges,
            shape_of,
            fit_of,
            open_to_fit: Default::default(),
            open_to_make_room: Default::default(),
            allowed: RefCell::new(vec![vec![0u8; nodes]; shapes]),
            refused,
            gpus_only: false,
            fixed,
            free: cluster.nodes.iter().map(|n| n.gpu_free).collect(),
            reserved: vec![0; nodes],
            host,
            target,
            placed: vec![false; needs.len()],
            needs,
            classes,
            signature,
            signatures,
            kept_in: vec![None; by_constraint.len()],
            by_constraint,
            leftover: vec![i64::MAX; pool_count],
            pool_spare: vec![0; pool_count],
            pool_hosts: vec![BTreeMap::new(); pool_count],
            node_pool,
            pool_nodes,
            class_room,
            lookahead: true,
            moved: vec![false; movables.len()],
            movables,
            on_node,
            room: HashMap::new(),
            candidates: vec![None; nodes],
            version: vec![0; nodes],
            bounds: std::collections::BinaryHeap::new(),
            parked: Vec::new(),
            actions: 0,
            dirty: (0..nodes).collect(),
            largest_room: HashMap::new(),
            largest_waiting: Vec::new(),
            emptiable: vec![(None, false); nodes],
            emptiable_count: FxHashMap::default(),
            scarce: FxHashSet::default(),
            seated: Vec::new(),
        };
        for n in 0..nodes {
            planner.index_room(n, true);
        }
        planner
    }
}

/// The Instances the plan may move (movable, holding GPUs, wholly on target nodes: node health
/// moves the others; not moved within the hour), per node the movables with a pod there, in
/// eviction order (largest share of the node first, then the oldest workload), and the
/// (pod, node) placements refused because the Instance left that node within the day.
fn movables(ctx: &Context<'_>, movable: &[bool], target: &[bool]) -> Movables {
    let cluster = &ctx.cluster;
    let mut movables = Vec::new();
    let mut on_node = vec![Vec::new(); cluster.nodes.len()];
    let mut refused = FxHashSet::default();
    let defrag = &ctx.config.defragmentation;
    let horizon = defrag
        .holding()
        .then(|| SignedDuration::from_mins(defrag.hold_minutes));
    for (i, inst) in cluster.instances.iter().enumerate() {
        let Some(pool) = inst.pool.clone().filter(|_| movable[i] && inst.gpus > 0) else {
            continue;
        };
        let pods: Vec<MovablePod> = surge::gpu_pods(ctx, i)
            .into_iter()
            .filter_map(|pod| {
                let view = &cluster.pods[pod];
                Some(MovablePod {
                    pod,
                    node: view.host?,
                    gpus: view.gpus,
                })
            })
            .collect();
        if pods.is_empty() || pods.iter().any(|p| !target[p.node]) {
            continue;
        }
        if cluster.moved_lately(i).is_some() {
            continue;
        }
        for n in cluster.left_lately(i) {
            refused.extend(pods.iter().map(|p| (p.pod, n)));
        }
        let m = movables.len();
        for p in &pods {
            if !on_node[p.node].contains(&m) {
                on_node[p.node].push(m);
            }
        }
        let young = horizon.is_some_and(|h| {
            cluster
                .instance_created(i)
                .is_some_and(|t| ctx.now().duration_since(t) < h)
        });
        movables.push(Movable {
            instance: i,
            pods,
            pool,
            young,
        });
    }
    // Among equals, the longest-standing workload first: serving lifetimes are heavy-tailed,
    // so the young are the likeliest to leave on their own and free the node without a move.
    for (n, list) in on_node.iter_mut().enumerate() {
        list.sort_by_key(|&m| {
            let created = cluster.instance_created(movables[m].instance);
            (std::cmp::Reverse(movables[m].gpus_on(n)), created, m)
        });
    }
    Movables {
        movables,
        on_node,
        refused,
    }
}

struct Movables {
    movables: Vec<Movable>,
    on_node: Vec<Vec<usize>>,
    refused: FxHashSet<(usize, usize)>,
}

/// The pending pods, largest first, and their classes: pods with the same node constraints and
/// requests allow the same nodes.
struct Pending {
    needs: Vec<Need>,
    classes: Vec<Vec<bool>>,
}

fn pending(
    ctx: &Context<'_>,
    surges: &Surges<'_, '_>,
    host: &[bool],
    movables: &[Movable],
) -> Pending {
    let cluster = &ctx.cluster;
    // What every movable pod frees on its node when it leaves: the most room a node can be
    // given, so a pending pod that would not fit even then is not planned for there.
    let mut departures: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); cluster.nodes.len()];
    for p in movables.iter().flat_map(|m| &m.pods) {
        departures[p.node].push((p.node, p.pod, false));
    }
    for (pod, node) in super::holds::departing_pods(ctx) {
        departures[node].push((node, pod, false));
    }
    let emptied: Vec<_> = (0..cluster.nodes.len())
        .map(|n| surges.staged_on(n, &[&departures[n]]))
        .collect();
    let mut class_of: HashMap<(String, &Request), usize> = HashMap::new();
    let mut classes: Vec<Vec<bool>> = Vec::new();
    // Per shape, whether each node passes its fixed filters, looked at only where there is
    // room: most nodes have none for a large pod, and many requests share a shape.
    let mut passes: HashMap<String, Vec<Option<bool>>> = HashMap::new();
    let mut needs: Vec<Need> = Vec::new();
    for pending in &cluster.pending {
        let pod = &cluster.pods[pending.pod];
        let shape = shape_key(ctx, pending.pod);
        let key = (shape.clone(), surges.request(pending.pod));
        let class = *class_of.entry(key).or_insert_with(|| {
            let passes = passes
                .entry(shape)
                .or_insert_with(|| vec![None; cluster.nodes.len()]);
            classes.push(
                (0..cluster.nodes.len())
                    .map(|n| {
                        host[n]
                            && surges.has_room_with(pending.pod, n, &emptied[n])
                            && *passes[n].get_or_insert_with(|| {
                                fixed_on(ctx, pod.namespace, &pod.pod.spec, n).passes()
                            })
                    })
                    .collect(),
            );
            classes.len() - 1
        });
        needs.push(Need {
            pod: pending.pod,
            gpus: pending.gpus,
            class,
        });
    }
    needs.sort_by_key(|n| std::cmp::Reverse(n.gpus));
    Pending { needs, classes }
}

/// Per target node its pool (an index), and per pool its target nodes.
struct Pools {
    node_pool: Vec<Option<usize>>,
    pool_nodes: Vec<Vec<usize>>,
}

fn pools(ctx: &Context<'_>, target: &[bool]) -> Pools {
    let nodes = &ctx.cluster.nodes;
    let mut names: Vec<&String> = Vec::new();
    let mut pool_nodes: Vec<Vec<usize>> = Vec::new();
    let node_pool = (0..nodes.len())
        .map(|n| {
            let pool = nodes[n].pool.as_ref().filter(|_| target[n])?;
            let p = names.iter().position(|&x| x == pool).unwrap_or_else(|| {
                names.push(pool);
                pool_nodes.push(Vec::new());
                names.len() - 1
            });
            pool_nodes[p].push(n);
            Some(p)
        })
        .collect();
    Pools {
        node_pool,
        pool_nodes,
    }
}

/// Per class and pool: the most GPUs one node of the pool that the class allows has.
fn class_room(
    ctx: &Context<'_>,
    classes: &[Vec<bool>],
    pool_nodes: &[Vec<usize>],
) -> Vec<Vec<i64>> {
    classes
        .iter()
        .map(|allowed| {
            pool_nodes
                .iter()
                .map(|nodes| {
                    let allowed_nodes = nodes.iter().filter(|&&n| allowed[n]);
                    allowed_nodes
                        .map(|&n| ctx.cluster.nodes[n].gpu_total)
                        .max()
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect()
}

/// Per node the index of its signature (the classes that allow it), and the signatures.
fn signatures(nodes: usize, classes: &[Vec<bool>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut signature_of: HashMap<Vec<usize>, usize> = HashMap::new();
    let mut signatures = Vec::new();
    let signature = (0..nodes)
        .map(|n| {
            let allowed: Vec<usize> = (0..classes.len()).filter(|&c| classes[c][n]).collect();
            *signature_of.entry(allowed.clone()).or_insert_with(|| {
                signatures.push(allowed);
                signatures.len() - 1
            })
        })
        .collect();
    (signature, signatures)
}

/// Per movable pod its shape and its fit (shape and requests), as indexes, and the number of
/// shapes.
struct Fits {
    shape_of: FxHashMap<usize, usize>,
    shapes: usize,
    fit_of: FxHashMap<usize, usize>,
}

fn fits(ctx: &Context<'_>, surges: &Surges<'_, '_>, movables: &[Movable]) -> Fits {
    let mut shape_index: HashMap<String, usize> = HashMap::new();
    let mut fit_index: HashMap<(usize, &Request), usize> = HashMap::new();
    let mut shape_of = FxHashMap::default();
    let mut fit_of = FxHashMap::default();
    for p in movables.iter().flat_map(|m| &m.pods) {
        let next = shape_index.len();
        let shape = *shape_index.entry(shape_key(ctx, p.pod)).or_insert(next);
        shape_of.insert(p.pod, shape);
        let next = fit_index.len();
        let fit = *fit_index
            .entry((shape, surges.request(p.pod)))
            .or_insert(next);
        fit_of.insert(p.pod, fit);
    }
    Fits {
        shape_of,
        shapes: shape_index.len(),
        fit_of,
    }
}
