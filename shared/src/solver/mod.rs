//! An assignment solver in the style of Meta's Rebalancer (rebalancer-tofreespec.md): objects
//! assigned to containers, dimensions with a value per object and a capacity per container,
//! constraints and goals built from small specs, solved by local search. Alfred uses it to
//! drain nodes (ToFreeSpec), to plan joint moves when several Instances leave one node, and to
//! repack pools; `kubectl alfred solve` gives it to users for their own placement questions.
//!
//! Constraints are components of the form `expression <= 0`, judged in the initial
//! assignment. Under the default policy a component that holds stays hard, and one broken at
//! the start may never get worse and is fixed as the top priority; `hard` makes a component
//! still broken at the end an error; `soft` only penalises violation. Goals are minimised
//! quantities with a weight and a priority: priorities compare lexicographically (0 first),
//! weights add within a priority.

mod affinity;
mod capacity;
pub mod file;
mod movement;
mod pinned;
mod search;
mod state;
mod term;
mod to_free;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use affinity::{AffinitySpec, Preference};
pub use capacity::CapacitySpec;
pub use movement::MinimizeMovementSpec;
pub use pinned::PinnedSpec;
pub use to_free::{ToFreeFormula, ToFreeSpec};

use search::{Constraint, Goal, Search};
use state::State;
use term::{EPS, Term};

pub type ObjectId = usize;
pub type ContainerId = usize;
pub type DimId = usize;

/// The built-in dimension: every object counts 1.
pub const COUNT: DimId = 0;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SolveError {
    /// The problem is ill-formed; the message says what and where.
    #[error("{0}")]
    Invalid(String),
    /// A `hard` constraint is still broken when the search ends.
    #[error(
        "hard constraint {label} is still broken in {broken} of its components when the search \
         ended ({end_reason}); no plan found satisfies it: relax it (policy: default) or make room"
    )]
    HardConstraintBroken {
        label: String,
        broken: usize,
        end_reason: &'static str,
    },
}

crate::named! {
    #[derive(Default)]
    pub enum Policy {
        #[default]
        Default = "default",
        Hard = "hard",
        Soft = "soft",
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    Capacity(CapacitySpec),
    ToFree(ToFreeSpec),
    Affinity(AffinitySpec),
    MinimizeMovement(MinimizeMovementSpec),
    Pinned(PinnedSpec),
}

struct Dimension {
    name: String,
    object_default: f64,
    objects: BTreeMap<ObjectId, f64>,
    container_default: Option<f64>,
    containers: BTreeMap<ContainerId, f64>,
}

#[derive(Clone, Debug)]
struct GoalEntry {
    spec: Spec,
    priority: u32,
    weight: f64,
}

/// A problem, built object by object; names are only for messages and output.
pub struct Problem {
    objects: Vec<String>,
    containers: Vec<String>,
    initial: Vec<ContainerId>,
    object_ids: HashMap<String, ObjectId>,
    container_ids: HashMap<String, ContainerId>,
    dimensions: Vec<Dimension>,
    constraints: Vec<(Spec, Policy)>,
    goals: Vec<GoalEntry>,
}

impl Default for Problem {
    fn default() -> Self {
        Problem::new()
    }
}

impl Problem {
    pub fn new() -> Problem {
        Problem {
            objects: Vec::new(),
            containers: Vec::new(),
            initial: Vec::new(),
            object_ids: HashMap::new(),
            container_ids: HashMap::new(),
            dimensions: vec![Dimension {
                name: "count".into(),
                object_default: 1.0,
                objects: BTreeMap::new(),
                container_default: None,
                containers: BTreeMap::new(),
            }],
            constraints: Vec::new(),
            goals: Vec::new(),
        }
    }

    pub fn add_container(&mut self, name: &str) -> Result<ContainerId, SolveError> {
        if self.container_ids.contains_key(name) {
            return Err(SolveError::Invalid(format!(
                "container {name} is listed twice"
            )));
        }
        let id = self.containers.len();
        self.containers.push(name.to_string());
        self.container_ids.insert(name.to_string(), id);
        Ok(id)
    }

    /// Adds an object in its initial container.
    pub fn add_object(
        &mut self,
        name: &str,
        container: ContainerId,
    ) -> Result<ObjectId, SolveError> {
        if let Some(&other) = self.object_ids.get(name) {
            return Err(SolveError::Invalid(format!(
                "object {name} is in two containers ({} and {}); each object is in exactly one",
                self.containers[self.initial[other]], self.containers[container]
            )));
        }
        let id = self.objects.len();
        self.objects.push(name.to_string());
        self.object_ids.insert(name.to_string(), id);
        self.initial.push(container);
        Ok(id)
    }

    /// A dimension with a default value per object and an optional default capacity per
    /// container (None: no capacity unless set per container).
    pub fn add_dimension(
        &mut self,
        name: &str,
        object_default: f64,
        container_default: Option<f64>,
    ) -> Result<DimId, SolveError> {
        if self.dimension_id(name).is_some() {
            return Err(SolveError::Invalid(format!(
                "dimension {name} is defined twice (count is built in)"
            )));
        }
        self.dimensions.push(Dimension {
            name: name.to_string(),
            object_default,
            objects: BTreeMap::new(),
            container_default,
            containers: BTreeMap::new(),
        });
        Ok(self.dimensions.len() - 1)
    }

    pub fn set_value(&mut self, dimension: DimId, object: ObjectId, value: f64) {
        self.dimensions[dimension].objects.insert(object, value);
    }

    pub fn set_capacity(&mut self, dimension: DimId, container: ContainerId, capacity: f64) {
        self.dimensions[dimension]
            .containers
            .insert(container, capacity);
    }

    /// Sets the capacity every container has unless set one by one (the count dimension has
    /// none by default).
    pub fn set_default_capacity(&mut self, dimension: DimId, capacity: Option<f64>) {
        self.dimensions[dimension].container_default = capacity;
    }

    pub fn add_constraint(&mut self, spec: Spec, policy: Policy) {
        self.constraints.push((spec, policy));
    }

    /// A goal at a priority (0 is the highest) with a weight within it.
    pub fn add_goal(&mut self, spec: Spec, priority: u32, weight: f64) {
        self.goals.push(GoalEntry {
            spec,
            priority,
            weight,
        });
    }

    pub fn object_id(&self, name: &str) -> Option<ObjectId> {
        self.object_ids.get(name).copied()
    }

    pub fn container_id(&self, name: &str) -> Option<ContainerId> {
        self.container_ids.get(name).copied()
    }

    pub fn dimension_id(&self, name: &str) -> Option<DimId> {
        self.dimensions.iter().position(|d| d.name == name)
    }

    pub fn object_name(&self, id: ObjectId) -> &str {
        &self.objects[id]
    }

    pub fn container_name(&self, id: ContainerId) -> &str {
        &self.containers[id]
    }

    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    pub fn container_count(&self) -> usize {
        self.containers.len()
    }

    /// Dense values and capacities, checked to be numbers.
    fn state(&self) -> Result<State, SolveError> {
        let (n_objects, n_containers) = (self.objects.len(), self.containers.len());
        let mut values = Vec::with_capacity(self.dimensions.len());
        let mut capacity = Vec::with_capacity(self.dimensions.len());
        for d in &self.dimensions {
            let mut v = vec![d.object_default; n_objects];
            for (&o, &x) in &d.objects {
                v[o] = x;
            }
            let mut c = vec![d.container_default.unwrap_or(f64::INFINITY); n_containers];
            for (&k, &x) in &d.containers {
                c[k] = x;
            }
            if let Some((o, x)) = v
                .iter()
                .enumerate()
                .find(|(_, x)| !in_range(**x, -MAX_MAGNITUDE))
            {
                return Err(SolveError::Invalid(format!(
                    "dimension {}: object {} has value {}; values must be numbers from -{MAX_MAGNITUDE:e} to {MAX_MAGNITUDE:e}",
                    d.name,
                    self.objects[o],
                    shown(*x)
                )));
            }
            // Infinite: no capacity was given (a capacity spec then needs a limit).
            if let Some((k, x)) = c
                .iter()
                .enumerate()
                .find(|(_, x)| **x != f64::INFINITY && !in_range(**x, 0.0))
            {
                return Err(SolveError::Invalid(format!(
                    "dimension {}: container {} has capacity {}; capacities must be numbers from 0 to {MAX_MAGNITUDE:e}",
                    d.name,
                    self.containers[k],
                    shown(*x)
                )));
            }
            values.push(v);
            capacity.push(c);
        }
        Ok(State::new(
            self.initial.clone(),
            n_containers,
            values,
            capacity,
        ))
    }

    fn term(
        &self,
        spec: &Spec,
        state: &State,
        as_constraint: bool,
    ) -> Result<Box<dyn Term>, SolveError> {
        let dimension_name = |d: Option<DimId>| self.dimensions[d.unwrap_or(COUNT)].name.as_str();
        Ok(match spec {
            Spec::Capacity(s) => {
                Box::new(s.term(state, dimension_name(Some(s.dimension)), &self.containers)?)
            }
            Spec::ToFree(s) => {
                Box::new(s.term(state, dimension_name(s.dimension), as_constraint)?)
            }
            Spec::Affinity(_) | Spec::MinimizeMovement(_) if as_constraint => {
                return Err(SolveError::Invalid(format!(
                    "{} is a goal, not a constraint",
                    spec_name(spec)
                )));
            }
            Spec::Pinned(_) if !as_constraint => {
                return Err(SolveError::Invalid(
                    "pinned is a constraint, not a goal".into(),
                ));
            }
            Spec::Affinity(s) => Box::new(s.term(self.objects.len())?),
            Spec::MinimizeMovement(_) => Box::new(movement::MovementTerm),
            Spec::Pinned(s) => Box::new(s.term(self.objects.len())),
        })
    }
}

fn spec_name(spec: &Spec) -> &'static str {
    match spec {
        Spec::Capacity(_) => "capacity",
        Spec::ToFree(_) => "toFree",
        Spec::Affinity(_) => "affinity",
        Spec::MinimizeMovement(_) => "minimizeMovement",
        Spec::Pinned(_) => "pinned",
    }
}

/// SplitMix64: a small deterministic generator, for the search's tie-breaking orders and for
/// generating benchmark problems from a seed.
pub struct SeededRng(pub u64);

impl SeededRng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The search stops before recording more moves than this.
    pub max_moves: usize,
    pub seed: u64,
    /// Also try swaps. A swap is judged as one step, so its two moves cannot be carried out
    /// one after the other safely: leave it off when the plan is executed move by move.
    pub swaps: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_moves: 100_000,
            seed: 1,
            swaps: false,
        }
    }
}

/// The largest magnitude of a value, capacity, limit or weight: sums over a million objects
/// stay finite and exact to far below one unit.
pub const MAX_MAGNITUDE: f64 = 1e12;

/// True for a number from `min` to [`MAX_MAGNITUDE`] (false for NaN).
pub(crate) fn in_range(x: f64, min: f64) -> bool {
    (min..=MAX_MAGNITUDE).contains(&x)
}

/// A number as a message shows it: huge ones in exponent form, not 300 digits.
pub(crate) fn shown(x: f64) -> String {
    if x.abs() >= 1e15 {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// Tells the search when its time is up. The core has no clock: the caller brings one.
pub trait Budget {
    fn exhausted(&self) -> bool;
}

/// No time limit.
pub struct Unlimited;

impl Budget for Unlimited {
    fn exhausted(&self) -> bool {
        false
    }
}

pub use crate::reasons::EndReason;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub object: ObjectId,
    pub from: ContainerId,
    pub to: ContainerId,
    /// Half of a swap: this move and the next are one step.
    pub swap: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmovable {
    pub object: ObjectId,
    pub container: ContainerId,
    /// The constraints that refused the other containers, e.g. `capacity(gpu) in 1999 containers`.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    /// Object -> container at the end.
    pub assignment: Vec<ContainerId>,
    /// In the order they are to be carried out; each keeps the hard constraints.
    pub moves: Vec<Move>,
    /// The goal priorities, ascending; the objectives below have one number per priority.
    pub priorities: Vec<u32>,
    pub initial_objective: Vec<f64>,
    pub final_objective: Vec<f64>,
    /// The violation of broken constraints that the search fixes first.
    pub initial_violation: f64,
    pub final_violation: f64,
    /// Broken constraint components before and after.
    pub broken: (usize, usize),
    pub end_reason: EndReason,
    /// Objects the search wanted to move but could not, and why.
    pub unmovable: Vec<Unmovable>,
}

/// Solves a problem: deterministic for a seed, unless the budget runs out.
pub fn solve(
    problem: &Problem,
    options: &Options,
    budget: &dyn Budget,
) -> Result<Solution, SolveError> {
    let state = problem.state()?;
    let priorities: Vec<u32> = problem
        .goals
        .iter()
        .map(|g| g.priority)
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();
    let mut constraints = Vec::new();
    for (spec, policy) in &problem.constraints {
        let term = problem.term(spec, &state, true)?;
        let values = term.components(&state);
        constraints.push(Constraint {
            initially_broken: values.iter().map(|v| *v > EPS).collect(),
            term,
            policy: *policy,
            values,
        });
    }
    let mut goals = Vec::new();
    for g in &problem.goals {
        if !in_range(g.weight, 0.0) {
            return Err(SolveError::Invalid(format!(
                "{} goal: weight must be a number from 0 to {MAX_MAGNITUDE:e}, got {}",
                spec_name(&g.spec),
                shown(g.weight)
            )));
        }
        let term = problem.term(&g.spec, &state, false)?;
        let values = term.components(&state);
        let bucket = 1 + priorities
            .iter()
            .position(|p| *p == g.priority)
            .unwrap_or(0);
        goals.push(Goal {
            term,
            bucket,
            weight: g.weight,
            values,
        });
    }
    let primary = problem
        .constraints
        .iter()
        .find_map(|(spec, policy)| match spec {
            Spec::Capacity(c) if *policy != Policy::Soft && c.limit.is_none() => Some(c.dimension),
            _ => None,
        });
    let broken_initially = constraints
        .iter()
        .map(|c| c.initially_broken.iter().filter(|b| **b).count())
        .sum();
    let mut search = Search::new(
        state,
        constraints,
        goals,
        1 + priorities.len(),
        primary,
        options,
        budget,
    );
    let initial = search.objective.clone();
    let end_reason = search.run();
    for c in &search.constraints {
        let broken = c.values.iter().filter(|v| **v > EPS).count();
        if c.policy == Policy::Hard && broken > 0 {
            return Err(SolveError::HardConstraintBroken {
                label: c.term.label(),
                broken,
                end_reason: end_reason.as_str(),
            });
        }
    }
    let unmovable = search.unmovable(end_reason);
    let broken_finally = search
        .constraints
        .iter()
        .map(|c| c.values.iter().filter(|v| **v > EPS).count())
        .sum();
    Ok(Solution {
        assignment: search.state.assignment.clone(),
        moves: std::mem::take(&mut search.moves),
        priorities,
        initial_objective: initial[1..].to_vec(),
        final_objective: search.objective[1..].iter().map(|v| clean(*v)).collect(),
        initial_violation: initial[0],
        final_violation: clean(search.objective[0]),
        broken: (broken_initially, broken_finally),
        end_reason,
        unmovable,
    })
}

/// Rounds away the drift of adding and removing fractions (and -0).
fn clean(v: f64) -> f64 {
    let rounded = (v * 1e9).round() / 1e9;
    if rounded == 0.0 { 0.0 } else { rounded }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A problem from `(container, [objects])` pairs.
    pub fn problem(assignment: &[(&str, &[&str])]) -> Problem {
        let mut p = Problem::new();
        for (container, objects) in assignment {
            let c = p.add_container(container).unwrap();
            for o in *objects {
                p.add_object(o, c).unwrap();
            }
        }
        p
    }

    /// A `gpu` dimension: every object uses 1, every container has `capacity`.
    pub fn gpus(p: &mut Problem, capacity: f64) -> DimId {
        p.add_dimension("gpu", 1.0, Some(capacity)).unwrap()
    }

    pub fn solve_plain(p: &Problem) -> Solution {
        solve(p, &Options::default(), &Unlimited).unwrap()
    }

    pub fn container_of<'p>(p: &'p Problem, s: &Solution, object: &str) -> &'p str {
        p.container_name(s.assignment[p.object_id(object).unwrap()])
    }
}
