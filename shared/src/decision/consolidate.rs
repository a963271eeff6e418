//! Fewest-move consolidation plans (`recommend --plan`): the sequence of Instance moves that
//! makes the most waiting GPU demand placeable per move. Beyond the reference (which makes one
//! move a pass, each worth its own fragmentation drop), so it only plans and explains.
//!
//! The pending pods are placed first, largest first, each on the fullest node it fits (best
//! fit); what they take is reserved. An action frees room on one node by moving the fewest of
//! its movable Instances (largest first) onto other nodes' unreserved room, so no pending pod
//! already placeable loses its place and every step is a surge with room for the new pods
//! while the old ones run; a pod larger than any room first moves a smaller Instance out of
//! the node with the most room, to make it. Each round takes the action that makes the most
//! pending GPUs placeable per move; the plan stops when no action makes anything more
//! placeable.
//!
//! Every placement, of a moved pod or a pending one, is one kube-scheduler's filters allow on
//! the cluster as the earlier moves leave it (`simulate::Surges`): GPU room picks the target,
//! the filters may refuse it, and then the next is taken.
//!
//! Three rules keep the greedy from spoiling what later rounds need: moves land on nodes
//! that cannot be emptied anyway (they hold GPUs that stay, or are promised to pending pods)
//! before nodes that could be (best fit within each); while pods that need a whole node
//! wait, a node that could be emptied for them is only ever emptied whole; and a pool's free
//! GPUs, which moves only move around it, are kept for the largest pending pods they can
//! hold, so a smaller pod seated in fewer moves does not take the room a larger one needs
//! (until no action seats those).

use std::cell::{RefCell, RefMut};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::surge;
use crate::api::component::ComponentKind;
use crate::model::context::Context;
use crate::simulate::Surges;
use crate::simulate::filters::fixed_on;

/// Pending GPU demand and where it is placeable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placeable {
    /// GPUs of pending pods that fit somewhere (largest first, best fit).
    pub pending_gpus: i64,
    pub pending_pods: usize,
    /// Nodes available as targets with all their GPUs free.
    pub whole_free_nodes: usize,
    /// The GPUs of each pending pod that fits nowhere, largest first.
    pub unplaced: Vec<i64>,
}

/// One move of the plan: an Instance's pods onto their targets.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub workload: String,
    pub component: ComponentKind,
    pub instance: i32,
    pub gpus: i64,
    pub from: Vec<String>,
    pub to: Vec<String>,
    /// The node whose room the move is part of freeing.
    pub frees: String,
    /// The moved Instance (index into the cluster's Instances) and each of its GPU pods'
    /// (pod, target node), largest first: what a move of the plan is, for execute mode.
    #[serde(skip)]
    pub moved: usize,
    #[serde(skip)]
    pub placements: Vec<(usize, usize)>,
}

/// Where the plan stands after some moves: the trade a user chooses a stopping point on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CurvePoint {
    pub moves: usize,
    pub pending_gpus: i64,
    pub whole_free_nodes: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsolidationPlan {
    /// GPUs of pending pods in all, placeable or not.
    pub pending_gpus_total: i64,
    pub steps: Vec<PlanStep>,
    /// The first point is now; one more after each action (a group of moves freeing one node).
    pub curve: Vec<CurvePoint>,
}

impl ConsolidationPlan {
    pub fn before(&self) -> CurvePoint {
        self.curve[0]
    }

    pub fn after(&self) -> CurvePoint {
        *self.curve.last().unwrap_or(&self.curve[0])
    }
}

/// A fast hasher for the planner's small integer keys (the default one hashes for safety
/// against chosen keys, which these are not, and costs a tenth of a plan).
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// A pending pod as the planner sees it.
struct Need {
    /// Its index in the cluster's pods.
    pod: usize,
    gpus: i64,
    /// Index into `Planner::classes`.
    class: usize,
}

/// One movable Instance: its GPU pods' (node, GPUs).
struct Movable {
    instance: usize,
    /// Its GPU pods, largest first.
    pods: Vec<MovablePod>,
    pool: String,
}

#[derive(Clone, Copy)]
struct MovablePod {
    pod: usize,
    node: usize,
    gpus: i64,
}

impl Movable {
    /// Its GPUs on one node.
    fn gpus_on(&self, n: usize) -> i64 {
        self.pods
            .iter()
            .filter(|p| p.node == n)
            .map(|p| p.gpus)
            .sum()
    }
}

/// Nodes a chained move looks at for room to make, most room first: a bound on the work a
/// move that finds no room costs on a large cluster.
const CHAIN_SCAN: usize = 64;

struct Planner<'a, 's> {
    ctx: &'a Context<'s>,
    /// The cluster as the plan's moves leave it, for the scheduler's filters: every move's
    /// new pods must pass them where the plan puts them.
    surges: Surges<'a, 's>,
    /// Per pod with a place in the plan: its shape, the index of what the filters that do not
    /// depend on other pods read of it.
    shape_of: FxMap<usize, usize>,
    /// Per pod with a place in the plan: the index of its shape and requests (pods with the
    /// same fit the same nodes).
    fit_of: FxMap<usize, usize>,
    /// The nodes a direct move scans for a fit: not those where it does not fit.
    open_to_fit: OpenNodes,
    /// The nodes a chain scans for a fit: not those where no room can be made for it by
    /// moving smaller Instances out.
    open_to_make_room: OpenNodes,
    /// Per shape and node: 0 not worked out yet, 1 allowed, 2 refused (they do not change).
    allowed: RefCell<Vec<Vec<u8>>>,
    /// (pod, node) placements found to fail a filter that depends on other pods.
    refused: std::collections::HashSet<(usize, usize)>,
    /// Pending pods are seated by GPU room alone (`placeable`).
    gpus_only: bool,
    /// Per node: free GPUs, and GPUs reserved for pending pods placed there.
    free: Vec<i64>,
    reserved: Vec<i64>,
    /// Per node: GPUs that stay, held by pods that never move or by Instances moved there.
    fixed: Vec<i64>,
    /// Nodes pending pods and moved pods may use.
    host: Vec<bool>,
    target: Vec<bool>,
    /// Pending pods, largest first; which are placed.
    needs: Vec<Need>,
    placed: Vec<bool>,
    /// Per class (distinct node constraints of pending pods): the nodes it allows.
    classes: Vec<Vec<bool>>,
    /// Per node: its index into `signatures` (the classes that allow it).
    signature: Vec<usize>,
    signatures: Vec<Vec<usize>>,
    /// Per target node: its pool (index into `pool_nodes`); per pool: its target nodes and
    /// their unreserved room in all.
    node_pool: Vec<Option<usize>>,
    pool_nodes: Vec<Vec<usize>>,
    pool_spare: Vec<i64>,
    /// Per pool: how many of its nodes could give how many GPUs once every movable Instance
    /// left them (a pod needs one such node as well as room).
    pool_hosts: Vec<BTreeMap<i64, usize>>,
    /// Per class and pool: the most GPUs one node of the pool it allows has.
    class_room: Vec<Vec<i64>>,
    /// Pending pods by size, then by the fewest pools that could seat them.
    by_constraint: Vec<usize>,
    /// Per pending pod: the pool whose room is kept for it; per pool: the room kept for none
    /// (`weigh_pools`).
    kept_in: Vec<Option<usize>>,
    leftover: Vec<i64>,
    /// Whether seating follows `kept_in`; lifted when no action seats a pod so.
    lookahead: bool,
    movables: Vec<Movable>,
    /// Per node: the movables with a pod there.
    on_node: Vec<Vec<usize>>,
    moved: Vec<bool>,
    /// Per pool: (rank, unreserved room, node) of the target nodes, for best fit on nodes
    /// that cannot be emptied anyway (rank 0) before nodes that could (rank 1).
    room: HashMap<String, RoomIndex>,
    /// Per node, while nothing on it changes: each prefix of its eviction order.
    candidates: Vec<Option<Vec<Prefix>>>,
    /// Per node: bumped whenever it changes, so older bounds of it are dropped.
    version: Vec<u32>,
    /// Candidate actions by their bound, kept across rounds; bounds are checked when taken.
    bounds: std::collections::BinaryHeap<Bound>,
    /// Candidates that found no room for their pods, with the count of actions made when they
    /// were tried: room made elsewhere later may seat them (`retry_parked`).
    parked: Vec<(Bound, usize)>,
    /// Actions made so far.
    actions: usize,
    /// Nodes whose candidates are to be worked out (again).
    dirty: Vec<usize>,
    /// Per pool: the most room one node had when the candidates were worked out.
    largest_room: HashMap<String, i64>,
    /// Per signature: the largest pending pod still waiting.
    largest_waiting: Vec<i64>,
}

/// The plan, within `max_moves` if given. `movable[i]`: Instance i passes defragmentation
/// eligibility (as the decision pass computes it).
pub fn plan(ctx: &Context<'_>, movable: &[bool], max_moves: Option<usize>) -> ConsolidationPlan {
    let mut p = Planner::new(ctx, movable);
    let total: i64 = p.needs.iter().map(|n| n.gpus).sum();
    p.place_unplaced(None);
    let mut curve = vec![p.point(0)];
    let mut steps = Vec::new();
    let budget = max_moves.unwrap_or(usize::MAX);
    loop {
        let Some(trial) = p.best_action(budget - steps.len()) else {
            if p.retry_parked() || p.lift_lookahead() {
                continue;
            }
            break;
        };
        // A trial whose moves the filters refuse in order is dropped; what was refused is not
        // tried again.
        if let Some(made) = p.apply(trial) {
            steps.extend(made);
            curve.push(p.point(steps.len()));
        }
    }
    ConsolidationPlan {
        pending_gpus_total: total,
        steps,
        curve,
    }
}

/// Pending demand placeable on nodes with these free GPUs (largest first, best fit), and the
/// whole free nodes: for comparing now, after a plan and after an ideal repack. The free GPUs
/// given need not be the cluster's, so neither are its CPU and memory: a pending pod counts on
/// a node where it would fit with every Instance `movable` marks gone.
pub fn placeable(ctx: &Context<'_>, movable: &[bool], free: &[i64]) -> Placeable {
    let mut p = Planner::new(ctx, movable);
    p.free = free.to_vec();
    p.gpus_only = true;
    p.place_unplaced(None);
    let point = p.point(0);
    Placeable {
        pending_gpus: point.pending_gpus,
        pending_pods: p.placed.iter().filter(|&&x| x).count(),
        whole_free_nodes: point.whole_free_nodes,
        unplaced: (0..p.needs.len())
            .filter(|&k| !p.placed[k])
            .map(|k| p.needs[k].gpus)
            .collect(),
    }
}

impl<'a, 's> Planner<'a, 's> {
    fn new(ctx: &'a Context<'s>, movable: &[bool]) -> Self {
        let cluster = &ctx.cluster;
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
        let mut movables = Vec::new();
        let mut on_node = vec![Vec::new(); cluster.nodes.len()];
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
            // Only Instances wholly on target nodes: node health moves the others.
            if pods.is_empty() || pods.iter().any(|p| !target[p.node]) {
                continue;
            }
            let m = movables.len();
            for p in &pods {
                if !on_node[p.node].contains(&m) {
                    on_node[p.node].push(m);
                }
            }
            movables.push(Movable {
                instance: i,
                pods,
                pool,
            });
        }
        // Each node's movables in eviction order: largest share of the node first.
        for (n, list) in on_node.iter_mut().enumerate() {
            list.sort_by_key(|&m| (std::cmp::Reverse(movables[m].gpus_on(n)), m));
        }
        let surges = Surges::new(ctx);
        // Pending pods grouped by their node constraints and requests.
        let mut class_of: HashMap<String, usize> = HashMap::new();
        let mut classes: Vec<Vec<bool>> = Vec::new();
        let mut needs: Vec<Need> = Vec::new();
        // What every movable pod frees on its node when it leaves: the most room a node can
        // be given, so a pending pod that would not fit even then is not planned for there.
        let mut departures: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); cluster.nodes.len()];
        for p in movables.iter().flat_map(|m| &m.pods) {
            departures[p.node].push((p.node, p.pod, false));
        }
        for pending in &cluster.pending {
            let pod = &cluster.pods[pending.pod];
            let spec = &pod.pod.spec;
            let key = format!(
                "{}{:?}",
                shape_key(ctx, pending.pod),
                crate::simulate::pod_requests(spec)
            );
            let class = *class_of.entry(key).or_insert_with(|| {
                classes.push(
                    (0..cluster.nodes.len())
                        .map(|n| {
                            host[n]
                                && fixed_on(ctx, pod.namespace, spec, n).passes()
                                && surges.has_room(pending.pod, n, &[&departures[n]])
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
        let mut pools: Vec<&String> = Vec::new();
        let mut pool_nodes: Vec<Vec<usize>> = Vec::new();
        let node_pool: Vec<Option<usize>> = (0..cluster.nodes.len())
            .map(|n| {
                let pool = cluster.nodes[n].pool.as_ref().filter(|_| target[n])?;
                let p = pools.iter().position(|&x| x == pool).unwrap_or_else(|| {
                    pools.push(pool);
                    pool_nodes.push(Vec::new());
                    pools.len() - 1
                });
                pool_nodes[p].push(n);
                Some(p)
            })
            .collect();
        let class_room: Vec<Vec<i64>> = classes
            .iter()
            .map(|allowed| {
                pool_nodes
                    .iter()
                    .map(|nodes| {
                        let sizes = nodes.iter().filter(|&&n| allowed[n]);
                        sizes
                            .map(|&n| cluster.nodes[n].gpu_total)
                            .max()
                            .unwrap_or(0)
                    })
                    .collect()
            })
            .collect();
        let mut by_constraint: Vec<usize> = (0..needs.len()).collect();
        by_constraint.sort_by_key(|&k| {
            let Need { gpus, class, .. } = needs[k];
            let pools = pools_holding(&class_room[class], gpus).count();
            (std::cmp::Reverse(gpus), pools, k)
        });
        let mut signature_of: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut signatures = Vec::new();
        let signature = (0..cluster.nodes.len())
            .map(|n| {
                let allowed: Vec<usize> = (0..classes.len()).filter(|&c| classes[c][n]).collect();
                *signature_of.entry(allowed.clone()).or_insert_with(|| {
                    signatures.push(allowed);
                    signatures.len() - 1
                })
            })
            .collect();
        let mut shape_index: HashMap<String, usize> = HashMap::new();
        let mut fit_index: HashMap<String, usize> = HashMap::new();
        let mut shape_of = FxMap::default();
        let mut fit_of = FxMap::default();
        for p in movables.iter().flat_map(|m| &m.pods) {
            let shape = shape_key(ctx, p.pod);
            let requests = crate::simulate::pod_requests(&cluster.pods[p.pod].pod.spec);
            let next = fit_index.len();
            let fit = format!("{shape}{requests:?}");
            fit_of.insert(p.pod, *fit_index.entry(fit).or_insert(next));
            let next = shape_index.len();
            shape_of.insert(p.pod, *shape_index.entry(shape).or_insert(next));
        }
        let allowed = vec![vec![0u8; cluster.nodes.len()]; shape_index.len()];
        let mut fixed: Vec<i64> = cluster.nodes.iter().map(|n| n.gpu_used).collect();
        for movable in &movables {
            for p in &movable.pods {
                fixed[p.node] -= p.gpus;
            }
        }
        let mut planner = Planner {
            ctx,
            surges,
            shape_of,
            fit_of,
            open_to_fit: Default::default(),
            open_to_make_room: Default::default(),
            allowed: RefCell::new(allowed),
            refused: Default::default(),
            gpus_only: false,
            fixed,
            free: cluster.nodes.iter().map(|n| n.gpu_free).collect(),
            reserved: vec![0; cluster.nodes.len()],
            host,
            target,
            placed: vec![false; needs.len()],
            needs,
            classes,
            signature,
            signatures,
            kept_in: vec![None; by_constraint.len()],
            by_constraint,
            leftover: vec![i64::MAX; pool_nodes.len()],
            pool_spare: vec![0; pool_nodes.len()],
            pool_hosts: vec![BTreeMap::new(); pool_nodes.len()],
            node_pool,
            pool_nodes,
            class_room,
            lookahead: true,
            moved: vec![false; movables.len()],
            movables,
            on_node,
            room: HashMap::new(),
            candidates: vec![None; cluster.nodes.len()],
            version: vec![0; cluster.nodes.len()],
            bounds: std::collections::BinaryHeap::new(),
            parked: Vec::new(),
            actions: 0,
            dirty: (0..cluster.nodes.len()).collect(),
            largest_room: HashMap::new(),
            largest_waiting: Vec::new(),
        };
        for n in 0..cluster.nodes.len() {
            planner.index_room(n, true);
        }
        planner
    }

    fn spare(&self, n: usize) -> i64 {
        self.free[n] - self.reserved[n]
    }

    /// Changes a node's free and reserved GPUs, keeping the room index and the node's cached
    /// candidates current.
    fn change(&mut self, n: usize, free: i64, reserved: i64, fixed: i64) {
        self.index_room(n, false);
        self.free[n] += free;
        self.reserved[n] += reserved;
        self.fixed[n] += fixed;
        self.index_room(n, true);
        self.invalidate(n);
    }

    /// 0 for a node that cannot be emptied anyway (it holds GPUs that stay, or is promised to
    /// pending pods): room there is used first, keeping other nodes free to empty.
    fn rank(&self, n: usize) -> u8 {
        u8::from(self.fixed[n] <= 0 && self.reserved[n] <= 0)
    }

    /// Node `n`'s place in its pool's room index (and in the open sets drawn from it).
    fn room_key(&self, n: usize) -> (u8, i64, usize) {
        (self.rank(n), self.spare(n), n)
    }

    fn invalidate(&mut self, n: usize) {
        if self.candidates[n].take().is_some() {
            self.dirty.push(n);
        }
        self.version[n] = self.version[n].wrapping_add(1);
    }

    /// Adds or removes a target node in its pool's room index.
    fn index_room(&mut self, n: usize, add: bool) {
        let node = &self.ctx.cluster.nodes[n];
        let Some(pool) = node.pool.as_ref().filter(|_| self.target[n]) else {
            return;
        };
        let key = self.room_key(n);
        let set = self.room.entry(pool.clone()).or_default();
        if add {
            set.insert(key);
        } else {
            set.remove(&key);
        }
        self.open_to_fit.update(pool, key, add);
        self.open_to_make_room.update(pool, key, add);
        if let Some(p) = self.node_pool[n] {
            self.pool_spare[p] += if add { key.1 } else { -key.1 };
            let most = node.gpu_total - self.fixed[n] - self.reserved[n];
            if self.host[n] && most > 0 {
                let hosts = self.pool_hosts[p].entry(most).or_insert(0);
                if add {
                    *hosts += 1;
                } else {
                    *hosts -= 1;
                }
            }
        }
    }

    /// Places unplaced pending pods, largest first, each on the allowed node with the least
    /// room that fits (of `only` when given, else of all nodes).
    fn place_unplaced(&mut self, only: Option<&[usize]>) {
        let all: Vec<usize>;
        let nodes = match only {
            Some(nodes) => nodes,
            None => {
                all = (0..self.free.len()).filter(|&n| self.host[n]).collect();
                &all
            }
        };
        for k in 0..self.needs.len() {
            if self.placed[k] {
                continue;
            }
            let (pod, gpus, class) = (self.needs[k].pod, self.needs[k].gpus, self.needs[k].class);
            let allowed = &self.classes[class];
            let best = nodes
                .iter()
                .copied()
                .filter(|&n| {
                    allowed[n]
                        && self.spare(n) >= gpus
                        && (self.gpus_only || self.surges.has_room(pod, n, &[]))
                })
                .min_by_key(|&n| (self.spare(n), n));
            if let Some(n) = best {
                self.change(n, 0, gpus, 0);
                self.surges.reserve(pod, n);
                self.placed[k] = true;
            }
        }
    }

    fn point(&self, moves: usize) -> CurvePoint {
        let nodes = &self.ctx.cluster.nodes;
        CurvePoint {
            moves,
            pending_gpus: (0..self.needs.len())
                .filter(|&k| self.placed[k])
                .map(|k| self.needs[k].gpus)
                .sum(),
            whole_free_nodes: (0..nodes.len())
                .filter(|&n| self.host[n] && self.free[n] >= nodes[n].gpu_total)
                .count(),
        }
    }

    /// Pending GPUs an unplaced-pods-only best fit would seat in `room` on a node of
    /// signature `sig` (the room's other nodes cannot seat them: they were tried).
    fn benefit(&self, sig: usize, pool: Option<usize>, mut room: i64) -> i64 {
        let allowed = &self.signatures[sig];
        let mut gained = 0;
        for (k, need) in self.needs.iter().enumerate() {
            if !self.placed[k]
                && need.gpus <= room
                && allowed.contains(&need.class)
                && pool.is_none_or(|p| self.seatable_in(k, p))
            {
                room -= need.gpus;
                gained += need.gpus;
            }
        }
        gained
    }

    /// The largest pending pod still waiting that a node of signature `sig` allows.
    fn largest_waiting_for(&self, sig: usize) -> i64 {
        let allowed = &self.signatures[sig];
        (0..self.needs.len())
            .filter(|&k| !self.placed[k] && allowed.contains(&self.needs[k].class))
            .map(|k| self.needs[k].gpus)
            .max()
            .unwrap_or(0)
    }

    /// The action with the most pending GPUs made placeable per move, within `budget` moves.
    /// Every prefix (largest first) of each node's movables is a candidate, bounded by the
    /// GPUs it seats per Instance taken off; candidates are tried in bound order, each with
    /// the moves that make room for it, until no bound can beat the best found.
    fn best_action(&mut self, budget: usize) -> Option<Trial> {
        if budget == 0 || self.placed.iter().all(|&p| p) {
            return None;
        }
        // A pod larger than the most room any node of its pool has needs a move first.
        self.largest_room = self
            .room
            .iter()
            .map(|(pool, set)| {
                let most = |rank: u8| {
                    let mut ranked = set.range((rank, 0, 0)..(rank + 1, 0, 0));
                    ranked.next_back().map_or(0, |r| r.1)
                };
                (pool.clone(), most(0).max(most(1)))
            })
            .collect();
        if self.lookahead {
            self.weigh_pools();
        }
        let mut cache = GainCache::default();
        let largest_waiting: Vec<i64> = (0..self.signatures.len())
            .map(|sig| self.largest_waiting_for(sig))
            .collect();
        if largest_waiting != self.largest_waiting {
            // Which nodes may be half emptied changes: work every node out again.
            self.largest_waiting = largest_waiting;
            for n in 0..self.free.len() {
                self.invalidate(n);
            }
        }
        for n in std::mem::take(&mut self.dirty) {
            if self.candidates[n].is_some()
                || !self.host[n]
                || self.signatures[self.signature[n]].is_empty()
            {
                continue;
            }
            let candidates = self.node_candidates(n);
            // A node that could be emptied is emptied whole, not spoiled by half-emptying it,
            // while pods that need a whole node of its size wait.
            let whole_only = self.rank(n) == 1
                && self.largest_waiting[self.signature[n]] >= self.ctx.cluster.nodes[n].gpu_total;
            for (k, prefix) in candidates.iter().enumerate() {
                if whole_only && k + 1 < candidates.len() {
                    continue;
                }
                let least = self.least_moves(n, prefix);
                let gained = self.gained(&mut cache, n, prefix.room);
                if gained > 0 {
                    self.bounds.push(Bound {
                        ratio: gained as f64 / least as f64,
                        gained,
                        node: n,
                        prefix: k + 1,
                        version: self.version[n],
                    });
                }
            }
            self.candidates[n] = Some(candidates);
        }
        // Take candidates best bound first, checking each bound against the pending pods
        // still waiting, until none can beat the best action found.
        let mut best: Option<(f64, i64, Trial)> = None;
        let mut tried: Vec<Bound> = Vec::new();
        while let Some(c) = self.bounds.pop() {
            // Later bounds are no higher: none can beat the best (ratio, then GPUs seated).
            if best
                .as_ref()
                .is_some_and(|b| (c.ratio, c.gained) <= (b.0, b.1))
            {
                self.bounds.push(c);
                break;
            }
            if c.version != self.version[c.node] {
                continue;
            }
            let Some(prefix) = self.candidates[c.node]
                .as_ref()
                .and_then(|list| list.get(c.prefix - 1))
            else {
                continue;
            };
            let (room, least) = (prefix.room, self.least_moves(c.node, prefix));
            if least > budget {
                continue;
            }
            let gained = self.gained(&mut cache, c.node, room);
            if gained <= 0 {
                continue;
            }
            let ratio = gained as f64 / least as f64;
            if ratio < c.ratio {
                self.bounds.push(Bound { ratio, gained, ..c });
                continue;
            }
            let order = self.eviction_order(c.node);
            let trial = self.trial(c.node, &order[..c.prefix]);
            // A tried candidate comes back at the ratio its moves gave: the room its pods
            // need rarely grows, so trying it again each round at its first bound is wasted.
            // One that finds no room for its pods is parked until its node changes (which
            // works its candidates out again) or nothing else is left.
            let Some(trial) = trial else {
                self.parked.push((c, self.actions));
                continue;
            };
            let ratio = gained as f64 / trial.moves.len() as f64;
            tried.push(Bound { ratio, gained, ..c });
            if trial.moves.len() > budget {
                continue;
            }
            let better = best.as_ref().is_none_or(|b| {
                (ratio, gained, std::cmp::Reverse(trial.moves.len()))
                    > (b.0, b.1, std::cmp::Reverse(b.2.moves.len()))
            });
            if better {
                best = Some((ratio, gained, trial));
            }
        }
        // Candidates tried and not taken stay candidates (those of changed nodes drop out).
        self.bounds.extend(tried);
        best.map(|b| b.2)
    }

    /// Keeps each pool's room for the pods it can seat, largest first: moves only move room
    /// around a pool, so its unreserved room in all is what every pod seated there shares,
    /// and sizes that divide each other fill it best. Each pod, those with the fewest pools
    /// first, is given the pool with the least room that holds it. A pod may then be seated
    /// in a pool keeping room for it, or in what a pool keeps for none: a smaller pod seated
    /// first, often in fewer moves, would take room a larger one needs.
    fn weigh_pools(&mut self) {
        let mut room = self.pool_spare.clone();
        let mut hosts = self.pool_hosts.clone();
        let mut kept_in = vec![None; self.needs.len()];
        for &k in &self.by_constraint {
            let Need { gpus, class, .. } = self.needs[k];
            if self.placed[k] {
                continue;
            }
            let host_of =
                |hosts: &BTreeMap<i64, usize>| hosts.range(gpus..).find(|h| *h.1 > 0).map(|h| *h.0);
            let best_fit = pools_holding(&self.class_room[class], gpus)
                .filter(|&p| room[p] >= gpus)
                .filter_map(|p| Some((room[p], p, host_of(&hosts[p])?)))
                .min();
            if let Some((_, p, most)) = best_fit {
                room[p] -= gpus;
                let sizes = &mut hosts[p];
                if let Some(count) = sizes.get_mut(&most) {
                    *count -= 1;
                }
                if most > gpus {
                    *sizes.entry(most - gpus).or_insert(0) += 1;
                }
                kept_in[k] = Some(p);
            }
        }
        let before: Vec<Vec<bool>> = (0..room.len()).map(|p| self.seatable(p)).collect();
        self.kept_in = kept_in;
        self.leftover = room;
        // Bounds stay bounds where fewer pods may be seated; where more may, the pool's
        // nodes are worked out again.
        for (p, before) in before.into_iter().enumerate() {
            let widened = self
                .seatable(p)
                .iter()
                .zip(&before)
                .any(|(&now, &was)| now && !was);
            if widened {
                for n in self.pool_nodes[p].clone() {
                    self.invalidate(n);
                }
            }
        }
    }

    fn seatable_in(&self, k: usize, p: usize) -> bool {
        !self.lookahead || self.kept_in[k] == Some(p) || self.needs[k].gpus <= self.leftover[p]
    }

    /// Per pending pod still waiting: whether pool `p` may seat it.
    fn seatable(&self, p: usize) -> Vec<bool> {
        (0..self.needs.len())
            .map(|k| !self.placed[k] && self.seatable_in(k, p))
            .collect()
    }

    /// Lets every pool seat every pod once no action seats one where `weigh_pools` keeps
    /// room; false when that was done already or kept no pod from a pool.
    fn lift_lookahead(&mut self) -> bool {
        if !self.lookahead {
            return false;
        }
        let kept_out = (0..self.needs.len()).any(|k| {
            let Need { gpus, class, .. } = self.needs[k];
            !self.placed[k]
                && pools_holding(&self.class_room[class], gpus).any(|p| !self.seatable_in(k, p))
        });
        self.lookahead = false;
        if !kept_out {
            return false;
        }
        for n in 0..self.free.len() {
            self.invalidate(n);
        }
        true
    }

    /// Makes the parked candidates candidates again when actions were made since they were
    /// parked (the room they lacked may exist now); false when there are none such.
    fn retry_parked(&mut self) -> bool {
        let actions = self.actions;
        let (retry, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|&(c, at)| at < actions && c.version == self.version[c.node]);
        self.parked = stay;
        let any = !retry.is_empty();
        self.bounds.extend(retry.into_iter().map(|(c, _)| c));
        any
    }

    /// Pending GPUs a node's room would seat now, memoized for the round.
    fn gained(&self, cache: &mut GainCache, n: usize, room: i64) -> i64 {
        let (sig, pool) = (self.signature[n], self.node_pool[n]);
        *cache
            .entry((sig, pool, room))
            .or_insert_with(|| self.benefit(sig, pool, room))
    }

    /// The prefixes of a node's eviction order: the room each leaves and what it moves.
    fn node_candidates(&self, n: usize) -> Vec<Prefix> {
        let mut room = self.spare(n);
        let mut pods: Vec<i64> = Vec::new();
        self.eviction_order(n)
            .into_iter()
            .enumerate()
            .map(|(k, m)| {
                room += self.movables[m].gpus_on(n);
                let movable = &self.movables[m];
                pods.extend(movable.pods.iter().map(|p| p.gpus));
                Prefix {
                    room,
                    moves: k + 1,
                    pods: pods.clone(),
                }
            })
            .collect()
    }

    /// The fewest moves a prefix of node `n` can take: one a movable, one more for each pod
    /// larger than any room in the pool (a movable's pool is its node's).
    fn least_moves(&self, n: usize, prefix: &Prefix) -> usize {
        let pool = self.ctx.cluster.nodes[n].pool.as_ref();
        let largest = pool
            .and_then(|p| self.largest_room.get(p))
            .copied()
            .unwrap_or(0);
        prefix.moves + prefix.pods.iter().filter(|&&gpus| gpus > largest).count()
    }

    /// A node's movables not yet moved, largest share of the node first.
    fn eviction_order(&self, n: usize) -> Vec<usize> {
        self.on_node[n]
            .iter()
            .copied()
            .filter(|&m| !self.moved[m])
            .collect()
    }

    /// The moves that take `chosen` off `node`: each pod onto unreserved room in its pool
    /// (best fit), or where none is, onto a node whose room one or more moves of smaller
    /// Instances make first. None when some pod finds no room.
    ///
    /// When that fails although the pool has the GPUs, it is tried once more swapping first:
    /// each pod goes where GPUs are free but CPU or memory is short, once what holds those has
    /// moved onto room elsewhere. Best fit may have given that room to pods that fit anywhere.
    fn trial(&self, node: usize, chosen: &[usize]) -> Option<Trial> {
        let (m, stuck) = match self.trial_with(node, chosen, false) {
            Ok(trial) => return Some(trial),
            Err(stuck) => stuck,
        };
        // Swapping helps only where the pool has the GPUs, and a node has them for the pod
        // that found no room.
        let pool = self.node_pool[node]?;
        let needed: i64 = chosen.iter().map(|&m| self.movables[m].gpus_on(node)).sum();
        let gpus = self.ctx.cluster.pods[stuck].gpus;
        let index = self.room.get(&self.movables[m].pool)?;
        let roomy = (0..2u8).any(|rank| with_room(index, rank, gpus).any(|n| n != node));
        if !roomy || self.pool_spare[pool] - self.spare(node) < needed {
            return None;
        }
        self.trial_with(node, chosen, true).ok()
    }

    /// The trial, or the (movable, pod) that found no room.
    fn trial_with(
        &self,
        node: usize,
        chosen: &[usize],
        swap_first: bool,
    ) -> Result<Trial, (usize, usize)> {
        let mut trial = Trial {
            node,
            delta: FxMap::default(),
            taken: chosen.to_vec(),
            leaving: chosen
                .iter()
                .flat_map(|&m| self.movables[m].pods.iter().map(|p| p.node))
                .collect(),
            moves: Vec::new(),
            staged: Vec::new(),
        };
        for &m in chosen {
            let mut targets = Vec::new();
            for &MovablePod { pod, gpus, .. } in &self.movables[m].pods {
                let swapped = swap_first
                    .then(|| self.chained(&mut trial, m, pod, true))
                    .flatten();
                let to = match swapped.or_else(|| self.direct(&trial, &[], m, pod, None)) {
                    Some(to) => to,
                    None => self.chained(&mut trial, m, pod, false).ok_or((m, pod))?,
                };
                *trial.delta.entry(to).or_default() -= gpus;
                trial.staged.push((to, pod, true));
                targets.push(to);
            }
            // The old pods leave once the new ones run.
            for p in &self.movables[m].pods {
                trial.staged.push((p.node, p.pod, false));
            }
            trial.moves.push((m, targets));
        }
        Ok(trial)
    }

    /// Would the scheduler's filters let `pod` start on node `n`, with the `staged` moves
    /// being worked out on top of the plan so far? Those that depend on other pods' places
    /// (spread, pod affinity) are checked when the action is made (`apply`).
    fn admits(&self, pod: usize, n: usize, staged: &[&[Staged]]) -> bool {
        !self.refused.contains(&(pod, n)) && self.fits(pod, n, staged)
    }

    /// The part of `admits` that holds alike for every pod of a fit.
    fn fits(&self, pod: usize, n: usize, staged: &[&[Staged]]) -> bool {
        self.allows(pod, n) && self.surges.has_room(pod, n, staged)
    }

    /// The filters that do not depend on other pods, worked out once per shape and node.
    fn allows(&self, pod: usize, n: usize) -> bool {
        let shape = self.shape_of[&pod];
        let known = self.allowed.borrow()[shape][n];
        if known != 0 {
            return known == 1;
        }
        let allows = self.surges.allows(pod, n);
        self.allowed.borrow_mut()[shape][n] = if allows { 1 } else { 2 };
        allows
    }

    fn spare_in(&self, trial: &Trial, n: usize) -> i64 {
        self.spare(n) + trial.delta.get(&n).copied().unwrap_or(0)
    }

    /// The target with the least room that fits `pod` of movable `m` (best fit) and that the
    /// scheduler's filters allow, away from the nodes the action leaves and from `avoid`, with
    /// `extra` moves on top of the trial's (moves being worked out).
    fn direct(
        &self,
        trial: &Trial,
        extra: &[Staged],
        m: usize,
        pod: usize,
        avoid: Option<usize>,
    ) -> Option<usize> {
        let movable = &self.movables[m];
        let gpus = self.ctx.cluster.pods[pod].gpus;
        let component = self.ctx.cluster.instances[movable.instance].component;
        let changed_by = |n: usize| {
            extra
                .iter()
                .filter(|e| e.0 == n)
                .map(|&(_, p, arriving)| {
                    let g = self.ctx.cluster.pods[p].gpus;
                    if arriving { -g } else { g }
                })
                .sum::<i64>()
        };
        let room = |n: usize| self.spare_in(trial, n) + changed_by(n);
        let usable = |n: usize| {
            !trial.leaving.contains(&n)
                && Some(n) != avoid
                && room(n) >= gpus
                && self.ctx.model_allows(component, n)
                && self.admits(pod, n, &[&trial.staged, extra])
        };
        // Nodes this action already changed are not where the index says.
        let changed = trial
            .delta
            .keys()
            .copied()
            .chain(extra.iter().map(|e| e.0))
            .filter(|&n| {
                self.target[n] && self.ctx.cluster.nodes[n].pool.as_ref() == Some(&movable.pool)
            })
            .filter(|&n| usable(n))
            .min_by_key(|&n| (self.rank(n), room(n), n));
        // Away from the action, whether the pod fits depends on the node and its fit alone:
        // a node where it does not is closed to the fit until the node changes.
        let index = self.room.get(&movable.pool)?;
        let mut open = self
            .open_to_fit
            .of(&movable.pool, self.fit_of[&pod], index)?;
        let mut closed = Vec::new();
        let indexed = (0..2u8).find_map(|rank| {
            with_room(&open, rank, gpus).find(|&n| {
                if trial.delta.contains_key(&n) || extra.iter().any(|e| e.0 == n) {
                    return false;
                }
                if !self.fits(pod, n, &[]) {
                    closed.push(n);
                    return false;
                }
                usable(n)
            })
        });
        for n in closed {
            open.remove(&self.room_key(n));
        }
        match (changed, indexed) {
            (Some(a), Some(b)) => {
                let key = |n: usize| (self.rank(n), room(n), n);
                Some(if key(a) <= key(b) { a } else { b })
            }
            (a, b) => a.or(b),
        }
    }

    /// Room for `gpus` of movable `m` made on another node of its pool by moving some of that
    /// node's smaller Instances (largest first) onto room that exists: the node needing the
    /// fewest such moves. The moves are added to the trial before the one they make room for.
    /// With `gpus_there`, only nodes that have the GPUs and are short of something else.
    fn chained(&self, trial: &mut Trial, m: usize, pod: usize, gpus_there: bool) -> Option<usize> {
        let gpus = self.ctx.cluster.pods[pod].gpus;
        let movable = &self.movables[m];
        let component = self.ctx.cluster.instances[movable.instance].component;
        // ((rank, moves), node, the (movable, target) moves that make the room): room made on
        // a node that cannot be emptied anyway first, then the fewest moves.
        let mut best: Option<((u8, usize), usize, Chain)> = None;
        let may_take =
            |n: usize| !trial.leaving.contains(&n) && self.ctx.model_allows(component, n);
        // Of the nodes where room can be made at all (`room_to_make`) and may be for this fit:
        // away from the trial the answer depends on the node and the fit alone, so a node
        // with none is closed to the fit until it changes.
        let room_index = self.room.get(&movable.pool)?;
        let mut open = self
            .open_to_make_room
            .of(&movable.pool, self.fit_of[&pod], room_index)?;
        let closed = RefCell::new(Vec::new());
        let nodes = (0..2u8).flat_map(|rank| {
            room_to_make(&open, rank, gpus, !gpus_there)
                .filter(|&n| !trial.delta.contains_key(&n) && may_take(n))
                .filter_map(|n| {
                    let smaller = self.room_made_on(trial, n, pod);
                    if smaller.is_none() {
                        closed.borrow_mut().push(n);
                    }
                    Some((n, smaller?))
                })
                .take(CHAIN_SCAN)
        });
        let changed: Vec<(usize, Vec<usize>)> = trial
            .delta
            .keys()
            .copied()
            .filter(|&n| self.target[n])
            .filter(|&n| self.ctx.cluster.nodes[n].pool.as_ref() == Some(&movable.pool))
            .filter(|&n| !gpus_there || self.spare_in(trial, n) >= gpus)
            .filter(|&n| may_take(n))
            .filter_map(|n| Some((n, self.room_made_on(trial, n, pod)?)))
            .collect();
        for (n, smaller) in changed.into_iter().chain(nodes) {
            let rank = self.rank(n);
            if best.as_ref().is_some_and(|b| b.0 <= (0, 1)) {
                break;
            }
            if best.as_ref().is_some_and(|b| b.0 <= (rank, 1)) {
                continue;
            }
            let mut room = self.spare_in(trial, n);
            // Move the largest smaller ones out until the pod fits (its GPUs, then the rest
            // of what it requests).
            let mut plan: Chain = Vec::new();
            let mut extra: Vec<Staged> = Vec::new();
            let mut fits = false;
            for &x in &smaller {
                fits = room >= gpus && self.admits(pod, n, &[&trial.staged, &extra]);
                if fits || best.as_ref().is_some_and(|b| b.0 <= (rank, plan.len() + 1)) {
                    break;
                }
                let MovablePod {
                    pod: moved,
                    gpus: g,
                    ..
                } = self.movables[x].pods[0];
                let to = self.direct(trial, &extra, x, moved, Some(n)).or_else(|| {
                    gpus_there
                        .then(|| self.second_link(trial, &mut extra, &mut plan, x, n, pod))
                        .flatten()
                });
                let Some(to) = to else {
                    continue;
                };
                extra.push((to, moved, true));
                extra.push((n, moved, false));
                plan.push((x, to));
                room += g;
                fits = room >= gpus && self.admits(pod, n, &[&trial.staged, &extra]);
            }
            if fits && best.as_ref().is_none_or(|b| (rank, plan.len()) < b.0) {
                best = Some(((rank, plan.len()), n, plan));
            }
        }
        for n in closed.into_inner() {
            open.remove(&self.room_key(n));
        }
        let (_, n, plan) = best?;
        for (x, to) in plan {
            let MovablePod {
                pod: moved,
                gpus: g,
                ..
            } = self.movables[x].pods[0];
            *trial.delta.entry(to).or_default() -= g;
            *trial.delta.entry(n).or_default() += g;
            trial.staged.push((to, moved, true));
            trial.staged.push((n, moved, false));
            trial.taken.push(x);
            trial.moves.push((x, vec![to]));
        }
        Some(n)
    }

    /// Room for single-pod movable `x`, which leaves node `n` to make room for `pod`, made on
    /// another node by moving that node's smaller Instances onto room that exists: a chain's
    /// second link. Its moves are added to `plan` and `extra`; returns the node for `x`.
    fn second_link(
        &self,
        trial: &Trial,
        extra: &mut Vec<Staged>,
        plan: &mut Chain,
        x: usize,
        n: usize,
        pod: usize,
    ) -> Option<usize> {
        let MovablePod {
            pod: moved, gpus, ..
        } = self.movables[x].pods[0];
        let movable = &self.movables[x];
        let component = self.ctx.cluster.instances[movable.instance].component;
        let room_index = self.room.get(&movable.pool)?;
        let candidates = (0..2u8)
            .flat_map(|rank| room_to_make(room_index, rank, gpus, true))
            .filter(|&z| {
                z != n
                    && !trial.leaving.contains(&z)
                    && !trial.delta.contains_key(&z)
                    && !extra.iter().any(|e| e.0 == z)
                    && self.ctx.model_allows(component, z)
            })
            .filter_map(|z| Some((z, self.room_made_on(trial, z, moved)?)))
            .take(CHAIN_SCAN);
        for (z, smaller) in candidates {
            // The room on `n` is `pod`'s: nothing of this link may take it.
            let mut local = extra.clone();
            local.push((n, pod, true));
            let mut links = Vec::new();
            let mut room = self.spare_in(trial, z);
            for &y in &smaller {
                let MovablePod {
                    pod: y_pod,
                    gpus: g,
                    ..
                } = self.movables[y].pods[0];
                let Some(to) = self.direct(trial, &local, y, y_pod, Some(z)) else {
                    continue;
                };
                local.push((to, y_pod, true));
                local.push((z, y_pod, false));
                links.push((y, to));
                room += g;
                if room >= gpus && self.admits(moved, z, &[&trial.staged, &local]) {
                    extra.extend(local.drain(extra.len() + 1..));
                    plan.extend(links);
                    return Some(z);
                }
            }
        }
        None
    }

    /// Node `n`'s single-pod Instances no larger than `pod` (smaller ones, or where the GPUs
    /// are there already, any that frees CPU or memory), when moving all of them would make
    /// room for it (its GPUs and every other resource it requests).
    fn room_made_on(&self, trial: &Trial, n: usize, pod: usize) -> Option<Vec<usize>> {
        let gpus = self.ctx.cluster.pods[pod].gpus;
        let room = self.spare_in(trial, n);
        if !self.allows(pod, n) || (room >= gpus && self.admits(pod, n, &[&trial.staged])) {
            return None;
        }
        let largest = if room >= gpus { gpus } else { gpus - 1 };
        let smaller: Vec<usize> = self.on_node[n]
            .iter()
            .copied()
            .filter(|&x| !self.moved[x] && !trial.taken.contains(&x))
            .filter(|&x| {
                let pods = &self.movables[x].pods;
                pods.len() == 1 && pods[0].gpus <= largest
            })
            .collect();
        let freed: i64 = smaller.iter().map(|&x| self.movables[x].gpus_on(n)).sum();
        let leaving: Vec<Staged> = smaller
            .iter()
            .map(|&x| (n, self.movables[x].pods[0].pod, false))
            .collect();
        (room + freed >= gpus && self.admits(pod, n, &[&trial.staged, &leaving])).then_some(smaller)
    }

    /// A move's (pod, target) pairs.
    fn placements(&self, m: usize, to: &[usize]) -> Vec<(usize, usize)> {
        self.movables[m]
            .pods
            .iter()
            .map(|p| p.pod)
            .zip(to.iter().copied())
            .collect()
    }

    /// Carries out a trial: its moves in order, each checked with every filter on the cluster
    /// as the earlier ones leave it, then the pending pods the freed room seats. None, with
    /// nothing changed, when a filter refuses a move (the refused placement is remembered).
    fn apply(&mut self, trial: Trial) -> Option<Vec<PlanStep>> {
        for (k, (m, to)) in trial.moves.iter().enumerate() {
            if let Err((pod, _)) = self.surges.try_move(&self.placements(*m, to)) {
                for (m, to) in trial.moves[..k].iter().rev() {
                    let from: Vec<usize> = self.movables[*m].pods.iter().map(|p| p.node).collect();
                    self.surges.undo(&self.placements(*m, to), &from);
                }
                let target = self.placements(*m, to).into_iter().find(|p| p.0 == pod);
                self.refused.insert(target.unwrap_or((pod, 0)));
                return None;
            }
        }
        let cluster = &self.ctx.cluster;
        let mut steps = Vec::new();
        let mut freed: BTreeSet<usize> = BTreeSet::new();
        for (m, to) in trial.moves {
            let pods = self.movables[m].pods.clone();
            for (p, &t) in pods.iter().zip(&to) {
                self.change(t, -p.gpus, 0, p.gpus);
            }
            // The old pods go once the new ones run.
            for p in &pods {
                let back = p
                    .gpus
                    .min(cluster.nodes[p.node].gpu_total - self.free[p.node]);
                self.change(p.node, back, 0, 0);
                freed.insert(p.node);
            }
            self.moved[m] = true;
            let instance = self.movables[m].instance;
            let inst = &cluster.instances[instance];
            let names = |nodes: &mut dyn Iterator<Item = usize>| {
                let mut names: Vec<String> =
                    nodes.map(|n| cluster.nodes[n].name.to_string()).collect();
                names.dedup();
                names
            };
            steps.push(PlanStep {
                workload: self.ctx.workload_key(instance).to_string(),
                component: cluster.components[inst.component].kind,
                instance: inst.index,
                gpus: pods.iter().map(|p| p.gpus).sum(),
                from: names(&mut pods.iter().map(|p| p.node)),
                to: names(&mut to.iter().copied()),
                frees: cluster.nodes[trial.node].name.to_string(),
                moved: instance,
                placements: pods.iter().map(|p| p.pod).zip(to).collect(),
            });
        }
        let freed: Vec<usize> = freed.into_iter().filter(|&n| self.host[n]).collect();
        self.place_unplaced(Some(&freed));
        self.actions += 1;
        Some(steps)
    }
}

/// The pools with a node of at least `gpus` GPUs that a class allows (`class_room`: its row).
fn pools_holding(class_room: &[i64], gpus: i64) -> impl Iterator<Item = usize> + '_ {
    (0..class_room.len()).filter(move |&p| class_room[p] >= gpus)
}

/// A pool's nodes of `rank` with at least `gpus` of unreserved room, least room first.
fn with_room(index: &RoomIndex, rank: u8, gpus: i64) -> impl Iterator<Item = usize> + '_ {
    index
        .range((rank, gpus, 0)..(rank + 1, 0, 0))
        .map(|&(_, _, n)| n)
}

/// Where room for `gpus` can be made among a pool's nodes of `rank`: those with the GPUs (short
/// of something else), least room first, then, with `short_of_gpus`, those with less room, most
/// first (they need the fewest moves).
fn room_to_make(
    index: &RoomIndex,
    rank: u8,
    gpus: i64,
    short_of_gpus: bool,
) -> impl Iterator<Item = usize> + '_ {
    let short = index
        .range((rank, 0, 0)..(rank, gpus, 0))
        .rev()
        .filter(move |_| short_of_gpus)
        .map(|&(_, _, n)| n);
    with_room(index, rank, gpus).chain(short)
}

/// Per pool and fit: the pool's room index less the nodes a scan found closed to the fit, as
/// they are now; a node is back once it changes (`index_room`). Made on first use. A scan
/// then skips what it found before instead of walking thousands of full nodes again.
#[derive(Default)]
struct OpenNodes(RefCell<HashMap<String, FxMap<usize, RoomIndex>>>);

impl OpenNodes {
    fn of(&self, pool: &str, fit: usize, index: &RoomIndex) -> Option<RefMut<'_, RoomIndex>> {
        RefMut::filter_map(self.0.borrow_mut(), |open| {
            if !open.contains_key(pool) {
                open.insert(pool.to_owned(), FxMap::default());
            }
            let by_fit = open.get_mut(pool)?;
            Some(by_fit.entry(fit).or_insert_with(|| index.clone()))
        })
        .ok()
    }

    fn update(&mut self, pool: &str, key: (u8, i64, usize), add: bool) {
        for set in self
            .0
            .get_mut()
            .get_mut(pool)
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            if add {
                set.insert(key);
            } else {
                set.remove(&key);
            }
        }
    }
}

/// A pool's target nodes by (rank, unreserved room, node).
type RoomIndex = BTreeSet<(u8, i64, usize)>;

/// Pending GPUs seated per (signature, pool, room), for one round.
type GainCache = FxMap<(usize, Option<usize>, i64), i64>;

/// A pod of a move being worked out: (node, pod, arriving there or leaving it).
type Staged = (usize, usize, bool);

/// What the filters that do not depend on other pods read of a pod: pods with the same key
/// pass them on the same nodes.
fn shape_key(ctx: &Context<'_>, pod: usize) -> String {
    let p = &ctx.cluster.pods[pod];
    let spec = &p.pod.spec;
    serde_json::to_string(&(
        p.namespace,
        &spec.node_selector,
        &spec.affinity,
        &spec.tolerations,
        &spec.volumes,
    ))
    .unwrap_or_default()
}

/// Moves (movable, target) that make room on a node for a larger pod.
type Chain = Vec<(usize, usize)>;

/// The moves of one action, worked out before any is made.
#[derive(Clone)]
struct Trial {
    /// The node whose room the action frees.
    node: usize,
    /// Room each node gains (or loses) by the moves so far.
    delta: FxMap<usize, i64>,
    /// Movables the action moves (a handful: a list is quicker than a set).
    taken: Vec<usize>,
    /// Nodes movables leave: no move lands there.
    leaving: Vec<usize>,
    /// (movable, the target of each of its pods, largest pod first), in the order to make them.
    moves: Vec<(usize, Vec<usize>)>,
    /// The pods these moves start and stop, for the filters' resource check.
    staged: Vec<Staged>,
}

/// A candidate action's bound in the search: GPUs seated per move at best.
#[derive(Clone, Copy)]
struct Bound {
    ratio: f64,
    gained: i64,
    node: usize,
    prefix: usize,
    /// The node's version when the bound was worked out.
    version: u32,
}

impl Bound {
    /// Higher ratio, more GPUs, shorter prefix, lower node index: first.
    fn key(&self) -> (f64, i64, std::cmp::Reverse<usize>, std::cmp::Reverse<usize>) {
        (
            self.ratio,
            self.gained,
            std::cmp::Reverse(self.prefix),
            std::cmp::Reverse(self.node),
        )
    }
}

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Bound {}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (a, b) = (self.key(), other.key());
        a.0.total_cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    }
}

/// A prefix of a node's eviction order: the room it leaves, the movables it takes, and their
/// pods' GPUs.
#[derive(Clone)]
struct Prefix {
    room: i64,
    moves: usize,
    pods: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use super::{OpenNodes, RoomIndex};

    #[test]
    fn a_node_closed_to_a_fit_is_open_again_once_it_changes() {
        let index: RoomIndex = [(0, 1, 7), (0, 2, 8), (1, 8, 9)].into_iter().collect();
        let mut open = OpenNodes::default();
        // Node 8 is closed to fit 0; fit 1 and a fit seen later still scan it.
        open.of("a100", 0, &index).unwrap().remove(&(0, 2, 8));
        assert!(open.of("a100", 1, &index).unwrap().contains(&(0, 2, 8)));
        // Node 8 takes a pod: its key changes in the index and in every open set.
        open.update("a100", (0, 2, 8), false);
        open.update("a100", (0, 1, 8), true);
        let keys = |open: &OpenNodes, fit| -> Vec<_> {
            open.of("a100", fit, &index)
                .unwrap()
                .iter()
                .copied()
                .collect()
        };
        assert_eq!(keys(&open, 0), [(0, 1, 7), (0, 1, 8), (1, 8, 9)]);
        assert_eq!(keys(&open, 1), [(0, 1, 7), (0, 1, 8), (1, 8, 9)]);
        // Another pool's sets are not touched.
        open.update("h100", (0, 1, 7), false);
        assert_eq!(keys(&open, 0).len(), 3);
    }
}
