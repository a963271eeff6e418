//! Free GPUs per node in a max segment tree: the next node at or after a position with room
//! for a pod's GPUs in O(log n), so a search skips the nodes NodeResourcesFit would refuse.

pub(super) struct GpuRoom {
    nodes: usize,
    /// Leaves from `leaves` on; each inner node the largest below it.
    tree: Vec<i64>,
    leaves: usize,
}

impl GpuRoom {
    pub fn new(free: impl ExactSizeIterator<Item = i64>) -> GpuRoom {
        let nodes = free.len();
        let leaves = nodes.next_power_of_two().max(1);
        let mut tree = vec![i64::MIN; 2 * leaves];
        for (n, f) in free.enumerate() {
            tree[leaves + n] = f;
        }
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        GpuRoom {
            nodes,
            tree,
            leaves,
        }
    }

    pub fn set(&mut self, n: usize, free: i64) {
        let mut i = self.leaves + n;
        self.tree[i] = free;
        while i > 1 {
            i /= 2;
            self.tree[i] = self.tree[2 * i].max(self.tree[2 * i + 1]);
        }
    }

    /// The first node at or after `from` with at least `need` free GPUs.
    pub fn next(&self, from: usize, need: i64) -> Option<usize> {
        if from >= self.nodes {
            return None;
        }
        let mut i = self.leaves + from;
        while self.tree[i] < need {
            // On to the subtree right of this one: up past every right child, then across.
            while i % 2 == 1 {
                i /= 2;
                if i == 0 {
                    return None;
                }
            }
            i += 1;
        }
        while i < self.leaves {
            i = if self.tree[2 * i] >= need {
                2 * i
            } else {
                2 * i + 1
            };
        }
        Some(i - self.leaves)
    }
}

#[cfg(test)]
mod tests {
    use super::GpuRoom;

    #[test]
    fn next_finds_the_first_node_with_room_at_or_after_a_position() {
        let free = [0, 3, 1, 8, 0, 2, 0];
        let mut room = GpuRoom::new(free.into_iter());
        for need in 0..=9 {
            for from in 0..=free.len() {
                let expected = (from..free.len()).find(|&n| free[n] >= need);
                assert_eq!(room.next(from, need), expected, "from {from} need {need}");
            }
        }
        room.set(3, 0);
        assert_eq!(room.next(0, 4), None);
        assert_eq!(room.next(2, 2), Some(5));
        assert_eq!(GpuRoom::new(std::iter::empty()).next(0, 1), None);
    }
}
