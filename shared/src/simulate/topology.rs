//! The filters that depend on other pods: PodTopologySpread (`DoNotSchedule` constraints) and
//! InterPodAffinity (required affinity and anti-affinity, both ways), against the pods running
//! and the pods of the same move placed before this one. Counted once per pod to place, so the
//! per-node check is a lookup.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::NewPod;
use super::filters::{Rejection, node_affinity_matches, untolerated_taint};
use crate::api::core::{FlatMap, PodSpec};
use crate::model::Context;

/// A pod as these filters see it: namespace, labels, node, required anti-affinity terms.
pub struct Placed<'a> {
    pub namespace: &'a str,
    pub labels: &'a FlatMap<String>,
    pub node: usize,
    pub anti_affinity: &'a [PodAffinityTerm],
    /// Its preferred pod affinity and anti-affinity terms, which score a new pod's nodes.
    pub preferred: &'a [WeightedPodAffinityTerm],
    pub preferred_anti: &'a [WeightedPodAffinityTerm],
}

impl<'a> Placed<'a> {
    pub fn new(
        namespace: &'a str,
        labels: &'a FlatMap<String>,
        node: usize,
        spec: &'a PodSpec,
    ) -> Placed<'a> {
        let affinity = spec.affinity.as_ref();
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        Placed {
            namespace,
            labels,
            node,
            anti_affinity: pod_anti
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_deref()
                })
                .unwrap_or_default(),
            preferred: pod_affinity
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_deref()
                })
                .unwrap_or_default(),
            preferred_anti: pod_anti
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_deref()
                })
                .unwrap_or_default(),
        }
    }

    /// Does it carry any pod affinity term (which can reject or score another pod)?
    pub fn has_terms(&self) -> bool {
        !(self.anti_affinity.is_empty()
            && self.preferred.is_empty()
            && self.preferred_anti.is_empty())
    }
}

/// Does a label selector select these labels? A missing selector selects nothing; an empty one
/// selects everything.
pub fn selects(selector: Option<&LabelSelector>, labels: &FlatMap<String>) -> bool {
    let Some(s) = selector else {
        return false;
    };
    s.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().flatten().all(|e| {
            let have = labels.get(&e.key);
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => have.is_some_and(|h| values.contains(h)),
                "NotIn" => have.is_none_or(|h| !values.contains(h)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// Is `namespace` one the term looks in? Its `namespaces`, or those its `namespaceSelector`
/// selects (`{}`: every namespace); with neither, the owner's own. A selector with terms needs
/// the Namespaces' labels, which no snapshot holds: it answers `cautious`, true for
/// anti-affinity (a pod it might repel is kept away) and false for affinity.
fn term_namespace(term: &PodAffinityTerm, owner: &str, namespace: &str, cautious: bool) -> bool {
    let listed = term.namespaces.as_deref().unwrap_or_default();
    let Some(selector) = &term.namespace_selector else {
        return if listed.is_empty() {
            namespace == owner
        } else {
            listed.iter().any(|n| n == namespace)
        };
    };
    let everything = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    everything || cautious || listed.iter().any(|n| n == namespace)
}

fn term_selects(term: &PodAffinityTerm, owner: &str, pod: &Placed<'_>, anti: bool) -> bool {
    term_namespace(term, owner, pod.namespace, anti)
        && selects(term.label_selector.as_ref(), pod.labels)
}

struct Spread {
    key: String,
    max_skew: i64,
    counts: HashMap<String, i64>,
    /// The least count over the domains (0 when fewer than minDomains exist).
    min: i64,
    self_match: i64,
}

struct Affinity {
    key: String,
    /// Topology values holding a pod the term selects.
    domains: HashSet<String>,
    /// No pod anywhere matches, but the pod matches its own term: it may go anywhere.
    first_of_group: bool,
}

/// A scoring term: its topology key, its weight, and the pods it counts per domain.
struct Preference {
    key: String,
    weight: f64,
    counts: HashMap<String, i64>,
    /// Spread terms add `maxSkew - 1` to every count, as kube-scheduler does.
    offset: i64,
}

/// What the pod's own constraints and the others' anti-affinity need, counted once.
pub struct Topology {
    spread: Vec<Spread>,
    affinity: Vec<Affinity>,
    anti_affinity: Vec<(String, HashSet<String>)>,
    /// Domains (key, value) where a pod whose anti-affinity selects this pod runs.
    repelled: Vec<(String, HashSet<String>)>,
    /// Preferred pod affinity (positive weight) and anti-affinity (negative) terms.
    preferred: Vec<Preference>,
    /// `ScheduleAnyway` spread constraints, weighted by the log of their domain count.
    soft_spread: Vec<Preference>,
}

/// A node's raw scores from the pod's preferences, to be normalized over the feasible nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RawScores {
    pub affinity: f64,
    /// None when the pod has no `ScheduleAnyway` constraint.
    pub spread: Option<f64>,
}

impl Topology {
    pub fn new(ctx: &Context<'_>, pod: &NewPod, others: &[Placed<'_>]) -> Topology {
        let cluster = &ctx.cluster;
        let spec = &pod.spec;
        let value = |n: usize, key: &str| cluster.nodes[n].label(key).map(str::to_string);
        let me = Placed {
            namespace: &pod.namespace,
            labels: &pod.labels,
            node: usize::MAX,
            anti_affinity: &[],
            preferred: &[],
            preferred_anti: &[],
        };
        let node_selected = |n: usize| node_affinity_matches(spec, &cluster.nodes[n]);
        let hard: Vec<_> = spec
            .topology_spread_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .collect();
        // Only nodes labelled with every hard constraint's key count, as kube-scheduler has it.
        let all_keys = |n: usize| hard.iter().all(|c| value(n, &c.topology_key).is_some());
        let spread = hard
            .iter()
            .map(|c| {
                // nodeAffinityPolicy Honor (the default): only nodes the pod could use count;
                // nodeTaintsPolicy Honor (not the default): only nodes whose taints it tolerates.
                // Domains and the pods in them both come from these nodes alone.
                let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
                let honor_taints = c.node_taints_policy.as_deref() == Some("Honor");
                let eligible: Vec<bool> = (0..cluster.nodes.len())
                    .map(|n| {
                        all_keys(n)
                            && (!honor_affinity || node_selected(n))
                            && (!honor_taints
                                || untolerated_taint(spec, &cluster.nodes[n].node.spec.taints)
                                    .is_none())
                    })
                    .collect();
                let mut counts: HashMap<String, i64> = HashMap::new();
                for n in (0..cluster.nodes.len()).filter(|&n| eligible[n]) {
                    if let Some(v) = value(n, &c.topology_key) {
                        counts.entry(v).or_insert(0);
                    }
                }
                // matchLabelKeys: only pods with the pod's own values for these keys count.
                let same_keys = |labels: &FlatMap<String>| {
                    c.match_label_keys
                        .iter()
                        .flatten()
                        .all(|k| pod.labels.get(k).is_none_or(|v| labels.get(k) == Some(v)))
                };
                for p in others.iter().filter(|p| eligible[p.node]) {
                    if p.namespace == pod.namespace
                        && selects(c.label_selector.as_ref(), p.labels)
                        && same_keys(p.labels)
                        && let Some(v) = value(p.node, &c.topology_key)
                        && let Some(count) = counts.get_mut(&v)
                    {
                        *count += 1;
                    }
                }
                let min_domains = c.min_domains.unwrap_or(1).max(1) as usize;
                let min = if counts.len() < min_domains {
                    0
                } else {
                    counts.values().copied().min().unwrap_or(0)
                };
                Spread {
                    key: c.topology_key.clone(),
                    max_skew: i64::from(c.max_skew),
                    counts,
                    min,
                    self_match: i64::from(selects(c.label_selector.as_ref(), &pod.labels)),
                }
            })
            .collect();
        let terms = |anti: bool| -> Vec<PodAffinityTerm> {
            spec.affinity
                .as_ref()
                .and_then(|a| {
                    if anti {
                        a.pod_anti_affinity
                            .as_ref()?
                            .required_during_scheduling_ignored_during_execution
                            .clone()
                    } else {
                        a.pod_affinity
                            .as_ref()?
                            .required_during_scheduling_ignored_during_execution
                            .clone()
                    }
                })
                .unwrap_or_default()
        };
        let domains_of = |term: &PodAffinityTerm, anti: bool| -> HashSet<String> {
            others
                .iter()
                .filter(|p| term_selects(term, &pod.namespace, p, anti))
                .filter_map(|p| value(p.node, &term.topology_key))
                .collect()
        };
        let affinity = terms(false)
            .iter()
            .map(|t| {
                let domains = domains_of(t, false);
                let anywhere = others
                    .iter()
                    .any(|p| term_selects(t, &pod.namespace, p, false));
                Affinity {
                    key: t.topology_key.clone(),
                    first_of_group: !anywhere && term_selects(t, &pod.namespace, &me, false),
                    domains,
                }
            })
            .collect();
        let anti_affinity = terms(true)
            .iter()
            .map(|t| (t.topology_key.clone(), domains_of(t, true)))
            .collect();
        let mut repelled: Vec<(String, HashSet<String>)> = Vec::new();
        for p in others {
            for t in p.anti_affinity {
                if term_selects(t, p.namespace, &me, true)
                    && let Some(v) = value(p.node, &t.topology_key)
                {
                    match repelled.iter_mut().find(|(k, _)| *k == t.topology_key) {
                        Some((_, set)) => {
                            set.insert(v);
                        }
                        None => repelled.push((t.topology_key.clone(), HashSet::from([v]))),
                    }
                }
            }
        }
        let count_in_domains = |selects_pod: &dyn Fn(&Placed<'_>) -> bool, key: &str| {
            let mut counts: HashMap<String, i64> = HashMap::new();
            for p in others.iter().filter(|p| selects_pod(p)) {
                if let Some(v) = value(p.node, key) {
                    *counts.entry(v).or_insert(0) += 1;
                }
            }
            counts
        };
        let weighted = |anti: bool| {
            let a = spec.affinity.as_ref();
            let terms = if anti {
                a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .clone()
                })
            } else {
                a.and_then(|a| a.pod_affinity.as_ref()).and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .clone()
                })
            };
            terms.unwrap_or_default()
        };
        let preferred: Vec<Preference> = [false, true]
            .into_iter()
            .flat_map(|anti| weighted(anti).into_iter().map(move |t| (anti, t)))
            .map(|(anti, w)| {
                let term = &w.pod_affinity_term;
                let sign = if anti { -1.0 } else { 1.0 };
                Preference {
                    key: term.topology_key.clone(),
                    weight: sign * f64::from(w.weight),
                    counts: count_in_domains(
                        &|p| term_selects(term, &pod.namespace, p, anti),
                        &term.topology_key,
                    ),
                    offset: 0,
                }
            })
            .collect();
        // The running pods' own preferred terms that select this pod: +weight (affinity) or
        // -weight (anti-affinity) on the nodes of their domain, one term per topology key.
        let mut theirs: Vec<Preference> = Vec::new();
        for p in others {
            let signed = p
                .preferred
                .iter()
                .map(|w| (w, 1))
                .chain(p.preferred_anti.iter().map(|w| (w, -1)));
            for (w, sign) in signed {
                let term = &w.pod_affinity_term;
                let Some(v) = value(p.node, &term.topology_key) else {
                    continue;
                };
                if !term_selects(term, p.namespace, &me, sign < 0) {
                    continue;
                }
                let at = match theirs.iter().position(|t| t.key == term.topology_key) {
                    Some(i) => i,
                    None => {
                        theirs.push(Preference {
                            key: term.topology_key.clone(),
                            weight: 1.0,
                            counts: HashMap::new(),
                            offset: 0,
                        });
                        theirs.len() - 1
                    }
                };
                *theirs[at].counts.entry(v).or_insert(0) += sign * i64::from(w.weight);
            }
        }
        let preferred: Vec<Preference> = preferred.into_iter().chain(theirs).collect();
        let soft_spread = spec
            .topology_spread_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == "ScheduleAnyway")
            .map(|c| {
                let domains: HashSet<String> = (0..cluster.nodes.len())
                    .filter(|&n| node_selected(n))
                    .filter_map(|n| value(n, &c.topology_key))
                    .collect();
                Preference {
                    key: c.topology_key.clone(),
                    weight: ((domains.len() + 2) as f64).ln(),
                    counts: count_in_domains(
                        &|p| {
                            p.namespace == pod.namespace
                                && selects(c.label_selector.as_ref(), p.labels)
                        },
                        &c.topology_key,
                    ),
                    offset: i64::from(c.max_skew) - 1,
                }
            })
            .collect();
        Topology {
            spread,
            affinity,
            anti_affinity,
            repelled,
            preferred,
            soft_spread,
        }
    }

    /// The node's raw InterPodAffinity and PodTopologySpread scores (kube-scheduler's, before
    /// normalization): matching pods in its domains times each term's weight.
    pub fn raw_scores(&self, ctx: &Context<'_>, n: usize) -> RawScores {
        let node = &ctx.cluster.nodes[n];
        let sum = |terms: &[Preference]| -> f64 {
            terms
                .iter()
                .filter_map(|t| {
                    let v = node.label(&t.key)?;
                    let count = t.counts.get(v).copied().unwrap_or(0) + t.offset;
                    Some(count as f64 * t.weight)
                })
                .sum()
        };
        RawScores {
            affinity: sum(&self.preferred),
            spread: (!self.soft_spread.is_empty()).then(|| sum(&self.soft_spread)),
        }
    }

    /// True when nothing here can reject or score a node.
    pub fn is_empty(&self) -> bool {
        self.spread.is_empty()
            && self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.repelled.is_empty()
            && self.preferred.is_empty()
            && self.soft_spread.is_empty()
    }

    /// PodTopologySpread then InterPodAffinity on one node.
    pub fn check(&self, ctx: &Context<'_>, n: usize) -> Result<(), Rejection> {
        let node = &ctx.cluster.nodes[n];
        for s in &self.spread {
            let Some(v) = node.label(&s.key) else {
                return Err(Rejection::SpreadMissingLabel);
            };
            let count = s.counts.get(v).copied().unwrap_or(0);
            if count + s.self_match - s.min > s.max_skew {
                return Err(Rejection::Spread);
            }
        }
        // InterPodAffinity's order: the pod's own affinity, its anti-affinity, then the
        // running pods' anti-affinity.
        if self
            .affinity
            .iter()
            .any(|a| !a.first_of_group && node.label(&a.key).is_none_or(|v| !a.domains.contains(v)))
        {
            return Err(Rejection::Affinity);
        }
        if self
            .anti_affinity
            .iter()
            .any(|(key, set)| node.label(key).is_some_and(|v| set.contains(v)))
        {
            return Err(Rejection::AntiAffinity);
        }
        if self
            .repelled
            .iter()
            .any(|(key, set)| node.label(key).is_some_and(|v| set.contains(v)))
        {
            return Err(Rejection::ExistingAntiAffinity);
        }
        Ok(())
    }
}
