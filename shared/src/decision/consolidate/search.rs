//! The search for the next action: every prefix of each node's eviction order is a candidate,
//! bounded by the GPUs it seats per move, tried best bound first.

use rustc_hash::{FxHashMap, FxHashSet};

use super::Planner;
use super::trial::Trial;

/// Nodes that waiting pods see alike: (signature, node size in GPUs).
pub(super) type Group = (usize, i64);

impl Planner<'_, '_> {
    /// Pending GPUs an unplaced-pods-only best fit would seat in `room` on a node of
    /// signature `sig` (the room's other nodes cannot seat them: they were tried).
    pub(super) fn benefit(&self, sig: usize, pool: Option<usize>, mut room: i64) -> i64 {
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

    /// The groups whose every node is wanted whole by a waiting pod. Pods waiting for a
    /// whole node are matched to the nodes that could still be emptied for them (nothing on
    /// them stays, and no Instance on them is as large as the node), the pods with the fewest
    /// groups first, each to its group with the most nodes left; a group is scarce when that
    /// uses it up, or when one of its pods finds no node left. Nodes are looked at again only
    /// when they changed (`version`).
    fn scarce_whole_nodes(&mut self) -> FxHashSet<Group> {
        for n in (0..self.free.len()).filter(|&n| self.host[n]) {
            let version = Some(self.version[n]);
            if self.emptiable[n].0 == version {
                continue;
            }
            let total = self.ctx.cluster.nodes[n].gpu_total;
            let on = self.on_node[n].iter().filter(|&&m| !self.moved[m]);
            let largest = on.map(|&m| self.movables[m].gpus_on(n)).max();
            let now = self.rank(n) == 1 && largest.unwrap_or(0) < total;
            let count = self
                .emptiable_count
                .entry((self.signature[n], total))
                .or_default();
            match (self.emptiable[n].1, now) {
                (false, true) => *count += 1,
                (true, false) => *count -= 1,
                _ => {}
            }
            self.emptiable[n] = (version, now);
        }
        let mut left = self.emptiable_count.clone();
        left.retain(|_, count| *count > 0);
        let mut waiting: FxHashMap<(usize, i64), usize> = FxHashMap::default();
        for k in (0..self.needs.len()).filter(|&k| !self.placed[k]) {
            *waiting
                .entry((self.needs[k].class, self.needs[k].gpus))
                .or_default() += 1;
        }
        let groups_of = |&(class, gpus): &(usize, i64)| -> Vec<Group> {
            let mut groups: Vec<Group> = left
                .keys()
                .copied()
                .filter(|&(sig, total)| total == gpus && self.signatures[sig].contains(&class))
                .collect();
            groups.sort_unstable();
            groups
        };
        let mut demand: Vec<((usize, i64), usize, Vec<Group>)> = waiting
            .into_iter()
            .map(|(need, count)| (need, count, groups_of(&need)))
            .filter(|(_, _, groups)| !groups.is_empty())
            .collect();
        demand.sort_unstable_by_key(|(need, _, groups)| (groups.len(), *need));
        let mut scarce = FxHashSet::default();
        for (_, count, groups) in demand {
            let mut wanting = count;
            while wanting > 0 {
                let group = groups
                    .iter()
                    .copied()
                    .max_by_key(|g| (left[g], std::cmp::Reverse(*g)))
                    .expect("a pod in the demand has a group");
                if left[&group] == 0 {
                    scarce.extend(groups.iter().copied());
                    break;
                }
                let taken = wanting.min(left[&group]);
                *left.get_mut(&group).expect("a group") -= taken;
                wanting -= taken;
                if left[&group] == 0 {
                    scarce.insert(group);
                }
            }
        }
        scarce
    }

    /// The action with the most pending GPUs made placeable per move, within `budget` moves.
    /// Every prefix (largest first) of each node's movables is a candidate, bounded by the
    /// GPUs it seats per Instance taken off; candidates are tried in bound order, each with
    /// the moves that make room for it, until no bound can beat the best found.
    pub(super) fn best_action(&mut self, budget: usize) -> Option<Trial> {
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
        self.scarce = self.scarce_whole_nodes();
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
                        young: prefix.young,
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

    /// Makes the parked candidates candidates again when actions were made since they were
    /// parked (the room they lacked may exist now); false when there are none such.
    pub(super) fn retry_parked(&mut self) -> bool {
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
        let (mut room, mut young) = (self.spare(n), 0);
        let mut pods: Vec<i64> = Vec::new();
        self.eviction_order(n)
            .into_iter()
            .enumerate()
            .map(|(k, m)| {
                let movable = &self.movables[m];
                room += movable.gpus_on(n);
                if movable.young {
                    young += movable.gpus_on(n);
                }
                pods.extend(movable.pods.iter().map(|p| p.gpus));
                Prefix {
                    room,
                    moves: k + 1,
                    pods: pods.clone(),
                    young,
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
    pub(super) fn eviction_order(&self, n: usize) -> Vec<usize> {
        self.on_node[n]
            .iter()
            .copied()
            .filter(|&m| !self.moved[m])
            .collect()
    }

    /// The best action that empties `node` (most pending GPUs seated per move), within
    /// `budget` moves: the plan carrying on where it left off.
    pub(super) fn anchored_action(&mut self, node: usize, budget: usize) -> Option<Trial> {
        let order = self.eviction_order(node);
        let mut best: Option<(f64, Trial)> = None;
        let mut room = self.spare(node) + super::holds::departing_by_node(self.ctx)[node];
        for k in 0..order.len() {
            room += self.movables[order[k]].gpus_on(node);
            let gained = self.benefit(self.signature[node], self.node_pool[node], room);
            if gained <= 0 {
                continue;
            }
            let Some(trial) = self.trial(node, &order[..=k]) else {
                continue;
            };
            if trial.moves.len() > budget {
                continue;
            }
            let ratio = gained as f64 / trial.moves.len() as f64;
            if best.as_ref().is_none_or(|b| ratio > b.0) {
                best = Some((ratio, trial));
            }
        }
        best.map(|b| b.1)
    }
}

/// Pending GPUs seated per (signature, pool, room), for one round.
pub(super) type GainCache = FxHashMap<(usize, Option<usize>, i64), i64>;

/// A candidate action's bound in the search: GPUs seated per move at best.
#[derive(Clone, Copy)]
pub(super) struct Bound {
    pub(super) ratio: f64,
    pub(super) gained: i64,
    /// GPUs of its moves that are young (`Movable::young`): between equals, the action that
    /// departures are likeliest to finish first.
    pub(super) young: i64,
    pub(super) node: usize,
    pub(super) prefix: usize,
    /// The node's version when the bound was worked out.
    pub(super) version: u32,
}

impl Bound {
    /// Higher ratio, more GPUs, more young GPUs, shorter prefix, lower node index: first.
    fn key(
        &self,
    ) -> (
        f64,
        i64,
        i64,
        std::cmp::Reverse<usize>,
        std::cmp::Reverse<usize>,
    ) {
        (
            self.ratio,
            self.gained,
            self.young,
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
            .then(a.4.cmp(&b.4))
    }
}

/// A prefix of a node's eviction order: the room it leaves, the movables it takes, and their
/// pods' GPUs.
#[derive(Clone)]
pub(super) struct Prefix {
    pub(super) room: i64,
    pub(super) moves: usize,
    pub(super) pods: Vec<i64>,
    pub(super) young: i64,
}
