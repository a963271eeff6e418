//! The tasks of the schedule arriving and leaving, and a simulated OME controller that runs
//! them through the API server: an InferenceService per whole-GPU task, its InferenceReplica
//! and one engine pod per Instance, whose status it keeps; and Alfred's migration requests
//! answered as omenative-reference.md §5 says (annotation removed, a `status.migrations` row,
//! a surge at the lowest unused index that kube-scheduler places and KWOK readies after its
//! model's load time, the source drained; some requests fail, some are never taken).
//!
//! The controller is level-based, as OME's is: events (watches, timers) change what it wants,
//! and each tick it writes what the API server does not hold yet, so a write lost to an API
//! server restart is made again and a watch that relists catches up.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::objects::{self, NAMESPACE};
use crate::schedule::{Task, task_of};

/// The request annotation's prefix (omenative-reference.md §5).
pub const REQUEST_PREFIX: &str = "ome.io/migration-request-v1-";

/// How the simulated OME and the kubelets answer, in the soak's (scaled) time.
#[derive(Clone)]
pub struct Settings {
    /// From a request's annotation to its acknowledgement.
    pub acknowledge: Duration,
    /// A model's load time: a base and a part per GPU (a model on more GPUs is larger).
    pub load_base_ms: u64,
    pub load_per_gpu_ms: u64,
    /// A deleted pod's grace period: how long its GPUs stay held while it drains.
    pub drain_seconds: i64,
    /// `instanceReadyTimeout`: the deadline after acceptance.
    pub ready_timeout: Duration,
    pub fail_rate: f64,
    pub no_ack_rate: f64,
}

impl Settings {
    fn load_ms(&self, task: &Task) -> u64 {
        if task.whole {
            self.load_base_ms + self.load_per_gpu_ms * task.gpus.max(0) as u64
        } else {
            1000
        }
    }
}

/// What OME and the load did, as counts (the record file holds each with its time).
#[derive(Default, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub arrivals: usize,
    pub departures: usize,
    pub bound: usize,
    pub requests_seen: usize,
    pub never_acknowledged: usize,
    pub accepted: usize,
    pub rejected_mismatch: usize,
    pub completed: usize,
    pub failed: usize,
    pub expired: usize,
    pub owner_gone: usize,
    pub write_errors: usize,
    pub watch_errors: usize,
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Timer {
    Arrive(usize),
    Depart(usize),
    Acknowledge(usize, String),
    Expire(usize, String),
}

/// An Instance OME wants: its pod, where it runs, since when it is Ready.
#[derive(Default)]
struct Instance {
    created: bool,
    node: Option<String>,
    ready_since: Option<String>,
    /// Being drained or removed: its pod is deleted.
    leaving: bool,
    /// The nodes its pod prefers (a surge's request hints).
    hints: Vec<String>,
}

#[derive(PartialEq)]
enum Phase {
    SurgePending,
    Draining,
}

struct Migration {
    uuid: String,
    source: i32,
    from: String,
    surge: i32,
    started: String,
    deadline: String,
    fails: bool,
    phase: Phase,
}

struct State {
    task: Task,
    departed: bool,
    service_uid: Option<String>,
    replica_created: bool,
    instances: BTreeMap<i32, Instance>,
    migration: Option<Migration>,
    /// Ended `status.migrations` rows, newest last (OME keeps a bounded history).
    ended: Vec<Value>,
    status_written: Option<Value>,
    bound: bool,
    /// Requests seen on the InferenceService (taken or left), and those whose annotation is
    /// still to be removed.
    answered: HashSet<String>,
    unannotate: BTreeSet<String>,
}

/// An InferenceService as the watch shows it: its uid and annotations.
type ServiceView = (String, BTreeMap<String, String>);

#[derive(Clone)]
struct PodView {
    node: Option<String>,
    ready_since: Option<String>,
    deleting: bool,
}

pub struct World {
    pods: Api<Pod>,
    services: Api<DynamicObject>,
    replicas: Api<DynamicObject>,
    settings: Settings,
    rng: u64,
    /// The schedule's time 0.
    zero: Instant,
    tasks: BTreeMap<usize, State>,
    timers: BinaryHeap<Reverse<(Instant, Timer)>>,
    dirty: BTreeSet<usize>,
    pods_seen: HashMap<String, PodView>,
    /// InferenceServices as the watch shows them: uid and request annotations.
    services_seen: HashMap<String, ServiceView>,
    record: std::fs::File,
    pub counts: Counts,
}

pub fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ome.io", "v1beta1", kind), plural)
}

impl World {
    pub fn new(
        client: kube::Client,
        settings: Settings,
        seed: u64,
        record: std::fs::File,
    ) -> World {
        World {
            pods: Api::namespaced(client.clone(), NAMESPACE),
            services: Api::namespaced_with(
                client.clone(),
                NAMESPACE,
                &resource("InferenceService", "inferenceservices"),
            ),
            replicas: Api::namespaced_with(
                client,
                NAMESPACE,
                &resource("InferenceReplica", "inferencereplicas"),
            ),
            settings,
            // splitmix64 of the seed: xorshift's first draws from a small seed are tiny.
            rng: {
                let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) | 1
            },
            zero: Instant::now(),
            tasks: BTreeMap::new(),
            timers: BinaryHeap::new(),
            dirty: BTreeSet::new(),
            pods_seen: HashMap::new(),
            services_seen: HashMap::new(),
            record,
            counts: Counts::default(),
        }
    }

    fn draw(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A line of the record: what happened, when (the checker reads it beside the API server).
    fn note(&mut self, what: &str, k: usize, extra: Value) {
        let mut line = json!({"at": objects::stamp(Timestamp::now()), "what": what, "task": k});
        if let (Some(line), Value::Object(extra)) = (line.as_object_mut(), extra) {
            line.extend(extra);
        }
        let _ = writeln!(self.record, "{line}");
    }

    fn state(task: Task) -> State {
        State {
            task,
            departed: false,
            service_uid: None,
            replica_created: false,
            instances: BTreeMap::new(),
            migration: None,
            ended: Vec::new(),
            status_written: None,
            bound: false,
            answered: HashSet::new(),
            unannotate: BTreeSet::new(),
        }
    }

    /// Creates the start state's tasks, running on their nodes since they began (before KWOK
    /// and kube-scheduler look at them), and queues the arrivals.
    pub async fn seed(
        &mut self,
        start: &[Task],
        arrivals: &[Task],
        drain: i64,
    ) -> anyhow::Result<()> {
        self.zero = Instant::now();
        let now = Timestamp::now();
        let seeded = futures::stream::iter(start.iter().cloned())
            .map(|task| {
                let (pods, services, replicas) = (
                    self.pods.clone(),
                    self.services.clone(),
                    self.replicas.clone(),
                );
                async move {
                    let since = objects::stamp(now - Duration::from_millis(task.ran_ms));
                    let uid = seed_task(&pods, &services, &replicas, &task, &since, drain).await?;
                    anyhow::Ok((task, uid, since))
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        for result in seeded {
            let (task, uid, since) = result?;
            let k = task.task;
            let node = task.node.clone();
            let runs = task.runs_ms;
            let mut state = World::state(task);
            state.service_uid = uid;
            state.replica_created = true;
            state.bound = true;
            let instance = Instance {
                created: true,
                node,
                ready_since: Some(since),
                ..Instance::default()
            };
            state.instances.insert(0, instance);
            if state.task.whole {
                state.status_written = Some(replica_status(&state));
            }
            self.tasks.insert(k, state);
            self.at(Duration::from_millis(runs), Timer::Depart(k));
        }
        for task in arrivals {
            let k = task.task;
            self.tasks.insert(k, World::state(task.clone()));
            self.timers.push(Reverse((
                self.zero + Duration::from_millis(task.at_ms),
                Timer::Arrive(k),
            )));
        }
        Ok(())
    }

    /// The schedule's time 0 (when seeding began).
    pub fn zero(&self) -> Instant {
        self.zero
    }

    fn at(&mut self, after: Duration, timer: Timer) {
        self.timers.push(Reverse((Instant::now() + after, timer)));
    }

    /// Runs until `until`: watches, timers, and the writes they call for.
    pub async fn run(&mut self, until: Instant) {
        let pods = watcher(self.pods.clone(), watcher::Config::default()).default_backoff();
        let services = watcher(self.services.clone(), watcher::Config::default()).default_backoff();
        let (mut pods, mut services) = (Box::pin(pods), Box::pin(services));
        let mut pods_listing: Option<HashMap<String, PodView>> = None;
        let mut services_listing: Option<HashMap<String, ServiceView>> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Instant::now() < until {
            tokio::select! {
                Some(event) = pods.next() => match event {
                    Ok(watcher::Event::Init) => pods_listing = Some(HashMap::new()),
                    Ok(watcher::Event::InitApply(pod)) => {
                        if let (Some(list), Some(name)) = (pods_listing.as_mut(), pod.metadata.name.clone()) {
                            list.insert(name, pod_view(&pod));
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        let list = pods_listing.take().unwrap_or_default();
                        let gone: Vec<String> = self.pods_seen.keys().filter(|n| !list.contains_key(*n)).cloned().collect();
                        for name in gone {
                            self.pod_gone(&name);
                        }
                        for (name, view) in list {
                            self.pod_seen(&name, view);
                        }
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        if let Some(name) = pod.metadata.name.clone() {
                            self.pod_seen(&name, pod_view(&pod));
                        }
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        if let Some(name) = pod.metadata.name.as_deref() {
                            self.pod_gone(name);
                        }
                    }
                    Err(_) => self.counts.watch_errors += 1,
                },
                Some(event) = services.next() => match event {
                    Ok(watcher::Event::Init) => services_listing = Some(HashMap::new()),
                    Ok(watcher::Event::InitApply(s)) => {
                        if let Some(list) = services_listing.as_mut() {
                            list.insert(s.metadata.name.clone().unwrap_or_default(), service_view(&s));
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        let list = services_listing.take().unwrap_or_default();
                        self.services_seen.retain(|n, _| list.contains_key(n));
                        for (name, view) in list {
                            self.service_seen(&name, view);
                        }
                    }
                    Ok(watcher::Event::Apply(s)) => {
                        let name = s.metadata.name.clone().unwrap_or_default();
                        self.service_seen(&name, service_view(&s));
                    }
                    Ok(watcher::Event::Delete(s)) => {
                        self.services_seen.remove(s.metadata.name.as_deref().unwrap_or_default());
                    }
                    Err(_) => self.counts.watch_errors += 1,
                },
                _ = tick.tick() => {
                    self.fire_timers();
                    self.write_all().await;
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while self
            .timers
            .peek()
            .is_some_and(|Reverse((at, _))| *at <= now)
        {
            let Reverse((_, timer)) = self.timers.pop().expect("peeked");
            match timer {
                Timer::Arrive(k) => {
                    self.counts.arrivals += 1;
                    let gpus = self.tasks.get(&k).map_or(0, |s| s.task.gpus);
                    self.note("arrived", k, json!({"gpus": gpus}));
                    if let Some(state) = self.tasks.get_mut(&k) {
                        state.instances.insert(0, Instance::default());
                    }
                    self.dirty.insert(k);
                }
                Timer::Depart(k) => self.depart(k),
                Timer::Acknowledge(k, uuid) => self.acknowledge(k, &uuid),
                Timer::Expire(k, uuid) => self.expire(k, &uuid),
            }
        }
    }

    fn depart(&mut self, k: usize) {
        let Some(state) = self.tasks.get_mut(&k) else {
            return;
        };
        state.departed = true;
        let in_flight = state.migration.take().map(|m| m.uuid);
        self.counts.departures += 1;
        if let Some(uuid) = in_flight {
            self.counts.owner_gone += 1;
            self.note("ownerGone", k, json!({"uuid": uuid}));
        }
        self.note("departed", k, json!({}));
        self.dirty.insert(k);
    }

    fn pod_seen(&mut self, name: &str, view: PodView) {
        let before = self.pods_seen.insert(name.to_string(), view.clone());
        let (Some(k), Some(index)) = (task_of(name), instance_of(name)) else {
            return;
        };
        let Some(state) = self.tasks.get_mut(&k) else {
            return;
        };
        let Some(instance) = state.instances.get_mut(&index) else {
            return;
        };
        let mut changed = false;
        let mut first_bind = None;
        if view.node.is_some() && instance.node != view.node {
            instance.node = view.node.clone();
            changed = true;
            if !state.bound {
                state.bound = true;
                first_bind = Some(Duration::from_millis(state.task.runs_ms));
            }
        }
        let mut surge_ready = false;
        if view.ready_since.is_some() && instance.ready_since.is_none() {
            instance.ready_since = view.ready_since.clone();
            changed = true;
            surge_ready = state
                .migration
                .as_ref()
                .is_some_and(|m| m.surge == index && m.phase == Phase::SurgePending);
        }
        if let Some(runs) = first_bind {
            self.counts.bound += 1;
            self.at(runs, Timer::Depart(k));
            self.note("bound", k, json!({"node": view.node}));
        }
        if surge_ready {
            self.surge_ready(k);
        }
        if changed || before.is_none() {
            self.dirty.insert(k);
        }
    }

    /// The surge serves: the source drains (or, for a request drawn to fail, the surge is
    /// given up and the source stays).
    fn surge_ready(&mut self, k: usize) {
        let state = self.tasks.get_mut(&k).expect("a task with a migration");
        let m = state.migration.as_mut().expect("a migration");
        if m.fails {
            let (uuid, surge) = (m.uuid.clone(), m.surge);
            self.end_migration(k, "Failed", Some("SurgeFailed"));
            if let Some(i) = self
                .tasks
                .get_mut(&k)
                .and_then(|s| s.instances.get_mut(&surge))
            {
                i.leaving = true;
            }
            self.counts.failed += 1;
            self.note("failed", k, json!({"uuid": uuid, "reason": "SurgeFailed"}));
            return;
        }
        m.phase = Phase::Draining;
        let source = m.source;
        if let Some(i) = state.instances.get_mut(&source) {
            i.leaving = true;
        }
    }

    fn pod_gone(&mut self, name: &str) {
        self.pods_seen.remove(name);
        let (Some(k), Some(index)) = (task_of(name), instance_of(name)) else {
            return;
        };
        let Some(state) = self.tasks.get_mut(&k) else {
            return;
        };
        if state.instances.get(&index).is_some_and(|i| i.leaving) {
            state.instances.remove(&index);
        } else if let Some(i) = state.instances.get_mut(&index) {
            // Gone without OME asking (not in this soak's world, but a controller recreates).
            i.created = false;
            i.node = None;
            i.ready_since = None;
        }
        let drained = state
            .migration
            .as_ref()
            .is_some_and(|m| m.phase == Phase::Draining && m.source == index);
        if drained {
            let m = state.migration.as_ref().expect("checked");
            let (uuid, from, surge) = (m.uuid.clone(), m.from.clone(), m.surge);
            let to = state.instances.get(&surge).and_then(|i| i.node.clone());
            self.end_migration(k, "Completed", None);
            self.counts.completed += 1;
            self.note(
                "completed",
                k,
                json!({"uuid": uuid, "from": from, "to": to}),
            );
        }
        self.dirty.insert(k);
    }

    fn service_seen(&mut self, name: &str, view: ServiceView) {
        let requests: Vec<(String, String)> = view
            .1
            .iter()
            .filter_map(|(key, v)| Some((key.strip_prefix(REQUEST_PREFIX)?.to_string(), v.clone())))
            .collect();
        self.services_seen.insert(name.to_string(), view);
        let Some(k) = task_of(name) else {
            return;
        };
        for (uuid, payload) in requests {
            let Some(state) = self.tasks.get_mut(&k) else {
                return;
            };
            if !state.answered.insert(uuid.clone()) {
                continue;
            }
            self.counts.requests_seen += 1;
            if self.draw() < self.settings.no_ack_rate {
                self.counts.never_acknowledged += 1;
                self.note("ignored", k, json!({"uuid": uuid, "payload": payload}));
                continue;
            }
            self.note("seen", k, json!({"uuid": uuid, "payload": payload}));
            self.at(self.settings.acknowledge, Timer::Acknowledge(k, uuid));
        }
    }

    /// OME takes the request: it removes the annotation and accepts it, or fails it when its
    /// source is not where the Instance runs; while another migration runs it waits.
    fn acknowledge(&mut self, k: usize, uuid: &str) {
        let name = crate::schedule::name(k);
        let payload = self
            .services_seen
            .get(&name)
            .and_then(|(_, a)| a.get(&format!("{REQUEST_PREFIX}{uuid}")))
            .cloned();
        let Some(state) = self.tasks.get_mut(&k) else {
            return;
        };
        let Some(payload) = payload.filter(|_| !state.departed) else {
            return; // the request or its workload went
        };
        if state.migration.is_some() {
            self.at(Duration::from_secs(2), Timer::Acknowledge(k, uuid.into()));
            return;
        }
        state.unannotate.insert(uuid.to_string());
        let request: Value = serde_json::from_str(&payload).unwrap_or_default();
        let instance = request["instance"].as_i64().unwrap_or(-1) as i32;
        let from = request["from_node"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let now = Timestamp::now();
        let runs_there = state
            .instances
            .get(&instance)
            .is_some_and(|i| !i.leaving && i.node.as_deref() == Some(from.as_str()));
        if !runs_there {
            let mut row = migration_row(
                uuid,
                instance,
                &from,
                "Failed",
                &objects::stamp(now),
                &objects::stamp(now),
            );
            row["completedAt"] = json!(objects::stamp(now));
            row["reason"] = json!("MigrationFromNodeMismatch");
            push_ended(state, row);
            self.counts.rejected_mismatch += 1;
            self.note(
                "failed",
                k,
                json!({"uuid": uuid, "reason": "MigrationFromNodeMismatch"}),
            );
            self.dirty.insert(k);
            return;
        }
        let hints: Vec<String> = request["hint_target_nodes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let surge = (0..)
            .find(|i| !state.instances.contains_key(i))
            .expect("an unused index");
        let fails = self.draw() < self.settings.fail_rate;
        let deadline = now + self.settings.ready_timeout;
        let state = self.tasks.get_mut(&k).expect("looked up above");
        state.migration = Some(Migration {
            uuid: uuid.to_string(),
            source: instance,
            from: from.clone(),
            surge,
            started: objects::stamp(now),
            deadline: objects::stamp(deadline),
            fails,
            phase: Phase::SurgePending,
        });
        state.instances.insert(
            surge,
            Instance {
                hints: hints.clone(),
                ..Instance::default()
            },
        );
        self.counts.accepted += 1;
        self.note(
            "accepted",
            k,
            json!({"uuid": uuid, "from": from, "hints": hints, "surge": surge}),
        );
        self.at(
            self.settings.ready_timeout,
            Timer::Expire(k, uuid.to_string()),
        );
        self.dirty.insert(k);
    }

    fn expire(&mut self, k: usize, uuid: &str) {
        let Some(state) = self.tasks.get_mut(&k) else {
            return;
        };
        let Some(m) = state.migration.as_ref().filter(|m| m.uuid == uuid) else {
            return;
        };
        if m.phase == Phase::Draining {
            return; // the surge serves: the drain finishes it
        }
        let surge = m.surge;
        self.end_migration(k, "Failed", Some("MigrationExpired"));
        if let Some(i) = self
            .tasks
            .get_mut(&k)
            .and_then(|s| s.instances.get_mut(&surge))
        {
            i.leaving = true;
        }
        self.counts.expired += 1;
        self.note("expired", k, json!({"uuid": uuid}));
    }

    fn end_migration(&mut self, k: usize, phase: &str, reason: Option<&str>) {
        let state = self.tasks.get_mut(&k).expect("a task");
        let Some(m) = state.migration.take() else {
            return;
        };
        let mut row = migration_row(&m.uuid, m.source, &m.from, phase, &m.started, &m.deadline);
        row["surgeInstance"] = json!(m.surge);
        row["completedAt"] = json!(objects::stamp(Timestamp::now()));
        if let Some(reason) = reason {
            row["reason"] = json!(reason);
        }
        push_ended(state, row);
        self.dirty.insert(k);
    }

    /// Makes the API server hold what each changed task should be. A task whose write fails
    /// stays dirty for the next tick; after a failure the rest wait too (the API server is
    /// likely down).
    async fn write_all(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        let mut failing = false;
        for k in dirty {
            if failing {
                self.dirty.insert(k);
                continue;
            }
            match self.write(k).await {
                Ok(true) => {}
                Ok(false) => {
                    self.dirty.insert(k);
                }
                Err(_) => {
                    self.counts.write_errors += 1;
                    self.dirty.insert(k);
                    failing = true;
                }
            }
        }
    }

    /// One task's writes; Ok(false) when it waits for the watch to show something first.
    async fn write(&mut self, k: usize) -> Result<bool, kube::Error> {
        let Some(state) = self.tasks.get(&k) else {
            return Ok(true);
        };
        let name = state.task.name();
        let drain = self.settings.drain_seconds;
        if state.departed {
            return self.remove(k).await;
        }
        if state.instances.is_empty() {
            return Ok(true); // not arrived yet
        }
        let load_ms = self.settings.load_ms(&state.task);
        if !state.task.whole {
            if !state.instances[&0].created {
                let pod = objects::plain_pod(&state.task, load_ms, drain);
                create(&self.pods, &pod).await?;
                self.tasks
                    .get_mut(&k)
                    .expect("a task")
                    .instances
                    .get_mut(&0)
                    .expect("0")
                    .created = true;
            }
            return Ok(true);
        }
        // The InferenceService, as its user creates it, then OME's objects under it.
        let uid = match &state.service_uid {
            Some(uid) => uid.clone(),
            None => {
                let service = objects::service(&state.task);
                let created = create(&self.services, &service).await?;
                let uid =
                    created.or_else(|| self.services_seen.get(&name).map(|(uid, _)| uid.clone()));
                let Some(uid) = uid else {
                    return Ok(false); // made before; its uid comes with the watch
                };
                self.tasks.get_mut(&k).expect("a task").service_uid = Some(uid.clone());
                uid
            }
        };
        let state = self.tasks.get(&k).expect("a task");
        if !state.replica_created {
            create(&self.replicas, &objects::replica(&state.task, &uid)).await?;
            self.tasks.get_mut(&k).expect("a task").replica_created = true;
        }
        let state = self.tasks.get(&k).expect("a task");
        for uuid in state.unannotate.clone() {
            let key = format!("{REQUEST_PREFIX}{uuid}");
            if self
                .services_seen
                .get(&name)
                .is_some_and(|(_, a)| a.contains_key(&key))
            {
                let path = format!(
                    "/metadata/annotations/{}",
                    key.replace('~', "~0").replace('/', "~1")
                );
                let patch: json_patch::Patch =
                    serde_json::from_value(json!([{"op": "remove", "path": path}]))
                        .expect("a patch");
                match self
                    .services
                    .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                    .await
                {
                    Ok(_) => {}
                    // Gone meanwhile (the watch had not shown it yet).
                    Err(kube::Error::Api(e)) if e.code == 422 || e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            self.tasks
                .get_mut(&k)
                .expect("a task")
                .unannotate
                .remove(&uuid);
        }
        let state = self.tasks.get(&k).expect("a task");
        let missing: Vec<i32> = state
            .instances
            .iter()
            .filter(|(_, i)| !i.created && !i.leaving)
            .map(|(&n, _)| n)
            .collect();
        for index in missing {
            let state = self.tasks.get(&k).expect("a task");
            let hints = &state.instances[&index].hints;
            let pod = objects::engine_pod(&state.task, index, load_ms, drain, hints);
            create(&self.pods, &pod).await?;
            self.tasks
                .get_mut(&k)
                .expect("a task")
                .instances
                .get_mut(&index)
                .expect("an instance")
                .created = true;
        }
        let state = self.tasks.get(&k).expect("a task");
        let leaving: Vec<String> = state
            .instances
            .iter()
            .filter(|(_, i)| i.leaving)
            .map(|(&n, _)| objects::pod_name(&name, n))
            .filter(|pod| self.pods_seen.get(pod).is_some_and(|v| !v.deleting))
            .collect();
        for pod in leaving {
            delete(&self.pods, &pod, drain).await?;
        }
        let state = self.tasks.get(&k).expect("a task");
        let status = replica_status(state);
        if state.status_written.as_ref() != Some(&status) {
            let patch = json!({"status": status});
            self.replicas
                .patch_status(
                    &objects::replica_name(&name),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            self.tasks.get_mut(&k).expect("a task").status_written = Some(status);
        }
        Ok(true)
    }

    /// A departed task's objects are deleted (its pods drain); it is forgotten once the watch
    /// shows them gone.
    async fn remove(&mut self, k: usize) -> Result<bool, kube::Error> {
        let state = self.tasks.get(&k).expect("a task");
        let name = state.task.name();
        let drain = self.settings.drain_seconds;
        let pods: Vec<String> = self
            .pods_seen
            .iter()
            .filter(|(pod, v)| task_of(pod) == Some(k) && !v.deleting)
            .map(|(pod, _)| pod.clone())
            .collect();
        for pod in &pods {
            delete(&self.pods, pod, drain).await?;
        }
        if state.task.whole && self.services_seen.contains_key(&name) {
            delete(&self.replicas, &objects::replica_name(&name), 0).await?;
            delete(&self.services, &name, 0).await?;
        }
        let left = self.pods_seen.keys().any(|pod| task_of(pod) == Some(k))
            || self.services_seen.contains_key(&name);
        if !left {
            self.tasks.remove(&k);
            return Ok(true);
        }
        Ok(false)
    }
}

fn push_ended(state: &mut State, row: Value) {
    state.ended.push(row);
    if state.ended.len() > 8 {
        state.ended.remove(0);
    }
}

/// A `status.migrations` row.
fn migration_row(
    uuid: &str,
    source: i32,
    from: &str,
    phase: &str,
    started: &str,
    deadline: &str,
) -> Value {
    json!({"requestUUID": uuid, "trigger": "Manual", "sourceInstance": source, "fromNode": from,
        "phase": phase, "startedAt": started, "deadline": deadline})
}

/// The InferenceReplica's status as OME writes it: a row per Instance, the migration in
/// flight on its source row, and the migrations' rows.
fn replica_status(state: &State) -> Value {
    let revision = objects::revision(&state.task.name());
    let mut rows = Vec::new();
    for (&index, instance) in &state.instances {
        if instance.leaving && state.migration.as_ref().is_none_or(|m| m.source != index) {
            continue;
        }
        let ready = instance.ready_since.is_some();
        let mut row = json!({"index": index, "incarnation": 1,
            "phase": if ready { "Ready" } else { "Creating" }, "runningRevision": revision,
            "podCount": 1, "servingPodCount": ready as i32, "availablePodCount": ready as i32,
            "admitted": true});
        if let Some(since) = &instance.ready_since {
            row["readySince"] = json!(since);
        }
        if let Some(m) = state.migration.as_ref().filter(|m| m.source == index) {
            row["phase"] = json!("Migrating");
            let step = if m.phase == Phase::Draining {
                "DrainSource"
            } else {
                "CreateSurge"
            };
            row["operation"] = json!({"id": format!("migrate-{}", m.uuid), "type": "Migrate",
                "step": step, "startedAt": m.started, "lastProgressAt": m.started,
                "deadline": m.deadline, "retryCount": 0, "surgeIndex": m.surge,
                "requestUUID": m.uuid});
        }
        if state.migration.as_ref().is_some_and(|m| m.surge == index) {
            row["targetRevision"] = json!(revision);
        }
        rows.push(row);
    }
    let ready = rows.iter().filter(|r| r["readySince"].is_string()).count();
    let mut migrations = state.ended.clone();
    if let Some(m) = &state.migration {
        let phase = match m.phase {
            Phase::SurgePending => "SurgePending",
            Phase::Draining => "Draining",
        };
        let mut row = migration_row(&m.uuid, m.source, &m.from, phase, &m.started, &m.deadline);
        row["surgeInstance"] = json!(m.surge);
        migrations.push(row);
    }
    let mut status = json!({"observedGeneration": 1, "replicas": rows.len(), "readyReplicas": ready,
        "servingReplicas": ready, "availableReplicas": ready, "updatedReplicas": rows.len(),
        "updatedReadyReplicas": ready, "currentRevision": revision, "updateRevision": revision,
        "instanceStatuses": rows});
    if !migrations.is_empty() {
        status["migrations"] = json!(migrations);
    }
    status
}

fn instance_of(pod: &str) -> Option<i32> {
    // task-00012-engine-1-default-0
    let rest = pod
        .strip_prefix("task-")?
        .get(5..)?
        .strip_prefix("-engine-")?;
    rest.split('-').next()?.parse().ok()
}

fn pod_view(pod: &Pod) -> PodView {
    let ready_since = pod.status.as_ref().and_then(|s| {
        let c = s
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")?;
        Some(
            c.last_transition_time
                .as_ref()
                .map_or_else(|| objects::stamp(Timestamp::now()), |t| objects::stamp(t.0)),
        )
    });
    PodView {
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ready_since,
        deleting: pod.metadata.deletion_timestamp.is_some(),
    }
}

fn service_view(s: &DynamicObject) -> ServiceView {
    let uid = s.metadata.uid.clone().unwrap_or_default();
    let annotations = s.metadata.annotations.clone().unwrap_or_default();
    (uid, annotations)
}

/// Creates `object`; its uid, or None when it already existed.
async fn create<K>(api: &Api<K>, object: &Value) -> Result<Option<String>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + kube::Resource,
{
    let typed: K = serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(made) => Ok(made.meta().uid.clone()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

async fn delete<K>(api: &Api<K>, name: &str, grace_seconds: i64) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    let params = DeleteParams {
        grace_period_seconds: Some(grace_seconds.max(0) as u32),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// One task of the start state: its objects as they stand after it ran since `since`. Returns
/// its InferenceService's uid (None for a plain pod).
async fn seed_task(
    pods: &Api<Pod>,
    services: &Api<DynamicObject>,
    replicas: &Api<DynamicObject>,
    task: &Task,
    since: &str,
    drain: i64,
) -> anyhow::Result<Option<String>> {
    let node = task.node.as_deref().unwrap_or_default();
    let ip = format!(
        "10.{}.{}.{}",
        64 + task.task / 65536,
        task.task / 256 % 256,
        task.task % 256
    );
    let mut uid = None;
    let pod = if task.whole {
        let made = create(services, &objects::service(task)).await?;
        let made = match made {
            Some(uid) => uid,
            None => services
                .get(&task.name())
                .await?
                .metadata
                .uid
                .unwrap_or_default(),
        };
        create(replicas, &objects::replica(task, &made)).await?;
        let mut state = World::state(task.clone());
        let instance = Instance {
            created: true,
            node: Some(node.into()),
            ready_since: Some(since.into()),
            ..Instance::default()
        };
        state.instances.insert(0, instance);
        let status = json!({"status": replica_status(&state)});
        replicas
            .patch_status(
                &objects::replica_name(&task.name()),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await?;
        uid = Some(made);
        objects::engine_pod(task, 0, 0, drain, &[])
    } else {
        objects::plain_pod(task, 0, drain)
    };
    let pod = objects::running(pod, node, since, &ip);
    create(pods, &pod).await?;
    let status = json!({"status": pod["status"]});
    pods.patch_status(
        pod["metadata"]["name"].as_str().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await?;
    Ok(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_give_their_instance() {
        assert_eq!(instance_of("task-00012-engine-1-default-0"), Some(1));
        assert_eq!(instance_of("task-00012-engine-0-default-0"), Some(0));
        assert_eq!(instance_of("task-00012"), None);
    }
}
