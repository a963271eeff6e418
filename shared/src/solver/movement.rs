//! `MinimizeMovementSpec`, a goal: fewer objects away from where they started. One component
//! per object, 1 while it is not in its initial container. Below a drain goal it makes the
//! search prefer plans that disturb fewer Instances.

use super::state::State;
use super::term::{Effect, Term};
use super::{ContainerId, ObjectId};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MinimizeMovementSpec;

pub(super) struct MovementTerm;

fn moved(state: &State, object: ObjectId, container: ContainerId) -> f64 {
    f64::from(u8::from(state.initial[object] != container))
}

impl Term for MovementTerm {
    fn label(&self) -> String {
        "minimizeMovement".into()
    }

    fn components(&self, state: &State) -> Vec<f64> {
        (0..state.assignment.len())
            .map(|o| moved(state, o, state.assignment[o]))
            .collect()
    }

    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>) {
        out.push(Effect {
            component: object,
            before: moved(state, object, state.assignment[object]),
            after: moved(state, object, to),
        });
    }

    fn hot_objects(&self, _state: &State, component: usize, out: &mut Vec<ObjectId>) {
        out.push(component);
    }

    fn special_targets(&self, state: &State, object: ObjectId, out: &mut Vec<ContainerId>) {
        out.push(state.initial[object]);
    }

    fn reports_unmovable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn a_drain_moves_each_object_once_and_nothing_else() {
        let mut p = problem(&[("host0", &["a", "b"]), ("host1", &["c"]), ("host2", &["d"])]);
        let gpu = gpus(&mut p, 4.0);
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            Policy::Default,
        );
        let h0 = p.container_id("host0").unwrap();
        p.add_constraint(
            Spec::ToFree(ToFreeSpec {
                containers: vec![h0],
                ..Default::default()
            }),
            Policy::Default,
        );
        p.add_goal(Spec::MinimizeMovement(MinimizeMovementSpec), 0, 1.0);
        let s = solve_plain(&p);
        assert_eq!(s.moves.len(), 2);
        assert_eq!(s.final_objective, vec![2.0]);
        assert_eq!(container_of(&p, &s, "c"), "host1");
        assert_eq!(container_of(&p, &s, "d"), "host2");
    }
}
