//! Holds: the plan kept across passes (beyond the reference;
//! `policies.defragmentation.holdMinutes`, off by default). A spreading scheduler sends each
//! new pod to the emptiest node, which is the node a plan is emptying, so the room a move frees
//! goes to whoever arrives next. A hold keeps it:
//! Alfred's NoSchedule taint on the node being emptied, and the matching toleration on the
//! waiting pod the action is for. The hold is also the plan's memory: while it stands, every
//! pass carries on emptying that node, and gives it up only with a reason. Every action of the
//! plan is held for its pod at once: departures empty a held node for free while the budget's
//! moves go to the nearest to empty (`Config::emptied_at_once` of them at a time).
//!
//! The state lives on the objects (the taint names the pod's UID, an annotation says since
//! when), so a pass needs nothing else to carry on, and a user sees it with `kubectl get node`.
//!
//! A node emptied once serves one large pod after another: when its pod binds there and
//! leaves (on the openb trace an 8-GPU task's median lifetime is 9 minutes), or binds
//! elsewhere, the hold is handed over to the waiting pod the node seats now (`kept_holds`).

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::api::keys::{HELD_FOR, HELD_SINCE};
use crate::model::cluster::PodView;
use crate::model::context::Context;
pub use crate::reasons::HoldReason;
use crate::simulate::Ledger;
use crate::simulate::filters;
use k8s_openapi::api::core::v1::Toleration;

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
    /// Placing: the UID of the pod whose hold on the node this one takes over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
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
    if cluster.pods[pod].terminal {
        return Err((HoldReason::HoldPodGone, "the pod has finished"));
    }
    if cluster.pods[pod].node.is_some() {
        return Err((HoldReason::HoldPodBound, "the pod was scheduled"));
    }
    if !cluster.pending.iter().any(|p| p.pod == pod) {
        return Err((HoldReason::HoldPodGone, "the pod no longer waits for GPUs"));
    }
    Ok(pod)
}

/// The holds a pass finds, by what becomes of each.
#[derive(Debug, Default)]
pub struct HoldsFound {
    /// Holds the plan carries on emptying, as (node, pod), the nearest to empty first.
    pub carried: Vec<(usize, usize)>,
    /// Holds that spend no move, as (node, pod): a node handed over to a pod it seats now, or
    /// one that stays held while the pod it was held for runs there.
    pub standing: Vec<(usize, usize)>,
    /// Releases and hand-overs, written whatever the plan.
    pub changes: Vec<HoldChange>,
}

/// Sorts the cluster's holds: those the plan carries on with, those that stand, and the
/// releases and hand-overs due before planning. A hold whose pod bound or left goes to the
/// waiting pod its node seats now, if any (`successor`), and otherwise stands while its pod
/// runs there: the node emptied for one pod then serves the next without a move, where a
/// spreading scheduler would fill it with small arrivals the moment the first pod leaves.
pub fn kept_holds(ctx: &Context<'_>, enabled: bool) -> HoldsFound {
    let cluster = &ctx.cluster;
    let mut found = HoldsFound::default();
    let mut kept: Vec<(usize, usize)> = Vec::new();
    // Per kept hold: its node and how long it has left.
    let mut held: Vec<(usize, SignedDuration)> = Vec::new();
    // Holds whose pod bound or left: handed over, or released.
    let mut ended = Vec::new();
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
            Err((reason @ (HoldReason::HoldPodBound | HoldReason::HoldPodGone), why)) => {
                ended.push((hold, reason, why))
            }
            Err((reason, why)) => found.changes.push(hold_change(
                ctx,
                hold.node,
                (pod_by_uid(ctx, &hold.pod_uid), &hold.pod_uid),
                false,
                reason,
                format!("node {node} released: {why}"),
            )),
        }
    }
    let leaving = departing_pods(ctx);
    let departing = gpus_by_node(ctx, &leaving);
    // The nearest to empty first: the budget's moves go to those first. GPUs of workloads
    // younger than the hold has left count as leaving on their own (lifetimes are heavy
    // tailed: a workload is likely to run about as long again as it has run).
    let young = young_gpus(ctx, &held, &leaving);
    let need = |node: usize, pod: usize| {
        cluster.pods[pod].gpus - cluster.nodes[node].gpu_free - departing[node]
    };
    let mut order: Vec<(i64, i64, usize)> = Vec::with_capacity(kept.len());
    for (k, &(node, pod)) in kept.iter().enumerate() {
        let need = need(node, pod);
        order.push(((need - young[k]).max(0), need, k));
    }
    order.sort();
    found.carried = order.into_iter().map(|(_, _, k)| kept[k]).collect();
    let mut ledger = None;
    for (hold, reason, why) in ended {
        let node = cluster.nodes[hold.node].name;
        let ledger = ledger.get_or_insert_with(|| Ledger::new(cluster));
        // Pods a node stands for (handed over this pass) are not taken again.
        let held: Vec<(usize, i64)> = found
            .carried
            .iter()
            .map(|&(n, p)| (p, need(n, p)))
            .chain(found.standing.iter().map(|&(_, p)| (p, 0)))
            .collect();
        let ended_pod = pod_by_uid(ctx, &hold.pod_uid);
        let Some(next) = successor(ctx, ledger, hold.node, &held) else {
            // While the pod it was held for runs there, the node stays held: it is whole again
            // when that pod leaves, and holds no room a waiting pod fits meanwhile.
            match ended_pod.filter(|&p| runs_on(&cluster.pods[p], hold.node)) {
                Some(pod) => found.standing.push((hold.node, pod)),
                None => found.changes.push(hold_change(
                    ctx,
                    hold.node,
                    (ended_pod, &hold.pod_uid),
                    false,
                    reason,
                    format!("node {node} released: {why}"),
                )),
            }
            continue;
        };
        let pod = &cluster.pods[next];
        let mut change = hold_change(
            ctx,
            hold.node,
            (Some(next), &pod.pod.metadata.uid),
            true,
            HoldReason::HoldHandedOver,
            format!(
                "node {node} handed over to pod {} ({} GPUs), which it seats now: {why}",
                pod.name, pod.gpus
            ),
        );
        change.replaces = Some(hold.pod_uid);
        // The pod's hold elsewhere, which does not seat it yet, is released first.
        if let Some(k) = found.carried.iter().position(|&(_, p)| p == next) {
            let (other, _) = found.carried.remove(k);
            found.changes.push(hold_change(
                ctx,
                other,
                (Some(next), &pod.pod.metadata.uid),
                false,
                HoldReason::HoldSuperseded,
                format!(
                    "node {} released: pod {} was handed node {node}, which seats it now",
                    cluster.nodes[other].name, pod.name
                ),
            ));
        }
        found.changes.push(change);
        found.standing.push((hold.node, next));
    }
    found
}

/// The pod runs on the node (bound there, not finished).
fn runs_on(pod: &PodView<'_>, node: usize) -> bool {
    pod.host == Some(node) && !pod.terminal
}

/// The waiting pod a node goes to when its held pod no longer needs it, if any: of the
/// waiting pods the node seats now (its filters but Alfred's hold, every resource) and that
/// no other hold seats yet (`held`: pod, and the GPUs its node still needs), the one with the
/// most GPUs, then the one whose hold elsewhere needs most (none: most of all), then the
/// longest waiting.
fn successor(
    ctx: &Context<'_>,
    ledger: &mut Ledger,
    node: usize,
    held: &[(usize, i64)],
) -> Option<usize> {
    let cluster = &ctx.cluster;
    let mut best = None;
    for waiting in &cluster.pending {
        let pod = &cluster.pods[waiting.pod];
        let need_elsewhere = held
            .iter()
            .find(|&&(p, _)| p == waiting.pod)
            .map_or(i64::MAX, |h| h.1);
        if waiting.gpus > cluster.nodes[node].gpu_free
            || need_elsewhere <= 0
            || pod.pod.metadata.uid.is_empty()
            || !filters_but_holds(ctx, pod, node)
        {
            continue;
        }
        let request = ledger.requests_of(&pod.pod.spec);
        if !filters::fits(ledger, &request, node) {
            continue;
        }
        let key = (
            waiting.gpus,
            need_elsewhere,
            std::cmp::Reverse(waiting.since),
        );
        if best.as_ref().is_none_or(|(b, _)| *b < key) {
            best = Some((key, waiting.pod));
        }
    }
    best.map(|b| b.1)
}

/// The node's filters for the pod before resources, with any hold of Alfred's tolerated.
fn filters_but_holds(ctx: &Context<'_>, pod: &PodView<'_>, node: usize) -> bool {
    let mut spec = pod.pod.spec.clone();
    spec.tolerations.push(Toleration {
        key: Some(HELD_FOR.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    });
    filters::fixed_on(ctx, pod.namespace, &spec, node).passes()
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
        replaces: None,
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

/// The changes a pass with `plan` asks for beyond `found`'s: release each carried hold whose
/// node the plan no longer empties, and hold the node of each other action for its pod.
pub fn change_for(
    ctx: &Context<'_>,
    found: &HoldsFound,
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
    let mut held = found.standing.clone();
    for &(node, pod) in &found.carried {
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
