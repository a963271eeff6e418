//! The persisted plan (beyond the reference; `policies.defragmentation.holdMinutes`, off by
//! default). A spreading scheduler sends each new pod to the emptiest node, which is the node
//! a plan is emptying, so the room a move frees goes to whoever arrives next. A hold keeps it:
//! Alfred's NoSchedule taint on the node being emptied, and the matching toleration on the
//! waiting pod the action is for. The hold is also the plan's memory: while it stands, every
//! pass carries on emptying that node, and gives it up only with a reason.
//!
//! The state lives on the objects (the taint names the pod's UID, an annotation says since
//! when), so a pass needs nothing else to carry on, and a user sees it with `kubectl get node`.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{Planner, trial::Trial};
use crate::api::component::ComponentKind;
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
    /// True: place the hold, once the pass has sent the action's first move. False: release.
    pub place: bool,
    pub reason: HoldReason,
    pub message: String,
    /// A hold to place: the first move of its action, as (workload, component, instance);
    /// it is placed only by the pass that sends that move.
    #[serde(skip)]
    pub with_move: Option<(String, ComponentKind, i32)>,
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

/// The held pod's index among the cluster's pods, when it still waits.
fn waiting_pod(ctx: &Context<'_>, uid: &str) -> Result<usize, (HoldReason, &'static str)> {
    let cluster = &ctx.cluster;
    let pod = cluster
        .pods
        .iter()
        .position(|p| !uid.is_empty() && p.pod.metadata.uid == uid)
        .ok_or((HoldReason::HoldPodGone, "the pod is gone"))?;
    if cluster.pods[pod].node.is_some() {
        return Err((HoldReason::HoldPodBound, "the pod was scheduled"));
    }
    if !cluster.pending.iter().any(|p| p.pod == pod) {
        return Err((HoldReason::HoldPodGone, "the pod no longer waits for GPUs"));
    }
    Ok(pod)
}

/// Splits the cluster's holds into the one the plan carries on with (node, pod) and the
/// releases due before planning.
pub fn kept_hold(ctx: &Context<'_>, enabled: bool) -> (Option<(usize, usize)>, Vec<HoldChange>) {
    let cluster = &ctx.cluster;
    let mut kept = None;
    let mut releases = Vec::new();
    let mut all = holds(ctx);
    // The oldest stands; a hold without a time sorts first and expires.
    all.sort_by_key(|h| (h.since, h.node));
    for hold in all {
        let node = cluster.nodes[hold.node].name;
        let why = if !enabled {
            Err((HoldReason::HoldDisabled, "holds are off".to_string()))
        } else if kept.is_some() {
            Err((
                HoldReason::HoldSuperseded,
                "another hold stands".to_string(),
            ))
        } else {
            waiting_pod(ctx, &hold.pod_uid)
                .map_err(|(r, m)| (r, m.to_string()))
                .and_then(|pod| match hold.since {
                    Some(t)
                        if ctx.now().duration_since(t).as_mins()
                            < ctx.config.defragmentation.hold_minutes =>
                    {
                        Ok(pod)
                    }
                    _ => Err((
                        HoldReason::HoldExpired,
                        format!(
                            "held for {} minutes (holdMinutes) without the pod binding",
                            ctx.config.defragmentation.hold_minutes
                        ),
                    )),
                })
        };
        match why {
            Ok(pod) => kept = Some((hold.node, pod)),
            Err((reason, why)) => releases.push(release(ctx, &hold, reason, &why, node)),
        }
    }
    (kept, releases)
}

fn release(
    ctx: &Context<'_>,
    hold: &Hold,
    reason: HoldReason,
    why: &str,
    node: &str,
) -> HoldChange {
    let pod = ctx
        .cluster
        .pods
        .iter()
        .find(|p| !hold.pod_uid.is_empty() && p.pod.metadata.uid == hold.pod_uid);
    HoldChange {
        node: node.to_string(),
        pod: pod.map_or_else(String::new, |p| p.name.to_string()),
        namespace: pod.map_or_else(String::new, |p| p.namespace.to_string()),
        pod_uid: hold.pod_uid.clone(),
        place: false,
        reason,
        message: format!("node {node} released: {why}"),
        with_move: None,
    }
}

/// The change a pass with `plan` asks for beyond the releases: release the kept hold when the
/// plan gave up its node, or place one for the plan's first action when none stands.
pub fn change_for(
    ctx: &Context<'_>,
    kept: Option<(usize, usize)>,
    plan: &super::ConsolidationPlan,
) -> Option<HoldChange> {
    let cluster = &ctx.cluster;
    let first = plan.steps.first();
    let change = |node: usize, pod: usize, place: bool, reason: HoldReason, message: String| {
        let p = &cluster.pods[pod];
        HoldChange {
            node: cluster.nodes[node].name.to_string(),
            pod: p.name.to_string(),
            namespace: p.namespace.to_string(),
            pod_uid: p.pod.metadata.uid.clone(),
            place,
            reason,
            message,
            with_move: None,
        }
    };
    match kept {
        Some((node, pod)) => {
            // Emptied enough already, or once the moves in flight end: the hold stands until
            // the scheduler binds the pod.
            let ready =
                cluster.nodes[node].gpu_free + departing_gpus(ctx, node) >= cluster.pods[pod].gpus;
            let carried = ready || first.is_some_and(|s| s.frees == cluster.nodes[node].name);
            (!carried).then(|| {
                change(
                    node,
                    pod,
                    false,
                    HoldReason::HoldAbandoned,
                    format!(
                        "node {} released: emptying it no longer seats pod {}",
                        cluster.nodes[node].name, cluster.pods[pod].name
                    ),
                )
            })
        }
        None => {
            let step = first?;
            let node = cluster.nodes.iter().position(|n| n.name == step.frees)?;
            // The largest pod the action seats on the node it empties (a taint names its UID).
            let &(pod, _) = step
                .seats
                .iter()
                .filter(|&&(p, n)| n == node && !cluster.pods[p].pod.metadata.uid.is_empty())
                .max_by_key(|&&(p, _)| (cluster.pods[p].gpus, std::cmp::Reverse(p)))?;
            let mut placed = change(
                node,
                pod,
                true,
                HoldReason::HoldPlaced,
                format!(
                    "node {} held for pod {} ({} GPUs) while the plan empties it",
                    step.frees, cluster.pods[pod].name, cluster.pods[pod].gpus
                ),
            );
            placed.with_move = Some((step.workload.clone(), step.component, step.instance));
            Some(placed)
        }
    }
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

/// GPUs that migrations in flight are taking off `node`.
pub fn departing_gpus(ctx: &Context<'_>, node: usize) -> i64 {
    departing_pods(ctx)
        .into_iter()
        .filter(|&(_, n)| n == node)
        .map(|(p, _)| ctx.cluster.pods[p].gpus)
        .sum()
}

impl Planner<'_, '_> {
    /// The best action that empties `node` (most pending GPUs seated per move), within
    /// `budget` moves: the plan carrying on where it left off.
    pub(super) fn anchored_action(&mut self, node: usize, budget: usize) -> Option<Trial> {
        let order = self.eviction_order(node);
        let mut best: Option<(f64, Trial)> = None;
        let mut room = self.spare(node) + departing_gpus(self.ctx, node);
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
