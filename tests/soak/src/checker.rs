//! The outside checker: it reads only what the API server holds (and, for requests OME never
//! took, OME's record), never Alfred's logs or metrics, and judges every migration request with
//! `churn_bench`'s checks (`shared/examples/churn/checks.rs`): sent twice, cap violations,
//! stale sends, bounce-backs; and counts journal entries lost or doubled and holds left behind.
//!
//! A request is judged against the cluster as it stood when the request was written: every
//! object the checker watches keeps its history by resourceVersion, which on one etcd is the
//! revision of the write, ordered across kinds; the state "as of" the request's revision is what
//! a read just before it returned. Judgement waits a few seconds so that every watch has
//! delivered the writes before it.

#[path = "../../../shared/examples/churn/checks.rs"]
mod checks;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

pub use checks::Bounds;

use crate::objects::NAMESPACE;
use crate::ome::{REQUEST_PREFIX, resource};
use crate::schedule::task_of;

/// How long a request waits before it is judged (every watch has caught up by then).
const SETTLE: Duration = Duration::from_secs(3);
/// A hold may outlive its pod's binding by this much: the next pass releases it.
const HOLD_GRACE: Duration = Duration::from_secs(30);

/// Milliseconds since the Unix epoch.
fn ms(t: Timestamp) -> u64 {
    t.as_millisecond().max(0) as u64
}

fn parse_ms(text: &str) -> Option<u64> {
    text.parse::<Timestamp>().ok().map(ms)
}

/// An object's states by resourceVersion (None: deleted), oldest first.
struct History<T>(Vec<(u64, Option<T>)>);

impl<T> History<T> {
    fn as_of(&self, rv: u64) -> Option<&T> {
        let i = self.0.partition_point(|(v, _)| *v <= rv);
        i.checked_sub(1).and_then(|i| self.0[i].1.as_ref())
    }

    fn now(&self) -> Option<&T> {
        self.0.last().and_then(|(_, s)| s.as_ref())
    }

    fn push(&mut self, rv: u64, state: Option<T>) {
        // A relist repeats the newest state: keep one.
        if self.0.last().is_some_and(|(v, _)| *v >= rv) {
            return;
        }
        self.0.push((rv, state));
    }
}

#[derive(Clone)]
struct PodState {
    uid: String,
    node: Option<String>,
    started: Option<u64>,
    /// GPUs, CPU (milli) and memory (bytes) it requests; whether it still holds them.
    requests: [i64; 3],
    holds_room: bool,
}

#[derive(Clone)]
struct ReplicaState {
    /// (uuid, phase, fromNode, completedAt) of each `status.migrations` row.
    rows: Vec<(String, String, String, Option<u64>)>,
}

#[derive(Clone)]
struct NodeState {
    allocatable: [i64; 3],
    /// The pod UIDs Alfred's hold taints name.
    held_for: Vec<String>,
}

/// A request seen on an InferenceService, waiting to be judged.
struct Pending {
    due: Instant,
    rv: u64,
    at: u64,
    uuid: String,
    task: usize,
    payload: String,
}

/// What the checker counts (the JSON report's `checks`).
#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub requests: usize,
    pub sent_twice: usize,
    pub cap_violations: usize,
    pub cap_violations_by: BTreeMap<&'static str, usize>,
    /// Each violation: which request, which bound.
    pub cap_details: Vec<String>,
    pub stale_sends: usize,
    /// Each stale send: which request, and why.
    pub stale_details: Vec<String>,
    pub bounce_backs: usize,
    /// Requests written while the migration guard was missing.
    pub sent_without_guard: usize,
    /// Requests that no version of the journal ever held, and entries a version held twice.
    pub journal_entries_lost: usize,
    pub journal_entries_doubled: usize,
    /// Hold taints still set `HOLD_GRACE` after their pod bound or went, and which.
    pub holds_left_behind: usize,
    pub holds_left_details: Vec<String>,
    /// The Lease's holders in order, with when each was first seen holding it (ms since the
    /// epoch).
    pub leaders: Vec<(String, u64)>,
    pub watch_errors: usize,
}

pub struct Checker {
    checks: checks::SendChecks,
    pods: HashMap<String, History<PodState>>,
    replicas: HashMap<String, History<ReplicaState>>,
    nodes: HashMap<String, History<NodeState>>,
    /// The migration guard's policy: present or not, by revision.
    guard: History<()>,
    node_index: HashMap<String, usize>,
    /// Request annotations present per InferenceService: uuid -> removed at (ms).
    annotations: HashMap<String, BTreeMap<String, Option<u64>>>,
    uuids: BTreeSet<String>,
    ended: BTreeSet<String>,
    pending: Vec<Pending>,
    journal_uuids: BTreeSet<String>,
    /// Holds seen on a node for a pod, and whether counted.
    holds_counted: BTreeSet<(String, String)>,
    /// When each pod UID was first seen bound or gone.
    settled: HashMap<String, Instant>,
    /// A watch relisting (after its connection broke): the kind and the names listed so far.
    relisting: HashMap<&'static str, BTreeSet<String>>,
    /// The wall clock in ms (tests set it).
    clock: fn() -> u64,
    pub report: Report,
}

/// The wall clock, in ms since the epoch.
pub fn now_ms() -> u64 {
    ms(Timestamp::now())
}

impl Checker {
    pub fn new(bounds: Bounds) -> Checker {
        Checker {
            checks: checks::SendChecks::new(bounds),
            pods: HashMap::new(),
            replicas: HashMap::new(),
            nodes: HashMap::new(),
            guard: History(vec![(0, Some(()))]),
            node_index: HashMap::new(),
            annotations: HashMap::new(),
            uuids: BTreeSet::new(),
            ended: BTreeSet::new(),
            pending: Vec::new(),
            journal_uuids: BTreeSet::new(),
            holds_counted: BTreeSet::new(),
            settled: HashMap::new(),
            relisting: HashMap::new(),
            clock: now_ms,
            report: Report::default(),
        }
    }

    fn node_id(&mut self, name: &str) -> usize {
        let next = self.node_index.len();
        *self.node_index.entry(name.to_string()).or_insert(next)
    }

    /// Watches until `until`, then judges what is left and checks the journal and holds.
    pub async fn run(&mut self, client: kube::Client, until: Instant) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let services: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            NAMESPACE,
            &resource("InferenceService", "inferenceservices"),
        );
        let replicas: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            NAMESPACE,
            &resource("InferenceReplica", "inferencereplicas"),
        );
        let nodes: Api<Node> = Api::all(client.clone());
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "ome");
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ome");
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(client);
        let config = watcher::Config::default;
        let mut pods = Box::pin(watcher(pods, config()).default_backoff());
        let mut services = Box::pin(watcher(services, config()).default_backoff());
        let mut replicas = Box::pin(watcher(replicas, config()).default_backoff());
        let mut nodes = Box::pin(watcher(nodes, config()).default_backoff());
        let journal = config().fields("metadata.name=alfred-dispatch-state");
        let mut maps = Box::pin(watcher(maps, journal).default_backoff());
        let lease = config().fields("metadata.name=alfred.ome.io");
        let mut leases = Box::pin(watcher(leases, lease).default_backoff());
        let guard = config().fields("metadata.name=alfred-migration-writes");
        let mut policies = Box::pin(watcher(policies, guard).default_backoff());
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while Instant::now() < until {
            tokio::select! {
                Some(e) = pods.next() => self.on("pods", e, Checker::pod),
                Some(e) = services.next() => self.on("services", e, Checker::service),
                Some(e) = replicas.next() => self.on("replicas", e, Checker::replica),
                Some(e) = nodes.next() => self.on("nodes", e, Checker::node),
                Some(e) = maps.next() => self.on("journal", e, Checker::journal),
                Some(e) = leases.next() => self.on("lease", e, Checker::lease),
                Some(e) = policies.next() => self.on("guard", e, Checker::guard),
                _ = tick.tick() => {
                    self.judge(Instant::now());
                    self.check_holds(Instant::now());
                }
            }
        }
        self.finish();
    }

    /// Judges what is left and tallies the report.
    fn finish(&mut self) {
        self.judge(Instant::now() + SETTLE);
        let lost = self.uuids.difference(&self.journal_uuids).count();
        self.report.journal_entries_lost = lost;
        let c = &self.checks.counts;
        self.report.requests = self.uuids.len();
        self.report.sent_twice = c.sent_twice;
        self.report.cap_violations = c.cap_violations;
        self.report.cap_violations_by = c.violated.clone();
        self.report.stale_sends = c.stale_sends;
        self.report.bounce_backs = c.bounce_backs;
    }

    /// One watch event: applied (or deleted) at its resourceVersion. A relist deletes what it
    /// no longer lists (those deletions came while the watch was down).
    fn on<K: kube::Resource>(
        &mut self,
        kind: &'static str,
        event: Result<watcher::Event<K>, watcher::Error>,
        apply: fn(&mut Checker, &K, u64, bool),
    ) {
        let rv = |o: &K| {
            o.meta()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        match event {
            Ok(watcher::Event::Apply(o)) => apply(self, &o, rv(&o), false),
            Ok(watcher::Event::Delete(o)) => apply(self, &o, rv(&o), true),
            Ok(watcher::Event::Init) => {
                self.relisting.insert(kind, BTreeSet::new());
            }
            Ok(watcher::Event::InitApply(o)) => {
                if let Some(names) = self.relisting.get_mut(kind) {
                    names.insert(o.meta().name.clone().unwrap_or_default());
                }
                apply(self, &o, rv(&o), false);
            }
            Ok(watcher::Event::InitDone) => {
                let Some(listed) = self.relisting.remove(kind) else {
                    return;
                };
                let gone: Vec<String> = match kind {
                    "pods" => self
                        .pods
                        .iter()
                        .filter(|(_, h)| h.now().is_some())
                        .map(|(n, _)| n.clone())
                        .collect(),
                    "replicas" => self
                        .replicas
                        .iter()
                        .filter(|(_, h)| h.now().is_some())
                        .map(|(n, _)| n.clone())
                        .collect(),
                    "guard" if self.guard.now().is_some() => vec!["alfred-migration-writes".into()],
                    "nodes" => self
                        .nodes
                        .iter()
                        .filter(|(_, h)| h.now().is_some())
                        .map(|(n, _)| n.clone())
                        .collect(),
                    _ => Vec::new(),
                };
                for name in gone.into_iter().filter(|n| !listed.contains(n)) {
                    self.gone(kind, &name);
                }
            }
            Err(_) => self.report.watch_errors += 1,
        }
    }

    /// An object a relist no longer holds. It went after its last version and before the
    /// list; when is unknown, so it is taken as gone right after its last version (the
    /// lenient side: a room it held is free from then).
    fn gone(&mut self, kind: &str, name: &str) {
        fn after<T>(h: &History<T>) -> u64 {
            h.0.last().map_or(0, |(v, _)| *v) + 1
        }
        match kind {
            "pods" => {
                let history = self.pods.get_mut(name).expect("listed before");
                if let Some(uid) = history.now().map(|p| p.uid.clone()) {
                    self.settled.entry(uid).or_insert_with(Instant::now);
                }
                let rv = after(history);
                history.push(rv, None);
            }
            "replicas" => {
                let history = self.replicas.get_mut(name).expect("listed before");
                let rv = after(history);
                history.push(rv, None);
            }
            "nodes" => {
                let history = self.nodes.get_mut(name).expect("listed before");
                let rv = after(history);
                history.push(rv, None);
            }
            "guard" => {
                let rv = after(&self.guard);
                self.guard.push(rv, None);
            }
            _ => {}
        }
    }

    fn pod(&mut self, pod: &Pod, rv: u64, deleted: bool) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let mut requests = [0i64; 3];
        for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
            let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            for (i, key) in ["nvidia.com/gpu", "cpu", "memory"].iter().enumerate() {
                if let Some(q) = r.and_then(|r| r.get(*key)) {
                    requests[i] += quantity(&q.0, i);
                }
            }
        }
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        let state = PodState {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: spec.and_then(|s| s.node_name.clone()),
            started: status.and_then(|s| s.start_time.as_ref()).map(|t| ms(t.0)),
            requests,
            holds_room: !deleted && phase != "Succeeded" && phase != "Failed",
        };
        if deleted || state.node.is_some() {
            self.settled
                .entry(state.uid.clone())
                .or_insert_with(Instant::now);
        }
        let history = self.pods.entry(name).or_insert(History(Vec::new()));
        history.push(rv, (!deleted).then_some(state));
    }

    fn service(&mut self, s: &DynamicObject, rv: u64, deleted: bool) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let Some(task) = task_of(&name) else {
            return;
        };
        let now = (self.clock)();
        let present: BTreeMap<String, String> = if deleted {
            BTreeMap::new()
        } else {
            (s.metadata.annotations.iter().flatten())
                .filter_map(|(k, v)| Some((k.strip_prefix(REQUEST_PREFIX)?.to_string(), v.clone())))
                .collect()
        };
        let known = self.annotations.entry(name).or_default();
        for (uuid, removed) in known.iter_mut() {
            if !present.contains_key(uuid) && removed.is_none() {
                *removed = Some(now);
            }
        }
        for (uuid, payload) in present {
            if known.contains_key(&uuid) {
                continue;
            }
            known.insert(uuid.clone(), None);
            self.pending.push(Pending {
                due: Instant::now() + SETTLE,
                rv,
                at: now,
                uuid,
                task,
                payload,
            });
        }
        if deleted {
            self.checks.end(task, now);
        }
    }

    fn replica(&mut self, r: &DynamicObject, rv: u64, deleted: bool) {
        let name = r.metadata.name.clone().unwrap_or_default();
        let rows: Vec<(String, String, String, Option<u64>)> = r.data["status"]["migrations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|row| {
                let text = |k: &str| row[k].as_str().unwrap_or_default().to_string();
                (
                    text("requestUUID"),
                    text("phase"),
                    text("fromNode"),
                    row["completedAt"].as_str().and_then(parse_ms),
                )
            })
            .collect();
        let task = task_of(&name);
        for (uuid, phase, _, done) in &rows {
            let terminal = phase == "Completed" || phase == "Failed";
            if terminal
                && self.ended.insert(uuid.clone())
                && let Some(k) = task
            {
                self.checks.end(k, done.unwrap_or_else(self.clock));
            }
        }
        let history = self.replicas.entry(name).or_insert(History(Vec::new()));
        history.push(rv, (!deleted).then_some(ReplicaState { rows }));
    }

    fn node(&mut self, n: &Node, rv: u64, deleted: bool) {
        let name = n.metadata.name.clone().unwrap_or_default();
        let allocatable = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let mut room = [0i64; 3];
        for (i, key) in ["nvidia.com/gpu", "cpu", "memory"].iter().enumerate() {
            room[i] = allocatable
                .and_then(|a| a.get(*key))
                .map_or(0, |q| quantity(&q.0, i));
        }
        let held_for = (n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten())
        .filter(|t| t.key == alfred::api::keys::HELD_FOR)
        .filter_map(|t| t.value.clone())
        .collect();
        self.node_id(&name);
        let history = self.nodes.entry(name).or_insert(History(Vec::new()));
        history.push(
            rv,
            (!deleted).then_some(NodeState {
                allocatable: room,
                held_for,
            }),
        );
    }

    fn journal(&mut self, map: &ConfigMap, _rv: u64, _deleted: bool) {
        let text = map.data.as_ref().and_then(|d| d.get("state.json"));
        let Some(doc) = text.and_then(|t| serde_json::from_str::<Value>(t).ok()) else {
            return;
        };
        let uuids: Vec<&str> = doc["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["uuid"].as_str())
            .collect();
        let distinct: BTreeSet<&str> = uuids.iter().copied().collect();
        if distinct.len() < uuids.len() {
            self.report.journal_entries_doubled += uuids.len() - distinct.len();
        }
        self.journal_uuids
            .extend(distinct.into_iter().map(String::from));
    }

    fn guard(&mut self, _: &ValidatingAdmissionPolicy, rv: u64, deleted: bool) {
        self.guard.push(rv, (!deleted).then_some(()));
    }

    fn lease(&mut self, lease: &Lease, _rv: u64, _deleted: bool) {
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        if self.report.leaders.last().is_none_or(|(h, _)| *h != holder) && !holder.is_empty() {
            self.report.leaders.push((holder, (self.clock)()));
        }
    }

    /// Judges the requests due by `now` against the cluster as of each one's revision.
    fn judge(&mut self, now: Instant) {
        let (due, waiting): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.due <= now);
        self.pending = waiting;
        for p in due {
            self.uuids.insert(p.uuid.clone());
            let request: Value = serde_json::from_str(&p.payload).unwrap_or_default();
            let service = crate::schedule::name(p.task);
            let instance = request["instance"].as_i64().unwrap_or(-1);
            let pod_name = crate::objects::pod_name(&service, instance as i32);
            let pod = self
                .pods
                .get(&pod_name)
                .and_then(|h| h.as_of(p.rv))
                .cloned();
            let from = request["from_node"].as_str().map(|n| self.node_id(n));
            let target_name = request["hint_target_nodes"][0].as_str().map(String::from);
            let target = target_name.as_deref().map(|n| self.node_id(n));
            let rows = (self.replicas.get(&crate::objects::replica_name(&service)))
                .and_then(|h| h.as_of(p.rv))
                .map(|r| r.rows.clone())
                .unwrap_or_default();
            let migrating = rows
                .iter()
                .any(|(_, phase, _, _)| phase != "Completed" && phase != "Failed");
            let migration_ended = rows.iter().filter_map(|r| r.3).max();
            let left: Vec<(usize, u64)> = rows
                .iter()
                .filter(|r| r.1 == "Completed")
                .filter_map(|r| Some((r.2.clone(), r.3?)))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|(n, at)| (self.node_id(&n), at))
                .collect();
            let target_room = match (&pod, &target_name) {
                (Some(pod), Some(t)) => self.room_as_of(t, p.rv, &pod.requests),
                _ => false,
            };
            let on = pod
                .as_ref()
                .and_then(|s| s.node.as_deref())
                .map(|n| self.node_id(n));
            let seen = checks::Seen {
                on,
                migrating,
                target_room,
                migration_ended,
                ran_for: pod
                    .as_ref()
                    .and_then(|s| s.started)
                    .map_or(0, |s| p.at.saturating_sub(s)),
                left,
            };
            let r = checks::Request {
                at: p.at,
                uuid: p.uuid.clone(),
                workload: p.task,
                from,
                target,
                health: request["reason"] == "NodeUnhealthy",
            };
            let verdict = self.checks.send(&r, &seen);
            if let Some(bound) = verdict.cap {
                let (from, to) = (&request["from_node"], &target_name);
                let detail = format!(
                    "{} {service} {from} -> {to:?} ({}): {bound}",
                    p.uuid, request["reason"]
                );
                self.report.cap_details.push(detail);
            }
            if self.guard.as_of(p.rv).is_none() {
                self.report.sent_without_guard += 1;
            }
            if verdict.stale {
                self.report.stale_details.push(format!(
                    "{} {service}: from {:?} target {:?}: on {:?}, migrating {migrating}, target room {target_room}",
                    p.uuid,
                    request["from_node"],
                    target_name,
                    pod.as_ref().and_then(|s| s.node.clone())
                ));
            }
            // A request that OME removed without a row (the operator resolved one never taken)
            // ended when its annotation went.
            let removed = self
                .annotations
                .get(&service)
                .and_then(|a| a.get(&p.uuid))
                .copied()
                .flatten();
            if let Some(at) = removed
                .filter(|_| !self.ended.contains(&p.uuid) && !rows.iter().any(|r| r.0 == p.uuid))
            {
                self.checks.end(p.task, at);
            }
        }
    }

    /// Whether `node` had room for `needs` as of `rv`: its allocatable less what the pods on it
    /// then requested (a draining pod still holds its room).
    fn room_as_of(&self, node: &str, rv: u64, needs: &[i64; 3]) -> bool {
        let Some(n) = self.nodes.get(node).and_then(|h| h.as_of(rv)) else {
            return false;
        };
        let mut free = n.allocatable;
        for history in self.pods.values() {
            if let Some(p) = history
                .as_of(rv)
                .filter(|p| p.holds_room && p.node.as_deref() == Some(node))
            {
                for (f, r) in free.iter_mut().zip(p.requests) {
                    *f -= r;
                }
            }
        }
        free.iter().zip(needs).all(|(f, n)| f >= n)
    }

    /// Counts each hold taint still set `HOLD_GRACE` after its pod bound or went.
    fn check_holds(&mut self, now: Instant) {
        let mut left = Vec::new();
        for (node, history) in &self.nodes {
            for uid in history
                .now()
                .map(|n| n.held_for.as_slice())
                .unwrap_or_default()
            {
                let settled = self
                    .settled
                    .get(uid)
                    .is_some_and(|t| now.duration_since(*t) > HOLD_GRACE);
                if settled && !self.holds_counted.contains(&(node.clone(), uid.clone())) {
                    left.push((node.clone(), uid.clone()));
                }
            }
        }
        self.report.holds_left_behind += left.len();
        for (node, uid) in &left {
            let pod = self.pods.iter().find(|(_, h)| {
                h.0.iter()
                    .any(|(_, s)| s.as_ref().is_some_and(|s| s.uid == *uid))
            });
            let name = pod.map_or("?", |(name, _)| name.as_str());
            let now = pod.and_then(|(_, h)| h.now()).and_then(|p| p.node.clone());
            let detail = format!("{node} held for {uid} ({name}, now on {now:?})");
            self.report.holds_left_details.push(detail);
        }
        self.holds_counted.extend(left);
    }
}

/// A quantity as an integer: GPUs as a count, CPU in millicores, memory in bytes.
fn quantity(text: &str, kind: usize) -> i64 {
    let value = alfred::kubernetes::quantity::parse(text).unwrap_or(0.0);
    let scale = if kind == 1 { 1000.0 } else { 1.0 };
    (value * scale).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_counts_millicores_and_bytes() {
        assert_eq!(quantity("8", 0), 8);
        assert_eq!(quantity("4000m", 1), 4000);
        assert_eq!(quantity("4", 1), 4000);
        assert_eq!(quantity("16384Mi", 2), 16384 * 1024 * 1024);
        assert_eq!(quantity("1G", 2), 1_000_000_000);
    }

    #[test]
    fn a_history_answers_as_of_a_revision() {
        let mut h = History(Vec::new());
        h.push(10, Some("a"));
        h.push(20, None);
        h.push(30, Some("b"));
        h.push(30, Some("again"));
        assert_eq!(h.as_of(5), None);
        assert_eq!(h.as_of(10), Some(&"a"));
        assert_eq!(h.as_of(25), None);
        assert_eq!(h.as_of(99), Some(&"b"));
        assert_eq!(h.now(), Some(&"b"));
    }

    const T0: u64 = 1_800_000_000_000;
    const MINUTE: u64 = 60_000;

    fn bounds() -> Bounds {
        Bounds {
            in_flight: 3,
            per_hour: 100,
            workload_cooldown: 0,
            node_cooldown: 0,
            placement_cooldown: 0,
            health_floor: 0,
        }
    }

    fn checker() -> Checker {
        let mut c = Checker::new(bounds());
        c.clock = || T0 + 90 * MINUTE;
        for n in ["n1", "n2", "n3"] {
            let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": n},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "768Gi"}}}))
            .unwrap();
            c.node(&node, 1, false);
        }
        c
    }

    fn pod(name: &str, uid: &str, node: Option<&str>, gpus: i64) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "main",
                "resources": {"requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "startTime": "2027-01-01T00:00:00Z"}}))
        .unwrap()
    }

    /// Task 1's InferenceService carrying requests (uuid, from, to).
    fn service(requests: &[(&str, &str, &str)]) -> DynamicObject {
        let annotations: serde_json::Map<String, Value> = requests
            .iter()
            .map(|(uuid, from, to)| {
                let payload = serde_json::json!({"schemaVersion": "v1", "component": "engine", "instance": 0,
                    "from_node": from, "hint_target_nodes": [to]});
                (format!("{REQUEST_PREFIX}{uuid}"), Value::String(payload.to_string()))
            })
            .collect();
        serde_json::from_value(
            serde_json::json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "task-00001", "annotations": annotations}}),
        )
        .unwrap()
    }

    fn replica(rows: Value) -> DynamicObject {
        serde_json::from_value(
            serde_json::json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": "task-00001-engine"}, "status": {"migrations": rows}}),
        )
        .unwrap()
    }

    fn settle(c: &mut Checker) {
        c.finish();
    }

    #[test]
    fn a_request_is_judged_against_the_cluster_as_of_its_write() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            10,
            false,
        );
        // Sent while the Instance runs on n1 and n2 has room: fine, even though n2 fills
        // right after it (rv 21).
        c.service(&service(&[("a", "n1", "n2")]), 20, false);
        c.pod(&pod("other-0", "o0", Some("n2"), 8), 21, false);
        c.replica(
            &replica(
                serde_json::json!([{"requestUUID": "a", "phase": "Completed",
            "fromNode": "n1", "completedAt": "2027-01-15T00:00:00Z"}]),
            ),
            22,
            false,
        );
        settle(&mut c);
        assert_eq!(c.report.stale_sends, 0, "{:?}", c.report.stale_details);
        // Sent from n1 after the Instance left it, and to n2, full since rv 21: stale.
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            30,
            true,
        );
        c.pod(
            &pod("task-00001-engine-1-default-0", "p1", Some("n2"), 4),
            31,
            false,
        );
        c.service(&service(&[("a", "n1", "n2"), ("b", "n1", "n2")]), 40, false);
        settle(&mut c);
        assert_eq!(c.report.requests, 2);
        assert_eq!(c.report.stale_sends, 1, "{:?}", c.report.stale_details);
        assert!(
            c.report.stale_details[0].starts_with("b "),
            "{:?}",
            c.report.stale_details
        );
    }

    #[test]
    fn a_target_with_a_draining_pod_has_no_room_for_the_request() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            10,
            false,
        );
        c.pod(&pod("leaving", "l0", Some("n3"), 6), 11, false);
        c.service(&service(&[("a", "n1", "n3")]), 20, false);
        settle(&mut c);
        assert_eq!(c.report.stale_sends, 1);
    }

    #[test]
    fn a_request_back_to_the_node_it_left_and_a_second_in_flight_are_counted() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-1-default-0", "p1", Some("n2"), 4),
            10,
            false,
        );
        c.replica(
            &replica(
                serde_json::json!([{"requestUUID": "a", "phase": "Completed",
            "fromNode": "n1", "completedAt": "2027-01-15T09:00:00Z"}]),
            ),
            11,
            false,
        );
        c.service(&service(&[("b", "n2", "n1")]), 20, false);
        c.service(&service(&[("b", "n2", "n1"), ("c", "n2", "n3")]), 21, false);
        settle(&mut c);
        assert_eq!(
            c.report.bounce_backs, 2,
            "both within the hour of the last move"
        );
        assert_eq!(c.report.sent_twice, 1, "c while b is in flight");
    }

    #[test]
    fn requests_the_journal_never_held_and_entries_held_twice_are_counted() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            10,
            false,
        );
        let journal = |uuids: &[&str]| -> ConfigMap {
            let entries: Vec<Value> = uuids
                .iter()
                .map(|u| serde_json::json!({"uuid": u}))
                .collect();
            let doc = serde_json::json!({"version": "v1", "entries": entries});
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "alfred-dispatch-state"},
                "data": {"state.json": doc.to_string()}}),
            )
            .unwrap()
        };
        c.journal(&journal(&["a"]), 19, false);
        c.service(&service(&[("a", "n1", "n2"), ("b", "n1", "n3")]), 20, false);
        c.journal(&journal(&["a", "a"]), 21, false);
        settle(&mut c);
        assert_eq!(c.report.journal_entries_lost, 1);
        assert_eq!(c.report.journal_entries_doubled, 1);
    }

    #[test]
    fn a_hold_outliving_its_pods_binding_is_counted_once() {
        let mut c = checker();
        let held: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n3"},
            "spec": {"taints": [{"key": alfred::api::keys::HELD_FOR, "value": "w0", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}))
        .unwrap();
        c.node(&held, 5, false);
        c.pod(&pod("waiting", "w0", None, 8), 6, false);
        c.check_holds(Instant::now() + HOLD_GRACE * 2);
        assert_eq!(c.report.holds_left_behind, 0, "its pod still waits");
        c.pod(&pod("waiting", "w0", Some("n3"), 8), 7, false);
        c.check_holds(Instant::now());
        assert_eq!(c.report.holds_left_behind, 0, "a pass may not have run yet");
        c.check_holds(Instant::now() + HOLD_GRACE * 2);
        c.check_holds(Instant::now() + HOLD_GRACE * 3);
        assert_eq!(c.report.holds_left_behind, 1);
    }

    #[test]
    fn a_request_written_while_the_guard_was_missing_is_counted() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            10,
            false,
        );
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "alfred-migration-writes"}}),
        )
        .unwrap();
        c.service(&service(&[("a", "n1", "n2")]), 20, false);
        c.guard(&policy, 25, true);
        c.service(&service(&[("a", "n1", "n2"), ("b", "n1", "n3")]), 30, false);
        c.guard(&policy, 35, false);
        c.service(
            &service(&[("a", "n1", "n2"), ("b", "n1", "n3"), ("c", "n1", "n2")]),
            40,
            false,
        );
        settle(&mut c);
        assert_eq!(c.report.requests, 3);
        assert_eq!(c.report.sent_without_guard, 1);
    }

    #[test]
    fn a_relist_deletes_what_went_while_the_watch_was_down() {
        let mut c = checker();
        c.pod(
            &pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4),
            10,
            false,
        );
        c.pod(&pod("filler", "f0", Some("n2"), 8), 11, false);
        c.on::<Pod>("pods", Ok(watcher::Event::Init), Checker::pod);
        let mut kept = pod("task-00001-engine-0-default-0", "p0", Some("n1"), 4);
        kept.metadata.resource_version = Some("10".into());
        c.on("pods", Ok(watcher::Event::InitApply(kept)), Checker::pod);
        c.on::<Pod>("pods", Ok(watcher::Event::InitDone), Checker::pod);
        c.service(&service(&[("a", "n1", "n2")]), 20, false);
        settle(&mut c);
        assert_eq!(
            c.report.stale_sends, 0,
            "n2 emptied while the watch was down"
        );
    }
}
