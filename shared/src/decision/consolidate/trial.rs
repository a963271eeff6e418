//! Working out one action: its moves onto room that exists, each checked with the filters.

use rustc_hash::FxHashMap;

use super::rooms::with_room;
use super::{MovablePod, Planner};

impl Planner<'_, '_> {
    /// The moves that take `chosen` off `node`: each pod onto unreserved room in its pool
    /// (best fit), or where none is, onto a node whose room one or more moves of smaller
    /// Instances make first. None when some pod finds no room.
    ///
    /// When that fails although the pool has the GPUs, it is tried once more swapping first:
    /// each pod goes where GPUs are free but CPU or memory is short, once what holds those has
    /// moved onto room elsewhere. Best fit may have given that room to pods that fit anywhere.
    pub(super) fn trial(&self, node: usize, chosen: &[usize]) -> Option<Trial> {
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
            delta: FxHashMap::default(),
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
                    Some(to) if self.wanted_whole(to) => self.kept_whole(&mut trial, m, pod, to),
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

    /// Whether node `n` could be emptied for a waiting pod that needs all of it, and every
    /// such node is wanted: a move landing there spoils it for good (a moved Instance does
    /// not move again).
    fn wanted_whole(&self, n: usize) -> bool {
        self.rank(n) == 1
            && self
                .scarce
                .contains(&(self.signature[n], self.ctx.cluster.nodes[n].gpu_total))
    }

    /// Where `pod` of movable `m` goes instead of `spoiled`, a node a waiting pod wants
    /// whole: room made by moving smaller Instances off a node that cannot be emptied anyway,
    /// when there is such room to make; `spoiled` otherwise.
    fn kept_whole(&self, trial: &mut Trial, m: usize, pod: usize, spoiled: usize) -> usize {
        let mut chained = trial.clone();
        match self.chained(&mut chained, m, pod, false) {
            Some(n) if self.rank(n) == 0 => {
                *trial = chained;
                n
            }
            _ => spoiled,
        }
    }

    /// Would the scheduler's filters let `pod` start on node `n`, with the `staged` moves
    /// being worked out on top of the plan so far? Those that depend on other pods' places
    /// (spread, pod affinity) are checked when the action is made (`apply`).
    pub(super) fn admits(&self, pod: usize, n: usize, staged: &[&[Staged]]) -> bool {
        !self.refused.contains(&(pod, n)) && self.fits(pod, n, staged)
    }

    /// The part of `admits` that holds alike for every pod of a fit.
    pub(super) fn fits(&self, pod: usize, n: usize, staged: &[&[Staged]]) -> bool {
        self.allows(pod, n) && self.surges.has_room(pod, n, staged)
    }

    /// The filters that do not depend on other pods, worked out once per shape and node.
    pub(super) fn allows(&self, pod: usize, n: usize) -> bool {
        let shape = self.shape_of[&pod];
        let known = self.allowed.borrow()[shape][n];
        if known != 0 {
            return known == 1;
        }
        let allows = self.surges.allows(pod, n);
        self.allowed.borrow_mut()[shape][n] = if allows { 1 } else { 2 };
        allows
    }

    pub(super) fn spare_in(&self, trial: &Trial, n: usize) -> i64 {
        self.spare(n) + trial.delta.get(&n).copied().unwrap_or(0)
    }

    /// The target with the least room that fits `pod` of movable `m` (best fit) and that the
    /// scheduler's filters allow, away from the nodes the action leaves and from `avoid`, with
    /// `extra` moves on top of the trial's (moves being worked out).
    pub(super) fn direct(
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
                && (avoid.is_none() || !self.wanted_whole(n))
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
}

/// A pod of a move being worked out: (node, pod, arriving there or leaving it).
pub(super) type Staged = (usize, usize, bool);

/// The moves of one action, worked out before any is made.
#[derive(Clone)]
pub(super) struct Trial {
    /// The node whose room the action frees.
    pub(super) node: usize,
    /// Room each node gains (or loses) by the moves so far.
    pub(super) delta: FxHashMap<usize, i64>,
    /// Movables the action moves (a handful: a list is quicker than a set).
    pub(super) taken: Vec<usize>,
    /// Nodes movables leave: no move lands there.
    pub(super) leaving: Vec<usize>,
    /// (movable, the target of each of its pods, largest pod first), in the order to make them.
    pub(super) moves: Vec<(usize, Vec<usize>)>,
    /// The pods these moves start and stop, for the filters' resource check.
    pub(super) staged: Vec<Staged>,
}
