//! The persisted plan (beyond the reference; `policies.defragmentation.holdMinutes`, off by
//! default). A spreading scheduler sends each new pod to the emptiest node, which is the node
//! a plan is emptying, so the room a move frees goes to whoever arrives next. A hold keeps it:
//! Alfred's NoSchedule taint on the node being emptied, and the matching toleration on the
//! waiting pod the action is for. The hold is also the plan's memory: while it stands, every
//! pass carries on emptying that node, and gives it up only with a reason. Every action of the
//! plan is held for its pod at once: departures empty a held node for free while the budget's
//! moves go to the nearest to empty (`Config::emptied_at_once` of them at a time).
//!
//! The state lives on the objects (the taint names the pod's UID, an annotation says since
//! when), so a pass needs nothing else to carry on, and a user sees it with `kubectl get node`.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::{Planner, trial::Trial};
use crate::api::keys::{HELD_FOR, HELD_SINCE};
use crate::model::context::Context;
pub use crate::reasons::HoldReason;

/// A hold the cluster carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    pub node: usize,
    /// The UID of the pod the node is held for.
    pub pod_uid: String,
    /// From the node's annotation; a hold without a readable one counts as expired.
    pub since: Option<Timestamp>,
}

/// A write a pass asks for.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldChange {
    pub node: String,
    /// The waiting pod, and its UID (the taint's value).
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
    /// True: place the hold. False: release it.
    pub place: bool,
    pub reason: HoldReason,
    pub message: String,
}

/// The holds on the cluster's nodes, in node order.
pub fn holds(ctx: &Context<'_>) -> Vec<Hold> {
    let mut out = Vec::new();
    for (n, node) in ctx.cluster.nodes.iter().enumerate() {
        for taint in &node.node.spec.taints {
            if taint.key == HELD_FOR {
                let since = node
                    .node
                    .metadata
                    .annotations
                    .get(HELD_SINCE)
                    .and_then(|t| t.parse().ok());
                out.push(Hold {
                    node: n,
                    pod_uid: taint.value.clone().unwrap_or_default(),
                    since,
                });
            }
        }
    }
    out
}

/// The index of the pod with this UID (a pod without one is never held).
fn pod_by_uid(ctx: &Context<'_>, uid: &str) -> Option<usize> {
    (!uid.is_empty())
        .then(|| {
            ctx.cluster
                .pods
                .iter()
                .position(|p| p.pod.metadata.uid == uid)
        })
        .flatten()
}

/// The held pod's index among the cluster's pods, when it still waits.
fn waiting_pod(ctx: &Context<'_>, uid: &str) -> Result<usize, (HoldReason, &'static str)> {
    let cluster = &ctx.cluster;
    let pod = pod_by_uid(ctx, uid).ok_or((HoldReason::HoldPodGone, "the pod is gone"))?;
    if cluster.pods[pod].node.is_some() {
        return Err((HoldReason::HoldPodBound, "the pod was scheduled"));
    }
    if !cluster.pending.iter().any(|p| p.pod == pod) {
        return Err((HoldReason::HoldPodGone, "the pod no longer waits for GPUs"));
    }
    Ok(pod)
}

/// Splits the cluster's holds into those the plan carries on with, as (node, pod), the nearest
/// to empty first, and the releases due before planning.
pub fn kept_holds(ctx: &Context<'_>, enabled: bool) -> (Vec<(usize, usize)>, Vec<HoldChange>) {
    let cluster = &ctx.cluster;
    let mut kept: Vec<(usize, usize)> = Vec::new();
    // Per kept hold: its node and how long it has left.
    let mut held: Vec<(usize, SignedDuration)> = Vec::new();
    let mut releases = Vec::new();
    let mut all = holds(ctx);
    // The oldest stand; a hold without a time sorts first and expires.
    all.sort_by_key(|h| (h.since, h.node));
    let hold_minutes = ctx.config.defragmentation.hold_minutes;
    for hold in all {
        let node = cluster.nodes[hold.node].name;
        let why = if !enabled {
            Err((HoldReason::HoldDisabled, "holds are off".to_string()))
        } else {
            waiting_pod(ctx, &hold.pod_uid)
                .map_err(|(r, m)| (r, m.to_string()))
                .and_then(|pod| match hold.since {
                    Some(t) if ctx.now().duration_since(t).as_mins() < hold_minutes => Ok(pod),
                    _ => Err((
                        HoldReason::HoldExpired,
                        format!(
                            "held for {hold_minutes} minutes (holdMinutes) without the pod binding"
                        ),
                    )),
                })
                .and_then(|pod| {
                    if kept.iter().any(|&(_, p)| p == pod) {
                        Err((
                            HoldReason::HoldSuperseded,
                            "an older hold stands for the same pod".to_string(),
                        ))
                    } else {
                        Ok(pod)
                    }
                })
        };
        match why {
            Ok(pod) => {
                let held_for = hold
                    .since
                    .map_or_else(Default::default, |t| ctx.now().duration_since(t));
                held.push((
                    hold.node,
                    SignedDuration::from_mins(hold_minutes) - held_for,
                ));
                kept.push((hold.node, pod));
            }
            Err((reason, why)) => releases.push(hold_change(
                ctx,
                hold.node,
                (pod_by_uid(ctx, &hold.pod_uid), &hold.pod_uid),
                false,
                reason,
                format!("node {node} released: {why}"),
            )),
        }
    }
    // The nearest to empty first: the budget's moves go to those first. GPUs of workloads
    // younger than the hold has left count as leaving on their own (lifetimes are heavy
    // tailed: a workload is likely to run about as long again as it has run).
    let leaving = departing_pods(ctx);
    let departing = gpus_by_node(ctx, &leaving);
    let young = young_gpus(ctx, &held, &leaving);
    let mut order: Vec<(i64, i64, usize)> = Vec::with_capacity(kept.len());
    for (k, &(node, pod)) in kept.iter().enumerate() {
        let need = cluster.pods[pod].gpus - cluster.nodes[node].gpu_free - departing[node];
        order.push(((need - young[k]).max(0), need, k));
    }
    order.sort();
    let kept = order.into_iter().map(|(_, _, k)| kept[k]).collect();
    (kept, releases)
}

/// A write for the hold on `node` for `pod` (its index when the cluster still has it, and its
/// UID).
fn hold_change(
    ctx: &Context<'_>,
    node: usize,
    (pod, pod_uid): (Option<usize>, &str),
    place: bool,
    reason: HoldReason,
    message: String,
) -> HoldChange {
    let pod = pod.map(|p| &ctx.cluster.pods[p]);
    HoldChange {
        node: ctx.cluster.nodes[node].name.to_string(),
        pod: pod.map_or_else(String::new, |p| p.name.to_string()),
        namespace: pod.map_or_else(String::new, |p| p.namespace.to_string()),
        pod_uid: pod_uid.to_string(),
        place,
        reason,
        message,
    }
}

/// The first step of each of the plan's first `limit` actions (an action: the moves that
/// free one node). With holds on, these are the moves the budget goes to.
pub fn action_heads(plan: &super::ConsolidationPlan, limit: usize) -> Vec<&super::PlanStep> {
    let mut heads: Vec<&super::PlanStep> = Vec::new();
    for step in &plan.steps {
        if heads.len() == limit {
            break;
        }
        if heads.iter().all(|h| h.frees != step.frees) {
            heads.push(step);
        }
    }
    heads
}

/// The changes a pass with `plan` asks for beyond the releases: release each kept hold whose
/// node the plan no longer empties, and hold the node of each other action for its pod.
pub fn change_for(
    ctx: &Context<'_>,
    kept: &[(usize, usize)],
    plan: &super::ConsolidationPlan,
) -> Vec<HoldChange> {
    let cluster = &ctx.cluster;
    let heads = action_heads(plan, usize::MAX);
    let departing = departing_by_node(ctx);
    let change = |node: usize, pod: usize, place: bool, reason: HoldReason, message: String| {
        let uid = &cluster.pods[pod].pod.metadata.uid;
        hold_change(ctx, node, (Some(pod), uid), place, reason, message)
    };
    let mut changes = Vec::new();
    let mut held: Vec<(usize, usize)> = Vec::new();
    for &(node, pod) in kept {
        // Emptied enough already, or once the moves in flight end: the hold stands until the
        // scheduler binds the pod.
        let ready = cluster.nodes[node].gpu_free + departing[node] >= cluster.pods[pod].gpus;
        if ready || heads.iter().any(|s| s.frees == cluster.nodes[node].name) {
            held.push((node, pod));
        } else {
            changes.push(change(
                node,
                pod,
                false,
                HoldReason::HoldAbandoned,
                format!(
                    "node {} released: emptying it no longer seats pod {}",
                    cluster.nodes[node].name, cluster.pods[pod].name
                ),
            ));
        }
    }
    for step in heads {
        let Some(node) = cluster.nodes.iter().position(|n| n.name == step.frees) else {
            continue;
        };
        if held.iter().any(|&(n, _)| n == node) {
            continue;
        }
        // The largest pod the action seats on the node it empties (a taint names its UID),
        // that no other hold is for.
        let Some(&(pod, _)) = step
            .seats
            .iter()
            .filter(|&&(p, n)| {
                n == node
                    && !cluster.pods[p].pod.metadata.uid.is_empty()
                    && held.iter().all(|&(_, q)| q != p)
            })
            .max_by_key(|&&(p, _)| (cluster.pods[p].gpus, std::cmp::Reverse(p)))
        else {
            continue;
        };
        changes.push(change(
            node,
            pod,
            true,
            HoldReason::HoldPlaced,
            format!(
                "node {} held for pod {} ({} GPUs) while the plan empties it",
                step.frees, cluster.pods[pod].name, cluster.pods[pod].gpus
            ),
        ));
        held.push((node, pod));
    }
    changes
}

/// Per `(node, within)`: the GPUs on the node of Instances whose workloads were created less
/// than `within` ago and that no migration is taking off it.
fn young_gpus(
    ctx: &Context<'_>,
    held: &[(usize, SignedDuration)],
    departing: &[(usize, usize)],
) -> Vec<i64> {
    let cluster = &ctx.cluster;
    let mut slot = vec![None; cluster.nodes.len()];
    for (k, &(node, _)) in held.iter().enumerate() {
        slot[node] = Some(k);
    }
    let mut gpus = vec![0; held.len()];
    for (i, instance) in cluster.instances.iter().enumerate() {
        let Some(age) = cluster
            .instance_created(i)
            .map(|t| ctx.now().duration_since(t))
        else {
            continue;
        };
        for &p in &instance.pods {
            let pod = &cluster.pods[p];
            let Some((node, k)) = pod.host.and_then(|n| slot[n].map(|k| (n, k))) else {
                continue;
            };
            if age < held[k].1 && !pod.terminal && !departing.contains(&(p, node)) {
                gpus[k] += pod.gpus;
            }
        }
    }
    gpus
}

/// The pods migrations in flight are taking off their nodes: (pod, node). Their old pods
/// leave once the new ones run, so the held node's action counts their room as coming.
pub fn departing_pods(ctx: &Context<'_>) -> Vec<(usize, usize)> {
    let cluster = &ctx.cluster;
    let mut out = Vec::new();
    for m in &cluster.migrations {
        let (Some(component), Some(index)) = (m.component, m.source_instance) else {
            continue;
        };
        let Some(instance) = cluster.instance_of(&m.workload, component, index) else {
            continue;
        };
        for &p in &cluster.instances[instance].pods {
            let pod = &cluster.pods[p];
            if let Some(n) = pod
                .host
                .filter(|&n| m.from_node.as_deref() == Some(cluster.nodes[n].name))
                && !pod.terminal
            {
                out.push((p, n));
            }
        }
    }
    out
}

/// Per node: the GPUs that migrations in flight are taking off it.
pub fn departing_by_node(ctx: &Context<'_>) -> Vec<i64> {
    gpus_by_node(ctx, &departing_pods(ctx))
}

/// Per node: the GPUs of these (pod, node) pairs.
fn gpus_by_node(ctx: &Context<'_>, pods: &[(usize, usize)]) -> Vec<i64> {
    let mut out = vec![0; ctx.cluster.nodes.len()];
    for &(p, n) in pods {
        out[n] += ctx.cluster.pods[p].gpus;
    }
    out
}

impl Planner<'_, '_> {
    /// The best action that empties `node` (most pending GPUs seated per move), within
    /// `budget` moves: the plan carrying on where it left off.
    pub(super) fn anchored_action(&mut self, node: usize, budget: usize) -> Option<Trial> {
        let order = self.eviction_order(node);
        let mut best: Option<(f64, Trial)> = None;
        let mut room = self.spare(node) + departing_by_node(self.ctx)[node];
        for k in 0..order.len() {
            room += self.movables[order[k]].gpus_on(node);
            let gained = self.benefit(self.signature[node], self.node_pool[node], room);
            if gained <= 0 {
                continue;
            }
            let Some(trial) = self.trial(node, &order[..=k]) else {
                continue;
            };
            if trial.moves.len() > budget {
                continue;
            }
            let ratio = gained as f64 / trial.moves.len() as f64;
            if best.as_ref().is_none_or(|b| ratio > b.0) {
                best = Some((ratio, trial));
            }
        }
        best.map(|b| b.1)
    }
}
