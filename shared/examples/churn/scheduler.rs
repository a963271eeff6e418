//! The replay's scheduler: the simulator's filters and the profile's scores on a ledger kept
//! as pods come and go, ties drawn at random as kube-scheduler draws them.

use std::collections::{BTreeSet, HashMap};

use alfred::api::core::Pod as PodObject;
use alfred::model::Context;
use alfred::simulate::{self, Ledger, NewPod, Placer, Profile, Request};
use serde_json::Value;

use crate::trace::{self, Rng, Task, TraceNode};

pub struct Scheduler<'c, 's> {
    profile: Profile,
    /// The simulator's filters and scores on the ledger kept as pods come and go, searching
    /// as kube-scheduler searches a stream of pods.
    placer: Placer<'c, 's>,
    tasks: &'c [Task],
    /// Per task row, once needed: the pod it is created as, and what the ledger charges for it.
    templates: Vec<Option<(NewPod, Request)>>,
    /// Per node: free GPUs, CPU (milli) and memory (MiB), and its GPU model, for a quick check
    /// that some node has room before the simulator searches.
    free: Vec<[i64; 3]>,
    models: Vec<String>,
    /// Per GPU model, the nodes with each number of free GPUs: a retry of a waiting pod looks
    /// only at the nodes with its GPUs free, most often none.
    by_free_gpus: HashMap<String, Vec<BTreeSet<usize>>>,
}

impl<'c, 's> Scheduler<'c, 's> {
    pub fn new(
        ctx: &'c Context<'s>,
        nodes: &[TraceNode],
        tasks: &'c [Task],
        profile: Profile,
    ) -> Self {
        let mut by_free_gpus: HashMap<String, Vec<BTreeSet<usize>>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let slots = by_free_gpus.entry(n.model.clone()).or_default();
            let free = n.gpus.max(0) as usize;
            if slots.len() <= free {
                slots.resize(free + 1, BTreeSet::new());
            }
            slots[free].insert(i);
        }
        Scheduler {
            profile,
            // A stream of pods, as kube-scheduler sees them: each search starts where the last
            // one ended and stops at the share of feasible nodes it scores.
            placer: Placer::new(ctx, Ledger::new(&ctx.cluster), &[], &[]).streaming(),
            tasks,
            templates: (0..tasks.len()).map(|_| None).collect(),
            free: nodes
                .iter()
                .map(|n| [n.gpus, n.cpu_milli, n.memory_mib])
                .collect(),
            models: nodes.iter().map(|n| n.model.clone()).collect(),
            by_free_gpus,
        }
    }

    /// Whether node `n` has room for a pod of task row `row` and a GPU model it allows.
    pub fn has_room(&self, n: usize, row: usize) -> bool {
        let (task, need) = (&self.tasks[row], self.needs(row));
        (0..3).all(|r| self.free[n][r] >= need[r])
            && (task.gpu_spec.is_empty() || task.gpu_spec.contains(&self.models[n]))
    }

    /// Whether some node has room for a pod of task row `row`: only the nodes of a model it
    /// allows with its GPUs free are looked at.
    pub fn room_anywhere(&self, row: usize) -> bool {
        let task = &self.tasks[row];
        let gpus = task.holds().max(0) as usize;
        self.by_free_gpus
            .iter()
            .filter(|(model, _)| task.gpu_spec.is_empty() || task.gpu_spec.contains(model))
            .flat_map(|(_, slots)| slots.iter().skip(gpus).flatten())
            .any(|&n| self.has_room(n, row))
    }

    /// Changes node `n`'s free resources by `sign` times `need`.
    fn charge(&mut self, n: usize, need: [i64; 3], sign: i64) {
        let slots = self
            .by_free_gpus
            .get_mut(&self.models[n])
            .expect("every node's model is counted");
        slots[self.free[n][0] as usize].remove(&n);
        for (r, amount) in need.iter().enumerate() {
            self.free[n][r] += sign * amount;
        }
        slots[self.free[n][0] as usize].insert(n);
    }

    fn needs(&self, row: usize) -> [i64; 3] {
        let task = &self.tasks[row];
        [task.holds(), task.cpu_milli, task.memory_mib]
    }

    /// Binds a pod of task row `row` where the scheduler would, or None when no node takes it;
    /// never on a `tainted` node (a taint it does not tolerate). It does not check
    /// `room_anywhere` itself: `World::try_place` does, before the holds are looked at.
    pub fn place(&mut self, row: usize, tainted: &[usize], rng: &mut Rng) -> Option<usize> {
        if self.templates[row].is_none() {
            self.templates[row] = Some(self.template(row, &[]));
        }
        let (pod, request) = self.templates[row].take()?;
        let placed = self.bind_best(row, &pod, &request, tainted, rng);
        self.templates[row] = Some((pod, request));
        placed
    }

    /// Binds a migration's surge pod of task row `row`: OME renders the request's hint nodes
    /// as preferred (soft) node affinity, so the scheduler may still pick another node.
    pub fn place_surge(
        &mut self,
        row: usize,
        hints: &[String],
        tainted: &[usize],
        rng: &mut Rng,
    ) -> Option<usize> {
        let (pod, request) = self.template(row, hints);
        self.bind_best(row, &pod, &request, tainted, rng)
    }

    fn bind_best(
        &mut self,
        row: usize,
        pod: &NewPod,
        request: &Request,
        tainted: &[usize],
        rng: &mut Rng,
    ) -> Option<usize> {
        // A held node fails TaintToleration: filtered before the others are scored.
        let scores = self.placer.scores(pod, request, &self.profile, tainted);
        let best = scores.iter().map(|s| s.total()).max()?;
        let tied: Vec<usize> = scores
            .iter()
            .filter(|s| s.total() == best)
            .map(|s| s.node)
            .collect();
        let n = tied[rng.below(tied.len())];
        self.placer.charge(n, request);
        self.charge(n, self.needs(row), -1);
        Some(n)
    }

    /// A pod of task row `row` leaves node `n`.
    pub fn release(&mut self, n: usize, row: usize) {
        if self.templates[row].is_none() {
            self.templates[row] = Some(self.template(row, &[]));
        }
        if let Some((_, request)) = &self.templates[row] {
            self.placer.release(n, request);
        }
        self.charge(n, self.needs(row), 1);
    }

    /// The pod a task is created as (as `trace::objects` writes it), unbound; with `hints`,
    /// preferring those nodes.
    fn template(&mut self, row: usize, hints: &[String]) -> (NewPod, Request) {
        let objects = trace::objects(0, &self.tasks[row], Some("unbound"), true);
        let value = objects.last().cloned().unwrap_or_default();
        let mut pod: PodObject = serde_json::from_value(value).expect("the trace's pod reads back");
        pod.spec.node_name.clear();
        if !hints.is_empty() {
            simulate::prefer_nodes(&mut pod.spec, hints);
        }
        let request = self.placer.ledger.requests_of(&pod.spec);
        let new = NewPod {
            name: pod.metadata.name.clone(),
            namespace: "trace".into(),
            labels: pod.metadata.labels.clone(),
            spec: pod.spec,
        };
        (new, request)
    }
}

/// Adds the preferred node affinity OME gives a surge for its hint nodes to a pod's JSON.
pub fn prefer_nodes(spec: &mut Value, nodes: &[String]) {
    let mut pod = alfred::api::core::PodSpec::default();
    simulate::prefer_nodes(&mut pod, nodes);
    let terms = serde_json::to_value(&pod.affinity).expect("affinity is JSON")["nodeAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"]
        .clone();
    spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = terms;
}
