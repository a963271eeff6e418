//! The assignment being searched and the per-container utilisation of every dimension, kept up
//! to date move by move.

use super::{ContainerId, DimId, ObjectId};

pub struct State {
    pub assignment: Vec<ContainerId>,
    pub initial: Vec<ContainerId>,
    /// `values[dimension][object]`.
    pub values: Vec<Vec<f64>>,
    /// `capacity[dimension][container]`; infinite where none is set.
    pub capacity: Vec<Vec<f64>>,
    /// `utilization[dimension][container]`: the sum of the values of the container's objects.
    pub utilization: Vec<Vec<f64>>,
    /// The objects in each container, in no particular order.
    pub members: Vec<Vec<ObjectId>>,
    /// Where each object sits in its container's `members`.
    slot: Vec<usize>,
}

impl State {
    pub fn new(
        initial: Vec<ContainerId>,
        containers: usize,
        values: Vec<Vec<f64>>,
        capacity: Vec<Vec<f64>>,
    ) -> State {
        let mut utilization = vec![vec![0.0; containers]; values.len()];
        let mut members = vec![Vec::new(); containers];
        let mut slot = vec![0; initial.len()];
        for (object, &c) in initial.iter().enumerate() {
            for (d, dim) in values.iter().enumerate() {
                utilization[d][c] += dim[object];
            }
            slot[object] = members[c].len();
            members[c].push(object);
        }
        State {
            assignment: initial.clone(),
            initial,
            values,
            capacity,
            utilization,
            members,
            slot,
        }
    }

    pub fn containers(&self) -> usize {
        self.members.len()
    }

    pub fn value(&self, dimension: DimId, object: ObjectId) -> f64 {
        self.values[dimension][object]
    }

    /// Capacity left in a container for a dimension (negative when over).
    pub fn free(&self, dimension: DimId, container: ContainerId) -> f64 {
        self.capacity[dimension][container] - self.utilization[dimension][container]
    }

    pub fn apply(&mut self, object: ObjectId, to: ContainerId) {
        let from = self.assignment[object];
        if from == to {
            return;
        }
        for d in 0..self.values.len() {
            let v = self.values[d][object];
            self.utilization[d][from] -= v;
            self.utilization[d][to] += v;
        }
        let slot = self.slot[object];
        self.members[from].swap_remove(slot);
        if let Some(&moved) = self.members[from].get(slot) {
            self.slot[moved] = slot;
        }
        self.slot[object] = self.members[to].len();
        self.members[to].push(object);
        self.assignment[object] = to;
    }
}
