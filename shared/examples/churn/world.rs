//! The replay's cluster: tasks coming and going, the scheduler's queue, and a simulated OME
//! that answers Alfred's migration requests as omenative-reference.md §5 describes. The world
//! is also the store Alfred's execute pass reads and writes (`store.rs`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use alfred::execute::run::JournalDoc;
use serde_json::{Value, json};

use crate::scheduler::Scheduler;
use crate::trace::{Rng, Task, TraceNode};

/// Milliseconds: the virtual clock's unit.
pub const MINUTE: u64 = 60_000;
pub const HOUR: u64 = 60 * MINUTE;

/// What happens next on the virtual clock, earliest first (departures before arrivals before
/// samples before passes at the same moment).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Event {
    Departure(usize),
    Arrival,
    Sample,
    Pass,
    /// OME's next step on task `.0`'s migration number `.1`.
    Ome(usize, u32, Step),
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Step {
    /// The controller sees the request annotation.
    Acknowledge,
    /// The surge has loaded its model: it is ready (or, for a failing request, it failed).
    SurgeLoaded,
    /// The migration's deadline.
    Expire,
}

/// How the simulated OME answers (chart defaults where it has them).
pub struct OmeSettings {
    /// From the annotation to the acknowledgement.
    pub acknowledge_ms: u64,
    /// From the surge pod's binding to its readiness.
    pub model_load_ms: u64,
    /// `instanceReadyTimeout`: the deadline after acceptance.
    pub ready_timeout_ms: u64,
    /// Share of requests whose surge fails, and of requests OME never picks up.
    pub fail_rate: f64,
    pub no_ack_rate: f64,
    /// How long a request that can never resolve stalls Alfred before an operator resolves it
    /// as the runbook says (`kubectl alfred journal resolve`).
    pub operator_ms: u64,
}

/// A task in the replay.
pub struct Live {
    pub row: usize,
    pub arrived: u64,
    /// How long it runs once bound.
    pub runs: u64,
    pub node: Option<usize>,
    pub bound: Option<u64>,
    /// Its Instance's index (a migration moves it to the surge's), and when its current pod
    /// started.
    pub index: i32,
    pub started: u64,
    /// Bumped on every change a read shows: the writer's cache key.
    pub version: u64,
    /// The InferenceService's resourceVersion and its migration request annotation (uuid,
    /// payload), if any.
    pub service_version: u64,
    pub request: Option<(String, String)>,
    pub migration: Option<Migration>,
    /// The InferenceReplica's `status.migrations` rows that ended.
    pub ended: Vec<Value>,
    /// When the last migration OME ran for it ended.
    pub migration_ended: Option<u64>,
    /// The nodes its completed moves took it off, and when.
    pub left: Vec<(usize, u64)>,
    /// It tolerates Alfred's hold taint for its UID (a toleration, once added, stays).
    pub tolerates_hold: bool,
    /// How long a task of the steady state had run before the replay began: its objects were
    /// created that long before it arrived.
    pub ran_before: u64,
}

impl Live {
    /// A migration moved it: its pod is the surge's.
    pub fn moved(&self) -> bool {
        Some(self.started) != self.bound
    }

    /// How long its pod had run before the replay began.
    pub fn pod_ran_before(&self) -> u64 {
        if self.moved() { 0 } else { self.ran_before }
    }

    pub fn gone(&self) -> bool {
        self.node.is_none() && self.bound.is_some()
    }
}

/// A migration OME accepted.
pub struct Migration {
    pub serial: u32,
    pub uuid: String,
    /// The Instance moved: its index and node.
    pub source_index: i32,
    pub from: usize,
    pub surge_index: i32,
    pub hints: Vec<String>,
    pub started: u64,
    pub deadline: u64,
    pub surge_node: Option<usize>,
    pub surge_started: u64,
    pub fails: bool,
}

/// A pod in the scheduler's queue: a task's, or the surge of its migration.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    pub task: usize,
    pub surge: bool,
}

/// What Alfred did, checked independently of its own bookkeeping.
#[derive(Default)]
pub struct Counters {
    pub passes: usize,
    pub pass_errors: usize,
    pub moves: usize,
    pub completed: usize,
    pub failed: usize,
    pub expired: usize,
    pub never_acknowledged: usize,
    pub owner_gone: usize,
    pub operator_resolves: usize,
    pub journal_max_bytes: usize,
    /// Holds placed, and released by reason; held pods that bound on their held node.
    pub holds_placed: usize,
    pub holds_released: std::collections::BTreeMap<&'static str, usize>,
    pub held_pods_bound_there: usize,
    /// Surges bound, and those bound on a node the request did not hint (kube-scheduler
    /// scores only its share of the feasible nodes, which may hold none of the hints).
    pub surges_bound: usize,
    pub surges_off_hints: usize,
    /// First pass error seen, for the report.
    pub first_error: Option<String>,
}

/// One of Alfred's holds as the world carries it: the taint on `node` for task `task`, since
/// when.
#[derive(Clone, Copy, PartialEq)]
pub struct Held {
    pub node: usize,
    pub task: usize,
    pub since: u64,
}

pub struct World<'c, 's> {
    pub nodes: &'c [TraceNode],
    pub tasks: &'c [Task],
    pub live: Vec<Live>,
    pub waiting: Vec<Waiter>,
    pub scheduler: Scheduler<'c, 's>,
    pub rng: Rng,
    pub events: BinaryHeap<Reverse<(u64, Event)>>,
    pub now: u64,
    /// Room was freed since the queue was last tried.
    pub retry: bool,
    pub ome: OmeSettings,
    pub journal: JournalDoc,
    pub uuids: u64,
    pub counters: Counters,
    /// Alfred's requests judged from the outside.
    pub checks: crate::checks::SendChecks,
    pub node_index: std::collections::HashMap<String, usize>,
    pub writer: crate::store::Writer,
    pub holds: Vec<Held>,
    /// The last read Alfred's store returned, until anything changes (every event clears it,
    /// and so does a request): the recheck's read of an unchanged cluster is the same read.
    pub last_read: Option<std::sync::Arc<alfred::snapshot::Snapshot>>,
    /// Compare every read made from the last one with a whole read (`--check-reads`).
    pub check_reads: bool,
}

impl<'c, 's> World<'c, 's> {
    pub fn push(&mut self, at: u64, event: Event) {
        self.events.push(Reverse((at, event)));
    }

    /// A new task now, queued or bound at once.
    pub fn arrive(&mut self, row: usize, runs: u64) -> usize {
        let k = self.add(row, runs);
        self.submit(Waiter {
            task: k,
            surge: false,
        });
        k
    }

    /// A task of the start state, running with `left` of its run ahead, where the scheduler
    /// puts it; false when no node takes it (then it is dropped: only running tasks are drawn
    /// by their running times, a waiting one has all of its run ahead).
    pub fn seat_at_start(&mut self, row: usize, left: u64, ran_before: u64) -> bool {
        let k = self.add(row, left);
        let waiter = Waiter {
            task: k,
            surge: false,
        };
        if self.try_place(waiter) {
            self.live[k].ran_before = ran_before;
            return true;
        }
        self.live.pop();
        false
    }

    fn add(&mut self, row: usize, runs: u64) -> usize {
        self.live.push(Live {
            row,
            arrived: self.now,
            runs,
            node: None,
            bound: None,
            index: 0,
            started: self.now,
            version: 0,
            service_version: 1,
            request: None,
            migration: None,
            ended: Vec::new(),
            migration_ended: None,
            left: Vec::new(),
            tolerates_hold: false,
            ran_before: 0,
        });
        self.live.len() - 1
    }

    /// A new pod joins the back of the queue; unless room was freed since the last try (then
    /// the whole queue is tried next), only it can fit now.
    pub fn submit(&mut self, waiter: Waiter) {
        if self.retry || !self.try_place(waiter) {
            self.waiting.push(waiter);
        }
    }

    /// Tries every waiting pod in arrival order, as kube-scheduler retries them.
    /// The GPUs of each waiting task (surges left out).
    pub fn waiting_gpus(&self) -> impl Iterator<Item = i64> + '_ {
        (self.waiting.iter())
            .filter(|w| !w.surge)
            .map(|w| self.tasks[self.live[w.task].row].holds())
    }

    pub fn retry_queue(&mut self) {
        if !self.retry {
            return;
        }
        self.retry = false;
        let queue = std::mem::take(&mut self.waiting);
        for waiter in queue {
            if !self.try_place(waiter) {
                self.waiting.push(waiter);
            }
        }
    }

    fn try_place(&mut self, waiter: Waiter) -> bool {
        let k = waiter.task;
        let row = self.live[k].row;
        if waiter.surge && self.live[k].migration.is_none() {
            return true; // the migration ended: its surge is no longer wanted
        }
        // Most retries find no room anywhere: they end here, before the holds are looked at.
        if !self.scheduler.room_anywhere(row) {
            return false;
        }
        // Alfred's hold taint keeps everyone off the node but the pod it is for.
        let held: Vec<usize> = self
            .holds
            .iter()
            .filter(|h| waiter.surge || h.task != k)
            .map(|h| h.node)
            .collect();
        if !waiter.surge {
            let Some(n) = self.scheduler.place(row, &held, &mut self.rng) else {
                return false;
            };
            if self.holds.iter().any(|h| h.task == k && h.node == n) {
                self.counters.held_pods_bound_there += 1;
            }
            let pod = &mut self.live[k];
            pod.node = Some(n);
            pod.bound = Some(self.now);
            pod.started = self.now;
            pod.version += 1;
            let leaves = self.now + pod.runs;
            self.push(leaves, Event::Departure(k));
            return true;
        }
        let m = self.live[k].migration.as_ref().expect("checked above");
        let hints = m.hints.clone();
        let Some(n) = self
            .scheduler
            .place_surge(row, &hints, &held, &mut self.rng)
        else {
            return false;
        };
        let now = self.now;
        let pod = &mut self.live[k];
        let m = pod.migration.as_mut().expect("checked above");
        m.surge_node = Some(n);
        self.counters.surges_bound += 1;
        if !hints.contains(&self.nodes[n].name) {
            self.counters.surges_off_hints += 1;
        }
        m.surge_started = now;
        let serial = m.serial;
        pod.version += 1;
        self.push(
            now + self.ome.model_load_ms,
            Event::Ome(k, serial, Step::SurgeLoaded),
        );
        true
    }

    /// Task `k`'s run is over: its InferenceService is deleted, with any migration in flight.
    pub fn depart(&mut self, k: usize) {
        let row = self.live[k].row;
        if let Some(n) = self.live[k].node.take() {
            self.scheduler.release(n, row);
        }
        if let Some(m) = self.live[k].migration.take() {
            self.counters.owner_gone += 1;
            if let Some(s) = m.surge_node {
                self.scheduler.release(s, row);
            }
        }
        self.live[k].request = None;
        self.live[k].version += 1;
        self.waiting.retain(|w| w.task != k);
        let now = self.now;
        self.checks.end(k, now);
        self.retry = true;
    }

    /// OME's controller acts on task `k`'s migration.
    pub fn ome_step(&mut self, k: usize, serial: u32, step: Step) {
        if self.live[k].gone() {
            return;
        }
        match step {
            Step::Acknowledge => self.acknowledge(k, serial),
            Step::SurgeLoaded => {
                let Some(m) = self.live[k]
                    .migration
                    .as_ref()
                    .filter(|m| m.serial == serial)
                else {
                    return;
                };
                if m.fails {
                    self.end_migration(k, "Failed", "SurgeFailed");
                } else {
                    self.complete(k);
                }
            }
            Step::Expire => {
                if self.live[k]
                    .migration
                    .as_ref()
                    .is_some_and(|m| m.serial == serial)
                {
                    self.counters.expired += 1;
                    self.end_migration(k, "Failed", "MigrationExpired");
                }
            }
        }
    }

    /// The controller takes the request: it deletes the annotation and accepts it (or fails it
    /// when its source is not where the Instance runs), then creates the surge.
    fn acknowledge(&mut self, k: usize, serial: u32) {
        let Some((uuid, payload)) = self.live[k].request.take() else {
            return;
        };
        let now = self.now;
        let pod = &mut self.live[k];
        pod.service_version += 1;
        pod.version += 1;
        let request: Value = serde_json::from_str(&payload).unwrap_or_default();
        let from = request["from_node"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let hints: Vec<String> = request["hint_target_nodes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let source = pod.node.map(|n| self.nodes[n].name.clone());
        if pod.migration.is_some() || source.as_deref() != Some(from.as_str()) {
            let instance = request["instance"].as_i64().unwrap_or_default() as i32;
            let mut row = migration_row(&uuid, instance, &from, "Failed", now, now + 1000);
            row["completedAt"] = json!(stamp(now));
            row["reason"] = json!("MigrationFromNodeMismatch");
            pod.ended.push(row);
            pod.migration_ended = Some(now);
            self.counters.failed += 1;
            return;
        }
        let surge_index = if pod.index == 0 { 1 } else { 0 };
        let fails = uniform(&mut self.rng) < self.ome.fail_rate;
        let deadline = now + self.ome.ready_timeout_ms;
        let pod = &mut self.live[k];
        pod.migration = Some(Migration {
            serial,
            uuid,
            source_index: pod.index,
            from: pod.node.expect("bound"),
            surge_index,
            hints,
            started: now,
            deadline,
            surge_node: None,
            surge_started: 0,
            fails,
        });
        self.push(deadline, Event::Ome(k, serial, Step::Expire));
        self.submit(Waiter {
            task: k,
            surge: true,
        });
    }

    /// The surge is ready: the source drains, and the Instance runs at the surge's index.
    fn complete(&mut self, k: usize) {
        let row = self.live[k].row;
        let now = self.now;
        let pod = &mut self.live[k];
        let m = pod.migration.as_ref().expect("a migration completes");
        let (from, to) = (m.from, m.surge_node.expect("a ready surge is bound"));
        pod.left.push((from, now));
        pod.node = Some(to);
        pod.index = m.surge_index;
        pod.started = m.surge_started;
        self.scheduler.release(from, row);
        self.checks.end(k, now);
        self.counters.completed += 1;
        self.end_migration(k, "Completed", "");
        self.retry = true;
    }

    /// Records the migration's end in the InferenceReplica's status; a failed one's surge is
    /// removed.
    fn end_migration(&mut self, k: usize, phase: &str, reason: &str) {
        let now = self.now;
        let row = self.live[k].row;
        let Some(m) = self.live[k].migration.take() else {
            return;
        };
        let pod = &mut self.live[k];
        let mut status = migration_row(
            &m.uuid,
            m.source_index,
            &self.nodes[m.from].name,
            phase,
            m.started,
            m.deadline,
        );
        status["surgeInstance"] = json!(m.surge_index);
        status["completedAt"] = json!(stamp(now));
        if !reason.is_empty() {
            status["reason"] = json!(reason);
        }
        // OME keeps a bounded history; the journal needs only the newest rows.
        pod.ended.push(status);
        pod.migration_ended = Some(now);
        if pod.ended.len() > 8 {
            pod.ended.remove(0);
        }
        pod.version += 1;
        if phase != "Completed" {
            if phase == "Failed" && reason != "MigrationExpired" {
                self.counters.failed += 1;
            }
            if let Some(s) = m.surge_node {
                self.scheduler.release(s, row);
                self.retry = true;
            }
            self.waiting.retain(|w| !(w.task == k && w.surge));
            self.checks.end(k, now);
        }
    }
}

/// A `status.migrations` row.
pub fn migration_row(
    uuid: &str,
    source: i32,
    from: &str,
    phase: &str,
    started: u64,
    deadline: u64,
) -> Value {
    json!({"requestUUID": uuid, "trigger": "Manual", "sourceInstance": source, "fromNode": from,
           "phase": phase, "startedAt": stamp(started), "deadline": stamp(deadline)})
}

/// The virtual clock's start, as the API server writes times.
pub const EPOCH: &str = "2026-09-28T00:00:00Z";

/// A moment of the virtual clock as an RFC 3339 time in whole seconds.
pub fn stamp(ms: u64) -> String {
    stamp_before(ms, 0)
}

/// The moment `before` ms ahead of `ms` (it may be ahead of the clock's start).
pub fn stamp_before(ms: u64, before: u64) -> String {
    let epoch: k8s_openapi::jiff::Timestamp = EPOCH.parse().expect("epoch");
    let seconds = epoch.as_second() + (ms / 1000) as i64 - (before / 1000) as i64;
    let t = k8s_openapi::jiff::Timestamp::from_second(seconds).expect("in range");
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A moment of the virtual clock, to the millisecond.
pub fn timestamp(ms: u64) -> k8s_openapi::jiff::Timestamp {
    let epoch: k8s_openapi::jiff::Timestamp = EPOCH.parse().expect("epoch");
    k8s_openapi::jiff::Timestamp::from_millisecond(epoch.as_millisecond() + ms as i64)
        .expect("in range")
}

/// A uniform draw in [0, 1).
pub fn uniform(rng: &mut Rng) -> f64 {
    (rng.next() >> 11) as f64 / (1u64 << 53) as f64
}
