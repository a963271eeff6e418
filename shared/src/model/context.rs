//! What every policy reads besides the cluster model: each workload's annotations (read
//! leniently), its last migration, requests pending on it, and each component's runtime and
//! model access.

use std::collections::HashMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::access::{self, ModelAccess};
use crate::annotations::{self, SpotPolicy};
use crate::api::ComponentSpec;
use crate::api::keys;
use crate::config::Config;
use crate::migration;
use crate::model::cluster::{Cluster, Workload};
use crate::snapshot::Snapshot;

/// A node-health move's score without `alfred.ome.io/priority`.
pub const DEFAULT_PRIORITY: f64 = 0.5;

/// A workload's Alfred annotations as the plan reads them: an invalid value is ignored and the
/// default applies (the webhook refuses it; execute mode stops on a bad cooldown).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSettings {
    pub movable: bool,
    pub priority: f64,
    pub cooldown_minutes: i64,
    pub spot_policy: Option<SpotPolicy>,
    pub tenant_group: String,
    /// The end of its newest finished migration (its start when it has no end).
    pub last_migration: Option<Timestamp>,
    /// A migration requested or in progress, whoever asked.
    pub active_migration: Option<String>,
    /// A request annotation OME cannot act on.
    pub malformed_request: Option<String>,
}

impl WorkloadSettings {
    pub fn read(w: &Workload<'_>, cluster: &Cluster<'_>, config: &Config) -> WorkloadSettings {
        let annotations_map = w.isvc.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations_map?.get(key).map(String::as_str);
        WorkloadSettings {
            movable: annotation(keys::MOVABLE)
                .and_then(|v| annotations::movable(v).ok())
                .unwrap_or(config.default_movable),
            priority: annotation(keys::PRIORITY)
                .and_then(|v| annotations::priority(v).ok())
                .unwrap_or(DEFAULT_PRIORITY),
            cooldown_minutes: annotation(keys::COOLDOWN_MINUTES)
                .and_then(|v| annotations::cooldown_minutes(v).ok())
                .unwrap_or(config.per_workload_cooldown_minutes),
            spot_policy: annotation(keys::SPOT_POLICY)
                .and_then(|v| annotations::spot_policy(v).ok()),
            tenant_group: annotation(keys::TENANT_GROUP)
                .unwrap_or_default()
                .to_string(),
            last_migration: last_migration(w, cluster),
            active_migration: cluster
                .migrations
                .iter()
                .find(|m| m.workload == w.key)
                .map(|m| match m.phase {
                    Some(phase) => format!("migration {} is {phase:?}", m.uuid),
                    None => format!("migration request {} is waiting for OME", m.uuid),
                }),
            malformed_request: malformed_request(w, cluster),
        }
    }

    /// Still within the defragmentation cooldown after its last migration.
    pub fn in_cooldown(&self, now: Timestamp) -> Option<Timestamp> {
        let until = self
            .last_migration?
            .checked_add(SignedDuration::from_mins(self.cooldown_minutes))
            .unwrap_or(Timestamp::MAX);
        (now < until).then_some(until)
    }
}

/// The newest terminal migration on any of the workload's InferenceReplicas.
fn last_migration(w: &Workload<'_>, cluster: &Cluster<'_>) -> Option<Timestamp> {
    w.components
        .iter()
        .filter_map(|&c| cluster.components[c].replica)
        .flat_map(|r| r.status.iter().flat_map(|s| &s.migrations))
        .filter(|m| m.phase.is_terminal())
        .filter_map(|m| {
            m.completed_at
                .as_ref()
                .or(m.started_at.as_ref())
                .map(|t| t.0)
        })
        .max()
}

/// The first request annotation an observer would count as malformed (alfred-reference.md
/// §3.3): unreadable, another schema, an unknown component, a negative instance, no source
/// node, no such current Instance, or a bad `requested_at`.
fn malformed_request(w: &Workload<'_>, cluster: &Cluster<'_>) -> Option<String> {
    for (key, value) in w.isvc.metadata.annotations.iter().flatten() {
        let Some(uuid) = key.strip_prefix(keys::MIGRATION_REQUEST_PREFIX) else {
            continue;
        };
        let problem = match migration::parse_request(value) {
            Err(e) => Some(e.to_string()),
            Ok(r) => {
                let component = w
                    .components
                    .iter()
                    .map(|&c| &cluster.components[c])
                    .find(|c| c.kind.as_str() == r.component);
                let instance_exists = component.is_some_and(|c| {
                    c.instances
                        .iter()
                        .any(|&i| i64::from(cluster.instances[i].index) == r.instance)
                });
                if component.is_none() {
                    Some(format!("component {:?} is not served here", r.component))
                } else if r.instance < 0 || !instance_exists {
                    Some(format!("instance {} does not exist", r.instance))
                } else if r.from_node.as_deref().unwrap_or_default().is_empty() {
                    Some("from_node is empty".to_string())
                } else if r
                    .requested_at
                    .as_deref()
                    .is_some_and(|t| t.parse::<Timestamp>().is_err())
                {
                    Some("requested_at is not an RFC 3339 time".to_string())
                } else {
                    None
                }
            }
        };
        if let Some(p) = problem {
            return Some(format!("migration request {uuid} is malformed: {p}"));
        }
    }
    None
}

/// The pass's view: the cluster model plus what each workload and component brings, built
/// once from a snapshot, the configuration and `now` ([`Context::build`]).
pub struct Context<'s> {
    pub cluster: Cluster<'s>,
    pub snapshot: &'s Snapshot,
    pub config: &'s Config,
    /// By workload index.
    pub workloads: Vec<WorkloadSettings>,
    /// By component index: where its model lets its pods run.
    pub access: Vec<ModelAccess>,
    /// By component index: the runtime's config of the component, when there is one.
    pub runtime: Vec<Option<&'s ComponentSpec>>,
    /// By pool: the nodes available as targets, fullest first (name breaks ties).
    pub pool_order: HashMap<String, Vec<usize>>,
    /// By component whose model access is a node label: its column in `ready_nodes`.
    model_ready: Vec<Option<usize>>,
    /// Per model label: which nodes (by index) have the model `Ready`.
    ready_nodes: Vec<Vec<bool>>,
}

impl<'s> Context<'s> {
    /// The cluster model and everything the policies read besides, at `now`.
    pub fn build(snapshot: &'s Snapshot, config: &'s Config, now: Timestamp) -> Self {
        Self::of(Cluster::build(snapshot, config, now), snapshot, config)
    }

    /// Around a cluster model already built from this snapshot and configuration.
    pub fn of(model: Cluster<'s>, snapshot: &'s Snapshot, config: &'s Config) -> Self {
        let cluster = &model;
        let workloads = cluster
            .workloads
            .iter()
            .map(|w| WorkloadSettings::read(w, cluster, config))
            .collect();
        let access: Vec<ModelAccess> = cluster
            .components
            .iter()
            .map(|c| access::resolve(cluster, snapshot, c))
            .collect();
        let runtime = cluster
            .components
            .iter()
            .map(|c| {
                let w = &cluster.workloads[c.workload];
                snapshot.runtime_component(w.namespace, w.isvc, c.kind)
            })
            .collect();
        let pool_order = cluster
            .pools
            .iter()
            .map(|pool| {
                let mut nodes: Vec<usize> = pool
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&n| !cluster.nodes[n].unavailable_as_target())
                    .collect();
                nodes.sort_by(|&a, &b| {
                    let (a, b) = (&cluster.nodes[a], &cluster.nodes[b]);
                    a.gpu_free.cmp(&b.gpu_free).then_with(|| a.name.cmp(b.name))
                });
                (pool.name.clone(), nodes)
            })
            .collect();
        let mut columns: HashMap<&str, usize> = HashMap::new();
        let mut ready_nodes: Vec<Vec<bool>> = Vec::new();
        let model_ready = access
            .iter()
            .map(|a| {
                let ModelAccess::NodesLabelled { key } = a else {
                    return None;
                };
                Some(*columns.entry(key).or_insert_with(|| {
                    let ready = cluster.nodes.iter().map(|n| n.label(key) == Some("Ready"));
                    ready_nodes.push(ready.collect());
                    ready_nodes.len() - 1
                }))
            })
            .collect();
        Context {
            cluster: model,
            snapshot,
            config,
            workloads,
            access,
            runtime,
            pool_order,
            model_ready,
            ready_nodes,
        }
    }

    /// May the component's new pods run on the node (index)? Its model must be reachable there.
    pub fn model_allows(&self, component: usize, node: usize) -> bool {
        match self.model_ready[component] {
            Some(column) => self.ready_nodes[column][node],
            None => self.access[component].allows(&self.cluster.nodes[node]),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.cluster.now
    }

    /// The settings of the workload an Instance belongs to.
    pub fn settings_of(&self, instance: usize) -> &WorkloadSettings {
        let c = self.cluster.instances[instance].component;
        &self.workloads[self.cluster.components[c].workload]
    }

    /// `namespace/name` of the Instance's workload.
    pub fn workload_key(&self, instance: usize) -> &str {
        let c = self.cluster.instances[instance].component;
        &self.cluster.workloads[self.cluster.components[c].workload].key
    }
}
