//! `ToFreeSpec`, a constraint or a goal: drive the listed containers' utilisation of a dimension
//! (by default the object count, which empties them) to zero; this is how nodes are drained.
//! One component per listed container. As a constraint a container must end at zero: one that
//! starts empty stays empty, one that starts occupied is drained as far as possible under the
//! default policy, and no object with a non-zero value may move into any listed container, even
//! to help another goal (so two containers being freed never swap objects). Objects with a zero
//! value may stay or move in. As a goal, `MinimizeTotalUtilization` (the default) minimises what
//! is left in the listed containers, `MinimizeOccupiedContainers` how many are still occupied,
//! which concentrates removals to empty whole containers when there is not room to empty all.

use super::state::State;
use super::term::{EPS, Effect, Term};
use super::{ContainerId, DimId, ObjectId, SolveError};

crate::named! {
    #[derive(Default)]
    pub enum ToFreeFormula {
        #[default]
        MinimizeTotalUtilization = "MINIMIZE_TOTAL_UTILIZATION",
        MinimizeOccupiedContainers = "MINIMIZE_OCCUPIED_CONTAINERS",
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToFreeSpec {
    /// Names the spec in reasons and errors.
    pub name: String,
    pub containers: Vec<ContainerId>,
    /// The dimension to drive to zero; None is the object count.
    pub dimension: Option<DimId>,
    pub formula: ToFreeFormula,
}

pub(super) struct ToFreeTerm {
    listed: Vec<ContainerId>,
    /// The component of each container, when it is listed.
    component: Vec<Option<usize>>,
    dimension: DimId,
    formula: ToFreeFormula,
    as_constraint: bool,
    label: String,
}

impl ToFreeSpec {
    pub(super) fn term(
        &self,
        state: &State,
        dimension_name: &str,
        as_constraint: bool,
    ) -> Result<ToFreeTerm, SolveError> {
        let label = match self.name.as_str() {
            "" => format!("toFree({dimension_name})"),
            name => format!("toFree({dimension_name}) {name}"),
        };
        let dimension = self.dimension.unwrap_or(super::COUNT);
        if as_constraint && self.formula != ToFreeFormula::default() {
            return Err(SolveError::Invalid(format!(
                "{label}: a constraint must use the default formula {} ({} is for goals)",
                ToFreeFormula::default().as_str(),
                self.formula.as_str()
            )));
        }
        if self.formula == ToFreeFormula::MinimizeOccupiedContainers
            && state.values[dimension].iter().any(|v| *v < 0.0)
        {
            return Err(SolveError::Invalid(format!(
                "{label}: {} needs a dimension without negative values",
                self.formula.as_str()
            )));
        }
        let mut component = vec![None; state.containers()];
        let mut listed = Vec::new();
        for &c in &self.containers {
            if component[c].is_none() {
                component[c] = Some(listed.len());
                listed.push(c);
            }
        }
        Ok(ToFreeTerm {
            listed,
            component,
            dimension,
            formula: self.formula,
            as_constraint,
            label,
        })
    }
}

impl ToFreeTerm {
    fn expression(&self, utilization: f64) -> f64 {
        match self.formula {
            ToFreeFormula::MinimizeTotalUtilization => utilization,
            ToFreeFormula::MinimizeOccupiedContainers => f64::from(u8::from(utilization > EPS)),
        }
    }
}

impl Term for ToFreeTerm {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn components(&self, state: &State) -> Vec<f64> {
        self.listed
            .iter()
            .map(|&c| self.expression(state.utilization[self.dimension][c]))
            .collect()
    }

    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>) {
        let v = state.value(self.dimension, object);
        if v == 0.0 {
            return;
        }
        let from = state.assignment[object];
        for (container, change) in [(from, -v), (to, v)] {
            if let Some(component) = self.component[container] {
                let utilization = state.utilization[self.dimension][container];
                out.push(Effect {
                    component,
                    before: self.expression(utilization),
                    after: self.expression(utilization + change),
                });
            }
        }
    }

    fn hot_objects(&self, state: &State, component: usize, out: &mut Vec<ObjectId>) {
        out.extend(
            state.members[self.listed[component]]
                .iter()
                .filter(|&&o| state.value(self.dimension, o).abs() > EPS),
        );
    }

    fn forbids(&self, state: &State, object: ObjectId, to: ContainerId) -> bool {
        self.as_constraint
            && self.component[to].is_some()
            && state.value(self.dimension, object).abs() > EPS
    }

    fn evacuations(&self, state: &State, out: &mut Vec<usize>) {
        if self.formula == ToFreeFormula::MinimizeOccupiedContainers {
            out.extend(
                (0..self.listed.len())
                    .filter(|&k| state.utilization[self.dimension][self.listed[k]] > EPS),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    fn to_free(
        p: &Problem,
        hosts: &[&str],
        dimension: Option<DimId>,
        formula: ToFreeFormula,
    ) -> Spec {
        Spec::ToFree(ToFreeSpec {
            name: String::new(),
            containers: hosts.iter().map(|h| p.container_id(h).unwrap()).collect(),
            dimension,
            formula,
        })
    }

    #[test]
    fn drains_host0_onto_host1() {
        let mut p = problem(&[
            ("host0", &["task0", "task1", "task2"]),
            ("host1", &["task3"]),
        ]);
        p.add_constraint(
            to_free(&p, &["host0"], None, ToFreeFormula::default()),
            Policy::Default,
        );
        let s = solve_plain(&p);
        for task in ["task0", "task1", "task2", "task3"] {
            assert_eq!(container_of(&p, &s, task), "host1");
        }
        assert_eq!(s.moves.len(), 3);
        assert_eq!(s.broken, (1, 0));
        assert_eq!(s.end_reason, EndReason::Optimal);
    }

    #[test]
    fn two_hosts_being_freed_never_swap_even_for_affinity() {
        let mut p = problem(&[("host0", &["task0"]), ("host1", &["task1"])]);
        p.add_constraint(
            to_free(&p, &["host0", "host1"], None, ToFreeFormula::default()),
            Policy::Default,
        );
        let (t0, t1) = (p.object_id("task0").unwrap(), p.object_id("task1").unwrap());
        let (h0, h1) = (
            p.container_id("host0").unwrap(),
            p.container_id("host1").unwrap(),
        );
        p.add_goal(
            Spec::Affinity(AffinitySpec {
                preferences: vec![
                    Preference {
                        object: t0,
                        container: h1,
                        weight: 1.0,
                    },
                    Preference {
                        object: t1,
                        container: h0,
                        weight: 1.0,
                    },
                ],
            }),
            0,
            1.0,
        );
        let options = Options {
            swaps: true,
            ..Options::default()
        };
        let s = solve(&p, &options, &Unlimited).unwrap();
        assert!(s.moves.is_empty(), "{:?}", s.moves);
        assert_eq!(s.broken, (2, 2));
        assert_eq!(s.unmovable.len(), 2);
        assert!(
            s.unmovable[0].reason.contains("toFree(count)"),
            "{}",
            s.unmovable[0].reason
        );
    }

    #[test]
    fn a_container_that_starts_empty_stays_empty() {
        let mut p = problem(&[("host0", &["a", "b"]), ("host1", &[]), ("host2", &[])]);
        p.add_constraint(
            to_free(&p, &["host0", "host1"], None, ToFreeFormula::default()),
            Policy::Default,
        );
        let s = solve_plain(&p);
        assert_eq!(container_of(&p, &s, "a"), "host2");
        assert_eq!(container_of(&p, &s, "b"), "host2");
    }

    #[test]
    fn a_gpu_dimension_moves_only_gpu_users_and_lets_others_in() {
        // cpu-task uses no GPU: it may stay on host0, and cpu-new may even move in.
        let mut p = problem(&[
            ("host0", &["gpu-task", "cpu-task"]),
            ("host1", &["cpu-new"]),
        ]);
        let gpu = p.add_dimension("gpu", 0.0, Some(8.0)).unwrap();
        p.set_value(gpu, p.object_id("gpu-task").unwrap(), 4.0);
        p.add_constraint(
            to_free(&p, &["host0"], Some(gpu), ToFreeFormula::default()),
            Policy::Default,
        );
        let h0 = p.container_id("host0").unwrap();
        let cpu_new = p.object_id("cpu-new").unwrap();
        p.add_goal(
            Spec::Affinity(AffinitySpec {
                preferences: vec![Preference {
                    object: cpu_new,
                    container: h0,
                    weight: 1.0,
                }],
            }),
            0,
            1.0,
        );
        let s = solve_plain(&p);
        assert_eq!(container_of(&p, &s, "gpu-task"), "host1");
        assert_eq!(container_of(&p, &s, "cpu-task"), "host0");
        assert_eq!(container_of(&p, &s, "cpu-new"), "host0");
    }

    /// Two hosts to free with two tasks each, and room elsewhere for only two tasks.
    fn short_of_room(formula: ToFreeFormula) -> (Problem, Solution) {
        let mut p = problem(&[
            ("host0", &["a", "b"]),
            ("host1", &["c", "d"]),
            ("spare", &[]),
        ]);
        let count_limit = p.add_dimension("slots", 1.0, Some(2.0)).unwrap();
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: count_limit,
                limit: None,
            }),
            Policy::Default,
        );
        p.add_goal(to_free(&p, &["host0", "host1"], None, formula), 0, 1.0);
        let options = Options {
            seed: 7,
            ..Options::default()
        };
        let s = solve(&p, &options, &Unlimited).unwrap();
        (p, s)
    }

    #[test]
    fn the_two_formulas_differ_when_room_is_short() {
        let (p, total) = short_of_room(ToFreeFormula::MinimizeTotalUtilization);
        assert_eq!(total.initial_objective, vec![4.0]);
        assert_eq!(total.final_objective, vec![2.0]);
        assert_eq!(total.moves.len(), 2);

        let (_, occupied) = short_of_room(ToFreeFormula::MinimizeOccupiedContainers);
        assert_eq!(occupied.initial_objective, vec![2.0]);
        assert_eq!(occupied.final_objective, vec![1.0]);
        let left: Vec<&str> = ["a", "b", "c", "d"]
            .into_iter()
            .filter(|t| container_of(&p, &occupied, t) != "spare")
            .collect();
        let hosts: std::collections::BTreeSet<&str> = left
            .iter()
            .map(|t| container_of(&p, &occupied, t))
            .collect();
        assert_eq!(hosts.len(), 1, "the tasks left share one host: {left:?}");
    }

    #[test]
    fn a_constraint_with_another_formula_is_an_error() {
        let mut p = problem(&[("host0", &["a"])]);
        p.add_constraint(
            to_free(
                &p,
                &["host0"],
                None,
                ToFreeFormula::MinimizeOccupiedContainers,
            ),
            Policy::Default,
        );
        let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
        assert!(
            e.to_string()
                .contains("a constraint must use the default formula"),
            "{e}"
        );
    }

    #[test]
    fn occupied_containers_needs_non_negative_values() {
        let mut p = problem(&[("host0", &["a"]), ("host1", &[])]);
        let d = p.add_dimension("credit", -1.0, None).unwrap();
        p.add_goal(
            to_free(
                &p,
                &["host0"],
                Some(d),
                ToFreeFormula::MinimizeOccupiedContainers,
            ),
            0,
            1.0,
        );
        let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
        assert!(e.to_string().contains("without negative values"), "{e}");
    }

    #[test]
    fn evacuating_listed_containers_that_are_not_the_first() {
        // The listed containers are 2 and 3: whole-container evacuations must number them as
        // the term's components (0, 1), not as containers (a past index-out-of-bounds).
        let mut p = problem(&[
            ("spare0", &[]),
            ("spare1", &[]),
            ("drain0", &["a", "b"]),
            ("drain1", &["c"]),
        ]);
        let gpu = gpus(&mut p, 2.0);
        p.add_constraint(
            Spec::Capacity(CapacitySpec {
                dimension: gpu,
                limit: None,
            }),
            Policy::Default,
        );
        p.add_goal(
            to_free(
                &p,
                &["drain0", "drain1"],
                Some(gpu),
                ToFreeFormula::MinimizeOccupiedContainers,
            ),
            0,
            1.0,
        );
        let s = solve_plain(&p);
        assert_eq!(s.final_objective, vec![0.0]);
    }
}
