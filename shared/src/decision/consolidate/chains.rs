//! Chains: room for a pod made on a node by first moving that node's smaller Instances out.

use std::cell::RefCell;

use super::rooms::room_to_make;
use super::trial::{Staged, Trial};
use super::{MovablePod, Planner};

/// Nodes a chained move looks at for room to make, most room first: a bound on the work a
/// move that finds no room costs on a large cluster.
pub(super) const CHAIN_SCAN: usize = 64;

/// Nodes a chained move looks at, in the same order, for one where a single move may make the
/// room (a look at GPUs alone, cheap beside `room_made_on`).
const ONE_MOVE_SCAN: usize = 512;

/// Moves (movable, target) that make room on a node for a larger pod.
pub(super) type Chain = Vec<(usize, usize)>;

impl Planner<'_, '_> {
    /// Room for `gpus` of movable `m` made on another node of its pool by moving some of that
    /// node's smaller Instances (largest first) onto room that exists: the node needing the
    /// fewest such moves. The moves are added to the trial before the one they make room for.
    /// With `gpus_there`, only nodes that have the GPUs and are short of something else.
    pub(super) fn chained(
        &self,
        trial: &mut Trial,
        m: usize,
        pod: usize,
        gpus_there: bool,
    ) -> Option<usize> {
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
            let mut order = room_to_make(&open, rank, gpus, !gpus_there)
                .filter(|&n| !trial.delta.contains_key(&n) && may_take(n));
            // Nodes where one move may make the room go first: by room alone, the first
            // CHAIN_SCAN are often nodes of single GPUs that need two.
            let (one_move, more): (Vec<usize>, Vec<usize>) = order
                .by_ref()
                .take(ONE_MOVE_SCAN)
                .partition(|&n| self.one_move_may_do(trial, n, gpus));
            one_move
                .into_iter()
                .chain(more)
                .chain(order)
                .filter_map(|n| {
                    let smaller = self.room_made_on(trial, n, pod);
                    if smaller.is_none() {
                        closed.borrow_mut().push(n);
                    }
                    Some((n, smaller?))
                })
                .take(CHAIN_SCAN)
        });
        // The nodes this trial changed, in node order: the first of equals wins, so the order
        // must not be the hash map's.
        let mut touched: Vec<usize> = trial.delta.keys().copied().collect();
        touched.sort_unstable();
        let changed: Vec<(usize, Vec<usize>)> = touched
            .into_iter()
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

    /// Whether one move may make room for `gpus` on node `n`, by GPUs alone: it has them (and
    /// is short of something else), or its largest smaller single-pod Instance frees enough.
    fn one_move_may_do(&self, trial: &Trial, n: usize, gpus: i64) -> bool {
        let room = self.spare_in(trial, n);
        let largest = self.on_node[n]
            .iter()
            .filter(|&&x| !self.moved[x] && !trial.taken.contains(&x))
            .map(|&x| &self.movables[x].pods)
            .filter(|pods| pods.len() == 1 && pods[0].gpus < gpus)
            .map(|pods| pods[0].gpus)
            .max();
        room >= gpus || room + largest.unwrap_or(0) >= gpus
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
}
