//! kube-scheduler's filter plugins, in its order, each with the message it reports for a node it
//! rejects; and the scores that pick among the nodes that pass.

use k8s_openapi::api::core::v1::{NodeSelector, Taint, Toleration};

use super::NewPod;
use super::resources::Ledger;
use crate::api::core::PodSpec;
use crate::config::ScoringStrategy;
use crate::kubernetes::selector;
use crate::model::Context;
use crate::model::cluster::NodeView;

/// The first filter that rejected a node, as kube-scheduler words it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rejection {
    Unschedulable,
    NodeName,
    Taint,
    NodeAffinity,
    /// NodeResourcesFit names every shortage at once: the pod count, then each resource.
    Resources {
        too_many_pods: bool,
        insufficient: Vec<String>,
    },
    VolumeNodeAffinity,
    SpreadMissingLabel,
    Spread,
    Affinity,
    AntiAffinity,
    ExistingAntiAffinity,
}

impl Rejection {
    /// The reasons kube-scheduler v1.34 records for the node, each counted on its own in the
    /// `0/N nodes are available` line.
    pub fn reasons(&self) -> Vec<String> {
        let one = |text: &str| vec![text.to_string()];
        match self {
            Self::Unschedulable => one("node(s) were unschedulable"),
            Self::NodeName => one("node(s) didn't match the requested node name"),
            // It names no taint since v1.33: keys and values may be private.
            Self::Taint => one("node(s) had untolerated taint(s)"),
            Self::NodeAffinity => one("node(s) didn't match Pod's node affinity/selector"),
            Self::Resources {
                too_many_pods,
                insufficient,
            } => too_many_pods
                .then(|| "Too many pods".to_string())
                .into_iter()
                .chain(insufficient.iter().map(|r| format!("Insufficient {r}")))
                .collect(),
            Self::VolumeNodeAffinity => one("node(s) had volume node affinity conflict"),
            Self::SpreadMissingLabel => {
                one("node(s) didn't match pod topology spread constraints (missing required label)")
            }
            Self::Spread => one("node(s) didn't match pod topology spread constraints"),
            Self::Affinity => one("node(s) didn't match pod affinity rules"),
            Self::AntiAffinity => one("node(s) didn't match pod anti-affinity rules"),
            Self::ExistingAntiAffinity => {
                one("node(s) didn't satisfy existing pods anti-affinity rules")
            }
        }
    }
}

/// Does the toleration tolerate the taint? An empty key with `Exists` tolerates every taint; an
/// empty effect matches every effect; `Equal` (the default operator) compares values.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" => {
            key == taint.key
                && t.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// The first NoSchedule or NoExecute taint the pod does not tolerate.
pub fn untolerated_taint<'t>(spec: &PodSpec, taints: &'t [Taint]) -> Option<&'t Taint> {
    taints.iter().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute")
            && !spec.tolerations.iter().any(|tol| tolerates(tol, t))
    })
}

/// NodeAffinity: the pod's node selector and its required node affinity terms.
pub fn node_affinity_matches(spec: &PodSpec, node: &NodeView<'_>) -> bool {
    spec.node_selector
        .iter()
        .all(|(k, v)| node.label(k) == Some(v.as_str()))
        && spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_none_or(|r| selector::matches(r, node.node))
}

/// NodeResourcesFit alone, cheaply: room for one more pod and for every request.
pub fn fits(ledger: &Ledger, request: &[(usize, i64)], n: usize) -> bool {
    let (bound, limit) = ledger.pods_on(n);
    bound < limit
        && request.iter().all(|&(c, amount)| {
            let (allocatable, requested) = ledger.usage(n, c);
            allocatable - requested >= amount
        })
}

/// The filters before NodeResourcesFit, which do not change as pods are placed.
fn before_fit(ctx: &Context<'_>, pod: &NewPod, n: usize) -> Result<(), Rejection> {
    let node = &ctx.cluster.nodes[n];
    let spec = &pod.spec;
    let taints = &node.node.spec.taints;
    // NodeUnschedulable: a cordoned node, unless the pod tolerates its taint.
    if node.node.spec.unschedulable {
        let cordon = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !spec.tolerations.iter().any(|t| tolerates(t, &cordon)) {
            return Err(Rejection::Unschedulable);
        }
    }
    if !spec.node_name.is_empty() && spec.node_name != node.name {
        return Err(Rejection::NodeName);
    }
    // TaintToleration: NoSchedule and NoExecute taints must be tolerated.
    if untolerated_taint(spec, taints).is_some() {
        return Err(Rejection::Taint);
    }
    if !node_affinity_matches(spec, node) {
        return Err(Rejection::NodeAffinity);
    }
    Ok(())
}

/// NodeResourcesFit, with the reasons kube-scheduler gives.
fn resource_fit(ledger: &Ledger, request: &[(usize, i64)], n: usize) -> Result<(), Rejection> {
    if !fits(ledger, request, n) {
        let (bound, limit) = ledger.pods_on(n);
        let insufficient = request
            .iter()
            .filter(|&&(c, amount)| {
                let (allocatable, requested) = ledger.usage(n, c);
                allocatable - requested < amount
            })
            .map(|&(c, _)| ledger.name(c).to_string())
            .collect();
        return Err(Rejection::Resources {
            too_many_pods: bound + 1 > limit,
            insufficient,
        });
    }
    Ok(())
}

/// The node affinity of each bound volume the pod claims (VolumeBinding's input; the same on
/// every node).
fn volume_affinities<'s>(ctx: &Context<'s>, pod: &NewPod) -> Vec<&'s NodeSelector> {
    pod.spec
        .volumes
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .filter_map(|v| ctx.snapshot.claim(&pod.namespace, &v.claim_name))
        .filter_map(|c| {
            ctx.snapshot
                .volume(c.spec.as_ref()?.volume_name.as_deref()?)
        })
        .filter_map(|pv| pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref())
        .collect()
}

/// What does not change while pods are placed: the filters before and after NodeResourcesFit,
/// computed once per distinct pod spec and node.
pub struct Fixed {
    before: Result<(), Rejection>,
    after: Result<(), Rejection>,
}

/// The fixed filters of a pod on every node, by node index.
pub fn fixed(ctx: &Context<'_>, pod: &NewPod) -> Vec<Fixed> {
    let volumes = volume_affinities(ctx, pod);
    ctx.cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| Fixed {
            before: before_fit(ctx, pod, n),
            // VolumeBinding: a bound claim's volume must be reachable from the node.
            after: if volumes.iter().any(|a| !selector::matches(a, node.node)) {
                Err(Rejection::VolumeNodeAffinity)
            } else {
                Ok(())
            },
        })
        .collect()
}

impl Fixed {
    pub fn passes(&self) -> bool {
        self.before.is_ok() && self.after.is_ok()
    }
}

/// Runs the filters on one node in kube-scheduler's order; the first rejection wins.
pub fn check(
    ctx: &Context<'_>,
    fixed: &Fixed,
    topology: Option<&super::topology::Topology>,
    ledger: &Ledger,
    request: &[(usize, i64)],
    n: usize,
) -> Result<(), Rejection> {
    fixed.before.clone()?;
    resource_fit(ledger, request, n)?;
    fixed.after.clone()?;
    topology.map_or(Ok(()), |t| t.check(ctx, n))
}

/// How well a feasible node suits the pod: NodeResourcesFit (weight 1) over cpu, memory and the
/// GPUs it asks for, preferred node affinity (weight 2, 0-100 by the terms' weights) and
/// PreferNoSchedule taints it does not tolerate (weight 3, fewer is better).
pub fn score(
    ctx: &Context<'_>,
    ledger: &Ledger,
    spec: &PodSpec,
    request: &[(usize, i64)],
    n: usize,
    strategy: ScoringStrategy,
) -> i64 {
    let node = &ctx.cluster.nodes[n];
    let base = ["cpu", "memory"]
        .into_iter()
        .filter_map(|r| ledger.column_of(r));
    let gpus = request
        .iter()
        .map(|&(c, _)| c)
        .filter(|&c| crate::kubernetes::quantity::is_gpu_resource(ledger.name(c)));
    let (mut fit, mut counted) = (0i64, 0i64);
    for c in base.chain(gpus) {
        let (allocatable, requested) = ledger.usage(n, c);
        counted += 1;
        if allocatable <= 0 {
            continue;
        }
        let asked = request.iter().find(|r| r.0 == c).map_or(0, |r| r.1);
        let used = (requested + asked).min(allocatable);
        fit += match strategy {
            ScoringStrategy::LeastAllocated => (allocatable - used) * 100 / allocatable,
            ScoringStrategy::MostAllocated => used * 100 / allocatable,
        };
    }
    let fit = if counted == 0 { 0 } else { fit / counted };
    let preferred = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default();
    let total_weight: i64 = preferred.iter().map(|p| i64::from(p.weight)).sum();
    let matched: i64 = preferred
        .iter()
        .filter(|p| {
            selector::matches(
                &k8s_openapi::api::core::v1::NodeSelector {
                    node_selector_terms: vec![p.preference.clone()],
                },
                node.node,
            )
        })
        .map(|p| i64::from(p.weight))
        .sum();
    let affinity = if total_weight > 0 {
        matched * 100 / total_weight
    } else {
        0
    };
    let untolerated = node
        .node
        .spec
        .taints
        .iter()
        .filter(|t| {
            t.effect == "PreferNoSchedule" && !spec.tolerations.iter().any(|tol| tolerates(tol, t))
        })
        .count() as i64;
    fit + 2 * affinity + 3 * (100 - (untolerated * 10).min(100))
}
