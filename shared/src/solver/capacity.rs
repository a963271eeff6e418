//! `CapacitySpec`, a constraint or a goal: each container's utilisation of a dimension stays
//! within the container's capacity for it, or within an absolute `limit` the same for every
//! container. One component per container, `utilisation - capacity <= 0`; as a goal it
//! minimises the total overload. The drain plans use it as a hard constraint on GPUs, so no
//! move ever lands an Instance on a node without room for it.

use super::state::State;
use super::term::{EPS, Effect, Term};
use super::{ContainerId, DimId, ObjectId, SolveError};

#[derive(Clone, Debug, PartialEq)]
pub struct CapacitySpec {
    pub dimension: DimId,
    /// The same limit for every container, instead of each container's capacity.
    pub limit: Option<f64>,
}

pub(super) struct CapacityTerm {
    dimension: DimId,
    limit: Option<f64>,
    label: String,
}

impl CapacitySpec {
    pub(super) fn term(
        &self,
        state: &State,
        dimension_name: &str,
        container_names: &[String],
    ) -> Result<CapacityTerm, SolveError> {
        let label = format!("capacity({dimension_name})");
        if let Some(limit) = self.limit.filter(|l| !super::in_range(*l, 0.0)) {
            return Err(SolveError::Invalid(format!(
                "{label}: limit {}; a limit is a number from 0 to {:e}, as capacities are",
                super::shown(limit),
                super::MAX_MAGNITUDE
            )));
        }
        if self.limit.is_none() {
            let capacities = &state.capacity[self.dimension];
            if let Some(c) = capacities.iter().position(|c| c.is_infinite()) {
                return Err(SolveError::Invalid(format!(
                    "{label}: container {} has no capacity for {dimension_name}; give it one \
                     (or a containerDefault), or give the spec a limit",
                    container_names[c]
                )));
            }
        }
        Ok(CapacityTerm {
            dimension: self.dimension,
            limit: self.limit,
            label,
        })
    }
}

impl CapacityTerm {
    fn capacity(&self, state: &State, container: ContainerId) -> f64 {
        self.limit
            .unwrap_or(state.capacity[self.dimension][container])
    }

    fn expression(&self, state: &State, container: ContainerId, change: f64) -> f64 {
        state.utilization[self.dimension][container] + change - self.capacity(state, container)
    }
}

impl Term for CapacityTerm {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn components(&self, state: &State) -> Vec<f64> {
        (0..state.containers())
            .map(|c| self.expression(state, c, 0.0))
            .collect()
    }

    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>) {
        let v = state.value(self.dimension, object);
        if v == 0.0 {
            return;
        }
        let from = state.assignment[object];
        for (container, change) in [(from, -v), (to, v)] {
            out.push(Effect {
                component: container,
                before: self.expression(state, container, 0.0),
                after: self.expression(state, container, change),
            });
        }
    }

    fn hot_objects(&self, state: &State, component: usize, out: &mut Vec<ObjectId>) {
        out.extend(
            state.members[component]
                .iter()
                .filter(|&&o| state.value(self.dimension, o).abs() > EPS),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn a_move_never_overfills_a_container() {
        // host0 is over capacity (3 GPUs of 2); host1 has room for one GPU, host2 for two.
        let mut p = problem(&[
            ("host0", &["a", "b", "c"]),
            ("host1", &["d"]),
            ("host2", &[]),
        ]);
        let gpu = gpus(&mut p, 2.0);
        p.set_capacity(gpu, p.container_id("host1").unwrap(), 2.0);
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            Policy::Default,
        );
        let s = solve_plain(&p);
        assert_eq!(s.broken, (1, 0));
        assert_eq!(
            s.moves.len(),
            1,
            "one move fixes the overload: {:?}",
            s.moves
        );
        assert_eq!(container_of(&p, &s, "d"), "host1");
    }

    #[test]
    fn an_absolute_limit_applies_to_every_container() {
        let mut p = problem(&[("host0", &["a", "b"]), ("host1", &[])]);
        let gpu = gpus(&mut p, 8.0);
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: Some(1.0),
            }),
            Policy::Default,
        );
        let s = solve_plain(&p);
        assert_eq!(s.broken, (1, 0));
        assert_ne!(container_of(&p, &s, "a"), container_of(&p, &s, "b"));
    }

    #[test]
    fn as_a_goal_it_minimises_the_overload() {
        let mut p = problem(&[("host0", &["a", "b", "c"]), ("host1", &[])]);
        let gpu = gpus(&mut p, 1.0);
        p.add_goal(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            0,
            1.0,
        );
        let s = solve_plain(&p);
        assert_eq!(s.initial_objective, vec![2.0]);
        assert_eq!(s.final_objective, vec![1.0]);
    }

    #[test]
    fn a_container_without_capacity_is_an_error() {
        let mut p = problem(&[("host0", &["a"])]);
        let gpu = p.add_dimension("gpu", 1.0, None).unwrap();
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            Policy::Default,
        );
        let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
        assert!(
            e.to_string()
                .contains("container host0 has no capacity for gpu"),
            "{e}"
        );
    }
}
