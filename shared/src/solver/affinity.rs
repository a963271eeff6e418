//! `AffinitySpec`, a goal: an object prefers a container, with a weight. One component per
//! object, the total weight of its preferences it is not in; several preferences of one object
//! add up. Weights are zero or more.

use super::state::State;
use super::term::{Effect, Term};
use super::{ContainerId, ObjectId, SolveError};

#[derive(Clone, Debug, PartialEq)]
pub struct Preference {
    pub object: ObjectId,
    pub container: ContainerId,
    pub weight: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AffinitySpec {
    pub preferences: Vec<Preference>,
}

pub(super) struct AffinityTerm {
    /// Each object's preferred containers and weights.
    preferences: Vec<Vec<(ContainerId, f64)>>,
}

impl AffinitySpec {
    pub(super) fn term(&self, objects: usize) -> Result<AffinityTerm, SolveError> {
        let mut preferences = vec![Vec::new(); objects];
        for p in &self.preferences {
            if !super::in_range(p.weight, 0.0) {
                return Err(SolveError::Invalid(format!(
                    "affinity: weight must be a number from 0 to {:e}, got {}",
                    super::MAX_MAGNITUDE,
                    super::shown(p.weight)
                )));
            }
            preferences[p.object].push((p.container, p.weight));
        }
        Ok(AffinityTerm { preferences })
    }
}

impl AffinityTerm {
    fn cost(&self, object: ObjectId, container: ContainerId) -> f64 {
        self.preferences[object]
            .iter()
            .filter(|(c, _)| *c != container)
            .map(|(_, w)| w)
            .sum()
    }
}

impl Term for AffinityTerm {
    fn label(&self) -> String {
        "affinity".into()
    }

    fn components(&self, state: &State) -> Vec<f64> {
        (0..self.preferences.len())
            .map(|o| self.cost(o, state.assignment[o]))
            .collect()
    }

    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>) {
        if !self.preferences[object].is_empty() {
            out.push(Effect {
                component: object,
                before: self.cost(object, state.assignment[object]),
                after: self.cost(object, to),
            });
        }
    }

    fn hot_objects(&self, _state: &State, component: usize, out: &mut Vec<ObjectId>) {
        out.push(component);
    }

    fn special_targets(&self, _state: &State, object: ObjectId, out: &mut Vec<ContainerId>) {
        out.extend(self.preferences[object].iter().map(|(c, _)| *c));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn an_object_moves_to_its_preferred_container_when_it_fits() {
        let mut p = problem(&[("host0", &["a", "b"]), ("host1", &["c"]), ("host2", &[])]);
        let gpu = gpus(&mut p, 2.0);
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            Policy::Default,
        );
        let a = p.object_id("a").unwrap();
        let (h1, h2) = (
            p.container_id("host1").unwrap(),
            p.container_id("host2").unwrap(),
        );
        p.add_goal(
            Spec::Affinity(AffinitySpec {
                preferences: vec![
                    Preference {
                        object: a,
                        container: h1,
                        weight: 1.0,
                    },
                    Preference {
                        object: a,
                        container: h2,
                        weight: 3.0,
                    },
                ],
            }),
            0,
            1.0,
        );
        let s = solve_plain(&p);
        assert_eq!(s.initial_objective, vec![4.0]);
        assert_eq!(
            container_of(&p, &s, "a"),
            "host2",
            "the heavier preference wins"
        );
        assert_eq!(s.final_objective, vec![1.0]);
    }

    #[test]
    fn a_negative_weight_is_an_error() {
        let mut p = problem(&[("host0", &["a"])]);
        let (a, h0) = (p.object_id("a").unwrap(), p.container_id("host0").unwrap());
        p.add_goal(
            Spec::Affinity(AffinitySpec {
                preferences: vec![Preference {
                    object: a,
                    container: h0,
                    weight: -1.0,
                }],
            }),
            0,
            1.0,
        );
        let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
        assert!(
            e.to_string()
                .contains("weight must be a number from 0 to 1e12, got -1"),
            "{e}"
        );
    }
}
