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

const HOSTNAME: &str = "kubernetes.io/hostname";

/// A pod as these filters see it: namespace, labels, node, required anti-affinity terms.
pub struct Placed<'a> {
    pub namespace: &'a str,
    pub labels: &'a FlatMap<String>,
    pub node: usize,
    pub anti_affinity: &'a [PodAffinityTerm],
    /// Its required pod affinity terms: each that selects a new pod adds 1 to the nodes of its
    /// domain (`hardPodAffinityWeight`).
    pub affinity: &'a [PodAffinityTerm],
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
            affinity: pod_affinity
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
            && self.affinity.is_empty()
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

/// An InterPodAffinity scoring term: its topology key, its weight (negative for
/// anti-affinity), and the pods it counts per domain.
struct Preference {
    key: String,
    weight: i64,
    counts: HashMap<String, i64>,
}

/// A `ScheduleAnyway` spread constraint, scored over the feasible nodes as kube-scheduler
/// scores it: its domains are the feasible nodes' values.
struct SoftSpread {
    key: String,
    max_skew: i64,
    /// Per node: may its pods count (the constraint's node inclusion policies)?
    counted: Vec<bool>,
    /// Per node: pods there the constraint selects.
    matching: Vec<i64>,
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
    soft_spread: Vec<SoftSpread>,
    /// Per node: carries every soft constraint's key (others are scored 0 and count nothing).
    soft_keys: Vec<bool>,
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
            affinity: &[],
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
                let sign = if anti { -1 } else { 1 };
                Preference {
                    key: term.topology_key.clone(),
                    weight: sign * i64::from(w.weight),
                    counts: count_in_domains(
                        &|p| term_selects(term, &pod.namespace, p, anti),
                        &term.topology_key,
                    ),
                }
            })
            .collect();
        // The running pods' own terms that select this pod: their required affinity (+1, the
        // default hardPodAffinityWeight), preferred affinity (+weight) and anti-affinity
        // (-weight) on the nodes of their domain, one sum per topology key.
        let mut theirs: Vec<Preference> = Vec::new();
        for p in others {
            let signed = p
                .affinity
                .iter()
                .map(|t| (t, 1))
                .chain(p.preferred.iter().map(|w| (&w.pod_affinity_term, w.weight)))
                .chain(
                    p.preferred_anti
                        .iter()
                        .map(|w| (&w.pod_affinity_term, -w.weight)),
                );
            for (term, weight) in signed {
                let Some(v) = value(p.node, &term.topology_key) else {
                    continue;
                };
                if !term_selects(term, p.namespace, &me, weight < 0) {
                    continue;
                }
                let at = match theirs.iter().position(|t| t.key == term.topology_key) {
                    Some(i) => i,
                    None => {
                        theirs.push(Preference {
                            key: term.topology_key.clone(),
                            weight: 1,
                            counts: HashMap::new(),
                        });
                        theirs.len() - 1
                    }
                };
                *theirs[at].counts.entry(v).or_insert(0) += i64::from(weight);
            }
        }
        let preferred: Vec<Preference> = preferred.into_iter().chain(theirs).collect();
        let soft: Vec<_> = spec
            .topology_spread_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == "ScheduleAnyway")
            .collect();
        let soft_keys: Vec<bool> = (0..cluster.nodes.len())
            .map(|n| soft.iter().all(|c| value(n, &c.topology_key).is_some()))
            .collect();
        let soft_spread = soft
            .iter()
            .map(|c| {
                let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
                let honor_taints = c.node_taints_policy.as_deref() == Some("Honor");
                let counted = (0..cluster.nodes.len())
                    .map(|n| {
                        (!honor_affinity || node_selected(n))
                            && (!honor_taints
                                || untolerated_taint(spec, &cluster.nodes[n].node.spec.taints)
                                    .is_none())
                    })
                    .collect();
                let same_keys = |labels: &FlatMap<String>| {
                    c.match_label_keys
                        .iter()
                        .flatten()
                        .all(|k| pod.labels.get(k).is_none_or(|v| labels.get(k) == Some(v)))
                };
                let mut matching = vec![0; cluster.nodes.len()];
                for p in others {
                    if p.namespace == pod.namespace
                        && selects(c.label_selector.as_ref(), p.labels)
                        && same_keys(p.labels)
                    {
                        matching[p.node] += 1;
                    }
                }
                SoftSpread {
                    key: c.topology_key.clone(),
                    max_skew: i64::from(c.max_skew),
                    counted,
                    matching,
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
            soft_keys,
        }
    }

    /// The node's InterPodAffinity score before normalization: the weights of the terms, the
    /// pod's and the running pods', times the pods they count in the node's domains.
    pub fn affinity_score(&self, ctx: &Context<'_>, n: usize) -> i64 {
        let node = &ctx.cluster.nodes[n];
        self.preferred
            .iter()
            .filter_map(|t| Some(t.counts.get(node.label(&t.key)?).copied()? * t.weight))
            .sum()
    }

    /// PodTopologySpread's scores of the feasible nodes, normalized (0-100, fewer matching pods
    /// in the node's domains is better), or None when the pod has no `ScheduleAnyway`
    /// constraint. As kube-scheduler: the domains are the feasible nodes' values, a node without
    /// every soft key scores 0 and counts nothing, each constraint weighs ln(domains + 2).
    pub fn spread_scores(&self, ctx: &Context<'_>, feasible: &[usize]) -> Option<Vec<i64>> {
        if self.soft_spread.is_empty() {
            return None;
        }
        let nodes = &ctx.cluster.nodes;
        let scored: Vec<usize> = feasible
            .iter()
            .copied()
            .filter(|&n| self.soft_keys[n])
            .collect();
        let by_constraint: Vec<(f64, HashMap<&str, i64>)> = self
            .soft_spread
            .iter()
            .map(|c| {
                let mut counts: HashMap<&str, i64> = HashMap::new();
                for &n in &scored {
                    counts
                        .entry(nodes[n].label(&c.key).unwrap_or_default())
                        .or_insert(0);
                }
                let size = if c.key == HOSTNAME {
                    scored.len()
                } else {
                    counts.len()
                };
                for n in (0..nodes.len()).filter(|&n| self.soft_keys[n] && c.counted[n]) {
                    if let Some(count) = nodes[n].label(&c.key).and_then(|v| counts.get_mut(v)) {
                        *count += c.matching[n];
                    }
                }
                (((size + 2) as f64).ln(), counts)
            })
            .collect();
        let raw = |n: usize| -> i64 {
            let score: f64 = self
                .soft_spread
                .iter()
                .zip(&by_constraint)
                .filter_map(|(c, (weight, counts))| {
                    let value = nodes[n].label(&c.key)?;
                    let count = if c.key == HOSTNAME {
                        c.matching[n]
                    } else {
                        counts.get(value).copied().unwrap_or(0)
                    };
                    Some(count as f64 * weight + (c.max_skew - 1) as f64)
                })
                .sum();
            score.round() as i64
        };
        let raws: Vec<Option<i64>> = feasible
            .iter()
            .map(|&n| self.soft_keys[n].then(|| raw(n)))
            .collect();
        let min = raws.iter().flatten().copied().min().unwrap_or(0);
        let max = raws.iter().flatten().copied().max().unwrap_or(0).max(0);
        Some(
            raws.into_iter()
                .map(|r| match r {
                    None => 0,
                    Some(_) if max == 0 => 100,
                    Some(s) => 100 * (max + min - s) / max,
                })
                .collect(),
        )
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
