//! The room index: each pool's target nodes by (rank, unreserved room, node), kept current as
//! the plan changes nodes, and the open sets drawn from it per fit.

use std::cell::{RefCell, RefMut};
use std::collections::{BTreeSet, HashMap};

use rustc_hash::FxHashMap;

use super::Planner;

impl Planner<'_, '_> {
    pub(super) fn spare(&self, n: usize) -> i64 {
        self.free[n] - self.reserved[n]
    }

    /// Changes a node's free and reserved GPUs, keeping the room index and the node's cached
    /// candidates current.
    pub(super) fn change(&mut self, n: usize, free: i64, reserved: i64, fixed: i64) {
        self.index_room(n, false);
        self.free[n] += free;
        self.reserved[n] += reserved;
        self.fixed[n] += fixed;
        self.index_room(n, true);
        self.invalidate(n);
    }

    /// 0 for a node that cannot be emptied anyway (it holds GPUs that stay, or is promised to
    /// pending pods): room there is used first, keeping other nodes free to empty.
    pub(super) fn rank(&self, n: usize) -> u8 {
        u8::from(self.fixed[n] <= 0 && self.reserved[n] <= 0)
    }

    /// Node `n`'s place in its pool's room index (and in the open sets drawn from it).
    pub(super) fn room_key(&self, n: usize) -> (u8, i64, usize) {
        (self.rank(n), self.spare(n), n)
    }

    pub(super) fn invalidate(&mut self, n: usize) {
        if self.candidates[n].take().is_some() {
            self.dirty.push(n);
        }
        self.version[n] = self.version[n].wrapping_add(1);
    }

    /// Adds or removes a target node in its pool's room index.
    pub(super) fn index_room(&mut self, n: usize, add: bool) {
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
}

/// A pool's nodes of `rank` with at least `gpus` of unreserved room, least room first.
pub(super) fn with_room(
    index: &RoomIndex,
    rank: u8,
    gpus: i64,
) -> impl Iterator<Item = usize> + '_ {
    index
        .range((rank, gpus, 0)..(rank + 1, 0, 0))
        .map(|&(_, _, n)| n)
}

/// Where room for `gpus` can be made among a pool's nodes of `rank`: those with the GPUs (short
/// of something else), least room first, then, with `short_of_gpus`, those with less room, most
/// first (they need the fewest moves).
pub(super) fn room_to_make(
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
pub(super) struct OpenNodes(pub(super) RefCell<HashMap<String, FxHashMap<usize, RoomIndex>>>);

impl OpenNodes {
    pub(super) fn of(
        &self,
        pool: &str,
        fit: usize,
        index: &RoomIndex,
    ) -> Option<RefMut<'_, RoomIndex>> {
        RefMut::filter_map(self.0.borrow_mut(), |open| {
            if !open.contains_key(pool) {
                open.insert(pool.to_owned(), FxHashMap::default());
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
pub(super) type RoomIndex = BTreeSet<(u8, i64, usize)>;

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
