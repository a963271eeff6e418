//! Fewest-move consolidation plans (`recommend --plan`): the sequence of Instance moves that
//! makes the most waiting GPU demand placeable per move. Beyond the reference (which makes one
//! move a pass, each worth its own fragmentation drop), so it only plans and explains.
//!
//! The pending pods are placed first, largest first, each on the fullest node it fits (best
//! fit); what they take is reserved. An action frees room on one node by moving the fewest of
//! its movable Instances (largest first, then the oldest) onto other nodes' unreserved room,
//! so no pending pod already placeable loses its place and every step is a surge with room
//! for the new pods while the old ones run; no move is undone (`setup::movables`); a pod
//! larger than any room first moves a smaller Instance out of the node with the most room, to
//! make it. Each round takes the action that makes the most
//! pending GPUs placeable per move; the plan stops when no action makes anything more
//! placeable.
//!
//! Every placement, of a moved pod or a pending one, is one kube-scheduler's filters allow on
//! the cluster as the earlier moves leave it (`simulate::Surges`): GPU room picks the target,
//! the filters may refuse it, and then the next is taken.
//!
//! Four rules keep the greedy from spoiling what later rounds need: moves land on nodes
//! that cannot be emptied anyway (they hold GPUs that stay, or are promised to pending pods)
//! before nodes that could be (best fit within each); while pods that need a whole node
//! wait, a node that could be emptied for them is only ever emptied whole; while they are at
//! least as many as the nodes that could still be emptied for them (so each is wanted), a
//! move lands on such a node only where no move of smaller Instances off a node that stays
//! busy makes the room, costly as that move is now (`search::scarce_whole_nodes`); and a
//! pool's free GPUs, which moves only move around it, are kept for the largest pending pods
//! they can hold, so a smaller pod seated in fewer moves does not take the room a larger one
//! needs (until no action seats those).
//!
//! `setup` builds the starting state, `rooms` keeps the room index, `search` finds the next
//! action by its bound (and, for a held node, the action that carries on emptying it), `trial`
//! works out an action's moves, `chains` makes room by moving smaller Instances first, `pools`
//! weighs the pools' room, and `holds` keeps the plan across passes on the cluster's nodes.

mod chains;
pub mod holds;
mod pools;
mod rooms;
mod search;
mod setup;
mod trial;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

// Its keys are small integers of its own: a fast hash, with no defence against chosen keys.
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::api::component::ComponentKind;
use crate::model::context::Context;
use crate::simulate::Surges;
use rooms::{OpenNodes, RoomIndex};
use search::{Bound, Prefix};
use trial::Trial;

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
    /// The pending pods the action this step is part of seats, and where: (pod, node).
    #[serde(skip)]
    pub seats: Vec<(usize, usize)>,
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
    /// With holds on, its workload is younger than `holdMinutes`: it may well leave on its
    /// own while a hold stands (`Cluster::instance_created`).
    young: bool,
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

struct Planner<'a, 's> {
    ctx: &'a Context<'s>,
    /// The cluster as the plan's moves leave it, for the scheduler's filters: every move's
    /// new pods must pass them where the plan puts them.
    surges: Surges<'a, 's>,
    /// Per pod with a place in the plan: its shape, the index of what the filters that do not
    /// depend on other pods read of it.
    shape_of: FxHashMap<usize, usize>,
    /// Per pod with a place in the plan: the index of its shape and requests (pods with the
    /// same fit the same nodes).
    fit_of: FxHashMap<usize, usize>,
    /// The nodes a direct move scans for a fit: not those where it does not fit.
    open_to_fit: OpenNodes,
    /// The nodes a chain scans for a fit: not those where no room can be made for it by
    /// moving smaller Instances out.
    open_to_make_room: OpenNodes,
    /// Per shape and node: 0 not worked out yet, 1 allowed, 2 refused (they do not change).
    allowed: RefCell<Vec<Vec<u8>>>,
    /// (pod, node) placements found to fail a filter that depends on other pods.
    refused: FxHashSet<(usize, usize)>,
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
    /// Per node: the version it was last looked at, and whether it could then be emptied for
    /// a pod needing all of it; per (signature, node size): how many such nodes there are.
    emptiable: Vec<(Option<u32>, bool)>,
    emptiable_count: FxHashMap<search::Group, usize>,
    /// The groups whose every node a waiting pod needs whole (`scarce_whole_nodes`).
    scarce: FxHashSet<search::Group>,
    /// Every pending pod seated so far and where: (pod, node), in order.
    seated: Vec<(usize, usize)>,
}

/// The plan, within `max_moves` if given. `movable[i]`: Instance i passes defragmentation
/// eligibility (as the decision pass computes it).
pub fn plan(ctx: &Context<'_>, movable: &[bool], max_moves: Option<usize>) -> ConsolidationPlan {
    plan_from(ctx, movable, max_moves, &[])
}

/// The plan carrying on with the `anchors` (held nodes, nearest to empty first): its first actions
/// empty those nodes, each while that still seats a waiting pod (`holds`).
pub fn plan_from(
    ctx: &Context<'_>,
    movable: &[bool],
    max_moves: Option<usize>,
    anchors: &[usize],
) -> ConsolidationPlan {
    let mut p = Planner::new(ctx, movable);
    let total: i64 = p.needs.iter().map(|n| n.gpus).sum();
    p.place_unplaced(None);
    let mut curve = vec![p.point(0)];
    let mut steps = Vec::new();
    let budget = max_moves.unwrap_or(usize::MAX);
    for &node in anchors {
        let carried = p.anchored_action(node, budget - steps.len());
        if let Some(made) = carried.and_then(|trial| p.apply(trial)) {
            steps.extend(made);
            curve.push(p.point(steps.len()));
        }
    }
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

impl Planner<'_, '_> {
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
                self.seated.push((pod, n));
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
    pub(super) fn apply(&mut self, trial: Trial) -> Option<Vec<PlanStep>> {
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
                seats: Vec::new(),
            });
        }
        let freed: Vec<usize> = freed.into_iter().filter(|&n| self.host[n]).collect();
        let before = self.seated.len();
        self.place_unplaced(Some(&freed));
        for step in &mut steps {
            step.seats = self.seated[before..].to_vec();
        }
        self.actions += 1;
        Some(steps)
    }
}

/// The pod's shape (`simulate::shape_key`): pods with the same one pass the fixed filters on
/// the same nodes.
fn shape_key(ctx: &Context<'_>, pod: usize) -> String {
    let p = &ctx.cluster.pods[pod];
    crate::simulate::shape_key(p.namespace, &p.pod.spec)
}
