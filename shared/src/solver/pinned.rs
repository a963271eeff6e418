//! `PinnedSpec`, a constraint: the listed objects never move (Instances that cannot be
//! migrated). One component per listed object, 1 while it is away from its initial container.

use super::state::State;
use super::term::{Effect, Term};
use super::{ContainerId, ObjectId};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PinnedSpec {
    pub objects: Vec<ObjectId>,
}

pub(super) struct PinnedTerm {
    listed: Vec<ObjectId>,
    component: Vec<Option<usize>>,
}

impl PinnedSpec {
    pub(super) fn term(&self, objects: usize) -> PinnedTerm {
        let mut component = vec![None; objects];
        let mut listed = Vec::new();
        for &o in &self.objects {
            if component[o].is_none() {
                component[o] = Some(listed.len());
                listed.push(o);
            }
        }
        PinnedTerm { listed, component }
    }
}

impl Term for PinnedTerm {
    fn label(&self) -> String {
        "pinned".into()
    }

    fn components(&self, state: &State) -> Vec<f64> {
        self.listed
            .iter()
            .map(|&o| f64::from(u8::from(state.assignment[o] != state.initial[o])))
            .collect()
    }

    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>) {
        if let Some(component) = self.component[object] {
            let moved = |c: ContainerId| f64::from(u8::from(c != state.initial[object]));
            out.push(Effect {
                component,
                before: moved(state.assignment[object]),
                after: moved(to),
            });
        }
    }

    fn hot_objects(&self, _state: &State, component: usize, out: &mut Vec<ObjectId>) {
        out.push(self.listed[component]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn a_pinned_object_stays_and_is_reported() {
        let mut p = problem(&[("host0", &["a", "b"]), ("host1", &[])]);
        let h0 = p.container_id("host0").unwrap();
        p.add_constraint(
            Spec::ToFree(ToFreeSpec {
                containers: vec![h0],
                ..Default::default()
            }),
            Policy::Default,
        );
        let a = p.object_id("a").unwrap();
        p.add_constraint(
            Spec::Pinned(PinnedSpec { objects: vec![a] }),
            Policy::Default,
        );
        let s = solve_plain(&p);
        assert_eq!(container_of(&p, &s, "a"), "host0");
        assert_eq!(container_of(&p, &s, "b"), "host1");
        assert_eq!(s.unmovable.len(), 1);
        assert_eq!(s.unmovable[0].object, a);
        assert!(
            s.unmovable[0].reason.starts_with("pinned"),
            "{}",
            s.unmovable[0].reason
        );
    }
}
