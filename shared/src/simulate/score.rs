//! kube-scheduler's Score plugins of the default profile over the feasible nodes: each plugin's
//! score, normalized over those nodes and weighted as the profile weighs it, so the node with the
//! highest total is one kube-scheduler would pick (it takes one at random among equal totals).
//! ImageLocality (weight 1) is not scored: snapshots carry no node images.

use k8s_openapi::api::core::v1::NodeSelector;

use super::Profile;
use super::filters::tolerates;
use super::resources::{Ledger, Request};
use super::topology::Topology;
use crate::api::core::PodSpec;
use crate::config::ScoringStrategy;
use crate::kubernetes::selector;
use crate::model::Context;

/// The plugins that score, as kube-scheduler names them in its log, with their weights in the
/// default profile.
pub const PLUGINS: [(&str, i64); 6] = [
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
];

const MAX: i64 = 100;

/// One feasible node's score by plugin (in `PLUGINS` order), normalized and weighted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeScore {
    pub node: usize,
    pub plugins: [i64; PLUGINS.len()],
}

impl NodeScore {
    pub fn total(&self) -> i64 {
        self.plugins.iter().sum()
    }
}

/// What the scores need of the pod being placed.
pub struct Scoring<'a> {
    pub spec: &'a PodSpec,
    pub request: &'a Request,
    pub topology: Option<&'a Topology>,
    pub profile: &'a Profile,
}

/// Every feasible node's score, in the order given.
pub fn score(
    ctx: &Context<'_>,
    ledger: &Ledger,
    pod: &Scoring<'_>,
    feasible: &[usize],
) -> Vec<NodeScore> {
    let nodes = &ctx.cluster.nodes;
    let spec = pod.spec;
    let taints: Vec<i64> = feasible
        .iter()
        .map(|&n| {
            nodes[n]
                .node
                .spec
                .taints
                .iter()
                .filter(|t| {
                    t.effect == "PreferNoSchedule"
                        && !spec.tolerations.iter().any(|tol| tolerates(tol, t))
                })
                .count() as i64
        })
        .collect();
    let preferred = preferred_node_terms(spec);
    let affinity: Vec<i64> = feasible
        .iter()
        .map(|&n| {
            preferred
                .iter()
                .filter(|(term, _)| selector::matches(term, nodes[n].node))
                .map(|(_, weight)| weight)
                .sum()
        })
        .collect();
    let spread = pod
        .topology
        .and_then(|t| t.spread_scores(ctx, feasible))
        .unwrap_or_else(|| vec![0; feasible.len()]);
    let pod_affinity: Vec<i64> = match pod.topology {
        Some(t) => min_max(feasible.iter().map(|&n| t.affinity_score(ctx, n)).collect()),
        None => vec![0; feasible.len()],
    };
    let taints = normalize(taints, true);
    let affinity = normalize(affinity, false);
    // BalancedAllocation skips a pod that requests neither cpu nor memory.
    let balanced: Vec<usize> = ["cpu", "memory"]
        .into_iter()
        .filter_map(|r| ledger.column_of(r))
        .collect();
    let best_effort = balanced.iter().all(|&c| pod.request.of(c) == 0);
    let fit = fit_columns(ledger, pod);
    feasible
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let raw = [
                taints[i],
                affinity[i],
                resource_fit(ledger, pod, &fit, n),
                spread[i],
                pod_affinity[i],
                if best_effort {
                    0
                } else {
                    balanced_allocation(ledger, pod, n, &balanced)
                },
            ];
            let mut plugins = [0; PLUGINS.len()];
            for (k, (_, weight)) in PLUGINS.iter().enumerate() {
                plugins[k] = raw[k] * weight;
            }
            NodeScore { node: n, plugins }
        })
        .collect()
}

/// The highest total; the lowest node index (name) among equals.
pub fn best(scores: &[NodeScore]) -> Option<usize> {
    scores
        .iter()
        .max_by_key(|s| (s.total(), std::cmp::Reverse(s.node)))
        .map(|s| s.node)
}

/// The pod's preferred node affinity terms that count: weight above 0, something to match.
fn preferred_node_terms(spec: &PodSpec) -> Vec<(NodeSelector, i64)> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
        .iter()
        .filter(|p| {
            p.weight > 0
                && (p
                    .preference
                    .match_expressions
                    .as_ref()
                    .is_some_and(|e| !e.is_empty())
                    || p.preference
                        .match_fields
                        .as_ref()
                        .is_some_and(|f| !f.is_empty()))
        })
        .map(|p| {
            (
                NodeSelector {
                    node_selector_terms: vec![p.preference.clone()],
                },
                i64::from(p.weight),
            )
        })
        .collect()
}

/// kube-scheduler's default normalization: scaled so the highest is 100 (reversed: the
/// highest is 0 and all score 100 when every raw score is 0).
fn normalize(raw: Vec<i64>, reverse: bool) -> Vec<i64> {
    let max = raw.iter().copied().max().unwrap_or(0).max(0);
    raw.into_iter()
        .map(|s| match (max, reverse) {
            (0, true) => MAX,
            (0, false) => s,
            (_, true) => MAX - MAX * s / max,
            (_, false) => MAX * s / max,
        })
        .collect()
}

/// InterPodAffinity's normalization: the lowest 0, the highest 100, all 0 when equal.
fn min_max(raw: Vec<i64>) -> Vec<i64> {
    let min = raw.iter().copied().min().unwrap_or(0);
    let max = raw.iter().copied().max().unwrap_or(0);
    raw.into_iter()
        .map(|s| {
            if max > min {
                (MAX as f64 * ((s - min) as f64 / (max - min) as f64)) as i64
            } else {
                0
            }
        })
        .collect()
}

/// A resource NodeResourcesFit scores, resolved once a pod: cpu and memory as requested with
/// each container's default for a missing request, other resources only when the pod asks for
/// them and the node offers them.
enum FitColumn {
    /// cpu (0) or memory (1) as `NonZeroRequested` counts them, and the ledger's column.
    NonZero(usize, usize),
    Requested(usize),
}

fn fit_columns(ledger: &Ledger, pod: &Scoring<'_>) -> Vec<(FitColumn, i64)> {
    pod.profile
        .scoring_resources
        .iter()
        .filter_map(|(name, weight)| {
            let c = ledger.column_of(name)?;
            let column = match name.as_str() {
                "cpu" => FitColumn::NonZero(0, c),
                "memory" => FitColumn::NonZero(1, c),
                _ if pod.request.of(c) > 0 || !is_scalar(name) => FitColumn::Requested(c),
                _ => return None,
            };
            Some((column, *weight))
        })
        .collect()
}

/// NodeResourcesFit's score: a weighted mean of the strategy's per-resource scores over the
/// resources the node offers.
fn resource_fit(ledger: &Ledger, pod: &Scoring<'_>, columns: &[(FitColumn, i64)], n: usize) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for (column, weight) in columns {
        let (allocatable, requested) = match *column {
            FitColumn::NonZero(k, c) => (
                ledger.usage(n, c).0,
                ledger.non_zero_on(n)[k] + pod.request.non_zero[k],
            ),
            FitColumn::Requested(c) => {
                let (allocatable, requested) = ledger.usage(n, c);
                (allocatable, requested + pod.request.of(c))
            }
        };
        if allocatable == 0 {
            continue;
        }
        let used = requested.min(allocatable);
        total += weight
            * match pod.profile.scoring {
                ScoringStrategy::LeastAllocated => (allocatable - used) * MAX / allocatable,
                ScoringStrategy::MostAllocated => used * MAX / allocatable,
            };
        weights += weight;
    }
    if weights == 0 { 0 } else { total / weights }
}

/// Is the resource one kube-scheduler scores only for pods that ask for it (an extended
/// resource, hugepages), as opposed to cpu, memory or ephemeral-storage?
fn is_scalar(name: &str) -> bool {
    !matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
}

/// NodeResourcesBalancedAllocation over the cpu and memory fractions of the node (actual
/// requests, no defaults): up to v1.36, how balanced the node is with the pod; from v1.37, how
/// much the pod improves that balance (`balanced_allocation.go`).
fn balanced_allocation(ledger: &Ledger, pod: &Scoring<'_>, n: usize, columns: &[usize]) -> i64 {
    let with_pod = balance(ledger, n, columns, |c| pod.request.of(c));
    if pod.profile.kubernetes_minor < 37 {
        return with_pod;
    }
    let without_pod = balance(ledger, n, columns, |_| 0);
    MAX / 2 + (MAX / 2 + with_pod - without_pod) / 2
}

/// 100 times one minus the spread of the node's requested fractions, `added` on top of what
/// it holds. `columns` are cpu and memory: at most two fractions, whose spread is half their
/// difference.
fn balance(ledger: &Ledger, n: usize, columns: &[usize], added: impl Fn(usize) -> i64) -> i64 {
    let mut fractions = columns.iter().filter_map(|&c| {
        let (allocatable, requested) = ledger.usage(n, c);
        (allocatable != 0).then(|| ((requested + added(c)) as f64 / allocatable as f64).min(1.0))
    });
    let std = match (fractions.next(), fractions.next()) {
        (Some(a), Some(b)) => ((a - b) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std) * MAX as f64) as i64
}
