//! The problem file `kubectl alfred solve` reads, and the result it writes (README "solve").
//!
//! ```yaml
//! assignment: {host0: [task0, task1, task2], host1: [task3]}   # container -> objects
//! dimensions:
//!   gpu: {objects: {task0: 1}, objectDefault: 0, containers: {host0: 8}, containerDefault: 8}
//! constraints:
//!   - capacity: {dimension: gpu}            # optional: limit: 3 (the same for every container)
//!   - toFree: {containers: [host0], dimension: gpu}
//!     policy: default                       # default | hard | soft
//!   - pinned: {objects: [task3]}
//! goals:
//!   - toFree: {containers: [host1], formula: MINIMIZE_OCCUPIED_CONTAINERS}
//!     priority: 0                           # 0 is the highest
//!     weight: 1
//!   - affinity: [{object: task3, container: host0, weight: 1}]
//!   - minimizeMovement: {}
//! solver: {timeLimitSeconds: 10, maxMoves: 100000, seed: 1, swaps: false}
//! ```

use std::collections::BTreeMap;

/// The longest a solve may be given: a day. A limit past what a clock can add is refused
/// here rather than overflowing where the deadline is set.
pub const MAX_TIME_LIMIT_SECONDS: f64 = 86_400.0;

use serde::{Deserialize, Serialize};

use super::{
    AffinitySpec, CapacitySpec, MinimizeMovementSpec, Options, PinnedSpec, Policy, Preference,
    Problem, Solution, SolveError, Spec, ToFreeFormula, ToFreeSpec,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProblemFile {
    assignment: serde_yaml_ng::Mapping,
    #[serde(default)]
    dimensions: BTreeMap<String, DimensionEntry>,
    #[serde(default)]
    constraints: Vec<SpecEntry>,
    #[serde(default)]
    goals: Vec<SpecEntry>,
    #[serde(default)]
    solver: SolverEntry,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DimensionEntry {
    #[serde(default)]
    objects: BTreeMap<String, f64>,
    #[serde(default)]
    object_default: Option<f64>,
    #[serde(default)]
    containers: BTreeMap<String, f64>,
    #[serde(default)]
    container_default: Option<f64>,
}

/// One constraint or goal: exactly one spec key, and the policy (constraints) or the priority
/// and weight (goals).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpecEntry {
    capacity: Option<CapacityEntry>,
    to_free: Option<ToFreeEntry>,
    affinity: Option<Vec<PreferenceEntry>>,
    minimize_movement: Option<Empty>,
    pinned: Option<PinnedEntry>,
    policy: Option<String>,
    priority: Option<u32>,
    weight: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CapacityEntry {
    dimension: String,
    limit: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ToFreeEntry {
    containers: Vec<String>,
    dimension: Option<String>,
    formula: Option<String>,
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PreferenceEntry {
    object: String,
    container: String,
    #[serde(default = "one")]
    weight: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PinnedEntry {
    objects: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SolverEntry {
    time_limit_seconds: Option<f64>,
    max_moves: Option<usize>,
    seed: Option<u64>,
    swaps: Option<bool>,
}

/// A problem read from a file, with the search options and time limit it asks for.
pub struct ProblemDocument {
    pub problem: Problem,
    pub options: Options,
    pub time_limit_seconds: Option<f64>,
}

fn invalid(message: String) -> SolveError {
    SolveError::Invalid(message)
}

impl ProblemDocument {
    pub fn parse(text: &str) -> Result<ProblemDocument, SolveError> {
        let file: ProblemFile = crate::input::read_one(text).map_err(|e| invalid(e.to_string()))?;
        let mut problem = Problem::new();
        for (container, objects) in &file.assignment {
            let name = container.as_str().ok_or_else(|| {
                invalid(format!(
                    "assignment: container names are strings, got {container:?}"
                ))
            })?;
            let c = problem.add_container(name)?;
            let objects: Vec<String> = serde_yaml_ng::from_value(objects.clone())
                .map_err(|e| invalid(format!("assignment.{name}: a list of object names ({e})")))?;
            for object in objects {
                problem.add_object(&object, c)?;
            }
        }
        for (name, d) in &file.dimensions {
            let id = if name == "count" {
                if !d.objects.is_empty() || d.object_default.is_some() {
                    return Err(invalid(
                        "dimensions.count: count is built in (every object counts 1); only its \
                         container capacities may be set"
                            .into(),
                    ));
                }
                problem.set_default_capacity(super::COUNT, d.container_default);
                super::COUNT
            } else {
                problem.add_dimension(name, d.object_default.unwrap_or(0.0), d.container_default)?
            };
            for (object, value) in &d.objects {
                let o = object_id(&problem, object, &format!("dimensions.{name}.objects"))?;
                problem.set_value(id, o, *value);
            }
            for (container, capacity) in &d.containers {
                let c = container_id(
                    &problem,
                    container,
                    &format!("dimensions.{name}.containers"),
                )?;
                problem.set_capacity(id, c, *capacity);
            }
        }
        for (i, entry) in file.constraints.iter().enumerate() {
            let at = format!("constraints[{i}]");
            if entry.priority.is_some() || entry.weight.is_some() {
                return Err(invalid(format!("{at}: priority and weight are for goals")));
            }
            let policy = match &entry.policy {
                None => Policy::Default,
                Some(p) => Policy::parse(p).ok_or_else(|| {
                    invalid(format!(
                        "{at}.policy: {p:?} is not one of default, hard, soft"
                    ))
                })?,
            };
            problem.add_constraint(spec(&problem, entry, &at)?, policy);
        }
        for (i, entry) in file.goals.iter().enumerate() {
            let at = format!("goals[{i}]");
            if entry.policy.is_some() {
                return Err(invalid(format!("{at}: policy is for constraints")));
            }
            let spec = spec(&problem, entry, &at)?;
            problem.add_goal(
                spec,
                entry.priority.unwrap_or(0),
                entry.weight.unwrap_or(1.0),
            );
        }
        let s = &file.solver;
        if let Some(t) = s
            .time_limit_seconds
            .filter(|t| !(*t > 0.0 && *t <= MAX_TIME_LIMIT_SECONDS))
        {
            return Err(invalid(format!(
                "solver.timeLimitSeconds must be above 0 and at most {MAX_TIME_LIMIT_SECONDS} (a day), got {t}"
            )));
        }
        let defaults = Options::default();
        Ok(ProblemDocument {
            problem,
            options: Options {
                max_moves: s.max_moves.unwrap_or(defaults.max_moves),
                seed: s.seed.unwrap_or(defaults.seed),
                swaps: s.swaps.unwrap_or(defaults.swaps),
            },
            time_limit_seconds: s.time_limit_seconds,
        })
    }
}

fn object_id(problem: &Problem, name: &str, at: &str) -> Result<usize, SolveError> {
    problem.object_id(name).ok_or_else(|| {
        invalid(format!(
            "{at}: unknown object {name} (objects are listed under assignment)"
        ))
    })
}

fn container_id(problem: &Problem, name: &str, at: &str) -> Result<usize, SolveError> {
    problem.container_id(name).ok_or_else(|| {
        invalid(format!(
            "{at}: unknown container {name} (containers are the keys of assignment)"
        ))
    })
}

fn dimension_id(problem: &Problem, name: &str, at: &str) -> Result<usize, SolveError> {
    problem.dimension_id(name).ok_or_else(|| {
        invalid(format!(
            "{at}: unknown dimension {name} (define it under dimensions, or use count)"
        ))
    })
}

fn spec(problem: &Problem, e: &SpecEntry, at: &str) -> Result<Spec, SolveError> {
    let given = [
        e.capacity.is_some(),
        e.to_free.is_some(),
        e.affinity.is_some(),
        e.minimize_movement.is_some(),
        e.pinned.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(invalid(format!(
            "{at}: give exactly one of capacity, toFree, affinity, minimizeMovement, pinned"
        )));
    }
    if let Some(c) = &e.capacity {
        return Ok(Spec::Capacity(CapacitySpec {
            dimension: dimension_id(problem, &c.dimension, &format!("{at}.capacity"))?,
            limit: c.limit,
        }));
    }
    if let Some(t) = &e.to_free {
        let at = format!("{at}.toFree");
        let containers = t
            .containers
            .iter()
            .map(|c| container_id(problem, c, &at))
            .collect::<Result<Vec<_>, _>>()?;
        let dimension = match &t.dimension {
            Some(d) => Some(dimension_id(problem, d, &at)?),
            None => None,
        };
        let formula = match &t.formula {
            None => ToFreeFormula::default(),
            Some(f) => ToFreeFormula::parse(f).ok_or_else(|| {
                invalid(format!(
                    "{at}.formula: {f:?} is not MINIMIZE_TOTAL_UTILIZATION or MINIMIZE_OCCUPIED_CONTAINERS"
                ))
            })?,
        };
        return Ok(Spec::ToFree(ToFreeSpec {
            name: t.name.clone().unwrap_or_default(),
            containers,
            dimension,
            formula,
        }));
    }
    if let Some(prefs) = &e.affinity {
        let at = format!("{at}.affinity");
        let preferences = prefs
            .iter()
            .map(|p| {
                Ok(Preference {
                    object: object_id(problem, &p.object, &at)?,
                    container: container_id(problem, &p.container, &at)?,
                    weight: p.weight,
                })
            })
            .collect::<Result<Vec<_>, SolveError>>()?;
        return Ok(Spec::Affinity(AffinitySpec { preferences }));
    }
    if let Some(p) = &e.pinned {
        let at = format!("{at}.pinned");
        let objects = p
            .objects
            .iter()
            .map(|o| object_id(problem, o, &at))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Spec::Pinned(PinnedSpec { objects }));
    }
    Ok(Spec::MinimizeMovement(MinimizeMovementSpec))
}

/// The result as `solve -o json|yaml` writes it, with names instead of indices.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SolutionReport {
    /// Object -> container at the end.
    pub assignment: BTreeMap<String, String>,
    pub moves: Vec<MoveReport>,
    pub priorities: Vec<u32>,
    pub initial_objective: Vec<f64>,
    pub final_objective: Vec<f64>,
    pub initial_violation: f64,
    pub final_violation: f64,
    pub broken: Broken,
    pub end_reason: &'static str,
    pub unmovable: Vec<UnmovableReport>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct MoveReport {
    pub object: String,
    pub from: String,
    pub to: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub swap: bool,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct Broken {
    pub initial: usize,
    #[serde(rename = "final")]
    pub final_: usize,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct UnmovableReport {
    pub object: String,
    pub container: String,
    pub reason: String,
}

impl SolutionReport {
    pub fn new(problem: &Problem, s: &Solution) -> SolutionReport {
        let object = |o: usize| problem.object_name(o).to_string();
        let container = |c: usize| problem.container_name(c).to_string();
        SolutionReport {
            assignment: s
                .assignment
                .iter()
                .enumerate()
                .map(|(o, c)| (object(o), container(*c)))
                .collect(),
            moves: s
                .moves
                .iter()
                .map(|m| MoveReport {
                    object: object(m.object),
                    from: container(m.from),
                    to: container(m.to),
                    swap: m.swap,
                })
                .collect(),
            priorities: s.priorities.clone(),
            initial_objective: s.initial_objective.clone(),
            final_objective: s.final_objective.clone(),
            initial_violation: s.initial_violation,
            final_violation: s.final_violation,
            broken: Broken {
                initial: s.broken.0,
                final_: s.broken.1,
            },
            end_reason: s.end_reason.as_str(),
            unmovable: s
                .unmovable
                .iter()
                .map(|u| UnmovableReport {
                    object: object(u.object),
                    container: container(u.container),
                    reason: u.reason.clone(),
                })
                .collect(),
        }
    }
}
