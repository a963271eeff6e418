//! Moves checked one after another as surges, with the simulator's filters: each move's new
//! pods start beside the old ones on the cluster as the earlier moves left it, and the old
//! pods leave once the new ones run. What a consolidation plan (and `followPlan`, which carries
//! it out) rests on: a move only counts when kube-scheduler would place its pods where it says.

use super::filters::{self, Rejection};
use super::resources::{Ledger, Request};
use super::topology::{Placed, Topology};
use super::{NewPod, has_topology};
use crate::model::Context;

/// The cluster as the moves applied so far leave it.
pub struct Surges<'a, 's> {
    ctx: &'a Context<'s>,
    ledger: Ledger,
    /// Per pod (cluster index): the node it runs on now.
    at: Vec<Option<usize>>,
    /// Per pod: its requests.
    requests: Vec<Request>,
    /// Does some running pod's required anti-affinity exist (which may repel any pod)?
    anti_anywhere: bool,
}

impl<'a, 's> Surges<'a, 's> {
    pub fn new(ctx: &'a Context<'s>) -> Surges<'a, 's> {
        let cluster = &ctx.cluster;
        let (ledger, requests) = Ledger::with_requests(cluster);
        Surges {
            ctx,
            ledger,
            requests,
            at: cluster
                .pods
                .iter()
                .map(|p| p.host.filter(|_| !p.terminal))
                .collect(),
            anti_anywhere: cluster.pods.iter().any(|p| {
                p.pod.spec.affinity.as_ref().is_some_and(|a| {
                    a.pod_anti_affinity.as_ref().is_some_and(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_ref()
                            .is_some_and(|t| !t.is_empty())
                    })
                })
            }),
        }
    }

    /// The pod's requests as the ledger charges them.
    pub fn request(&self, pod: usize) -> &Request {
        &self.requests[pod]
    }

    /// Where the pod runs as the applied moves leave it.
    pub fn node_of(&self, pod: usize) -> Option<usize> {
        self.at[pod]
    }

    /// The pod's filters on a node that do not depend on other pods (NodeUnschedulable,
    /// NodeName, TaintToleration, NodeAffinity, VolumeBinding): fixed for the whole plan.
    pub fn allows(&self, pod: usize, n: usize) -> bool {
        let p = &self.ctx.cluster.pods[pod];
        filters::fixed_on(self.ctx, p.namespace, &p.pod.spec, n).passes()
    }

    /// NodeResourcesFit for the pod on node `n` with `staged` changes on top of the applied
    /// moves: (node, pod, arriving) for pods of moves being worked out.
    pub fn has_room(&self, pod: usize, n: usize, staged: &[&[(usize, usize, bool)]]) -> bool {
        self.has_room_with(pod, n, &self.staged_on(n, staged))
    }

    /// `has_room` with the staged changes on the node already summed (`staged_on`), for many
    /// pods checked against the same changes.
    pub fn has_room_with(&self, pod: usize, n: usize, (extra, pods): &(Request, i64)) -> bool {
        filters::fits_with(&self.ledger, &self.requests[pod], n, extra, *pods)
    }

    /// What `staged` changes on node `n`: the requests arriving less those leaving, and the
    /// pod count's change.
    pub fn staged_on(&self, n: usize, staged: &[&[(usize, usize, bool)]]) -> (Request, i64) {
        let mut extra = Request::default();
        let mut pods = 0i64;
        for &(_, p, arriving) in staged.iter().copied().flatten().filter(|s| s.0 == n) {
            let r = &self.requests[p];
            let sign = if arriving { 1 } else { -1 };
            pods += sign;
            for &(c, amount) in &r.amounts {
                match extra.amounts.iter_mut().find(|(e, _)| *e == c) {
                    Some(e) => e.1 += sign * amount,
                    None => extra.amounts.push((c, sign * amount)),
                }
            }
        }
        (extra, pods)
    }

    /// Checks and, when every pod passes, makes one move: each pod of `placements` (pod,
    /// target) started on its target beside everything running (the move's earlier pods
    /// included), then the old pods gone. On a refusal nothing changes.
    pub fn try_move(&mut self, placements: &[(usize, usize)]) -> Result<(), (usize, Rejection)> {
        let mut added: Vec<(usize, Request)> = Vec::new();
        for (k, &(pod, n)) in placements.iter().enumerate() {
            if let Err(why) = self.check(pod, n, &placements[..k]) {
                for (node, r) in added {
                    self.ledger.remove(node, &r);
                }
                return Err((pod, why));
            }
            let request = self.requests[pod].clone();
            self.ledger.add(n, &request);
            added.push((n, request));
        }
        for &(pod, n) in placements {
            if let Some(old) = self.at[pod] {
                let request = self.requests[pod].clone();
                self.ledger.remove(old, &request);
            }
            self.at[pod] = Some(n);
        }
        Ok(())
    }

    /// The first filter refusing a new pod like `pod` on node `n` as the applied moves leave
    /// the cluster (None: every filter passes).
    pub fn refusal(&self, pod: usize, n: usize) -> Option<Rejection> {
        self.check(pod, n, &[]).err()
    }

    /// Every filter for a new pod like `pod` on node `n`, beside the new pods of its move
    /// placed so far (`starting`, already in the ledger).
    fn check(&self, pod: usize, n: usize, starting: &[(usize, usize)]) -> Result<(), Rejection> {
        let new = NewPod::like(&self.ctx.cluster.pods[pod]);
        let fixed = filters::fixed_on(self.ctx, &new.namespace, &new.spec, n);
        let topology = (self.anti_anywhere || has_topology(&new.spec))
            .then(|| Topology::new(self.ctx, &new, &self.others(starting)));
        filters::check(
            self.ctx,
            &fixed,
            topology.as_ref(),
            &self.ledger,
            &self.requests[pod],
            n,
        )
    }

    /// Seats a pending pod on a node, as the scheduler would bind it.
    pub fn reserve(&mut self, pod: usize, n: usize) {
        self.ledger.add(n, &self.requests[pod]);
        self.at[pod] = Some(n);
    }

    /// Undoes a move `try_move` made: the pods back on their nodes of `from`.
    pub fn undo(&mut self, placements: &[(usize, usize)], from: &[usize]) {
        for (&(pod, n), &old) in placements.iter().zip(from) {
            let request = self.requests[pod].clone();
            self.ledger.remove(n, &request);
            self.ledger.add(old, &request);
            self.at[pod] = Some(old);
        }
    }

    /// The running pods where the applied moves put them, and the new pods of the move placed
    /// so far (beside their old ones, which still run).
    fn others(&self, starting: &[(usize, usize)]) -> Vec<Placed<'s>> {
        let cluster = &self.ctx.cluster;
        let placed = |pod: usize, n: usize| {
            let p = &cluster.pods[pod];
            Placed::new(p.namespace, &p.pod.metadata.labels, n, &p.pod.spec)
        };
        cluster
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.terminal && !p.terminating)
            .filter_map(|(i, _)| Some(placed(i, self.at[i]?)))
            .chain(starting.iter().map(|&(pod, n)| placed(pod, n)))
            .collect()
    }
}
