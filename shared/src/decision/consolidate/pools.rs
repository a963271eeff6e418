//! Pool weighting: each pool's room kept for the largest pending pods it can hold.

use std::collections::BTreeMap;

use super::{Need, Planner};

impl Planner<'_, '_> {
    /// Keeps each pool's room for the pods it can seat, largest first: moves only move room
    /// around a pool, so its unreserved room in all is what every pod seated there shares,
    /// and sizes that divide each other fill it best. Each pod, those with the fewest pools
    /// first, is given the pool with the least room that holds it. A pod may then be seated
    /// in a pool keeping room for it, or in what a pool keeps for none: a smaller pod seated
    /// first, often in fewer moves, would take room a larger one needs.
    pub(super) fn weigh_pools(&mut self) {
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

    pub(super) fn seatable_in(&self, k: usize, p: usize) -> bool {
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
    pub(super) fn lift_lookahead(&mut self) -> bool {
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
}

/// The pools with a node of at least `gpus` GPUs that a class allows (`class_room`: its row).
pub(super) fn pools_holding(class_room: &[i64], gpus: i64) -> impl Iterator<Item = usize> + '_ {
    (0..class_room.len()).filter(move |&p| class_room[p] >= gpus)
}
