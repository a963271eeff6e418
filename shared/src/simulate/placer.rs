//! One pod at a time onto a ledger it charges: kube-scheduler's filters, then the profile's
//! scores, the best-scoring feasible node taken. The loop a simulation and a replay share.

use std::collections::HashMap;
use std::rc::Rc;

use super::filters::{self, Fixed};
use super::resources::{Ledger, Request};
use super::room::GpuRoom;
use super::topology::{Placed, Topology};
use super::{NewPod, Profile, SimulationOutcome, has_topology, infeasible, score};
use crate::model::Context;

/// Places pods one at a time on its ledger. A pod charged with `charge` instead of placed
/// with `place` counts in the ledger only, not in later pods' spread and affinity.
pub struct Placer<'c, 's> {
    ctx: &'c Context<'s>,
    pub ledger: Ledger,
    /// The filters that do not change as pods are placed, once per pod shape.
    fixed: HashMap<String, Rc<[Fixed]>>,
    /// Running pods being placed anew (by index): not counted where they run.
    lifted: &'c [bool],
    /// Pods other pods' spread and affinity count: the running ones, then the placed ones;
    /// built when a pod first needs them.
    others: Option<Vec<Placed<'c>>>,
    /// Pod affinity terms anywhere, running or among the pods to place, can reject or score
    /// any pod.
    terms_anywhere: bool,
    /// On a stream of pods: where the next pod's search for feasible nodes starts. None: every
    /// node is searched, as a prediction for one pod should.
    next_start: Option<usize>,
    /// Built when a pod asking for GPUs is first placed.
    room: Option<GpuRoom>,
}

/// How many feasible nodes kube-scheduler finds before it stops searching and scores them
/// (`numFeasibleNodesToFind` with the adaptive `percentageOfNodesToScore`).
fn feasible_nodes_to_find(nodes: usize) -> usize {
    const MIN_NODES: usize = 100;
    const MIN_PERCENT: usize = 5;
    if nodes < MIN_NODES {
        return nodes;
    }
    let percent = 50usize.saturating_sub(nodes / 125).max(MIN_PERCENT);
    (nodes * percent / 100).max(MIN_NODES)
}

impl<'c, 's> Placer<'c, 's> {
    pub fn new(ctx: &'c Context<'s>, ledger: Ledger, pods: &[NewPod], lifted: &'c [bool]) -> Self {
        let terms = |namespace, labels, spec| Placed::new(namespace, labels, 0, spec).has_terms();
        let terms_anywhere = ctx
            .cluster
            .pods
            .iter()
            .any(|p| terms(p.namespace, &p.pod.metadata.labels, &p.pod.spec))
            || pods.iter().any(|p| terms(&p.namespace, &p.labels, &p.spec));
        Placer {
            ctx,
            ledger,
            fixed: HashMap::new(),
            lifted,
            others: None,
            terms_anywhere,
            next_start: None,
            room: None,
        }
    }

    /// Searches as kube-scheduler does for a stream of pods: from where the last pod's search
    /// ended, until enough feasible nodes are found (`feasible_nodes_to_find`).
    pub fn streaming(mut self) -> Self {
        self.next_start = Some(0);
        self
    }

    /// The node `pod` goes to, charged to the ledger; None when no node but `exclude` takes it.
    pub fn place(
        &mut self,
        pod: &'c NewPod,
        request: &Request,
        profile: &Profile,
        exclude: &[usize],
    ) -> Option<usize> {
        let (feasible, topology) = self.search(pod, request, exclude);
        let n = match feasible.as_slice() {
            // One feasible node is taken without scoring, as kube-scheduler does.
            [only] => *only,
            _ => score::best(&self.scored(pod, request, profile, &feasible, topology.as_ref()))?,
        };
        self.charge(n, request);
        if let Some(others) = self.others.as_mut() {
            others.push(Placed::new(&pod.namespace, &pod.labels, n, &pod.spec));
        }
        Some(n)
    }

    /// Every node the search finds feasible for `pod`, scored; nothing is charged. For a
    /// caller that draws among equal scores itself (and charges with `charge`).
    pub fn scores(
        &mut self,
        pod: &NewPod,
        request: &Request,
        profile: &Profile,
        exclude: &[usize],
    ) -> Vec<score::NodeScore> {
        let (feasible, topology) = self.search(pod, request, exclude);
        self.scored(pod, request, profile, &feasible, topology.as_ref())
    }

    /// Charges a pod's request to node `n`.
    pub fn charge(&mut self, n: usize, request: &Request) {
        self.ledger.add(n, request);
        self.update_room(n);
    }

    /// Takes a pod's request that left node `n` off it.
    pub fn release(&mut self, n: usize, request: &Request) {
        self.ledger.remove(n, request);
        self.update_room(n);
    }

    fn update_room(&mut self, n: usize) {
        if let Some(room) = self.room.as_mut() {
            room.set(n, self.ledger.free_gpus(n));
        }
    }

    /// The nodes that pass every filter, in the order searched: every node, or on a stream
    /// the share kube-scheduler looks for, from where the last search ended.
    fn search(
        &mut self,
        pod: &NewPod,
        request: &Request,
        exclude: &[usize],
    ) -> (Vec<usize>, Option<Topology>) {
        let ctx = self.ctx;
        let topology = self.topology(pod);
        let fixed = self.fixed_of(pod);
        let nodes = fixed.len();
        let (start, wanted) = match self.next_start {
            Some(start) => (start, feasible_nodes_to_find(nodes)),
            None => (0, nodes),
        };
        // A pod without GPUs goes on any node, however its GPUs stand.
        let gpus = Some(self.ledger.gpus_in(request))
            .filter(|&g| g > 0)
            .unwrap_or(i64::MIN);
        let ledger = &self.ledger;
        let room = self
            .room
            .get_or_insert_with(|| GpuRoom::new((0..nodes).map(|n| ledger.free_gpus(n))));
        // From `start` round to it, skipping the nodes without the GPUs.
        let mut feasible = Vec::new();
        let mut searched = nodes;
        'search: for (from, to) in [(start, nodes), (0, start)] {
            let mut at = from;
            while let Some(n) = room.next(at, gpus).filter(|&n| n < to) {
                at = n + 1;
                if !exclude.contains(&n)
                    && fixed[n].passes()
                    && filters::fits(ledger, request, n)
                    && topology.as_ref().is_none_or(|t| t.check(ctx, n).is_ok())
                {
                    feasible.push(n);
                    if feasible.len() == wanted {
                        searched = (n + nodes - start) % nodes + 1;
                        break 'search;
                    }
                }
            }
        }
        if let Some(next) = self.next_start.as_mut() {
            *next = (start + searched) % nodes.max(1);
        }
        (feasible, topology)
    }

    fn scored(
        &self,
        pod: &NewPod,
        request: &Request,
        profile: &Profile,
        feasible: &[usize],
        topology: Option<&Topology>,
    ) -> Vec<score::NodeScore> {
        let scoring = score::Scoring {
            spec: &pod.spec,
            request,
            topology,
            profile,
        };
        score::score(self.ctx, &self.ledger, &scoring, feasible)
    }

    /// kube-scheduler's answer for a pod `place` found no node for.
    pub fn infeasible(
        &mut self,
        pod: &'c NewPod,
        request: &Request,
        profile: Profile,
        exclude: &[usize],
    ) -> SimulationOutcome {
        let topology = self.topology(pod);
        let fixed = self.fixed_of(pod);
        let check = |n: usize| {
            filters::check(
                self.ctx,
                &fixed[n],
                topology.as_ref(),
                &self.ledger,
                request,
                n,
            )
        };
        infeasible(self.ctx, pod, exclude, profile, check)
    }

    fn topology(&mut self, pod: &NewPod) -> Option<Topology> {
        if !self.terms_anywhere && !has_topology(&pod.spec) {
            return None;
        }
        let (ctx, lifted) = (self.ctx, self.lifted);
        let others = self.others.get_or_insert_with(|| running(ctx, lifted));
        Some(Topology::new(ctx, pod, others)).filter(|t| !t.is_empty())
    }

    /// The fixed filters of the pod's shape on every node. Its template names no node (the
    /// caller's contract), so its shape is all they read.
    fn fixed_of(&mut self, pod: &NewPod) -> Rc<[Fixed]> {
        let key = filters::shape_key(&pod.namespace, &pod.spec);
        let ctx = self.ctx;
        self.fixed
            .entry(key)
            .or_insert_with(|| filters::fixed(ctx, pod).into())
            .clone()
    }
}

/// The running pods as the topology filters count them (bound, not ending), but the `lifted`.
pub(super) fn running<'c>(ctx: &'c Context<'_>, lifted: &[bool]) -> Vec<Placed<'c>> {
    ctx.cluster
        .pods
        .iter()
        .enumerate()
        .filter(|(i, p)| !p.terminal && !p.terminating && !lifted.get(*i).copied().unwrap_or(false))
        .filter_map(|(_, p)| {
            Some(Placed::new(
                p.namespace,
                &p.pod.metadata.labels,
                p.host?,
                &p.pod.spec,
            ))
        })
        .collect()
}
