//! Whole execute passes over an in-memory cluster that behaves like the API server where it
//! matters (resourceVersion preconditions, JSON Patch `test` operations) and a stand-in for the
//! OME controller: the full request cycle, crashes injected at every write, and two runs
//! interleaved step by step. Nothing may be lost or sent twice.

mod common;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

use alfred::config::Config;
use alfred::decision::RowOutcome;
use alfred::execute::journal::{Journal, Phase};
use alfred::execute::run::{self, JournalDoc, Options, PassError, ServiceState, Store, StoreError};
use alfred::snapshot::Snapshot;
use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use serde_json::{Value, json};

const EXEC: &str = "schemaVersion: 1\nmode: execute\nmigration: {apiVersion: v1}\n";

/// The shared state of the fake cluster.
struct Cluster {
    world: World,
    now: Timestamp,
    journal: JournalDoc,
    uuids: u32,
    /// Every request UUID ever written onto an InferenceService, and how often OME took it.
    annotated: BTreeSet<String>,
    consumed: BTreeMap<String, usize>,
    /// Mutations (journal writes and patches) left before an injected failure; the bool says
    /// whether the failing mutation still takes effect (a reply lost after the write).
    crash: Option<(usize, bool)>,
    /// A change made to the cluster right after this many reads of it.
    after_reads: Option<(usize, Change)>,
    /// A change made right after this many journal writes.
    after_writes: Option<(usize, Change)>,
    /// Return the last read again (the same `Arc`) while the cluster and the clock are
    /// unchanged, as a store may; how often it did.
    reuse_reads: Option<(Option<LastRead>, usize)>,
}

/// A read as text, when it was taken, and what it gave.
type LastRead = (String, Timestamp, Arc<Snapshot>);

type Change = Box<dyn FnOnce(&mut Cluster)>;

impl Cluster {
    fn new(world: World) -> Cluster {
        Cluster {
            now: NOW.parse().unwrap(),
            world,
            journal: JournalDoc {
                version: "1".into(),
                ..Default::default()
            },
            uuids: 0,
            annotated: BTreeSet::new(),
            consumed: BTreeMap::new(),
            crash: None,
            after_reads: None,
            after_writes: None,
            reuse_reads: None,
        }
    }

    fn isvc(&mut self, namespace: &str, name: &str) -> Option<&mut Value> {
        self.world.items.iter_mut().find(|i| {
            i["kind"] == "InferenceService"
                && i["metadata"]["namespace"] == namespace
                && i["metadata"]["name"] == name
        })
    }

    /// Whether the next mutation fails, and whether it applies first.
    fn mutation(&mut self) -> Result<(), bool> {
        match &mut self.crash {
            Some((0, applies)) => {
                let applies = *applies;
                self.crash = None;
                Err(applies)
            }
            Some((n, _)) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn journal(&self) -> Journal {
        match &self.journal.state {
            Some(s) => Journal::load(s).unwrap(),
            None => Journal::new(),
        }
    }

    /// The OME controller: takes every request annotation (once) into a status row, then the
    /// next call completes it.
    fn ome_step(&mut self) {
        let now = self.now;
        let items = &mut self.world.items;
        let mut taken = Vec::new();
        for isvc in items.iter_mut().filter(|i| i["kind"] == "InferenceService") {
            let name = isvc["metadata"]["name"].as_str().unwrap().to_string();
            let Some(annotations) = isvc["metadata"]["annotations"].as_object_mut() else {
                continue;
            };
            let keys: Vec<String> = annotations
                .keys()
                .filter(|k| k.starts_with("ome.io/migration-request-v1-"))
                .cloned()
                .collect();
            for key in keys {
                let payload: Value =
                    serde_json::from_str(annotations.remove(&key).unwrap().as_str().unwrap())
                        .unwrap();
                let uuid = key
                    .trim_start_matches("ome.io/migration-request-v1-")
                    .to_string();
                *self.consumed.entry(uuid.clone()).or_default() += 1;
                taken.push((name.clone(), uuid, payload));
            }
            bump(isvc);
        }
        for ir in items.iter_mut().filter(|i| i["kind"] == "InferenceReplica") {
            let Some(rows) = ir
                .get_mut("status")
                .and_then(|s| s.get_mut("migrations"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for row in rows.iter_mut().filter(|r| r["phase"] == "Accepted") {
                row["phase"] = json!("Completed");
                row["completedAt"] = json!(now.to_string());
            }
        }
        for (name, uuid, payload) in taken {
            let ir = items
                .iter_mut()
                .find(|i| {
                    i["kind"] == "InferenceReplica"
                        && i["metadata"]["name"] == format!("{name}-engine")
                })
                .unwrap();
            let rows = ir["status"]["migrations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut rows = rows;
            rows.push(json!({"requestUUID": uuid, "trigger": "Manual",
                "sourceInstance": payload["instance"], "fromNode": payload["from_node"],
                "phase": "Accepted", "startedAt": now.to_string(),
                "deadline": (now + SignedDuration::from_mins(30)).to_string()}));
            ir["status"]["migrations"] = json!(rows);
        }
    }
}

fn bump(item: &mut Value) {
    let rv: u64 = item["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("1")
        .parse()
        .unwrap();
    item["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
}

/// A handle on the fake cluster; every call yields once, so that two passes polled in turn
/// interleave at every step.
#[derive(Clone)]
struct Handle(Rc<RefCell<Cluster>>);

struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl Store for Handle {
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError> {
        YieldOnce(false).await;
        let mut c = self.0.borrow_mut();
        let text = json!({"apiVersion": "v1", "kind": "List", "items": c.world.items}).to_string();
        let now = c.now;
        let read = match &mut c.reuse_reads {
            Some((Some((last, at, read)), hits)) if *last == text && *at == now => {
                *hits += 1;
                (Arc::clone(read), now)
            }
            Some((last, _)) => {
                let read = Arc::new(Snapshot::parse(&text).unwrap());
                *last = Some((text, now, Arc::clone(&read)));
                (read, now)
            }
            None => (Arc::new(Snapshot::parse(&text).unwrap()), now),
        };
        match c.after_reads.take() {
            Some((1, change)) => change(&mut c),
            Some((n, change)) => c.after_reads = Some((n - 1, change)),
            None => {}
        }
        Ok(read)
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError> {
        YieldOnce(false).await;
        Ok(self.0.borrow().journal.clone())
    }

    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, StoreError> {
        YieldOnce(false).await;
        let mut c = self.0.borrow_mut();
        let failure = c.mutation().err();
        if failure == Some(false) {
            return Err(injected("before the write"));
        }
        if c.journal.version != version {
            return Ok(None);
        }
        Journal::load(state).expect("only valid journals are written");
        let next = (c.journal.version.parse::<u64>().unwrap() + 1).to_string();
        c.journal = JournalDoc {
            state: Some(state.into()),
            breaker: Some(breaker.into()),
            version: next.clone(),
        };
        match c.after_writes.take() {
            Some((1, change)) => change(&mut c),
            Some((n, change)) => c.after_writes = Some((n - 1, change)),
            None => {}
        }
        match failure {
            Some(_) => Err(injected("after the write")),
            None => Ok(Some(next)),
        }
    }

    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, StoreError> {
        YieldOnce(false).await;
        let mut c = self.0.borrow_mut();
        Ok(c.isvc(namespace, name).map(|i| ServiceState {
            uid: i["metadata"]["uid"].as_str().unwrap().into(),
            resource_version: i["metadata"]["resourceVersion"].as_str().unwrap().into(),
            has_annotations: i["metadata"]["annotations"]
                .as_object()
                .is_some_and(|a| !a.is_empty()),
            request: i["metadata"]["annotations"][format!("ome.io/migration-request-v1-{uuid}")]
                .as_str()
                .map(String::from),
        }))
    }

    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), StoreError> {
        YieldOnce(false).await;
        let mut c = self.0.borrow_mut();
        let failure = c.mutation().err();
        if failure == Some(false) {
            return Err(injected("before the patch"));
        }
        let isvc = c
            .isvc(namespace, name)
            .ok_or_else(|| injected("not found"))?;
        let mut updated = isvc.clone();
        json_patch::patch(&mut updated, patch).map_err(|e| injected(&e.to_string()))?;
        bump(&mut updated);
        *isvc = updated.clone();
        for key in updated["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
        {
            if let Some(uuid) = key.strip_prefix("ome.io/migration-request-v1-") {
                c.annotated.insert(uuid.to_string());
            }
        }
        match failure {
            Some(_) => Err(injected("after the patch")),
            None => Ok(()),
        }
    }

    fn new_uuid(&mut self) -> String {
        let mut c = self.0.borrow_mut();
        c.uuids += 1;
        format!("00000000-0000-4000-8000-{:012x}", c.uuids)
    }
}

/// A failure the test store injects, as a client's error.
fn injected(cause: &str) -> StoreError {
    StoreError::Call {
        action: "the test store".into(),
        cause: format!("injected failure {cause}"),
        lasting: false,
    }
}

type Task<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Polls the futures in the order `schedule` picks (index mod the number still running) until
/// all finish.
fn run_interleaved<T>(
    mut futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>,
    schedule: &[usize],
) -> Vec<T> {
    let mut cx = TaskContext::from_waker(Waker::noop());
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    let mut step = 0;
    while results.iter().any(Option::is_none) {
        let running: Vec<usize> = (0..futures.len())
            .filter(|&i| results[i].is_none())
            .collect();
        let pick = running[schedule.get(step).copied().unwrap_or(0) % running.len()];
        step += 1;
        if let Poll::Ready(r) = futures[pick].as_mut().poll(&mut cx) {
            results[pick] = Some(r);
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

fn block_on<T>(f: impl Future<Output = T>) -> T {
    run_interleaved(vec![Box::pin(f)], &[]).pop().unwrap()
}

/// n1 is Unhealthy and holds a (4 GPUs) and b (2); n2 and n3 are empty.
fn evacuation() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .node("n3", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "b", &[("n1", 2)])
        .unhealthy("n1")
}

fn config() -> Config {
    Config::parse(EXEC).unwrap()
}

fn pass(h: &Handle, dry_run: bool) -> Result<run::Report, PassError> {
    let mut store = h.clone();
    block_on(async move { run::run_pass(&mut store, &config(), Options { dry_run }).await })
}

fn outcomes(report: &run::Report) -> Vec<(String, RowOutcome, String)> {
    report
        .rows()
        .into_iter()
        .filter(|r| r.dispatch_status.is_some() || r.reject_reason.is_some())
        .map(|r| {
            (
                format!("{}/{}", r.workload, r.instance),
                r.outcome,
                r.why().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn row(name: &str, outcome: RowOutcome, reason: &str) -> (String, RowOutcome, String) {
    (name.into(), outcome, reason.into())
}

#[test]
fn a_full_cycle_submit_acknowledge_complete_then_the_next_move() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));

    // Dry run: every check, nothing written.
    let dry = pass(&h, true).unwrap();
    let (_, would) = dry.sent.clone().expect("a move would be sent");
    assert_eq!(would.workload.to_string(), "team/b");
    assert_eq!(h.0.borrow().journal.state, None);
    assert!(h.0.borrow().annotated.is_empty());

    // The first pass sends b's move (the smaller one); a waits behind the serial limit.
    let first = pass(&h, false).unwrap();
    let (_, sent) = first.sent.clone().expect("a request was sent");
    assert_eq!(
        outcomes(&first),
        vec![
            row("team/b/0", RowOutcome::Submitted, "RequestSubmitted"),
            row("team/a/0", RowOutcome::Withheld, "SerialDispatchLimit"),
        ]
    );
    let uuid = sent.uuid.clone();
    {
        let mut c = h.0.borrow_mut();
        let isvc = c.isvc("team", "b").unwrap().clone();
        let value = isvc["metadata"]["annotations"][format!("ome.io/migration-request-v1-{uuid}")]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            value,
            format!(
                r#"{{"schemaVersion":"v1","component":"engine","instance":0,"from_node":"n1","hint_target_nodes":["n2"],"reason":"NodeUnhealthy","requested_at":"{NOW}","requested_by":"alfred"}}"#
            )
        );
        let j = c.journal();
        assert_eq!(j.entries.len(), 1);
        let e = &j.entries[0];
        assert_eq!(
            (e.phase, e.reason_str()),
            (Phase::Submitted, "RequestSubmitted")
        );
        assert_eq!(e.payload, value);
        assert_eq!(e.targets, vec!["n2"]);
        assert_eq!(
            (e.workload_uid.as_str(), e.ir_uid.as_str()),
            ("uid-b", "uid-b-engine")
        );
        assert_eq!(e.last_attempt, Some(c.now));
    }

    // While it waits, nothing else goes.
    let waiting = pass(&h, false).unwrap();
    assert!(waiting.sent.is_none());
    assert_eq!(
        waiting.withheld.as_ref().unwrap().reason.as_str(),
        "UnresolvedRequest"
    );

    // OME takes it: acknowledged.
    h.0.borrow_mut().now += SignedDuration::from_mins(1);
    h.0.borrow_mut().ome_step();
    let acked = pass(&h, false).unwrap();
    assert!(
        acked
            .rows()
            .iter()
            .any(|r| r.request_uuid.as_deref() == Some(uuid.as_str())
                && r.outcome == RowOutcome::Acknowledged)
    );
    assert_eq!(h.0.borrow().journal().entries[0].phase, Phase::Acknowledged);

    // OME finishes it: completed, once more in the rows, and the next move may go.
    h.0.borrow_mut().now += SignedDuration::from_mins(1);
    h.0.borrow_mut().ome_step();
    // The pods moved: b now runs on n2 (started just now).
    {
        let mut c = h.0.borrow_mut();
        let now = c.now;
        let pod = c
            .world
            .items
            .iter_mut()
            .find(|i| i["metadata"]["name"] == "b-engine-0-default-0")
            .unwrap();
        pod["spec"]["nodeName"] = json!("n2");
        pod["status"]["startTime"] = json!(now.to_string());
    }
    let done = pass(&h, false).unwrap();
    assert!(
        done.rows()
            .iter()
            .any(|r| r.request_uuid.as_deref() == Some(uuid.as_str())
                && r.outcome == RowOutcome::Completed)
    );
    let (_, next) = done
        .sent
        .clone()
        .expect("the next move goes once the first completed");
    assert_eq!(next.workload.to_string(), "team/a");
    assert_ne!(next.uuid, uuid);
    assert_eq!(
        next.targets,
        vec!["n3"],
        "n2 took b's pods and cools for 10 minutes after Alfred's move landed there"
    );
    let c = h.0.borrow();
    assert_eq!(c.journal().entries.len(), 2);
    assert_eq!(c.consumed.get(&uuid), Some(&1));
}

#[test]
fn a_read_returned_again_while_nothing_changed_gives_the_same_passes() {
    // The re-check's read of an unchanged cluster keeps the first read's decision, and still
    // reconciles the journal as saved in between (the pass that completes one move and sends
    // the next).
    let fresh = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    let reused = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    reused.0.borrow_mut().reuse_reads = Some((None, 0));
    for step in 0..6 {
        let (a, b) = (pass(&fresh, false).unwrap(), pass(&reused, false).unwrap());
        assert_eq!(outcomes(&a), outcomes(&b), "step {step}");
        assert_eq!(a.sent, b.sent, "step {step}");
        assert_eq!(a.transitions, b.transitions, "step {step}");
        assert_eq!(
            fresh.0.borrow().journal.state,
            reused.0.borrow().journal.state,
            "step {step}"
        );
        for h in [&fresh, &reused] {
            let mut c = h.0.borrow_mut();
            c.now += SignedDuration::from_mins(1);
            c.ome_step();
            if step == 1 {
                // The move completed: b's pod runs on n2.
                let now = c.now;
                let pod = (c.world.items.iter_mut())
                    .find(|i| i["metadata"]["name"] == "b-engine-0-default-0")
                    .unwrap();
                pod["spec"]["nodeName"] = json!("n2");
                pod["status"]["startTime"] = json!(now.to_string());
            }
        }
    }
    assert_eq!(fresh.0.borrow().journal().entries.len(), 2);
    let hits = reused.0.borrow().reuse_reads.as_ref().unwrap().1;
    assert!(hits >= 2, "the re-check reused the first read {hits} times");
}

/// A pass interrupted at mutation `k` (before or after it applies), then passes and OME steps
/// until the cluster settles.
fn crash_then_recover(k: usize, applies: bool, ome_between: bool) -> Cluster {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    h.0.borrow_mut().crash = Some((k, applies));
    let _ = pass(&h, false);
    for _ in 0..6 {
        if ome_between {
            h.0.borrow_mut().ome_step();
        }
        h.0.borrow_mut().now += SignedDuration::from_secs(30);
        let _ = pass(&h, false);
    }
    Rc::try_unwrap(h.0).ok().unwrap().into_inner()
}

/// Nothing lost, nothing twice: every request on an object is in the journal, OME took each at
/// most once, and no two of Alfred's requests were ever open at the same time.
fn assert_safe(c: &Cluster, what: &str) {
    let j = c.journal();
    for uuid in &c.annotated {
        assert!(
            j.find(uuid).is_some(),
            "{what}: request {uuid} was sent but is not in the journal"
        );
    }
    for (uuid, n) in &c.consumed {
        assert_eq!(*n, 1, "{what}: request {uuid} was taken {n} times");
    }
    let unresolved = j.unresolved().count();
    assert!(unresolved <= 1, "{what}: {unresolved} unresolved entries");
}

#[test]
fn a_crash_at_any_write_is_recovered_without_losing_or_repeating_a_request() {
    for k in 0..6 {
        for applies in [false, true] {
            for ome in [false, true] {
                let what =
                    format!("crash at mutation {k} (applied: {applies}, OME running: {ome})");
                let c = crash_then_recover(k, applies, ome);
                assert_safe(&c, &what);
                if ome {
                    assert!(
                        !c.consumed.is_empty(),
                        "{what}: a request eventually went through"
                    );
                }
            }
        }
    }
}

#[test]
fn a_crash_between_the_journal_write_and_the_patch_retries_the_same_request() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    // Mutations: 0 the prepared entry, 1 its attempt stamp, 2 the patch.
    h.0.borrow_mut().crash = Some((2, false));
    let failed = pass(&h, false).unwrap();
    assert!(failed.sent.is_none());
    assert!(outcomes(&failed).contains(&row(
        "team/b/0",
        RowOutcome::Withheld,
        "SubmissionUncertain"
    )));
    let prepared = h.0.borrow().journal();
    assert_eq!(prepared.entries.len(), 1);
    assert_eq!(
        (prepared.entries[0].phase, prepared.entries[0].reason_str()),
        (Phase::Prepared, "SubmissionUncertain")
    );
    assert!(h.0.borrow().annotated.is_empty(), "the patch never landed");
    let uuid = prepared.entries[0].uuid.clone();
    // Just attempted: another run may still be sending it, so none retries it yet.
    let soon = pass(&h, false).unwrap();
    assert_eq!(
        soon.withheld.as_ref().unwrap().reason.as_str(),
        "UnresolvedRequest"
    );
    h.0.borrow_mut().now += SignedDuration::from_secs(30);
    let again = pass(&h, false).unwrap();
    assert_eq!(
        again.sent.as_ref().map(|(_, e)| e.uuid.clone()),
        Some(uuid.clone()),
        "the same UUID, not a new one"
    );
    let j = h.0.borrow().journal();
    assert_eq!(j.entries.len(), 1);
    assert_eq!(j.entries[0].phase, Phase::Submitted);
    assert_eq!(h.0.borrow().annotated, BTreeSet::from([uuid]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Two `migrate` runs started together, interleaved at every store call in any order and
    /// with OME taking requests in between, submit at most one request between them, which
    /// OME takes once, and leave a valid journal.
    #[test]
    fn two_racing_runs_send_at_most_one_request(schedule in proptest::collection::vec(0usize..3, 0..300)) {
        let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
        let (mut s1, mut s2) = (h.clone(), h.clone());
        let config = config();
        let ome = h.clone();
        let futures: Vec<Task<'_, Option<Result<run::Report, PassError>>>> = vec![
            Box::pin(async { Some(run::run_pass(&mut s1, &config, Options::default()).await) }),
            Box::pin(async { Some(run::run_pass(&mut s2, &config, Options::default()).await) }),
            // OME takes requests at any moment.
            Box::pin(async move {
                for _ in 0..20 {
                    YieldOnce(false).await;
                    ome.0.borrow_mut().ome_step();
                }
                None
            }),
        ];
        let results: Vec<Result<run::Report, PassError>> =
            run_interleaved(futures, &schedule).into_iter().flatten().collect();
        let sent: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().ok()?.sent.as_ref().map(|(_, e)| e.uuid.clone()))
            .collect();
        let c = h.0.borrow();
        prop_assert!(c.annotated.len() <= 1, "requests on objects: {:?}", c.annotated);
        prop_assert!(sent.len() <= 1 || sent[0] == sent[1], "both sent: {sent:?}");
        prop_assert!(c.annotated.len() <= c.journal().entries.len());
        assert_safe(&c, "race");
    }
}

#[test]
fn a_configuration_changed_during_the_pass_withholds_it() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(
        evacuation().config_map(
            "alfred-config",
            "schemaVersion: 1\nmode: execute\nmigration: {apiVersion: v1}\n",
        ),
    ))));
    // The configuration is edited between the pass's two reads of the cluster.
    h.0.borrow_mut().after_reads = Some((
        1,
        Box::new(|c: &mut Cluster| {
            c.world = c
                .world
                .clone()
                .config_map("alfred-config", "schemaVersion: 1\nmode: recommend-only\n");
        }),
    ));
    let report = pass(&h, false).unwrap();
    assert_eq!(
        report.withheld.as_ref().unwrap().reason.as_str(),
        "ConfigurationChanged"
    );
    assert!(h.0.borrow().annotated.is_empty());
    assert_eq!(h.0.borrow().journal.state, None, "nothing journaled");
}

#[test]
fn an_object_changed_after_the_journal_write_is_not_patched_blindly() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    // Someone edits b right after the prepared entry is saved.
    h.0.borrow_mut().after_writes = Some((
        1,
        Box::new(|c: &mut Cluster| {
            bump(c.isvc("team", "b").unwrap());
        }),
    ));
    let report = pass(&h, false).unwrap();
    assert!(report.sent.is_none());
    assert!(outcomes(&report).contains(&row("team/b/0", RowOutcome::Withheld, "OwnerChanged")));
    let j = h.0.borrow().journal();
    assert_eq!(
        (j.entries[0].phase, j.entries[0].last_attempt),
        (Phase::Prepared, None)
    );
    assert!(h.0.borrow().annotated.is_empty());
    // Never attempted, so the next pass re-checks the move and sends the same request.
    let uuid = j.entries[0].uuid.clone();
    let again = pass(&h, false).unwrap();
    assert_eq!(again.sent.map(|(_, e)| e.uuid), Some(uuid.clone()));
    assert_eq!(h.0.borrow().annotated, BTreeSet::from([uuid]));
}

#[test]
fn a_request_sent_but_not_journaled_is_found_by_the_next_pass() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    // Mutations: 0 prepared, 1 stamp, 2 patch, 3 the submitted record (fails).
    h.0.borrow_mut().crash = Some((3, false));
    let report = pass(&h, false).unwrap();
    assert!(outcomes(&report).contains(&row(
        "team/b/0",
        RowOutcome::Submitted,
        "RequestSubmitted"
    )));
    assert!(
        report
            .per_move
            .iter()
            .any(|(_, w)| w.reason.as_str() == "SubmissionJournalUncertain")
    );
    let uuid = report.sent.as_ref().unwrap().1.uuid.clone();
    assert_eq!(h.0.borrow().journal().entries[0].phase, Phase::Prepared);
    // The next pass sees the annotation: submitted, and nothing new is sent.
    let next = pass(&h, false).unwrap();
    assert!(next.sent.is_none());
    let j = h.0.borrow().journal();
    assert_eq!(
        (j.entries[0].phase, j.entries[0].reason_str()),
        (Phase::Submitted, "RequestAnnotationObserved")
    );
    assert_eq!(h.0.borrow().annotated, BTreeSet::from([uuid]));
}

#[test]
fn a_full_journal_refuses_the_new_entry() {
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    let done = |i: usize| {
        json!({"uuid": format!("00000000-0000-4000-8000-{:012x}", 1000 + i),
        "workload": {"Namespace": "team", "Name": "a"}, "workloadUID": "uid-a", "irName": "a-engine",
        "irUID": "uid-a-engine", "component": "engine", "instance": 0, "fromNode": "n9",
        "payload": "{}", "sourceFingerprint": "ab", "createdAt": ago(200), "completedAt": ago(119),
        "phase": "completed", "reason": "TerminalStatusObserved"})
    };
    let full =
        json!({"version": "v1", "entries": (0..256).map(done).collect::<Vec<_>>()}).to_string();
    h.0.borrow_mut().journal.state = Some(full);
    let config = Config::parse(&format!(
        "{EXEC}maxMigrationsPerHour: 1000\nperWorkloadCooldownMinutes: 1\n"
    ))
    .unwrap();
    let mut store = h.clone();
    let report =
        block_on(async move { run::run_pass(&mut store, &config, Options::default()).await })
            .unwrap();
    // Entries that ended two hours ago are pruned to make room.
    assert!(report.sent.is_some(), "{:?}", report.per_move);
    assert_eq!(h.0.borrow().journal().entries.len(), 1);

    // Entries still within their retention are not: the journal is full.
    let h = Handle(Rc::new(RefCell::new(Cluster::new(evacuation()))));
    let recent = |i: usize| {
        let mut e = done(i);
        e["createdAt"] = json!(ago(90));
        e["completedAt"] = json!(ago(30));
        e
    };
    let full =
        json!({"version": "v1", "entries": (0..256).map(recent).collect::<Vec<_>>()}).to_string();
    h.0.borrow_mut().journal.state = Some(full);
    let config = Config::parse(&format!("{EXEC}maxMigrationsPerHour: 1000\n")).unwrap();
    let mut store = h.clone();
    let report =
        block_on(async move { run::run_pass(&mut store, &config, Options::default()).await })
            .unwrap();
    assert!(report.sent.is_none());
    assert!(
        report
            .per_move
            .iter()
            .any(|(_, w)| w.reason.as_str() == "JournalPayloadInvalid"),
        "{:?}",
        report.per_move
    );
    assert!(h.0.borrow().annotated.is_empty());
}

/// Execute mode with a bin-packing scheduler, following the plan or not.
fn consolidating(follow: bool) -> Config {
    Config::parse(&format!(
        "{EXEC}scheduling: {{profiles: {{default-scheduler: {{backend: kube-scheduler, schedulerVersion: v1.34, configurationID: binpack, scoringStrategy: MostAllocated, scoringResources: [{{name: cpu}}, {{name: memory}}, {{name: nvidia.com/gpu, weight: 3}}]}}}}}}\npolicies: {{defragmentation: {{followPlan: {follow}}}}}\n"
    ))
    .unwrap()
}

fn pass_with(h: &Handle, config: &Config) -> Result<run::Report, PassError> {
    let mut store = h.clone();
    block_on(async move { run::run_pass(&mut store, config, Options { dry_run: false }).await })
}

/// OME takes the request and completes it, and the moved pod runs on its predicted node.
fn carry_out(h: &Handle, entry: &alfred::execute::journal::Entry) {
    let mut c = h.0.borrow_mut();
    c.now += SignedDuration::from_mins(1);
    c.ome_step();
    c.ome_step();
    let now = c.now;
    let name = format!("{}-engine-0-default-0", entry.workload.name);
    let pod = c
        .world
        .items
        .iter_mut()
        .find(|i| i["metadata"]["name"] == name.as_str())
        .unwrap();
    pod["spec"]["nodeName"] = json!(entry.targets[0]);
    pod["status"]["startTime"] = json!(now.to_string());
}

#[test]
fn following_the_plan_carries_out_its_steps_one_pass_at_a_time() {
    // Off (the reference): each single move is advice, nothing is sent.
    let h = Handle(Rc::new(RefCell::new(Cluster::new(consolidation()))));
    let off = pass_with(&h, &consolidating(false)).unwrap();
    assert!(off.sent.is_none());
    let advice: Vec<String> = off
        .rows()
        .iter()
        .filter(|r| r.workload.starts_with("team/x"))
        .map(|r| r.why().unwrap_or_default().to_string())
        .collect();
    assert_eq!(advice, vec!["NonExecutableObservedFragmentation"; 3]);

    // On: the plan's three moves go one a pass, each once the one before completed and the
    // per-node cooldown on a (their source) ran out.
    let config = consolidating(true);
    let mut moved = Vec::new();
    for step in 0..3 {
        let report = pass_with(&h, &config).unwrap();
        let (_, entry) = report
            .sent
            .clone()
            .unwrap_or_else(|| panic!("step {step}: nothing sent: {:?}", outcomes(&report)));
        // The plan's other moves wait: one move a pass.
        assert!(
            outcomes(&report)
                .iter()
                .all(|o| o.1 != RowOutcome::Submitted || o.0 == format!("{}/0", entry.workload)),
            "{:?}",
            outcomes(&report)
        );
        moved.push((entry.workload.to_string(), entry.targets.clone()));
        carry_out(&h, &entry);
        let settled = pass_with(&h, &config).unwrap();
        assert!(settled.sent.is_none(), "the source node cools first");
        h.0.borrow_mut().now += SignedDuration::from_mins(11);
    }
    assert_eq!(
        moved,
        vec![
            ("team/x1".to_string(), vec!["c".to_string()]),
            ("team/x2".to_string(), vec!["b".to_string()]),
            ("team/x3".to_string(), vec!["b".to_string()]),
        ]
    );
    // a is empty: the pod that waited fits, and nothing more is worth a move.
    let done = pass_with(&h, &config).unwrap();
    assert!(done.sent.is_none(), "{:?}", outcomes(&done));
    assert_eq!(done.plan.decision.pools[0].largest_free_block, 8);
    let c = h.0.borrow();
    assert_eq!(c.journal().entries.len(), 3);
    assert!(c.consumed.values().all(|&n| n == 1));
}
