//! The cluster model every policy reads, built from a [`Snapshot`], the configuration and `now`
//! (alfred-reference.md §5 "Snapshot basics"): GPU accounting per node, GPU pools, node states,
//! Instances joined from pods and InferenceReplica rows, pending GPU pods and migrations in flight.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::api::core::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::InferenceService;
use crate::api::component::ComponentKind;
use crate::api::keys;
use crate::api::replica::{InferenceReplica, InstanceStatus, MigrationPhase, MigrationStatus};
use crate::config::Config;
use crate::kubernetes::quantity::{self, is_gpu_resource};
use crate::mode::{self, DeploymentMode};
use crate::model::health::{self, Health, HealthState};
use crate::model::observation::{ReplicaIndex, Unobservable, held_replicas};
use crate::model::requests::{non_zero_requests, pod_gpus, pod_requests};
use crate::snapshot::{Snapshot, UnreadableKind, UnreadableObject};

/// No move is undone (beyond the reference): an Instance does not go back to a node it left
/// this recently,
pub const LEFT_LATELY: SignedDuration = SignedDuration::from_hours(24);
/// and one whose last move ended this recently stays where it is.
pub const MOVED_LATELY: SignedDuration = SignedDuration::from_hours(1);

/// The label LeaderWorkerSet puts on the pods of one group (one MultiNode Instance).
pub const LABEL_LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The label older OME releases put on RawDeployment pods.
pub const LABEL_SERVING_ISVC: &str = "serving.ome.io/inferenceservice";

/// The node's largest allocatable GPU resource and its count.
fn node_gpu_capacity(node: &Node) -> Option<(String, i64)> {
    node.allocatable()
        .iter()
        .filter(|(name, _)| is_gpu_resource(name))
        .filter_map(|(name, q)| quantity::count(q).map(|n| (name.to_string(), n)))
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
}

/// Which InferenceService component and Instance a pod belongs to, from its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodOwner<'s> {
    pub isvc: &'s str,
    pub component: ComponentKind,
    pub instance_index: Option<i32>,
    pub lws_group: Option<i32>,
    pub runner: Option<&'s str>,
}

fn pod_owner(pod: &Pod) -> Option<PodOwner<'_>> {
    let label = |key| pod.metadata.label(key);
    let isvc = label(keys::LABEL_ISVC).or_else(|| label(LABEL_SERVING_ISVC))?;
    let component = ComponentKind::parse(label(keys::LABEL_COMPONENT)?)?;
    let int = |key| {
        label(key)
            .and_then(|v| v.parse::<i32>().ok())
            .filter(|i| *i >= 0)
    };
    Some(PodOwner {
        isvc,
        component,
        instance_index: int(keys::LABEL_INSTANCE_INDEX),
        lws_group: int(LABEL_LWS_GROUP_INDEX),
        runner: label(keys::LABEL_RUNNER),
    })
}

pub struct PodView<'s> {
    pub pod: &'s Pod,
    pub namespace: &'s str,
    pub name: &'s str,
    pub node: Option<&'s str>,
    /// The index of `node` in [`Cluster::nodes`], when the snapshot has that node.
    pub host: Option<usize>,
    pub gpus: i64,
    /// Its effective requests in milli-units by resource, and its cpu and memory as
    /// kube-scheduler's scores count them: read once, since every simulation charges them.
    pub requests: Vec<(&'s str, i64)>,
    pub non_zero: [i64; 2],
    /// Succeeded or Failed: holds nothing.
    pub terminal: bool,
    /// Has a deletionTimestamp: still holds its GPUs until it is gone.
    pub terminating: bool,
    pub owner: Option<PodOwner<'s>>,
}

pub struct NodeView<'s> {
    pub node: &'s Node,
    pub name: &'s str,
    pub uid: Option<&'s str>,
    /// The largest allocatable GPU resource and its count; None for nodes without GPUs.
    pub gpu_resource: Option<String>,
    pub gpu_total: i64,
    pub gpu_used: i64,
    pub gpu_free: i64,
    pub pool: Option<String>,
    pub cordoned: bool,
    pub scale_down_marked: bool,
    pub preemptible: bool,
    /// The node's own `Ready` condition is True.
    pub ready: bool,
    pub health: Health,
    /// Names of the maintenance triggers the node matches, sorted.
    pub maintenance: Vec<String>,
    /// Indices into [`Cluster::pods`] of the non-terminal pods bound here.
    pub pods: Vec<usize>,
}

impl NodeView<'_> {
    /// Alfred may place nothing here: health not Clear, maintenance requested, cordoned or
    /// marked for scale-down.
    pub fn unavailable_as_target(&self) -> bool {
        self.health.state != HealthState::Clear
            || !self.maintenance.is_empty()
            || self.cordoned
            || self.scale_down_marked
    }

    /// The node's free GPUs count for placement and scoring (a "bin"): it is available as a
    /// target, and not preemptible when preemptible nodes are avoided (`avoidAsTarget`).
    pub fn is_bin(&self, avoid_preemptible: bool) -> bool {
        !(self.unavailable_as_target() || (avoid_preemptible && self.preemptible))
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.node.metadata.label(key)
    }
}

pub struct Pool {
    pub name: String,
    /// Indices into [`Cluster::nodes`], by node name.
    pub nodes: Vec<usize>,
}

pub struct Workload<'s> {
    pub isvc: &'s InferenceService,
    pub namespace: &'s str,
    pub name: &'s str,
    /// `namespace/name`.
    pub key: String,
    /// Indices into [`Cluster::components`].
    pub components: Vec<usize>,
}

pub struct Component<'s> {
    pub workload: usize,
    pub kind: ComponentKind,
    /// As Alfred reads it: from the InferenceService alone.
    pub mode: DeploymentMode,
    /// Its InferenceReplica, when exactly one readable one serves it (also when stale).
    pub replica: Option<&'s InferenceReplica>,
    /// Indices into [`Cluster::instances`], by index.
    pub instances: Vec<usize>,
    /// Pods labelled for this component that no Instance holds: all of them when the component
    /// cannot be observed, else those without an Instance index.
    pub unjoined_pods: Vec<usize>,
    /// Why an OMENative component's Instances cannot be resolved: then it has none
    /// ([`crate::model::observation`]).
    pub unobservable: Option<Unobservable>,
}

pub struct Instance<'s> {
    pub component: usize,
    pub index: i32,
    /// Indices into [`Cluster::pods`], by pod name.
    pub pods: Vec<usize>,
    /// Its InferenceReplica row, as stored (DenseV1) or decoded (ColumnarV2).
    pub row: Option<Cow<'s, InstanceStatus>>,
    pub gpus: i64,
    /// Nodes the Instance's pods run on, sorted.
    pub nodes: Vec<String>,
    /// The node holding most of the Instance's GPUs (name breaks ties).
    pub primary_node: Option<String>,
    /// The pool all its GPU pods are in, when they are all in one.
    pub pool: Option<String>,
}

pub struct PendingPod {
    pub pod: usize,
    pub gpus: i64,
    pub since: Timestamp,
    /// The pool it is attributed to; None counts in every pool.
    pub pool: Option<String>,
}

impl PendingPod {
    /// It counts in this pool: attributed to it, or to no pool (then it counts in every one).
    pub fn counts_in(&self, pool: &str) -> bool {
        self.pool.as_deref().is_none_or(|p| p == pool)
    }

    pub fn age_minutes(&self, now: Timestamp) -> f64 {
        (now.as_second() - self.since.as_second()) as f64 / 60.0
    }
}

/// A migration someone asked for and that has not ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationInFlight {
    pub workload: String,
    pub uuid: String,
    pub component: Option<ComponentKind>,
    pub source_instance: Option<i32>,
    pub from_node: Option<String>,
    /// The request annotation is still on the InferenceService (not yet taken).
    pub requested: bool,
    /// The InferenceReplica reports it in progress.
    pub phase: Option<MigrationPhase>,
}

pub struct Cluster<'s> {
    pub now: Timestamp,
    /// Sorted by name.
    pub nodes: Vec<NodeView<'s>>,
    pub pods: Vec<PodView<'s>>,
    /// Sorted by name.
    pub pools: Vec<Pool>,
    /// Sorted by `namespace/name`.
    pub workloads: Vec<Workload<'s>>,
    pub components: Vec<Component<'s>>,
    pub instances: Vec<Instance<'s>>,
    pub pending: Vec<PendingPod>,
    pub migrations: Vec<MigrationInFlight>,
    /// The cluster serves no InferenceReplica (OME before OMENative).
    pub replicas_unserved: bool,
    /// OME objects that cannot be read as their kind; an unreadable InferenceService has no
    /// workload here.
    pub unreadable: &'s [UnreadableObject],
    node_by_name: HashMap<&'s str, usize>,
    /// (namespace, InferenceReplica name) -> the InferenceService its parentRef names.
    replica_parents: HashMap<(&'s str, &'s str), &'s str>,
    /// (namespace, name) -> index into `workloads`.
    workload_by_name: HashMap<(&'s str, &'s str), usize>,
}

impl<'s> Cluster<'s> {
    pub fn build(snapshot: &'s Snapshot, config: &Config, now: Timestamp) -> Cluster<'s> {
        let mut nodes: Vec<NodeView<'s>> = snapshot
            .nodes
            .iter()
            .map(|n| node_view(n, config, now))
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(b.name));
        let node_by_name: HashMap<&str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect();

        let mut pods: Vec<PodView<'s>> = snapshot.pods.iter().map(|p| pod_view(p)).collect();
        for (i, p) in pods.iter_mut().enumerate() {
            p.host = p.node.and_then(|name| node_by_name.get(name)).copied();
            if p.terminal {
                continue;
            }
            if let Some(n) = p.host {
                nodes[n].pods.push(i);
                nodes[n].gpu_used += p.gpus;
            }
        }
        for n in &mut nodes {
            n.gpu_free = (n.gpu_total - n.gpu_used).max(0);
        }
        assign_pools(&mut nodes);
        let pools = collect_pools(&nodes);

        let mut cluster = Cluster {
            now,
            nodes,
            pods,
            pools,
            workloads: Vec::new(),
            components: Vec::new(),
            instances: Vec::new(),
            pending: Vec::new(),
            migrations: Vec::new(),
            replicas_unserved: snapshot.replicas_unserved(),
            unreadable: &snapshot.unreadable,
            node_by_name,
            replica_parents: replica_parents(snapshot),
            workload_by_name: HashMap::new(),
        };
        cluster.join_workloads(snapshot);
        cluster.collect_pending();
        cluster.collect_migrations(snapshot);
        cluster
    }

    /// What occupies a node's GPUs, for its record (alfred-reference.md §3.1): the sorted
    /// workloads of the OME pods holding GPUs there, and whether any does. A pod counts for the
    /// InferenceService of the InferenceReplica that controls it, else for the one its label
    /// names; one whose owner cannot be resolved still occupies the node, under no name.
    pub fn gpu_occupants(&self, node: &NodeView<'_>) -> (Vec<String>, bool) {
        let mut workloads = BTreeSet::new();
        let mut occupied = false;
        for &p in &node.pods {
            let pod = &self.pods[p];
            if pod.gpus <= 0 || !ome_identity(pod) {
                continue;
            }
            occupied = true;
            let parent = controlling_replica(pod.pod)
                .and_then(|ir| self.replica_parents.get(&(pod.namespace, ir)));
            if let Some(isvc) = parent.copied().or(pod.owner.as_ref().map(|o| o.isvc)) {
                workloads.insert(format!("{}/{isvc}", pod.namespace));
            }
        }
        (workloads.into_iter().collect(), occupied)
    }

    /// The live GPU pods labelled for an OME component that no Instance holds, by (workload,
    /// component), in node-name then pod order. Alfred can move none of them and must never
    /// count their nodes as empty: [`Cluster::why_no_instance`] says why.
    pub fn unheld_gpu_pods(&self) -> BTreeMap<(String, ComponentKind), Vec<usize>> {
        let held: HashSet<usize> = self
            .instances
            .iter()
            .flat_map(|i| i.pods.iter().copied())
            .collect();
        let mut unheld: BTreeMap<(String, ComponentKind), Vec<usize>> = BTreeMap::new();
        for n in &self.nodes {
            for &p in &n.pods {
                let pod = &self.pods[p];
                let Some(o) = &pod.owner else { continue };
                if pod.gpus > 0 && !held.contains(&p) {
                    unheld
                        .entry((format!("{}/{}", pod.namespace, o.isvc), o.component))
                        .or_default()
                        .push(p);
                }
            }
        }
        unheld
    }

    /// Why no Instance holds a pod labelled for `kind` of the InferenceService `key`.
    pub fn why_no_instance(&self, key: &str, kind: ComponentKind, pod: usize) -> String {
        let pod = self.pods[pod].name;
        let Some(w) = self.workload_index(key) else {
            return match self.unreadable_service(key) {
                Some(u) => format!("InferenceService {key} cannot be read ({})", u.problem()),
                None => format!("pod {pod} names InferenceService {key}, which does not exist"),
            };
        };
        let component = self.workloads[w]
            .components
            .iter()
            .map(|&c| &self.components[c])
            .find(|c| c.kind == kind);
        match component {
            None => {
                format!("{key} declares no {kind} component, yet pod {pod} is labelled for one")
            }
            Some(c) => match &c.unobservable {
                Some(why) => why.to_string(),
                None => format!("pod {pod} carries no Instance index; check its labels"),
            },
        }
    }

    /// The InferenceService `namespace/name` when the snapshot holds it but cannot read it.
    pub fn unreadable_service(&self, key: &str) -> Option<&'s UnreadableObject> {
        let (namespace, name) = key.split_once('/')?;
        self.unreadable.iter().find(|u| {
            u.kind == UnreadableKind::InferenceService && u.namespace == namespace && u.name == name
        })
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.node_by_name.get(name).copied()
    }

    pub fn node(&self, name: &str) -> Option<&NodeView<'s>> {
        self.node_by_name.get(name).map(|&i| &self.nodes[i])
    }

    /// The Instance `index` of a workload's component, by `namespace/name`.
    pub fn instance_of(&self, workload: &str, kind: ComponentKind, index: i32) -> Option<usize> {
        self.workload(workload)?
            .components
            .iter()
            .map(|&c| &self.components[c])
            .find(|c| c.kind == kind)?
            .instances
            .iter()
            .copied()
            .find(|&i| self.instances[i].index == index)
    }

    /// When the workload Instance `i` serves was created: how long it has run, which under
    /// heavy-tailed serving lifetimes is about how long it is still to run.
    pub fn instance_created(&self, i: usize) -> Option<Timestamp> {
        let component = &self.components[self.instances[i].component];
        self.workloads[component.workload]
            .isvc
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
    }

    /// The nodes Instance `i` left within the day (`LEFT_LATELY`): no move takes it back there.
    pub fn left_lately(&self, i: usize) -> Vec<usize> {
        self.moves_of(i, self.now - LEFT_LATELY)
            .into_iter()
            .filter_map(|(node, _)| self.node_index(node))
            .collect()
    }

    /// When Instance `i`'s last move ended, if within the hour (`MOVED_LATELY`): no
    /// defragmentation move takes it anywhere yet.
    pub fn moved_lately(&self, i: usize) -> Option<Timestamp> {
        self.moves_of(i, self.now - MOVED_LATELY)
            .first()
            .map(|&(_, t)| t)
    }

    /// The completed migrations that brought Instance `i` where it runs, newest first, back to
    /// `since`: (the node it left, when the move ended). Read from its InferenceReplica's rows,
    /// following each move's source Instance (OME reuses indices).
    pub fn moves_of(&self, i: usize, since: Timestamp) -> Vec<(&'s str, Timestamp)> {
        let component = &self.components[self.instances[i].component];
        let Some(status) = component.replica.and_then(|r| r.status.as_ref()) else {
            return Vec::new();
        };
        let mut rows: Vec<(&MigrationStatus, Timestamp)> = status
            .migrations
            .iter()
            .filter(|m| m.phase == MigrationPhase::Completed)
            .filter_map(|m| Some((m, m.completed_at.as_ref().or(m.started_at.as_ref())?.0)))
            .filter(|&(_, t)| t >= since)
            .collect();
        rows.sort_by_key(|&(_, t)| std::cmp::Reverse(t));
        let (mut index, mut before) = (self.instances[i].index, self.now);
        let mut out = Vec::new();
        for (m, t) in rows {
            if m.surge_instance == Some(index) && t <= before {
                if let Some(node) = m.from_node.as_deref() {
                    out.push((node, t));
                }
                (index, before) = (m.source_instance, t);
            }
        }
        out
    }

    pub fn workload(&self, key: &str) -> Option<&Workload<'s>> {
        self.workload_index(key).map(|i| &self.workloads[i])
    }

    /// The index of a workload by `namespace/name`. (Not a binary search: the workloads are
    /// sorted by namespace, then name, which orders `chat-prod/a` after `chat/b`.)
    pub fn workload_index(&self, key: &str) -> Option<usize> {
        let (namespace, name) = key.split_once('/')?;
        self.workload_by_name.get(&(namespace, name)).copied()
    }

    fn join_workloads(&mut self, snapshot: &'s Snapshot) {
        let mut isvcs: Vec<&InferenceService> = snapshot
            .inference_services
            .iter()
            .map(|s| s.as_ref())
            .collect();
        isvcs.sort_by(|a, b| {
            (a.metadata.namespace.as_deref(), a.metadata.name.as_deref())
                .cmp(&(b.metadata.namespace.as_deref(), b.metadata.name.as_deref()))
        });
        // Pods by (namespace, isvc, component), in pod-name order.
        let mut owned: HashMap<(&str, &str, ComponentKind), Vec<usize>> = HashMap::new();
        for (i, p) in self.pods.iter().enumerate() {
            if let Some(o) = &p.owner {
                owned
                    .entry((p.namespace, o.isvc, o.component))
                    .or_default()
                    .push(i);
            }
        }
        for list in owned.values_mut() {
            list.sort_by(|a, b| self.pods[*a].name.cmp(self.pods[*b].name));
        }
        let replicas = ReplicaIndex::new(snapshot);
        for isvc in isvcs {
            let namespace = isvc.metadata.namespace.as_deref().unwrap_or("default");
            let name = isvc.metadata.name.as_deref().unwrap_or_default();
            let w = self.workloads.len();
            self.workload_by_name.insert((namespace, name), w);
            let mut workload = Workload {
                isvc,
                namespace,
                name,
                key: format!("{namespace}/{name}"),
                components: Vec::new(),
            };
            for (kind, _) in isvc.spec.components() {
                let mode = mode::alfred_mode(&isvc.spec, kind);
                let observed = replicas.observe(namespace, name, kind);
                let pods = owned.remove(&(namespace, name, kind)).unwrap_or_default();
                let c = self.components.len();
                let (groups, unjoined, unobservable) = match observed.rows {
                    Err(why) if mode == DeploymentMode::OmeNative => {
                        (BTreeMap::new(), pods, Some(why))
                    }
                    rows => {
                        let rows = rows.unwrap_or_default();
                        let (groups, unjoined) = self.group_instances(mode, rows, &pods);
                        (groups, unjoined, None)
                    }
                };
                let mut component = Component {
                    workload: w,
                    kind,
                    mode,
                    replica: observed.replica,
                    instances: Vec::new(),
                    unjoined_pods: unjoined,
                    unobservable,
                };
                for (index, (pods, row)) in groups {
                    component.instances.push(self.instances.len());
                    let instance = self.instance(c, index, pods, row);
                    self.instances.push(instance);
                }
                workload.components.push(c);
                self.components.push(component);
            }
            self.workloads.push(workload);
        }
    }

    /// Groups a component's pods into Instances by index, with the InferenceReplica's rows.
    #[allow(clippy::type_complexity)]
    fn group_instances(
        &self,
        mode: DeploymentMode,
        rows: Vec<Cow<'s, InstanceStatus>>,
        pods: &[usize],
    ) -> (
        BTreeMap<i32, (Vec<usize>, Option<Cow<'s, InstanceStatus>>)>,
        Vec<usize>,
    ) {
        let mut groups: BTreeMap<i32, (Vec<usize>, Option<Cow<'s, InstanceStatus>>)> =
            BTreeMap::new();
        let mut unjoined = Vec::new();
        match mode {
            DeploymentMode::OmeNative => {
                for &p in pods {
                    match self.pods[p].owner.as_ref().and_then(|o| o.instance_index) {
                        Some(index) => groups.entry(index).or_default().0.push(p),
                        None => unjoined.push(p),
                    }
                }
                for row in rows {
                    let index = row.index;
                    groups.entry(index).or_default().1 = Some(row);
                }
            }
            DeploymentMode::MultiNode => {
                for &p in pods {
                    let owner = self.pods[p].owner.as_ref();
                    match owner.and_then(|o| o.lws_group.or(o.instance_index)) {
                        Some(index) => groups.entry(index).or_default().0.push(p),
                        None => unjoined.push(p),
                    }
                }
            }
            DeploymentMode::RawDeployment | DeploymentMode::VirtualDeployment => {
                // One Instance per live pod, indexed in pod-name order.
                for (index, &p) in pods.iter().filter(|&&p| !self.pods[p].terminal).enumerate() {
                    groups.entry(index as i32).or_default().0.push(p);
                }
            }
        }
        (groups, unjoined)
    }

    fn instance(
        &self,
        component: usize,
        index: i32,
        pods: Vec<usize>,
        row: Option<Cow<'s, InstanceStatus>>,
    ) -> Instance<'s> {
        let mut per_node: BTreeMap<&str, i64> = BTreeMap::new();
        let mut gpus = 0;
        let mut pools: BTreeSet<Option<&str>> = BTreeSet::new();
        for &p in &pods {
            let pod = &self.pods[p];
            if pod.terminal {
                continue;
            }
            gpus += pod.gpus;
            if let Some(node) = pod.node {
                *per_node.entry(node).or_default() += pod.gpus;
                if pod.gpus > 0 {
                    pools.insert(self.node(node).and_then(|n| n.pool.as_deref()));
                }
            }
        }
        let primary_node = per_node
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string());
        let pool = match pools.len() {
            1 => pools.into_iter().next().flatten().map(str::to_string),
            _ => None,
        };
        Instance {
            component,
            index,
            pods,
            row,
            gpus,
            nodes: per_node.keys().map(|n| n.to_string()).collect(),
            primary_node,
            pool,
        }
    }

    fn collect_pending(&mut self) {
        let gpu_pools: Vec<&Pool> = self.pools.iter().collect();
        for (i, p) in self.pods.iter().enumerate() {
            if p.gpus <= 0 || p.node.is_some() || p.terminating || p.pod.phase() != "Pending" {
                continue;
            }
            let pod = p.pod;
            let since = pod
                .condition("PodScheduled")
                .filter(|c| c.status == "False")
                .and_then(|c| c.last_transition_time)
                .or(pod.metadata.creation_timestamp)
                .unwrap_or(self.now);
            let pool = if gpu_pools.len() == 1 {
                Some(gpu_pools[0].name.clone())
            } else {
                let selector = &pod.spec.node_selector;
                let fits: Vec<&str> = gpu_pools
                    .iter()
                    .filter(|pool| {
                        pool.nodes.iter().any(|&n| {
                            selector
                                .iter()
                                .all(|(k, v)| self.nodes[n].label(k) == Some(v.as_str()))
                        })
                    })
                    .map(|pool| pool.name.as_str())
                    .collect();
                (fits.len() == 1).then(|| fits[0].to_string())
            };
            self.pending.push(PendingPod {
                pod: i,
                gpus: p.gpus,
                since,
                pool,
            });
        }
    }

    fn collect_migrations(&mut self, snapshot: &Snapshot) {
        for w in &self.workloads {
            for (key, _) in w.isvc.metadata.annotations.iter().flatten() {
                if let Some(uuid) = key.strip_prefix(keys::MIGRATION_REQUEST_PREFIX) {
                    self.migrations.push(MigrationInFlight {
                        workload: w.key.clone(),
                        uuid: uuid.to_string(),
                        component: None,
                        source_instance: None,
                        from_node: None,
                        requested: true,
                        phase: None,
                    });
                }
            }
        }
        for ir in &snapshot.inference_replicas {
            let namespace = ir.metadata.namespace.as_deref().unwrap_or("default");
            let isvc = ir
                .spec
                .parent_ref
                .as_ref()
                .map(|p| p.name.clone())
                .or_else(|| ir.metadata.name.clone())
                .unwrap_or_default();
            for m in ir.status.iter().flat_map(|s| &s.migrations) {
                if m.phase.is_terminal() {
                    continue;
                }
                self.migrations.push(MigrationInFlight {
                    workload: format!("{namespace}/{isvc}"),
                    uuid: m.request_uuid.clone(),
                    component: Some(ir.spec.component),
                    source_instance: Some(m.source_instance),
                    from_node: m.from_node.clone(),
                    requested: false,
                    phase: Some(m.phase),
                });
            }
        }
        self.migrations
            .sort_by(|a, b| (&a.workload, &a.uuid).cmp(&(&b.workload, &b.uuid)));
    }
}

fn node_view<'s>(node: &'s Node, config: &Config, now: Timestamp) -> NodeView<'s> {
    let (gpu_resource, gpu_total) = match node_gpu_capacity(node) {
        Some((r, n)) => (Some(r), n),
        None => (None, 0),
    };
    let preemptible = config
        .spot_policy
        .preemptible_labels
        .iter()
        .any(|key| node.metadata.label(key).is_some_and(|v| v != "false"));
    let ready = node.condition("Ready").is_some_and(|c| c.status == "True");
    NodeView {
        node,
        name: &node.metadata.name,
        uid: Some(node.metadata.uid.as_str()).filter(|u| !u.is_empty()),
        gpu_resource,
        gpu_total,
        gpu_used: 0,
        gpu_free: 0,
        pool: None,
        cordoned: node.spec.unschedulable,
        scale_down_marked: node
            .spec
            .taints
            .iter()
            .any(|t| t.key == keys::TAINT_CA_SCALE_DOWN),
        preemptible,
        ready,
        health: health::node_health(node, &config.node_health, now),
        maintenance: health::maintenance_triggers(
            node,
            &config.node_health.maintenance_triggers,
            now,
        ),
        pods: Vec::new(),
    }
}

fn pod_view(pod: &Pod) -> PodView<'_> {
    let namespace = pod.metadata.namespace.as_str();
    PodView {
        pod,
        namespace: if namespace.is_empty() {
            "default"
        } else {
            namespace
        },
        name: &pod.metadata.name,
        node: Some(pod.spec.node_name.as_str()).filter(|n| !n.is_empty()),
        host: None, // set once the nodes are indexed
        gpus: pod_gpus(&pod.spec),
        requests: pod_requests(&pod.spec),
        non_zero: non_zero_requests(&pod.spec),
        terminal: matches!(pod.phase(), "Succeeded" | "Failed"),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        owner: pod_owner(pod),
    }
}

/// A pod OME runs: labelled with its InferenceService or `ome.io/managed-by: OMENative`, or
/// controlled by an InferenceReplica.
fn ome_identity(pod: &PodView<'_>) -> bool {
    pod.owner.is_some()
        || pod.pod.metadata.label(keys::LABEL_MANAGED_BY) == Some(keys::MANAGED_BY_OMENATIVE)
        || controlling_replica(pod.pod).is_some()
}

/// The name of the InferenceReplica that is the pod's controller, if one is.
fn controlling_replica(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.kind == "InferenceReplica" && o.api_version.starts_with("ome.io/"))
        .map(|o| o.name.as_str())
}

fn replica_parents(snapshot: &Snapshot) -> HashMap<(&str, &str), &str> {
    held_replicas(snapshot)
        .filter_map(|(namespace, h)| Some(((namespace, h.name()), h.claims().0?)))
        .collect()
}

/// Pool keys: the GPU product label; unlabelled nodes adopt the product when every labelled node
/// of the same shape (instance type, GPU resource and count) agrees on one; else the instance
/// type; else the GPU resource name.
fn assign_pools(nodes: &mut [NodeView<'_>]) {
    type Shape = (Option<String>, Option<String>, i64);
    let shape = |n: &NodeView<'_>| -> Shape {
        (
            n.label(keys::LABEL_INSTANCE_TYPE).map(str::to_string),
            n.gpu_resource.clone(),
            n.gpu_total,
        )
    };
    let mut products: HashMap<Shape, BTreeSet<String>> = HashMap::new();
    for n in nodes.iter().filter(|n| n.gpu_total > 0) {
        if let Some(p) = n.label(keys::LABEL_GPU_PRODUCT) {
            products.entry(shape(n)).or_default().insert(p.to_string());
        }
    }
    for n in nodes.iter_mut().filter(|n| n.gpu_total > 0) {
        let pool = n
            .label(keys::LABEL_GPU_PRODUCT)
            .map(str::to_string)
            .or_else(|| {
                products
                    .get(&shape(n))
                    .filter(|set| set.len() == 1)
                    .and_then(|set| set.iter().next().cloned())
            })
            .or_else(|| n.label(keys::LABEL_INSTANCE_TYPE).map(str::to_string))
            .or_else(|| n.gpu_resource.clone());
        n.pool = pool;
    }
}

fn collect_pools(nodes: &[NodeView<'_>]) -> Vec<Pool> {
    let mut pools: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = &n.pool {
            pools.entry(p).or_default().push(i);
        }
    }
    pools
        .into_iter()
        .map(|(name, nodes)| Pool {
            name: name.to_string(),
            nodes,
        })
        .collect()
}
