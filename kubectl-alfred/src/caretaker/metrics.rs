//! The caretaker's Prometheus series (alfred-reference.md §3.5), through `prometheus-client`:
//! OME's names and labels where the meaning is the same, so its dashboards and alerts work
//! unchanged, and what OME lacks (passes, API requests, journal, holds, leader transitions).
//!
//! Label values that come from objects stay bounded: the cluster gauges are cleared before each
//! publish (a vanished node, pool or size leaves no series); counters by workload or node drop
//! the series of objects no longer in the cluster after each pass, and past
//! [`MAX_OBJECT_LABELS`] distinct values a new one is counted as `other`.

use std::collections::{BTreeSet, HashSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use alfred::decision::gauges::ClusterGauges;
use alfred::decision::record::NodeEvent;
use alfred::decision::{Row, RowOutcome};
use alfred::reasons::{AdvisoryReason, EventReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// What `/metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Distinct workloads (or nodes) a counter keeps series for; more are counted as `other`.
pub const MAX_OBJECT_LABELS: usize = 2000;

/// Prometheus's default buckets (the reference's loop histograms use them).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

type FloatGauge = Gauge<f64, AtomicU64>;

macro_rules! labels {
    ($name:ident { $($field:ident),* }) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name { $(pub $field: String),* }
    };
}

labels!(Pool { pool });
labels!(PoolSize { pool, size });
labels!(NodeStatus { node, status });
labels!(Size { size });
labels!(Produced {
    policy,
    workload,
    component,
    reason,
    executable
});
labels!(Accepted {
    policy,
    workload,
    component
});
labels!(Rejected {
    policy,
    workload,
    component,
    reason
});
labels!(Lws { isvc, action });
labels!(NodeReason { node, reason });
labels!(Policy { policy });
labels!(Calls {
    policy,
    workload,
    mode,
    surface
});
labels!(Outcome {
    policy,
    workload,
    mode,
    outcome
});
labels!(Evacuation {
    node,
    workload,
    surface,
    outcome
});
labels!(PodLabel { pod });
labels!(OutcomeLabel { outcome });
labels!(Verb { verb });

/// A counter family that remembers its label sets, so the series of objects that left the
/// cluster can be dropped.
pub struct Tracked<L: EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync> {
    family: Family<L, Counter>,
    seen: Mutex<HashSet<L>>,
}

impl<L> Tracked<L>
where
    L: EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    fn new() -> Self {
        Tracked {
            family: Family::default(),
            seen: Mutex::new(HashSet::new()),
        }
    }

    fn inc(&self, labels: L) {
        self.family.get_or_create(&labels).inc();
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(labels);
    }

    /// Drops every series `keep` refuses.
    fn retain(&self, keep: impl Fn(&L) -> bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|l| {
            let kept = keep(l);
            if !kept {
                self.family.remove(l);
            }
            kept
        });
    }

    #[cfg(test)]
    pub fn get(&self, labels: &L) -> u64 {
        self.family.get(labels).map_or(0, |c| c.get())
    }
}

/// Object names a label may carry: at most [`MAX_OBJECT_LABELS`], the rest `other`.
#[derive(Default)]
struct Bounded(Mutex<BTreeSet<String>>);

impl Bounded {
    fn value(&self, name: &str) -> String {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if known.contains(name) || known.len() < MAX_OBJECT_LABELS && known.insert(name.into()) {
            return name.to_string();
        }
        "other".into()
    }

    /// Keeps only the names still present; true for a value to keep.
    fn retain(&self, present: &BTreeSet<&str>) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|n| present.contains(n.as_str()));
    }

    fn keeps(&self, name: &str) -> bool {
        name == "other"
            || self
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(name)
    }
}

pub struct Metrics {
    registry: Registry,
    // Cluster: every replica, every observation.
    pub cluster_fragmentation_score: FloatGauge,
    pub fragmentation_observed: Family<PoolSize, FloatGauge>,
    pub fragmentation_reclaimable: Family<Pool, FloatGauge>,
    pub pending_pressure: Family<Pool, FloatGauge>,
    pub gpu_capacity: Family<NodeStatus, Gauge>,
    pub pending_pod_count: Gauge,
    pub pending_pod_gpu_requirements: Family<Size, Gauge>,
    pub surge_headroom_gpus: Family<Pool, Gauge>,
    // Decision: the leader, every pass.
    pub recommendations_produced: Tracked<Produced>,
    pub recommendations_accepted: Tracked<Accepted>,
    pub recommendations_rejected: Tracked<Rejected>,
    pub lws_recommendations: Tracked<Lws>,
    pub nodehealth_signals: Tracked<NodeReason>,
    pub nodemaintenance_signals: Tracked<NodeReason>,
    pub cooldown_overrides: Family<Policy, Counter>,
    pub migration_calls: Tracked<Calls>,
    pub migration_outcome: Tracked<Outcome>,
    pub nodehealth_evacuations: Tracked<Evacuation>,
    // Loop and state.
    pub observation_loop_duration: Histogram,
    pub decision_loop_duration: Histogram,
    pub leader_status: Family<PodLabel, Gauge>,
    pub policy_reload: Family<OutcomeLabel, Counter>,
    pub circuit_breaker_state: Gauge,
    pub omenative_unavailable: Gauge,
    // Beyond the reference.
    pub passes: Family<OutcomeLabel, Counter>,
    pub last_successful_pass: FloatGauge,
    pub api_requests: Family<Verb, Counter>,
    pub api_request_duration: Family<Verb, Histogram>,
    pub pass_api_requests: Family<Verb, Gauge>,
    pub journal_bytes: Gauge,
    pub journal_entries: Gauge,
    pub holds: Gauge,
    pub leader_transitions: Counter,
    pub caches_synced: Gauge,
    workloads: Bounded,
    nodes: Bounded,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

fn histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let latency = || {
            Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ])
        };
        let m = Metrics {
            registry: Registry::default(),
            cluster_fragmentation_score: FloatGauge::default(),
            fragmentation_observed: Family::default(),
            fragmentation_reclaimable: Family::default(),
            pending_pressure: Family::default(),
            gpu_capacity: Family::default(),
            pending_pod_count: Gauge::default(),
            pending_pod_gpu_requirements: Family::default(),
            surge_headroom_gpus: Family::default(),
            recommendations_produced: Tracked::new(),
            recommendations_accepted: Tracked::new(),
            recommendations_rejected: Tracked::new(),
            lws_recommendations: Tracked::new(),
            nodehealth_signals: Tracked::new(),
            nodemaintenance_signals: Tracked::new(),
            cooldown_overrides: Family::default(),
            migration_calls: Tracked::new(),
            migration_outcome: Tracked::new(),
            nodehealth_evacuations: Tracked::new(),
            observation_loop_duration: histogram(),
            decision_loop_duration: histogram(),
            leader_status: Family::default(),
            policy_reload: Family::default(),
            circuit_breaker_state: Gauge::default(),
            omenative_unavailable: Gauge::default(),
            passes: Family::default(),
            last_successful_pass: FloatGauge::default(),
            api_requests: Family::default(),
            api_request_duration: Family::new_with_constructor(latency),
            pass_api_requests: Family::default(),
            journal_bytes: Gauge::default(),
            journal_entries: Gauge::default(),
            holds: Gauge::default(),
            leader_transitions: Counter::default(),
            caches_synced: Gauge::default(),
            workloads: Bounded::default(),
            nodes: Bounded::default(),
        };
        // prometheus-client adds `_total` to a counter's name itself.
        macro_rules! r {
            ($name:literal, $help:literal, Box::new($metric:expr)) => {
                registry.register(
                    $name.strip_suffix("_total").unwrap_or($name),
                    $help,
                    $metric,
                )
            };
        }
        r!(
            "alfred_cluster_fragmentation_score",
            "Highest fragmentation score over the GPU pools, in [0,1]",
            Box::new(m.cluster_fragmentation_score.clone())
        );
        r!(
            "alfred_fragmentation_observed",
            "Frag(c,s): share of the pool's free GPUs a pod of this size cannot use",
            Box::new(m.fragmentation_observed.clone())
        );
        r!(
            "alfred_fragmentation_reclaimable",
            "Share of the observed fragmentation that moving movable Instances could remove",
            Box::new(m.fragmentation_reclaimable.clone())
        );
        r!(
            "alfred_pending_pressure",
            "P(c): age-weighted pressure of pending pods a repack could seat",
            Box::new(m.pending_pressure.clone())
        );
        r!(
            "alfred_gpu_capacity",
            "GPUs of each GPU node: total, allocated, free and contiguous_max (= free)",
            Box::new(m.gpu_capacity.clone())
        );
        r!(
            "alfred_pending_pod_count",
            "Unscheduled pods that request GPUs",
            Box::new(m.pending_pod_count.clone())
        );
        r!(
            "alfred_pending_pod_gpu_requirements",
            "Unscheduled GPU pods by the GPUs each requests",
            Box::new(m.pending_pod_gpu_requirements.clone())
        );
        r!(
            "alfred_surge_headroom_gpus",
            "Most free GPUs on one node of the pool Alfred may place on (0: no surge fits)",
            Box::new(m.surge_headroom_gpus.clone())
        );
        r!(
            "alfred_recommendations_produced_total",
            "Recommendation rows the policies produced, every pass",
            Box::new(m.recommendations_produced.family.clone())
        );
        r!(
            "alfred_recommendations_accepted_total",
            "Rows the arbiter admitted (submitted or withheld)",
            Box::new(m.recommendations_accepted.family.clone())
        );
        r!(
            "alfred_recommendations_rejected_total",
            "Rows the arbiter rejected, by reason",
            Box::new(m.recommendations_rejected.family.clone())
        );
        r!(
            "alfred_lws_recommendations_total",
            "Advice for LeaderWorkerSet workloads, which Alfred never moves",
            Box::new(m.lws_recommendations.family.clone())
        );
        r!(
            "alfred_nodehealth_signals_total",
            "Node repair events recorded (NodeRepairNeeded, NodeDrainedForRepair)",
            Box::new(m.nodehealth_signals.family.clone())
        );
        r!(
            "alfred_nodemaintenance_signals_total",
            "Node maintenance events recorded (NodeMaintenanceRequested, NodeDrainedForMaintenance)",
            Box::new(m.nodemaintenance_signals.family.clone())
        );
        r!(
            "alfred_cooldown_overrides_total",
            "Health evacuations admitted under the cooldown floor",
            Box::new(m.cooldown_overrides.clone())
        );
        r!(
            "alfred_migration_calls_total",
            "Migration requests sent (annotation written)",
            Box::new(m.migration_calls.family.clone())
        );
        r!(
            "alfred_migration_outcome_total",
            "Terminal outcomes of sent requests: completed, failed, stalled",
            Box::new(m.migration_outcome.family.clone())
        );
        r!(
            "alfred_nodehealth_evacuations_total",
            "Requests sent to move an Instance off an unhealthy or maintenance node",
            Box::new(m.nodehealth_evacuations.family.clone())
        );
        r!(
            "alfred_observation_loop_duration_seconds",
            "Time of one observation: read the caches, score, publish",
            Box::new(m.observation_loop_duration.clone())
        );
        r!(
            "alfred_decision_loop_duration_seconds",
            "Time of one execute pass, its reads and writes included",
            Box::new(m.decision_loop_duration.clone())
        );
        r!(
            "alfred_leader_status",
            "1 on the replica that holds the lease, 0 on the others",
            Box::new(m.leader_status.clone())
        );
        r!(
            "alfred_policy_reload_total",
            "Loads of alfred-config by outcome (a failure keeps the last good one)",
            Box::new(m.policy_reload.clone())
        );
        r!(
            "alfred_circuit_breaker_state",
            "1 while the circuit breaker is open (no request is sent), else 0",
            Box::new(m.circuit_breaker_state.clone())
        );
        r!(
            "alfred_omenative_unavailable",
            "1 while no migration API is configured (migration.apiVersion is not v1)",
            Box::new(m.omenative_unavailable.clone())
        );
        r!(
            "alfred_passes_total",
            "Execute passes by outcome (failure: the pass ended in an error)",
            Box::new(m.passes.clone())
        );
        r!(
            "alfred_last_successful_pass_timestamp_seconds",
            "Unix time the last successful pass ended",
            Box::new(m.last_successful_pass.clone())
        );
        r!(
            "alfred_api_requests_total",
            "Requests to the API server by verb (list, watch, get, create, patch, update, delete)",
            Box::new(m.api_requests.clone())
        );
        r!(
            "alfred_api_request_duration_seconds",
            "Time to the API server's answer (its headers), by verb",
            Box::new(m.api_request_duration.clone())
        );
        r!(
            "alfred_pass_api_requests",
            "Requests the last pass made, by verb (watch caches make it constant)",
            Box::new(m.pass_api_requests.clone())
        );
        r!(
            "alfred_journal_bytes",
            "Size of the dispatch journal (state.json) after the last pass",
            Box::new(m.journal_bytes.clone())
        );
        r!(
            "alfred_journal_entries",
            "Entries in the dispatch journal after the last pass",
            Box::new(m.journal_entries.clone())
        );
        r!(
            "alfred_holds",
            "Holds the last pass asked to stand (holdMinutes)",
            Box::new(m.holds.clone())
        );
        r!(
            "alfred_leader_transitions_total",
            "Times this replica became the leader",
            Box::new(m.leader_transitions.clone())
        );
        r!(
            "alfred_caches_synced",
            "1 once every watched kind has been listed, else 0",
            Box::new(m.caches_synced.clone())
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Publishes one observation: the series of vanished pools, nodes and sizes go.
    pub fn publish_cluster(&self, g: &ClusterGauges, took: Duration) {
        self.cluster_fragmentation_score.set(g.fragmentation_score);
        self.fragmentation_observed.clear();
        self.fragmentation_reclaimable.clear();
        self.pending_pressure.clear();
        self.gpu_capacity.clear();
        self.pending_pod_gpu_requirements.clear();
        self.surge_headroom_gpus.clear();
        for p in &g.pools {
            let pool = || Pool {
                pool: p.pool.clone(),
            };
            for (size, frag) in &p.observed {
                let labels = PoolSize {
                    pool: p.pool.clone(),
                    size: size.to_string(),
                };
                self.fragmentation_observed
                    .get_or_create(&labels)
                    .set(*frag);
            }
            self.fragmentation_reclaimable
                .get_or_create(&pool())
                .set(p.reclaimable);
            self.pending_pressure
                .get_or_create(&pool())
                .set(p.pending_pressure);
            self.surge_headroom_gpus
                .get_or_create(&pool())
                .set(p.surge_headroom);
        }
        for n in &g.nodes {
            for (status, value) in [
                ("total", n.total),
                ("allocated", n.allocated),
                ("free", n.free),
                ("contiguous_max", n.free),
            ] {
                let labels = NodeStatus {
                    node: n.node.clone(),
                    status: status.into(),
                };
                self.gpu_capacity.get_or_create(&labels).set(value);
            }
        }
        self.pending_pod_count.set(g.pending_pods as i64);
        for (size, count) in &g.pending_by_size {
            let labels = Size {
                size: size.to_string(),
            };
            self.pending_pod_gpu_requirements
                .get_or_create(&labels)
                .set(*count as i64);
        }
        self.observation_loop_duration.observe(took.as_secs_f64());
    }

    /// Counts one pass's rows: every row produced, admitted or rejected; LWS advice; requests
    /// sent and outcomes observed.
    pub fn count_rows(&self, rows: &[Row]) {
        for row in rows {
            let policy = row.policy.as_str().to_string();
            let workload = self.workloads.value(&row.workload);
            let component = row.component.as_str().to_string();
            self.recommendations_produced.inc(Produced {
                policy: policy.clone(),
                workload: workload.clone(),
                component: component.clone(),
                reason: row.reason.as_str().into(),
                executable: row.advisory_reason.is_none().to_string(),
            });
            match (row.outcome, row.reject_reason) {
                (RowOutcome::Rejected, Some(reason)) => {
                    self.recommendations_rejected.inc(Rejected {
                        policy: policy.clone(),
                        workload: workload.clone(),
                        component: component.clone(),
                        reason: reason.as_str().into(),
                    })
                }
                (RowOutcome::Withheld | RowOutcome::Submitted, _) => {
                    self.recommendations_accepted.inc(Accepted {
                        policy: policy.clone(),
                        workload: workload.clone(),
                        component: component.clone(),
                    })
                }
                _ => {}
            }
            if row.advisory_reason == Some(AdvisoryReason::LWSMigrationUnsupported) {
                self.lws_recommendations.inc(Lws {
                    isvc: workload.clone(),
                    action: "MigrateToOMENative".into(),
                });
            }
            if row.cooldown_overridden {
                self.cooldown_overrides
                    .get_or_create(&Policy {
                        policy: policy.clone(),
                    })
                    .inc();
            }
        }
    }

    /// A request the pass sent: `migration_calls_total`, and for an evacuation
    /// `nodehealth_evacuations_total`.
    pub fn count_sent(&self, row: &Row) {
        let workload = self.workloads.value(&row.workload);
        self.migration_calls.inc(Calls {
            policy: row.policy.as_str().into(),
            workload: workload.clone(),
            mode: "OMENative".into(),
            surface: "omenative".into(),
        });
        if row.policy == alfred::decision::PolicyName::Nodehealth {
            self.nodehealth_evacuations.inc(Evacuation {
                node: self.nodes.value(&row.from_node),
                workload,
                surface: "omenative".into(),
                outcome: "submitted".into(),
            });
        }
    }

    /// A request that reached its end this pass (`completed`, `failed` or `stalled`).
    pub fn count_outcome(&self, policy: &str, workload: &str, outcome: &str) {
        self.migration_outcome.inc(Outcome {
            policy: policy.into(),
            workload: self.workloads.value(workload),
            mode: "OMENative".into(),
            outcome: outcome.into(),
        });
    }

    /// Node events recorded this pass.
    pub fn count_node_events(&self, events: &[NodeEvent]) {
        for e in events {
            let labels = NodeReason {
                node: self.nodes.value(&e.node),
                reason: e.reason.as_str().into(),
            };
            match e.reason {
                EventReason::NodeRepairNeeded | EventReason::NodeDrainedForRepair => {
                    self.nodehealth_signals.inc(labels)
                }
                EventReason::NodeMaintenanceRequested | EventReason::NodeDrainedForMaintenance => {
                    self.nodemaintenance_signals.inc(labels)
                }
                _ => {}
            }
        }
    }

    /// Drops the series of workloads and nodes no longer in the cluster.
    pub fn forget_gone(&self, workloads: &BTreeSet<&str>, nodes: &BTreeSet<&str>) {
        self.workloads.retain(workloads);
        self.nodes.retain(nodes);
        let w = |name: &String| self.workloads.keeps(name);
        let n = |name: &String| self.nodes.keeps(name);
        self.recommendations_produced.retain(|l| w(&l.workload));
        self.recommendations_accepted.retain(|l| w(&l.workload));
        self.recommendations_rejected.retain(|l| w(&l.workload));
        self.lws_recommendations.retain(|l| w(&l.isvc));
        self.migration_calls.retain(|l| w(&l.workload));
        self.migration_outcome.retain(|l| w(&l.workload));
        self.nodehealth_evacuations
            .retain(|l| w(&l.workload) && n(&l.node));
        self.nodehealth_signals.retain(|l| n(&l.node));
        self.nodemaintenance_signals.retain(|l| n(&l.node));
    }

    /// Counts one request to the API server.
    pub fn api_request(&self, verb: &'static str, took: Duration) {
        let labels = Verb { verb: verb.into() };
        self.api_requests.get_or_create(&labels).inc();
        self.api_request_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

/// The verbs requests are counted under.
pub const VERBS: [&str; 7] = [
    "list", "watch", "get", "create", "patch", "update", "delete",
];

/// The verb the API server logs a request under, from its method and query: a GET with
/// `watch=true` watches, one with a limit or a selector lists (every list Alfred makes has
/// one), any other reads one object.
pub fn verb_of(method: &http::Method, query: Option<&str>) -> &'static str {
    let has =
        |key: &str| query.is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some(key)));
    match *method {
        http::Method::GET if query.is_some_and(|q| q.split('&').any(|p| p == "watch=true")) => {
            "watch"
        }
        http::Method::GET if has("limit") || has("fieldSelector") || has("labelSelector") => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::PUT => "update",
        http::Method::DELETE => "delete",
        _ => "get",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_read_as_the_api_server_logs_them() {
        let get = http::Method::GET;
        assert_eq!(verb_of(&get, Some("watch=true&resourceVersion=5")), "watch");
        assert_eq!(verb_of(&get, Some("limit=500")), "list");
        assert_eq!(
            verb_of(&get, Some("fieldSelector=metadata.name%3Dx")),
            "list"
        );
        assert_eq!(verb_of(&get, None), "get");
        assert_eq!(verb_of(&http::Method::PATCH, None), "patch");
    }

    #[test]
    fn object_labels_stay_bounded_and_gone_objects_lose_their_series() {
        let m = Metrics::new();
        for i in 0..MAX_OBJECT_LABELS + 5 {
            assert_eq!(
                m.workloads.value(&format!("ns/w{i}")) == "other",
                i >= MAX_OBJECT_LABELS
            );
        }
        let calls = |w: &str| Calls {
            policy: "defragmentation".into(),
            workload: w.into(),
            mode: "OMENative".into(),
            surface: "omenative".into(),
        };
        m.migration_calls.inc(calls("ns/w1"));
        m.migration_calls.inc(calls("ns/w2"));
        let present: BTreeSet<&str> = ["ns/w2"].into();
        m.forget_gone(&present, &BTreeSet::new());
        assert_eq!(m.migration_calls.get(&calls("ns/w1")), 0);
        assert_eq!(m.migration_calls.get(&calls("ns/w2")), 1);
        assert!(!m.render().contains("ns/w1\""));
        // Room again for a new workload once the others left.
        assert_eq!(m.workloads.value("ns/new"), "ns/new");
    }
}
