//! kube-scheduler's filter plugins, in its order, each with the message it reports for a node it
//! rejects.

use k8s_openapi::api::core::v1::{NodeSelector, Taint, Toleration};

use super::NewPod;
use super::resources::{Ledger, Request};
use crate::api::core::PodSpec;
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
pub fn fits(ledger: &Ledger, request: &Request, n: usize) -> bool {
    fits_with(ledger, request, n, &Request::default(), 0)
}

/// NodeResourcesFit with `extra` requested and `extra_pods` more pods on the node than the
/// ledger holds (negative: pods leaving).
pub fn fits_with(
    ledger: &Ledger,
    request: &Request,
    n: usize,
    extra: &Request,
    extra_pods: i64,
) -> bool {
    let (bound, limit) = ledger.pods_on(n);
    bound + extra_pods < limit
        && request.amounts.iter().all(|&(c, amount)| {
            let (allocatable, requested) = ledger.usage(n, c);
            allocatable - requested - extra.of(c) >= amount
        })
}

/// The filters before NodeResourcesFit, which do not change as pods are placed.
fn before_fit(
    ctx: &Context<'_>,
    spec: &PodSpec,
    n: usize,
    node_name: bool,
) -> Result<(), Rejection> {
    let node = &ctx.cluster.nodes[n];
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
    if node_name && !spec.node_name.is_empty() && spec.node_name != node.name {
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
fn resource_fit(ledger: &Ledger, request: &Request, n: usize) -> Result<(), Rejection> {
    if !fits(ledger, request, n) {
        let (bound, limit) = ledger.pods_on(n);
        let insufficient = request
            .amounts
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
fn volume_affinities<'s>(
    ctx: &Context<'s>,
    namespace: &str,
    spec: &PodSpec,
) -> Vec<&'s NodeSelector> {
    spec.volumes
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .filter_map(|v| ctx.snapshot.claim(namespace, &v.claim_name))
        .filter_map(|c| {
            ctx.snapshot
                .volume(c.spec.as_ref()?.volume_name.as_deref()?)
        })
        .filter_map(|pv| pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref())
        .collect()
}

/// What the fixed filters read of a pod but its node name: pods with the same key pass them on
/// the same nodes.
pub fn shape_key(namespace: &str, spec: &PodSpec) -> String {
    serde_json::to_string(&(
        namespace,
        &spec.node_selector,
        &spec.affinity,
        &spec.tolerations,
        &spec.volumes,
    ))
    .unwrap_or_default()
}

/// What does not change while pods are placed: the filters before and after NodeResourcesFit,
/// computed once per distinct pod spec and node.
pub struct Fixed {
    before: Result<(), Rejection>,
    after: Result<(), Rejection>,
}

/// The fixed filters of a pod on every node, by node index.
pub fn fixed(ctx: &Context<'_>, pod: &NewPod) -> Vec<Fixed> {
    let volumes = volume_affinities(ctx, &pod.namespace, &pod.spec);
    (0..ctx.cluster.nodes.len())
        .map(|n| fixed_with(ctx, &pod.spec, &volumes, n, true))
        .collect()
}

/// The fixed filters of a pod on one node. A running pod's `nodeName` is not read: this is
/// the pod it would be created as.
pub fn fixed_on(ctx: &Context<'_>, namespace: &str, spec: &PodSpec, n: usize) -> Fixed {
    fixed_with(
        ctx,
        spec,
        &volume_affinities(ctx, namespace, spec),
        n,
        false,
    )
}

fn fixed_with(
    ctx: &Context<'_>,
    spec: &PodSpec,
    volumes: &[&NodeSelector],
    n: usize,
    node_name: bool,
) -> Fixed {
    Fixed {
        before: before_fit(ctx, spec, n, node_name),
        // VolumeBinding: a bound claim's volume must be reachable from the node.
        after: if volumes
            .iter()
            .any(|a| !selector::matches(a, ctx.cluster.nodes[n].node))
        {
            Err(Rejection::VolumeNodeAffinity)
        } else {
            Ok(())
        },
    }
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
    request: &Request,
    n: usize,
) -> Result<(), Rejection> {
    fixed.before.clone()?;
    resource_fit(ledger, request, n)?;
    fixed.after.clone()?;
    topology.map_or(Ok(()), |t| t.check(ctx, n))
}
