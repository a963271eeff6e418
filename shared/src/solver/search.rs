//! Local search over the assignment. Each pass collects the objects whose move could lower the
//! objective ("hot" objects, largest first) and tries, for each, a single move to the best
//! target, then (optionally) a swap, then an ejection chain: making room in a nearly fitting
//! container by first moving some of its smaller objects elsewhere. When no object improves,
//! whole containers are evacuated for goals that only count emptied containers. Every accepted
//! step lowers the objective lexicographically, and every single move in it keeps the hard
//! constraints, so the plan can be carried out move by move in order (swaps excepted: they are
//! judged as one step, and are off unless asked for).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::SeededRng;
use super::state::State;
use super::term::{EPS, Effect, Term};
use super::{Budget, ContainerId, DimId, EndReason, Move, ObjectId, Options, Policy, Unmovable};

/// Best-fitting targets evaluated for a move once one feasible target is found; targets that fit
/// equally well score alike unless a spec singles one out (and those are tried anyway).
const LOOKAHEAD: usize = 8;
/// Candidate targets read from the free-capacity index at a time.
const CHUNK: usize = 64;
/// Nearly fitting containers tried for an ejection chain or a swap.
const NEAR_FITS: usize = 16;
/// Objects of one container considered as the other half of a swap.
const SWAP_PARTNERS: usize = 32;

pub(super) struct Constraint {
    pub term: Box<dyn Term>,
    pub policy: Policy,
    pub initially_broken: Vec<bool>,
    pub values: Vec<f64>,
}

pub(super) struct Goal {
    pub term: Box<dyn Term>,
    pub bucket: usize,
    pub weight: f64,
    pub values: Vec<f64>,
}

/// A float ordered totally, for the free-capacity index.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Free(f64);
impl Eq for Free {}
impl PartialOrd for Free {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Free {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

fn positive(x: f64) -> f64 {
    x.max(0.0)
}

/// `a` is lexicographically lower than `b` by more than the tolerance.
fn lower(a: &[f64], b: &[f64]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x < &(y - EPS) {
            return true;
        }
        if x > &(y + EPS) {
            return false;
        }
    }
    false
}

/// The first bucket that changes, decreases.
fn improving(delta: &[f64]) -> bool {
    delta
        .iter()
        .find(|d| d.abs() > EPS)
        .is_some_and(|d| *d < 0.0)
}

pub(super) struct Search<'a> {
    pub state: State,
    pub constraints: Vec<Constraint>,
    pub goals: Vec<Goal>,
    /// Bucket 0 fixes broken constraints; bucket i > 0 is the i-th goal priority.
    pub objective: Vec<f64>,
    pub moves: Vec<Move>,
    /// The dimension of the first hard capacity constraint: targets are tried best fit first.
    primary: Option<DimId>,
    by_free: BTreeSet<(Free, ContainerId)>,
    rng: SeededRng,
    options: &'a Options,
    budget: &'a dyn Budget,
    effects: Vec<Effect>,
}

impl<'a> Search<'a> {
    pub fn new(
        state: State,
        constraints: Vec<Constraint>,
        goals: Vec<Goal>,
        buckets: usize,
        primary: Option<DimId>,
        options: &'a Options,
        budget: &'a dyn Budget,
    ) -> Search<'a> {
        let mut objective = vec![0.0; buckets];
        for c in &constraints {
            for (i, v) in c.values.iter().enumerate() {
                if c.policy == Policy::Soft || c.initially_broken[i] {
                    objective[0] += positive(*v);
                }
            }
        }
        for g in &goals {
            objective[g.bucket] += g.weight * g.values.iter().copied().map(positive).sum::<f64>();
        }
        let by_free = match primary {
            Some(d) => (0..state.containers())
                .map(|c| (Free(state.free(d, c)), c))
                .collect(),
            None => BTreeSet::new(),
        };
        Search {
            state,
            constraints,
            goals,
            objective,
            moves: Vec::new(),
            primary,
            by_free,
            rng: SeededRng(options.seed),
            options,
            budget,
            effects: Vec::new(),
        }
    }

    pub fn run(&mut self) -> EndReason {
        loop {
            if self.objective.iter().all(|v| v.abs() <= EPS) {
                return EndReason::Optimal;
            }
            let mut improved = false;
            for o in self.hot_objects(false) {
                if let Some(reason) = self.limit_reached() {
                    return reason;
                }
                improved |= self.try_single(o)
                    || (self.options.swaps && self.try_swap(o))
                    || self.try_ejection(o);
            }
            if !improved {
                if let Some(reason) = self.limit_reached() {
                    return reason;
                }
                improved = self.try_evacuations();
            }
            if !improved {
                return EndReason::NoImprovingMove;
            }
        }
    }

    fn limit_reached(&self) -> Option<EndReason> {
        if self.moves.len() >= self.options.max_moves {
            Some(EndReason::MoveLimit)
        } else if self.budget.exhausted() {
            Some(EndReason::TimeLimit)
        } else {
            None
        }
    }

    /// Objects whose move could lower the objective, largest (in the primary dimension) first,
    /// ties in a seeded order. `for_report` keeps only those worth reporting as unmovable.
    pub fn hot_objects(&mut self, for_report: bool) -> Vec<ObjectId> {
        let mut hot = Vec::new();
        for c in &self.constraints {
            for (i, v) in c.values.iter().enumerate() {
                if *v > EPS && (c.policy == Policy::Soft || c.initially_broken[i]) {
                    c.term.hot_objects(&self.state, i, &mut hot);
                }
            }
        }
        for g in &self.goals {
            if for_report && !g.term.reports_unmovable() {
                continue;
            }
            for (i, v) in g.values.iter().enumerate() {
                if *v > EPS {
                    g.term.hot_objects(&self.state, i, &mut hot);
                }
            }
        }
        let mut seen = vec![false; self.state.assignment.len()];
        hot.retain(|&o| !std::mem::replace(&mut seen[o], true));
        let mut keyed: Vec<(f64, u64, ObjectId)> = hot
            .into_iter()
            .map(|o| (self.size(o), self.rng.next_u64(), o))
            .collect();
        keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        keyed.into_iter().map(|(_, _, o)| o).collect()
    }

    fn size(&self, object: ObjectId) -> f64 {
        self.primary.map_or(1.0, |d| self.state.value(d, object))
    }

    /// The objective change of moving `object` to `to`, or the index of the constraint that
    /// forbids it. With `commit`, the components' values are updated as if it happened.
    fn assess(
        &mut self,
        object: ObjectId,
        to: ContainerId,
        commit: bool,
        delta: &mut [f64],
    ) -> Result<(), usize> {
        delta.fill(0.0);
        for (i, c) in self.constraints.iter_mut().enumerate() {
            let hard = c.policy != Policy::Soft;
            if hard && !commit && c.term.forbids(&self.state, object, to) {
                return Err(i);
            }
            self.effects.clear();
            c.term.effects(&self.state, object, to, &mut self.effects);
            for e in &self.effects {
                let broken = c.initially_broken[e.component];
                if hard && !commit && !allowed(e, broken) {
                    return Err(i);
                }
                if c.policy == Policy::Soft || broken {
                    delta[0] += positive(e.after) - positive(e.before);
                }
                if commit {
                    c.values[e.component] = e.after;
                }
            }
        }
        for g in &mut self.goals {
            self.effects.clear();
            g.term.effects(&self.state, object, to, &mut self.effects);
            for e in &self.effects {
                delta[g.bucket] += g.weight * (positive(e.after) - positive(e.before));
                if commit {
                    g.values[e.component] = e.after;
                }
            }
        }
        Ok(())
    }

    /// Moves an object, keeping component values, the objective and the index current.
    fn place(&mut self, object: ObjectId, to: ContainerId) {
        let from = self.state.assignment[object];
        if from == to {
            return;
        }
        let mut delta = vec![0.0; self.objective.len()];
        // Committing never fails: the checks are skipped.
        let _ = self.assess(object, to, true, &mut delta);
        for (o, d) in self.objective.iter_mut().zip(&delta) {
            *o += d;
        }
        if let Some(d) = self.primary {
            self.by_free.remove(&(Free(self.state.free(d, from)), from));
            self.by_free.remove(&(Free(self.state.free(d, to)), to));
        }
        self.state.apply(object, to);
        if let Some(d) = self.primary {
            self.by_free.insert((Free(self.state.free(d, from)), from));
            self.by_free.insert((Free(self.state.free(d, to)), to));
        }
    }

    fn record(&mut self, object: ObjectId, to: ContainerId, swap: bool) {
        let from = self.state.assignment[object];
        self.place(object, to);
        self.moves.push(Move {
            object,
            from,
            to,
            swap,
        });
    }

    /// Undoes the moves recorded after `mark`, restoring the objective exactly.
    fn rollback(&mut self, mark: usize, objective: &[f64]) {
        while self.moves.len() > mark {
            let Some(m) = self.moves.pop() else { break };
            self.place(m.object, m.from);
        }
        self.objective.copy_from_slice(objective);
    }

    /// The best target for an object among the specs' special targets and the best-fitting
    /// containers; with `improving`, only a target that lowers the objective.
    fn best_target(
        &mut self,
        object: ObjectId,
        exclude: &[ContainerId],
        improving_only: bool,
    ) -> Option<ContainerId> {
        let from = self.state.assignment[object];
        let mut delta = vec![0.0; self.objective.len()];
        let mut best: Option<(ContainerId, Vec<f64>)> = None;
        let mut feasible = 0;
        let mut consider = |search: &mut Self, to: ContainerId, feasible: &mut usize| {
            if to == from || exclude.contains(&to) {
                return;
            }
            if search.assess(object, to, false, &mut delta).is_err() {
                return;
            }
            *feasible += 1;
            if improving_only && !improving(&delta) {
                return;
            }
            if best.as_ref().is_none_or(|(_, d)| lower(&delta, d)) {
                best = Some((to, delta.clone()));
            }
        };
        let mut specials = Vec::new();
        for c in &self.constraints {
            c.term.special_targets(&self.state, object, &mut specials);
        }
        for g in &self.goals {
            g.term.special_targets(&self.state, object, &mut specials);
        }
        let mut ignore = 0;
        for to in specials {
            consider(self, to, &mut ignore);
        }
        match self.primary {
            Some(d) => {
                // Containers with room, tightest first.
                let mut after = (Free(self.state.value(d, object) - EPS), 0);
                loop {
                    let chunk: Vec<(Free, ContainerId)> =
                        self.by_free.range(after..).take(CHUNK).copied().collect();
                    for &(_, to) in &chunk {
                        consider(self, to, &mut feasible);
                        if feasible > LOOKAHEAD {
                            break;
                        }
                    }
                    match chunk.last() {
                        Some(&(free, c)) if feasible <= LOOKAHEAD && chunk.len() == CHUNK => {
                            after = (free, c + 1);
                        }
                        _ => break,
                    }
                }
            }
            None => {
                for to in 0..self.state.containers() {
                    consider(self, to, &mut feasible);
                }
            }
        }
        best.map(|(to, _)| to)
    }

    fn try_single(&mut self, object: ObjectId) -> bool {
        match self.best_target(object, &[], true) {
            Some(to) => {
                self.record(object, to, false);
                true
            }
            None => false,
        }
    }

    /// Containers the object almost fits in (largest free capacity below its size first),
    /// where no hard constraint keeps it out.
    fn near_fits(&self, object: ObjectId) -> Vec<ContainerId> {
        let Some(d) = self.primary else {
            return Vec::new();
        };
        let size = self.state.value(d, object);
        let from = self.state.assignment[object];
        self.by_free
            .range(..(Free(size - EPS), 0))
            .rev()
            .map(|&(_, c)| c)
            .filter(|&c| {
                c != from
                    && !self
                        .constraints
                        .iter()
                        .any(|k| k.policy != Policy::Soft && k.term.forbids(&self.state, object, c))
            })
            .take(NEAR_FITS)
            .collect()
    }

    /// Makes room for the object in a nearly fitting container by first moving some of that
    /// container's objects elsewhere, then moves it there; kept only if the whole chain lowers
    /// the objective.
    fn try_ejection(&mut self, object: ObjectId) -> bool {
        let Some(d) = self.primary else {
            return false;
        };
        let size = self.state.value(d, object);
        if size <= EPS {
            return false;
        }
        let source = self.state.assignment[object];
        for target in self.near_fits(object) {
            let need = size - self.state.free(d, target);
            let Some(ejected) = self.ejection_set(d, target, need) else {
                continue;
            };
            let (mark, before) = (self.moves.len(), self.objective.clone());
            let mut ok = true;
            for e in ejected {
                match self.best_target(e, &[source, target], false) {
                    Some(to) => self.record(e, to, false),
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            let mut delta = vec![0.0; self.objective.len()];
            if ok && self.assess(object, target, false, &mut delta).is_ok() {
                self.record(object, target, false);
                if lower(&self.objective, &before) && self.moves.len() <= self.options.max_moves {
                    return true;
                }
            }
            self.rollback(mark, &before);
        }
        false
    }

    /// Objects of `container` whose sizes add up to at least `need`: the largest that do not
    /// overshoot, then the smallest one that covers the rest.
    fn ejection_set(&self, d: DimId, container: ContainerId, need: f64) -> Option<Vec<ObjectId>> {
        let mut candidates: Vec<ObjectId> = self.state.members[container]
            .iter()
            .copied()
            .filter(|&o| self.state.value(d, o) > EPS)
            .collect();
        candidates.sort_by(|a, b| {
            self.state
                .value(d, *b)
                .total_cmp(&self.state.value(d, *a))
                .then(a.cmp(b))
        });
        let mut chosen = Vec::new();
        let mut remaining = need;
        for &o in &candidates {
            let v = self.state.value(d, o);
            if remaining > EPS && v <= remaining + EPS {
                chosen.push(o);
                remaining -= v;
            }
        }
        if remaining > EPS {
            let cover = candidates
                .iter()
                .rev()
                .find(|&&o| !chosen.contains(&o) && self.state.value(d, o) >= remaining - EPS)?;
            chosen.push(*cover);
        }
        Some(chosen)
    }

    /// Exchanges the object with one in a nearly fitting or special container, judged as one
    /// step: only the state after both moves must keep the hard constraints.
    fn try_swap(&mut self, object: ObjectId) -> bool {
        let a = self.state.assignment[object];
        let mut targets = self.near_fits(object);
        for c in &self.constraints {
            c.term.special_targets(&self.state, object, &mut targets);
        }
        for g in &self.goals {
            g.term.special_targets(&self.state, object, &mut targets);
        }
        for b in targets {
            if b == a {
                continue;
            }
            let partners: Vec<ObjectId> = self.state.members[b]
                .iter()
                .copied()
                .take(SWAP_PARTNERS)
                .collect();
            for other in partners {
                if self.swap_keeps_constraints(object, other) {
                    let (mark, before) = (self.moves.len(), self.objective.clone());
                    self.record(object, b, true);
                    self.record(other, a, true);
                    if lower(&self.objective, &before) {
                        return true;
                    }
                    self.rollback(mark, &before);
                }
            }
        }
        false
    }

    fn swap_keeps_constraints(&mut self, first: ObjectId, second: ObjectId) -> bool {
        let (a, b) = (self.state.assignment[first], self.state.assignment[second]);
        let forbidden = self.constraints.iter().any(|c| {
            c.policy != Policy::Soft
                && (c.term.forbids(&self.state, first, b) || c.term.forbids(&self.state, second, a))
        });
        if forbidden {
            return false;
        }
        let mut effects = Vec::new();
        for (i, c) in self.constraints.iter().enumerate() {
            if c.policy != Policy::Soft {
                let start = effects.len();
                c.term.effects(&self.state, first, b, &mut effects);
                for e in &mut effects[start..] {
                    e.component = e.component * self.constraints.len() + i;
                }
            }
        }
        self.state.apply(first, b);
        let mut second_effects = Vec::new();
        for (i, c) in self.constraints.iter().enumerate() {
            if c.policy != Policy::Soft {
                let start = second_effects.len();
                c.term.effects(&self.state, second, a, &mut second_effects);
                for e in &mut second_effects[start..] {
                    e.component = e.component * self.constraints.len() + i;
                }
            }
        }
        self.state.apply(first, a);
        // Per component: the value before the first move and after the second.
        for e2 in second_effects {
            match effects.iter_mut().find(|e| e.component == e2.component) {
                Some(e) => e.after = e2.after,
                None => effects.push(e2),
            }
        }
        effects.iter().all(|e| {
            let (component, i) = (
                e.component / self.constraints.len(),
                e.component % self.constraints.len(),
            );
            allowed(e, self.constraints[i].initially_broken[component])
        })
    }

    /// Moves every hot object out of a container a goal would like emptied, kept only if
    /// that lowers the objective.
    fn try_evacuations(&mut self) -> bool {
        for gi in 0..self.goals.len() {
            let mut components = Vec::new();
            self.goals[gi]
                .term
                .evacuations(&self.state, &mut components);
            for component in components {
                let mut objects = Vec::new();
                self.goals[gi]
                    .term
                    .hot_objects(&self.state, component, &mut objects);
                objects.sort_by(|a, b| self.size(*b).total_cmp(&self.size(*a)).then(a.cmp(b)));
                let Some(&first) = objects.first() else {
                    continue;
                };
                let container = self.state.assignment[first];
                let (mark, before) = (self.moves.len(), self.objective.clone());
                let mut ok = true;
                for o in objects {
                    match self.best_target(o, &[container], false) {
                        Some(to) => self.record(o, to, false),
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok
                    && lower(&self.objective, &before)
                    && self.moves.len() <= self.options.max_moves
                {
                    return true;
                }
                self.rollback(mark, &before);
            }
        }
        false
    }

    /// For each object still hot at the end, what kept it from moving: the constraints that
    /// refused each other container, most frequent first.
    pub fn unmovable(&mut self, end: EndReason) -> Vec<Unmovable> {
        let mut out = Vec::new();
        let mut delta = vec![0.0; self.objective.len()];
        for object in self.hot_objects(true) {
            let from = self.state.assignment[object];
            // Finding a reason tries every container: past the time limit, say it was not found.
            if end == EndReason::TimeLimit || self.budget.exhausted() {
                out.push(Unmovable {
                    object,
                    container: from,
                    reason: "the time limit ran out before it was moved or its reason found".into(),
                });
                continue;
            }
            let mut blocked = vec![0usize; self.constraints.len()];
            let (mut not_better, mut better) = (0, 0);
            for to in (0..self.state.containers()).filter(|&c| c != from) {
                match self.assess(object, to, false, &mut delta) {
                    Err(i) => blocked[i] += 1,
                    Ok(()) if improving(&delta) => better += 1,
                    Ok(()) => not_better += 1,
                }
            }
            if better > 0 {
                out.push(Unmovable {
                    object,
                    container: from,
                    reason: format!("the search ended ({}) before moving it", end.as_str()),
                });
                continue;
            }
            let mut parts: Vec<(usize, String)> = blocked
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (*n, self.constraints[i].term.label()))
                .collect();
            parts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut reason: Vec<String> = parts
                .into_iter()
                .map(|(n, label)| format!("{label} in {n} {}", containers(n)))
                .collect();
            if not_better > 0 {
                reason.push(format!(
                    "no better objective in {not_better} {}",
                    containers(not_better)
                ));
            }
            if reason.is_empty() {
                reason.push("no other container".into());
            }
            out.push(Unmovable {
                object,
                container: from,
                reason: reason.join("; "),
            });
        }
        out.sort_by_key(|u| u.object);
        out
    }
}

fn containers(n: usize) -> &'static str {
    if n == 1 { "container" } else { "containers" }
}

/// A hard component may end at or below zero, and one broken from the start may not get worse.
fn allowed(e: &Effect, initially_broken: bool) -> bool {
    e.after <= EPS || (initially_broken && e.after <= positive(e.before) + EPS)
}
