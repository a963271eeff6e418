//! The world as Alfred's execute pass sees it: reads are the cluster written as the API server
//! lists it, the journal ConfigMap is kept in memory with a resourceVersion, and a request is
//! a JSON patch on the InferenceService. Every send is checked here, independently of Alfred's
//! own bookkeeping, against the bounds it must keep.

use std::sync::Arc;

use alfred::execute::journal::Journal;
use alfred::execute::run::{JournalDoc, ServiceState, Store, StoreError};
use alfred::migration;
use alfred::snapshot::Snapshot;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::trace::{self, Task, TraceNode};
use crate::world::{Event, Held, Live, Step, World, stamp, stamp_before, timestamp};
use alfred::api::keys::HELD_SINCE;
use alfred::execute::hold;

/// The guard on Alfred's writes as a real API server lists it once installed.
const GUARD: &str = include_str!("../../tests/data/guard/installed.json");

impl Store for World<'_, '_> {
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError> {
        let snapshot = match &self.last_read {
            Some(read) => Arc::clone(read),
            None => {
                let read = self
                    .writer
                    .read(self.nodes, self.tasks, &self.live, &self.holds)
                    .map_err(StoreError::Observe)?;
                if self.check_reads {
                    let whole = self
                        .writer
                        .parts(self.nodes, self.tasks, &self.live, &self.holds, false)
                        .map_err(StoreError::Observe)?
                        .assemble();
                    if format!("{whole:?}") != format!("{read:?}") {
                        return Err(StoreError::Observe(format!(
                            "the read made from the last one differs from a whole read at {} ms",
                            self.now
                        )));
                    }
                }
                Arc::clone(self.last_read.insert(read))
            }
        };
        Ok((snapshot, timestamp(self.now)))
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError> {
        Ok(self.journal.clone())
    }

    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, StoreError> {
        if self.journal.version != version {
            return Ok(None);
        }
        let next = (self.journal.version.parse::<u64>().unwrap_or(0) + 1).to_string();
        self.counters.journal_max_bytes = self.counters.journal_max_bytes.max(state.len());
        self.journal = JournalDoc {
            state: Some(state.into()),
            breaker: Some(breaker.into()),
            version: next.clone(),
        };
        Ok(Some(next))
    }

    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, StoreError> {
        let Some(k) = self.service(namespace, name) else {
            return Ok(None);
        };
        let pod = &self.live[k];
        Ok(Some(ServiceState {
            uid: format!("uid-isvc-{k}"),
            resource_version: pod.service_version.to_string(),
            has_annotations: pod.request.is_some(),
            request: pod
                .request
                .as_ref()
                .filter(|(u, _)| u == uuid)
                .map(|(_, p)| p.clone()),
        }))
    }

    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), StoreError> {
        let refused = |cause: String| StoreError::Call {
            action: format!("patching InferenceService {namespace}/{name}"),
            cause,
            lasting: false,
        };
        let k = self
            .service(namespace, name)
            .ok_or_else(|| refused("not found (404)".into()))?;
        let mut object = self.service_object(k);
        json_patch::patch(&mut object, patch).map_err(|e| refused(format!("conflict: {e}")))?;
        let annotations = object["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut requests = annotations.iter().filter_map(|(key, value)| {
            let uuid = key.strip_prefix(alfred::api::keys::MIGRATION_REQUEST_PREFIX)?;
            Some((uuid.to_string(), value.as_str()?.to_string()))
        });
        let request = requests.next();
        if requests.next().is_some() {
            return Err(refused("two migration requests on one object".into()));
        }
        if self.live[k].request == request {
            return Ok(()); // the same request again: nothing changes
        }
        let Some((uuid, payload)) = request else {
            return Err(refused("the patch removed the request".into()));
        };
        self.check_send(k, &uuid, &payload);
        self.last_read = None;
        let pod = &mut self.live[k];
        pod.request = Some((uuid, payload));
        pod.service_version += 1;
        pod.version += 1;
        self.counters.moves += 1;
        if crate::world::uniform(&mut self.rng) >= self.ome.no_ack_rate {
            let serial = self.counters.moves as u32;
            self.push(
                self.now + self.ome.acknowledge_ms,
                Event::Ome(k, serial, Step::Acknowledge),
            );
        } else {
            self.counters.never_acknowledged += 1;
        }
        Ok(())
    }

    fn new_uuid(&mut self) -> String {
        self.uuids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uuids)
    }
}

impl World<'_, '_> {
    /// The task behind an InferenceService, while it exists.
    fn service(&self, namespace: &str, name: &str) -> Option<usize> {
        let k: usize = name.strip_prefix("task-")?.parse().ok()?;
        let pod = self.live.get(k)?;
        (namespace == "trace" && pod.bound.is_some() && !pod.gone() && self.tasks[pod.row].whole())
            .then_some(k)
    }

    /// The InferenceService's metadata as the API server holds it.
    fn service_object(&self, k: usize) -> Value {
        let pod = &self.live[k];
        let mut metadata = json!({"name": format!("task-{k:05}"), "namespace": "trace",
            "uid": format!("uid-isvc-{k}"), "resourceVersion": pod.service_version.to_string()});
        if let Some((uuid, payload)) = &pod.request {
            metadata["annotations"] = json!({migration::annotation_key(uuid): payload});
        }
        json!({"metadata": metadata})
    }

    /// Judges a send from the outside (`checks`): the request as it appeared, and the cluster
    /// as a fresh read shows it.
    fn check_send(&mut self, k: usize, uuid: &str, payload: &str) {
        let request = migration::parse_request(payload).ok();
        let node = |name: Option<&String>| name.and_then(|n| self.node_index.get(n).copied());
        let from = node(request.as_ref().and_then(|r| r.from_node.as_ref()));
        let target = node(request.as_ref().and_then(|r| r.hint_target_nodes.first()));
        let pod = &self.live[k];
        let seen = crate::checks::Seen {
            on: pod.node,
            migrating: pod.migration.is_some(),
            target_room: target.is_some_and(|t| self.scheduler.has_room(t, pod.row)),
            migration_ended: pod.migration_ended,
            // The API server keeps a pod's start to the second.
            ran_for: self.now - pod.started / 1000 * 1000 + pod.pod_ran_before() / 1000 * 1000,
            left: pod.left.clone(),
        };
        let request = crate::checks::Request {
            at: self.now,
            uuid: uuid.to_string(),
            workload: k,
            from,
            target,
            health: request.as_ref().and_then(|r| r.reason.as_deref()) == Some("NodeUnhealthy"),
        };
        self.checks.send(&request, &seen);
    }

    /// What an operator does about a request that can never resolve once it has held Alfred
    /// up for a while, as the runbook says: removes the annotation OME never took, then the
    /// entry (`kubectl alfred journal resolve`).
    pub fn operator(&mut self) {
        let Some(state) = self.journal.state.clone() else {
            return;
        };
        let Ok(mut journal) = Journal::load(&state) else {
            return;
        };
        let cutoff = timestamp(self.now.saturating_sub(self.ome.operator_ms));
        let stuck: Vec<(String, String)> = journal
            .entries
            .iter()
            .filter(|e| e.reason.is_some_and(|r| r.never_resolves()))
            .filter(|e| e.phase == alfred::execute::journal::Phase::Stalled)
            .filter(|e| e.created_at <= cutoff)
            .map(|e| (e.uuid.clone(), e.workload.name.clone()))
            .collect();
        if stuck.is_empty() {
            return;
        }
        for (uuid, name) in &stuck {
            let task = name
                .strip_prefix("task-")
                .and_then(|k| k.parse::<usize>().ok());
            let annotated = task.filter(|&k| {
                self.service("trace", name) == Some(k)
                    && self.live[k]
                        .request
                        .as_ref()
                        .is_some_and(|(u, _)| u == uuid)
            });
            if let Some(k) = annotated {
                let pod = &mut self.live[k];
                pod.request = None;
                pod.service_version += 1;
                pod.version += 1;
            }
            journal.entries.retain(|e| &e.uuid != uuid);
            self.counters.operator_resolves += 1;
            if let Some(k) = task {
                self.checks.end(k, self.now);
            }
        }
        let breaker = self.journal.breaker.clone().unwrap_or_default();
        let version = self.journal.version.clone();
        let text = journal.to_json();
        // The in-memory journal is at the version just read: the write cannot be refused.
        let _ = futures_lite(self.write_journal(&version, &text, &breaker));
    }

    /// Makes the hold writes the pass asked for (`holdMinutes`), as the plugin makes them:
    /// releases, then holds.
    pub fn apply_holds(&mut self, report: &alfred::execute::run::Report) {
        for change in &report.plan.decision.holds {
            let node = self.node_index.get(&change.node).copied();
            let task = change
                .pod_uid
                .strip_prefix("uid-pod-")
                .and_then(|k| k.parse().ok());
            let task = task.filter(|&k: &usize| k < self.live.len());
            let (Some(node), Some(task)) = (node, task) else {
                continue;
            };
            // A release ends the node's hold; a hand-over the hold of the pod it replaces.
            let ended = |h: &Held| {
                h.node == node
                    && (!change.place || change.replaces.as_deref() == Some(&pending_uid(h.task)))
            };
            if let Some(i) = self.holds.iter().position(ended) {
                self.holds.remove(i);
                *self
                    .counters
                    .holds_released
                    .entry(change.reason.as_str())
                    .or_default() += 1;
            }
            if !change.place {
                continue;
            }
            let taken = self.holds.iter().any(|h| h.node == node || h.task == task);
            if taken || self.live[task].node.is_some() {
                continue;
            }
            let pod = &mut self.live[task];
            if !pod.tolerates_hold {
                pod.tolerates_hold = true;
                pod.version += 1;
            }
            self.holds.push(Held {
                node,
                task,
                since: self.now,
            });
            self.counters.holds_placed += 1;
            self.retry = true;
        }
    }
}

/// Runs a future of the in-memory store, which never waits.
pub fn futures_lite<T>(f: impl Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Writes the replay's cluster as the API server would list it. Each task's objects are
/// written and read once per change and kept: a read is then mostly copying.
pub struct Writer {
    /// The model, the nodes (item 1 + n is node n) and the guard.
    cluster: Vec<String>,
    /// The same, read.
    cluster_read: Snapshot,
    /// Per task: the version its objects were written at, and them (comma-separated, and
    /// read: a pass clones what it reads instead of parsing the cluster's text again).
    written: Vec<Option<Written>>,
    /// The last read, to be updated in place by the next: most tasks have not changed since.
    last: Option<LastRead>,
}

struct LastRead {
    read: Arc<Snapshot>,
    holds: Vec<Held>,
    /// How many objects of each kind the cluster's own part holds.
    cluster: Counts,
    /// The tasks read, in order: index, version, how many objects of each kind.
    tasks: Vec<(usize, u64, Counts)>,
}

/// A count per object kind of a snapshot, in the order `each_kind!` names them.
type Counts = [usize; 13];

/// Runs `$m!(index, field)` for every kind of object a snapshot lists (a kind `Snapshot` gains
/// goes here too: the replay's test compares these reads with whole ones).
macro_rules! each_kind {
    ($m:ident) => {
        $m!(0, nodes);
        $m!(1, pods);
        $m!(2, inference_services);
        $m!(3, serving_runtimes);
        $m!(4, cluster_serving_runtimes);
        $m!(5, inference_replicas);
        $m!(6, base_models);
        $m!(7, cluster_base_models);
        $m!(8, persistent_volume_claims);
        $m!(9, persistent_volumes);
        $m!(10, config_maps);
        $m!(11, controller_revisions);
        $m!(12, unreadable);
    };
}

fn counts(snapshot: &Snapshot) -> Counts {
    let mut counts = Counts::default();
    macro_rules! count {
        ($i:expr, $field:ident) => {
            counts[$i] = snapshot.$field.len();
        };
    }
    each_kind!(count);
    counts
}

/// Where a part of the next read comes from.
enum Part {
    /// The objects of the last read's task `j`, moved.
    Kept(usize),
    /// The last read's task `j`: left out.
    Dropped(usize),
    /// A task's objects as written now, cloned.
    Fresh(Arc<Snapshot>),
}

struct Written {
    version: u64,
    text: String,
    read: Arc<Snapshot>,
}

/// A read in parts: the cluster's own objects, then each task's. Putting them together is
/// most of a read's work, so it can be done on another thread.
pub struct Parts {
    cluster: Snapshot,
    tasks: Vec<Arc<Snapshot>>,
}

impl Parts {
    pub fn assemble(self) -> Snapshot {
        let mut snapshot = self.cluster;
        for task in self.tasks {
            snapshot.append(Arc::unwrap_or_clone(task));
        }
        snapshot
    }
}

fn read_list(items: &str) -> Result<Snapshot, String> {
    Snapshot::parse(&format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{items}]}}"#
    ))
    .map_err(|e| e.to_string())
}

impl Writer {
    pub fn new(nodes: &[TraceNode], guard: bool) -> Self {
        let mut items = trace::cluster_objects(nodes);
        if guard {
            let list: Value = serde_json::from_str(GUARD).expect("the guard fixture is JSON");
            items.extend(list["items"].as_array().cloned().unwrap_or_default());
        }
        let cluster: Vec<String> = items.iter().map(Value::to_string).collect();
        let cluster_read = read_list(&cluster.join(",")).expect("the cluster's objects read");
        Writer {
            cluster,
            cluster_read,
            written: Vec::new(),
            last: None,
        }
    }

    /// The cluster now as a read returns it (`parts`, put together), made from the last read
    /// by moving the objects of the tasks that did not change since: a pass reads after every
    /// event, and cloning every object was most of its work.
    pub fn read(
        &mut self,
        nodes: &[TraceNode],
        tasks: &[Task],
        live: &[Live],
        holds: &[Held],
    ) -> Result<Arc<Snapshot>, String> {
        let last = self
            .last
            .take()
            .and_then(|l| Some((Arc::try_unwrap(l.read).ok()?, l.holds, l.cluster, l.tasks)));
        let Some((mut old, old_holds, old_cluster, old_tasks)) = last else {
            let parts = self.parts(nodes, tasks, live, holds, false)?;
            let cluster = counts(&parts.cluster);
            let tasks: Vec<_> = live
                .iter()
                .enumerate()
                .filter(|(_, pod)| !pod.gone())
                .zip(&parts.tasks)
                .map(|((k, pod), read)| (k, pod.version, counts(read)))
                .collect();
            let read = Arc::new(parts.assemble());
            self.last = Some(LastRead {
                read: Arc::clone(&read),
                holds: holds.to_vec(),
                cluster,
                tasks,
            });
            return Ok(read);
        };

        // The new cluster part only when the holds changed.
        let fresh_cluster = (old_holds != holds)
            .then(|| self.parts(nodes, tasks, &[], holds, false))
            .transpose()?
            .map(|p| p.cluster);
        // Both task lists are in index order: walk them together.
        let mut plan = Vec::with_capacity(live.len());
        let mut new_tasks = Vec::with_capacity(live.len());
        let mut j = 0;
        for (k, pod) in live.iter().enumerate().filter(|(_, pod)| !pod.gone()) {
            while j < old_tasks.len() && old_tasks[j].0 < k {
                plan.push(Part::Dropped(j));
                j += 1;
            }
            if old_tasks
                .get(j)
                .is_some_and(|t| t.0 == k && t.1 == pod.version)
            {
                plan.push(Part::Kept(j));
                new_tasks.push(old_tasks[j]);
                j += 1;
                continue;
            }
            if old_tasks.get(j).is_some_and(|t| t.0 == k) {
                plan.push(Part::Dropped(j));
                j += 1;
            }
            let read = Arc::clone(&self.written(k, pod, tasks, nodes)?.read);
            new_tasks.push((k, pod.version, counts(&read)));
            plan.push(Part::Fresh(read));
        }
        plan.extend((j..old_tasks.len()).map(Part::Dropped));

        let mut skipped = self.cluster_read.skipped.clone();
        for &(k, ..) in &new_tasks {
            let read = &self.written[k]
                .as_ref()
                .expect("a read task is written")
                .read;
            for (kind, n) in &read.skipped {
                *skipped.entry(kind.clone()).or_default() += n;
            }
        }
        macro_rules! splice {
            ($i:expr, $field:ident) => {{
                let mut objects = std::mem::take(&mut old.$field).into_iter();
                let mut next = Vec::with_capacity(objects.len());
                match &fresh_cluster {
                    Some(cluster) => {
                        objects.by_ref().take(old_cluster[$i]).for_each(drop);
                        next.extend(cluster.$field.iter().cloned());
                    }
                    None => next.extend(objects.by_ref().take(old_cluster[$i])),
                }
                for part in &plan {
                    match part {
                        Part::Kept(j) => next.extend(objects.by_ref().take(old_tasks[*j].2[$i])),
                        Part::Dropped(j) => {
                            objects.by_ref().take(old_tasks[*j].2[$i]).for_each(drop)
                        }
                        Part::Fresh(read) => next.extend(read.$field.iter().cloned()),
                    }
                }
                old.$field = next;
            }};
        }
        each_kind!(splice);
        old.skipped = skipped;
        let cluster = fresh_cluster.as_ref().map_or(old_cluster, counts);
        let read = Arc::new(old);
        self.last = Some(LastRead {
            read: Arc::clone(&read),
            holds: holds.to_vec(),
            cluster,
            tasks: new_tasks,
        });
        Ok(read)
    }

    /// The cluster now as a read returns it, with Alfred's holds on their nodes, in parts to be
    /// put together (`Parts::assemble`). A `sample` leaves out what only Alfred's own moves
    /// made: surge pods not yet bound and the rows of migrations that ended (so cooldowns do
    /// not shrink what an ideal repack may move, with Alfred on or off alike).
    pub fn parts(
        &mut self,
        nodes: &[TraceNode],
        tasks: &[Task],
        live: &[Live],
        holds: &[Held],
        sample: bool,
    ) -> Result<Parts, String> {
        let mut snapshot = self.cluster_read.clone();
        for &h in holds {
            let text = held_node(&self.cluster[h.node + 1], h).to_string();
            let held = read_list(&text)?.nodes.pop().ok_or("a held node reads")?;
            if let Some(node) = snapshot
                .nodes
                .iter_mut()
                .find(|n| n.metadata.name == held.metadata.name)
            {
                *node = held;
            }
        }
        let mut parts = Vec::with_capacity(live.len());
        for (k, pod) in live.iter().enumerate() {
            if pod.gone() {
                continue;
            }
            if sample && (pod.migration.is_some() || !pod.ended.is_empty()) {
                let text = objects_text(k, pod, tasks, nodes, true);
                parts.push(Arc::new(read_list(&text)?));
                continue;
            }
            parts.push(Arc::clone(&self.written(k, pod, tasks, nodes)?.read));
        }
        Ok(Parts {
            cluster: snapshot,
            tasks: parts,
        })
    }

    /// The cluster now as the API server would list it (`parts`' objects as text).
    pub fn write(
        &mut self,
        nodes: &[TraceNode],
        tasks: &[Task],
        live: &[Live],
        holds: &[Held],
    ) -> Result<String, String> {
        let mut items: Vec<String> = self
            .cluster
            .iter()
            .enumerate()
            .map(|(i, item)| match holds.iter().find(|h| h.node + 1 == i) {
                Some(&h) => held_node(item, h).to_string(),
                None => item.clone(),
            })
            .collect();
        for (k, pod) in live.iter().enumerate() {
            if !pod.gone() {
                items.push(self.written(k, pod, tasks, nodes)?.text.clone());
            }
        }
        Ok(format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{}]}}"#,
            items.join(",")
        ))
    }

    /// Task `k`'s objects as written at its current version.
    fn written(
        &mut self,
        k: usize,
        pod: &Live,
        tasks: &[Task],
        nodes: &[TraceNode],
    ) -> Result<&Written, String> {
        if self.written.len() <= k {
            self.written.resize_with(k + 1, || None);
        }
        let slot = &mut self.written[k];
        if !matches!(slot, Some(w) if w.version == pod.version) {
            let text = objects_text(k, pod, tasks, nodes, false);
            let read = Arc::new(read_list(&text)?);
            *slot = Some(Written {
                version: pod.version,
                text,
                read,
            });
        }
        Ok(slot.as_ref().expect("written just now"))
    }
}

fn objects_text(k: usize, pod: &Live, tasks: &[Task], nodes: &[TraceNode], sample: bool) -> String {
    task_objects(k, pod, &tasks[pod.row], nodes, sample)
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A node object with Alfred's hold for task `h.task` (as `execute::hold` writes it).
fn held_node(text: &str, h: Held) -> Value {
    let mut node: Value = serde_json::from_str(text).expect("the writer's node is JSON");
    node["spec"]["taints"] = json!([hold::taint(&pending_uid(h.task))]);
    node["metadata"]["annotations"] = json!({HELD_SINCE: stamp(h.since)});
    node
}

/// A task's pod UID while it waits, kept when it binds (a moved pod is a new pod).
pub fn pending_uid(k: usize) -> String {
    format!("uid-pod-{k}")
}

/// A task's objects as the API server holds them now: `trace::objects` with the Instance's
/// index, times, migration request, migration rows and surge.
fn task_objects(
    k: usize,
    pod: &Live,
    task: &Task,
    nodes: &[TraceNode],
    sample: bool,
) -> Vec<Value> {
    let node = pod.node.map(|n| nodes[n].name.as_str());
    let mut objects = trace::objects(k, task, node, true);
    let name = format!("task-{k:05}");
    // The task's objects were created when it arrived; its first pod started when bound, a
    // surge's pod when the surge was placed.
    let created = stamp_before(pod.arrived, pod.ran_before);
    let moved = pod.moved();
    let (pod_created, started) = if moved {
        (stamp(pod.started), stamp(pod.started))
    } else {
        (
            created.clone(),
            stamp_before(pod.started, pod.pod_ran_before()),
        )
    };
    for object in objects.iter_mut().filter(|o| o["kind"] != "Pod") {
        object["metadata"]["creationTimestamp"] = json!(created);
    }
    let Some(last) = objects.last_mut() else {
        return objects;
    };
    last["metadata"]["creationTimestamp"] = json!(pod_created);
    // A pod keeps a toleration it gained; a moved pod is a new pod, made without it.
    if pod.tolerates_hold && (node.is_none() || !moved) {
        let toleration = hold::toleration(&pending_uid(k));
        match last["spec"]["tolerations"].as_array_mut() {
            Some(list) => list.push(toleration),
            None => last["spec"]["tolerations"] = json!([toleration]),
        }
    }
    if node.is_none() {
        last["metadata"]["uid"] = json!(pending_uid(k));
        // kube-scheduler stamps its first failed attempt, as the pod arrives.
        last["status"]["conditions"][0]["lastTransitionTime"] = json!(pod_created);
        return objects;
    }
    set_started(last, &started);
    if moved {
        last["metadata"]["uid"] = json!(format!("uid-pod-{k}-{}", pod.started));
    }
    if !task.whole() {
        return objects;
    }
    let source_pod = {
        let p = &mut objects[2];
        p["metadata"]["name"] = json!(format!("{name}-engine-{}-default-0", pod.index));
        p["metadata"]["labels"]["ome.io/instance-index"] = json!(pod.index.to_string());
        p.clone()
    };
    objects[0]["metadata"]["resourceVersion"] = json!(pod.service_version.to_string());
    if let Some((uuid, payload)) = &pod.request {
        objects[0]["metadata"]["annotations"] = json!({migration::annotation_key(uuid): payload});
    }
    let status = &mut objects[1]["status"];
    let row = &mut status["instanceStatuses"][0];
    row["index"] = json!(pod.index);
    row["readySince"] = json!(started);
    let mut migrations = if sample {
        Vec::new()
    } else {
        pod.ended.clone()
    };
    if let Some(m) = &pod.migration {
        let phase = if m.surge_node.is_some() {
            "SurgePending"
        } else {
            "Accepted"
        };
        let mut active = crate::world::migration_row(
            &m.uuid,
            m.source_index,
            &nodes[m.from].name,
            phase,
            m.started,
            m.deadline,
        );
        active["surgeInstance"] = json!(m.surge_index);
        migrations.push(active);
        row["phase"] = json!("Migrating");
        row["operation"] = json!({"id": format!("migrate-{}", m.uuid), "type": "Migrate",
            "step": "CreateSurge", "startedAt": stamp(m.started), "lastProgressAt": stamp(m.started),
            "deadline": stamp(m.deadline), "retryCount": 0, "surgeIndex": m.surge_index,
            "requestUUID": m.uuid});
        let revision = row["runningRevision"].clone();
        let surge_row = json!({"index": m.surge_index, "incarnation": 1, "phase": "Creating",
            "runningRevision": revision, "targetRevision": revision, "podCount": 1,
            "servingPodCount": 0, "availablePodCount": 0, "admitted": true});
        status["instanceStatuses"]
            .as_array_mut()
            .expect("rows")
            .push(surge_row);
        status["replicas"] = json!(2);
        let mut surge = source_pod;
        surge["metadata"]["name"] = json!(format!("{name}-engine-{}-default-0", m.surge_index));
        surge["metadata"]["labels"]["ome.io/instance-index"] = json!(m.surge_index.to_string());
        surge["metadata"]["uid"] = json!(format!("uid-surge-{}", m.uuid));
        surge["metadata"]["creationTimestamp"] = json!(stamp(m.started));
        match m.surge_node {
            Some(n) => {
                surge["spec"]["nodeName"] = json!(nodes[n].name);
                set_started(&mut surge, &stamp(m.surge_started));
                // Loading its model: running, not ready.
                for c in surge["status"]["conditions"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if c["type"] != "PodScheduled" {
                        c["status"] = json!("False");
                    }
                }
            }
            None => {
                surge["spec"]
                    .as_object_mut()
                    .expect("spec")
                    .remove("nodeName");
                surge["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                    "status": "False", "reason": "Unschedulable", "lastTransitionTime": stamp(m.started)}]});
            }
        }
        crate::scheduler::prefer_nodes(&mut surge["spec"], &m.hints);
        if !(sample && m.surge_node.is_none()) {
            objects.push(surge);
        }
    }
    if !migrations.is_empty() {
        objects[1]["status"]["migrations"] = json!(migrations);
    }
    objects
}

/// Sets a bound pod's start and condition times.
fn set_started(pod: &mut Value, at: &str) {
    pod["status"]["startTime"] = json!(at);
    for c in pod["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        c["lastTransitionTime"] = json!(at);
    }
}
