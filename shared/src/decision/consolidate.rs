//! Fewest-move consolidation plans (`recommend --plan`): the sequence of Instance moves that
//! makes the most waiting GPU demand placeable per move. Beyond the reference (which makes one
//! move a pass, each worth its own fragmentation drop), so it only plans and explains.
//!
//! The pending pods are placed first, largest first, each on the fullest node it fits (best
//! fit); what they take is reserved. An action frees room on one node by moving the fewest of
//! its movable Instances (largest first) onto other nodes' unreserved room (best fit), so no
//! pending pod already placeable loses its place and every step is a surge with room for the
//! new pods while the old ones run. Each round takes the action that makes the most pending
//! GPUs placeable per move; the plan stops when no action makes anything more placeable.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::context::Context;
use crate::api::component::ComponentKind;
use crate::simulate::filters::node_affinity_matches;

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
    gpus: i64,
    /// Index into `Planner::classes`.
    class: usize,
}

/// One movable Instance: its GPU pods' (node, GPUs).
struct Movable {
    instance: usize,
    pods: Vec<(usize, i64)>,
    pool: String,
}

struct Planner<'a, 'c, 's> {
    ctx: &'a Context<'c, 's>,
    /// Per node: free GPUs, and GPUs reserved for pending pods placed there.
    free: Vec<i64>,
    reserved: Vec<i64>,
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
    movables: Vec<Movable>,
    /// Per node: the movables with a pod there.
    on_node: Vec<Vec<usize>>,
    moved: Vec<bool>,
    /// Per pool: (unreserved room, node) of the target nodes, for best fit.
    room: HashMap<String, BTreeSet<(i64, usize)>>,
}

/// The plan, within `max_moves` if given. `movable[i]`: Instance i passes defragmentation
/// eligibility (as the decision pass computes it).
pub fn plan(
    ctx: &Context<'_, '_>,
    movable: &[bool],
    max_moves: Option<usize>,
) -> ConsolidationPlan {
    let mut p = Planner::new(ctx, movable);
    let total: i64 = p.needs.iter().map(|n| n.gpus).sum();
    p.place_unplaced(None);
    let mut curve = vec![p.point(0)];
    let mut steps = Vec::new();
    let budget = max_moves.unwrap_or(usize::MAX);
    while let Some((node, chosen)) = p.best_action(budget - steps.len()) {
        steps.extend(p.apply(node, &chosen));
        curve.push(p.point(steps.len()));
    }
    ConsolidationPlan {
        pending_gpus_total: total,
        steps,
        curve,
    }
}

/// Pending demand placeable on nodes with these free GPUs (largest first, best fit), and the
/// whole free nodes: for comparing now, after a plan and after an ideal repack.
pub fn placeable(ctx: &Context<'_, '_>, free: &[i64]) -> Placeable {
    let mut p = Planner::new(ctx, &vec![false; ctx.cluster.instances.len()]);
    p.free = free.to_vec();
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

impl<'a, 'c, 's> Planner<'a, 'c, 's> {
    fn new(ctx: &'a Context<'c, 's>, movable: &[bool]) -> Self {
        let cluster = ctx.cluster;
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
        // Pending pods grouped by their node constraints.
        let mut class_of: HashMap<String, usize> = HashMap::new();
        let mut classes: Vec<Vec<bool>> = Vec::new();
        let mut needs: Vec<Need> = Vec::new();
        for pending in &cluster.pending {
            let spec = &cluster.pods[pending.pod].pod.spec;
            let key =
                serde_json::to_string(&(&spec.node_selector, &spec.affinity)).unwrap_or_default();
            let class = *class_of.entry(key).or_insert_with(|| {
                classes.push(
                    cluster
                        .nodes
                        .iter()
                        .zip(&host)
                        .map(|(n, &h)| h && node_affinity_matches(spec, n))
                        .collect(),
                );
                classes.len() - 1
            });
            needs.push(Need {
                gpus: pending.gpus,
                class,
            });
        }
        needs.sort_by_key(|n| std::cmp::Reverse(n.gpus));
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
        let mut movables = Vec::new();
        let mut on_node = vec![Vec::new(); cluster.nodes.len()];
        for (i, inst) in cluster.instances.iter().enumerate() {
            let Some(pool) = inst.pool.clone().filter(|_| movable[i] && inst.gpus > 0) else {
                continue;
            };
            let pods: Vec<(usize, i64)> = inst
                .pods
                .iter()
                .map(|&p| &cluster.pods[p])
                .filter(|p| !p.terminal && p.gpus > 0)
                .filter_map(|p| Some((p.host?, p.gpus)))
                .collect();
            // Only Instances wholly on target nodes: node health moves the others.
            if pods.is_empty() || pods.iter().any(|&(n, _)| !target[n]) {
                continue;
            }
            let m = movables.len();
            for &(n, _) in &pods {
                if !on_node[n].contains(&m) {
                    on_node[n].push(m);
                }
            }
            movables.push(Movable {
                instance: i,
                pods,
                pool,
            });
        }
        let mut planner = Planner {
            ctx,
            free: cluster.nodes.iter().map(|n| n.gpu_free).collect(),
            reserved: vec![0; cluster.nodes.len()],
            host,
            target,
            placed: vec![false; needs.len()],
            needs,
            classes,
            signature,
            signatures,
            moved: vec![false; movables.len()],
            movables,
            on_node,
            room: HashMap::new(),
        };
        for n in 0..cluster.nodes.len() {
            planner.index_room(n, true);
        }
        planner
    }

    fn spare(&self, n: usize) -> i64 {
        self.free[n] - self.reserved[n]
    }

    /// Adds or removes a target node in its pool's room index.
    fn index_room(&mut self, n: usize, add: bool) {
        let node = &self.ctx.cluster.nodes[n];
        let Some(pool) = node.pool.as_ref().filter(|_| self.target[n]) else {
            return;
        };
        let key = (self.spare(n), n);
        let set = self.room.entry(pool.clone()).or_default();
        if add {
            set.insert(key);
        } else {
            set.remove(&key);
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
            let (gpus, class) = (self.needs[k].gpus, self.needs[k].class);
            let allowed = &self.classes[class];
            let best = nodes
                .iter()
                .copied()
                .filter(|&n| allowed[n] && self.spare(n) >= gpus)
                .min_by_key(|&n| (self.spare(n), n));
            if let Some(n) = best {
                self.index_room(n, false);
                self.reserved[n] += gpus;
                self.index_room(n, true);
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
    fn benefit(&self, sig: usize, mut room: i64) -> i64 {
        let allowed = &self.signatures[sig];
        let mut gained = 0;
        for (k, need) in self.needs.iter().enumerate() {
            if !self.placed[k] && need.gpus <= room && allowed.contains(&need.class) {
                room -= need.gpus;
                gained += need.gpus;
            }
        }
        gained
    }

    /// The action with the most pending GPUs made placeable per move, within `budget` moves:
    /// a node and the movables to take off it (largest first).
    fn best_action(&self, budget: usize) -> Option<(usize, Vec<usize>)> {
        if budget == 0 || self.placed.iter().all(|&p| p) {
            return None;
        }
        let nodes = &self.ctx.cluster.nodes;
        let mut cache: HashMap<(usize, i64), i64> = HashMap::new();
        // (GPUs per move, GPUs, fewer moves, node name) decides; the first best wins.
        let mut best: Option<(f64, i64, usize, usize, Vec<usize>)> = None;
        let mut candidates: Vec<usize> = Vec::new();
        for n in 0..nodes.len() {
            if !self.host[n] || self.signatures[self.signature[n]].is_empty() {
                continue;
            }
            candidates.clear();
            candidates.extend(self.on_node[n].iter().copied().filter(|&m| !self.moved[m]));
            if candidates.is_empty() {
                continue;
            }
            let gpus_here = |m: &usize| -> i64 {
                self.movables[*m]
                    .pods
                    .iter()
                    .filter(|p| p.0 == n)
                    .map(|p| p.1)
                    .sum()
            };
            candidates.sort_by_key(|m| (std::cmp::Reverse(gpus_here(m)), *m));
            let mut room = self.spare(n);
            for (k, m) in candidates.iter().enumerate().take(budget) {
                room += gpus_here(m);
                let gained = *cache
                    .entry((self.signature[n], room))
                    .or_insert_with(|| self.benefit(self.signature[n], room));
                if gained <= 0 {
                    continue;
                }
                let moves = k + 1;
                let ratio = gained as f64 / moves as f64;
                let better = best.as_ref().is_none_or(|b| {
                    (ratio, gained, std::cmp::Reverse(moves)) > (b.0, b.1, std::cmp::Reverse(b.2))
                });
                if better && self.targets(&candidates[..moves]).is_some() {
                    best = Some((ratio, gained, moves, n, candidates[..moves].to_vec()));
                }
            }
        }
        best.map(|b| (b.3, b.4))
    }

    /// Targets for the movables' pods, best fit on unreserved room in their pool, away from
    /// every node they leave; None when one finds no room.
    fn targets(&self, chosen: &[usize]) -> Option<Vec<Vec<usize>>> {
        let mut taken: HashMap<usize, i64> = HashMap::new();
        let leaving: BTreeSet<usize> = chosen
            .iter()
            .flat_map(|&m| self.movables[m].pods.iter().map(|p| p.0))
            .collect();
        let mut out = Vec::new();
        for &m in chosen {
            let movable = &self.movables[m];
            let component = self.ctx.cluster.instances[movable.instance].component;
            let room = self.room.get(&movable.pool)?;
            let mut targets = Vec::new();
            // Largest pod first.
            let mut pods = movable.pods.clone();
            pods.sort_by_key(|p| std::cmp::Reverse(p.1));
            for (_, gpus) in pods {
                let to = room.range((gpus, 0)..).map(|&(_, n)| n).find(|&n| {
                    !leaving.contains(&n)
                        && self.spare(n) - taken.get(&n).copied().unwrap_or(0) >= gpus
                        && self.ctx.model_allows(component, n)
                })?;
                *taken.entry(to).or_default() += gpus;
                targets.push(to);
            }
            out.push(targets);
        }
        Some(out)
    }

    /// Carries out an action: the moves in order, then the pending pods the freed room seats.
    fn apply(&mut self, node: usize, chosen: &[usize]) -> Vec<PlanStep> {
        let targets = self
            .targets(chosen)
            .expect("an action is chosen only with its targets");
        let cluster = self.ctx.cluster;
        let mut steps = Vec::new();
        let mut freed: BTreeSet<usize> = BTreeSet::new();
        for (&m, to) in chosen.iter().zip(targets) {
            let mut pods = self.movables[m].pods.clone();
            pods.sort_by_key(|p| std::cmp::Reverse(p.1));
            for (&(_, gpus), &t) in pods.iter().zip(&to) {
                self.index_room(t, false);
                self.free[t] -= gpus;
                self.index_room(t, true);
            }
            // The old pods go once the new ones run.
            for &(from, gpus) in &pods {
                self.index_room(from, false);
                self.free[from] = (self.free[from] + gpus).min(cluster.nodes[from].gpu_total);
                self.index_room(from, true);
                freed.insert(from);
            }
            self.moved[m] = true;
            let inst = &cluster.instances[self.movables[m].instance];
            let names = |nodes: &mut dyn Iterator<Item = usize>| {
                let mut names: Vec<String> =
                    nodes.map(|n| cluster.nodes[n].name.to_string()).collect();
                names.dedup();
                names
            };
            steps.push(PlanStep {
                workload: self.ctx.workload_key(self.movables[m].instance).to_string(),
                component: cluster.components[inst.component].kind,
                instance: inst.index,
                gpus: pods.iter().map(|p| p.1).sum(),
                from: names(&mut pods.iter().map(|p| p.0)),
                to: names(&mut to.iter().copied()),
                frees: cluster.nodes[node].name.to_string(),
            });
        }
        let freed: Vec<usize> = freed.into_iter().filter(|&n| self.host[n]).collect();
        self.place_unplaced(Some(&freed));
        steps
    }
}
