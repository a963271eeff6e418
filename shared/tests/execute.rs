//! Execute mode: the journal's strict load and pruning, the circuit breaker, the reconcile state
//! machine, the arbiter's checks in order with each cooldown at its boundary, and the
//! dispatcher's pass-wide reasons (alfred-reference.md §3.2, §3.3, §4, §5).

mod common;

use alfred::execute::arbiter::{self, ArbiterReason, DispatchHistory};
use alfred::execute::breaker::{Breaker, MigrationOutcome};
use alfred::execute::dispatch::{self, DispatchReason};

use alfred::execute::journal::{EntryReason, Journal, Phase};
use alfred::execute::reconcile::{self, Timing, Transition};
use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

const UUID: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const UUID2: &str = "0b5f1c2e-3d4a-4b6c-8d7e-9f0a1b2c3d4e";
const EXEC: &str = "mode: execute\nmigration: {apiVersion: v1}\n";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn mins(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

fn payload(from: &str, reason: &str) -> String {
    format!(
        r#"{{"schemaVersion":"v1","component":"engine","instance":0,"from_node":"{from}","hint_target_nodes":["n2"],"reason":"{reason}","requested_at":"{}","requested_by":"alfred"}}"#,
        ago(1)
    )
}

/// A journal entry for `team/a` instance 0 off n1, created `minutes` ago.
fn entry(uuid: &str, phase: &str, reason: Option<&str>, minutes: i64) -> Value {
    let mut e = json!({
        "uuid": uuid, "workload": {"Namespace": "team", "Name": "a"}, "workloadUID": "uid-a",
        "irName": "a-engine", "irUID": "uid-a-engine", "component": "engine", "instance": 0,
        "fromNode": "n1", "targets": ["n2"], "payload": payload("n1", "Fragmentation"),
        "sourceFingerprint": "ab12", "createdAt": ago(minutes), "phase": phase,
    });
    if let Some(r) = reason {
        e["reason"] = json!(r);
    }
    if matches!(phase, "completed" | "failed") {
        e["completedAt"] = json!(ago(minutes));
    }
    e
}

fn journal(entries: Vec<Value>) -> String {
    json!({"version": "v1", "entries": entries}).to_string()
}

// ---------------------------------------------------------------------------------------------
// The journal

#[test]
fn a_journal_round_trips() {
    let text = journal(vec![
        entry(UUID, "submitted", Some("RequestSubmitted"), 1),
        entry(UUID2, "completed", Some("TerminalStatusObserved"), 90),
    ]);
    let j = Journal::load(&text).unwrap();
    assert_eq!(j.entries.len(), 2);
    assert_eq!(j.entries[0].phase, Phase::Submitted);
    assert_eq!(j.entries[0].workload.to_string(), "team/a");
    assert_eq!(Journal::load(&j.to_json()).unwrap(), j);
    // The wire form keeps the reference's capitalised workload keys and UID spellings.
    let v: Value = serde_json::from_str(&j.to_json()).unwrap();
    assert_eq!(v["entries"][0]["workload"]["Namespace"], "team");
    assert_eq!(v["entries"][0]["irUID"], "uid-a-engine");
    assert!(v.get("backoffUntil").is_none());
}

#[test]
fn every_invalid_journal_form_is_refused() {
    let good = entry(UUID, "submitted", Some("RequestSubmitted"), 1);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut doc = json!({"version": "v1", "entries": [good.clone()]});
        f(&mut doc);
        doc.to_string()
    };
    let many: Vec<Value> = (0..257)
        .map(|i| {
            let mut e = good.clone();
            e["uuid"] = json!(format!("7c9e6679-7425-40de-944b-{i:012x}"));
            e
        })
        .collect();
    let cases: Vec<(&str, String)> = vec![
        ("unknown field", with(&|d| d["extra"] = json!(1))),
        (
            "unknown entry field",
            with(&|d| d["entries"][0]["note"] = json!("x")),
        ),
        (
            "duplicate member",
            r#"{"version":"v1","entries":[],"entries":[]}"#.into(),
        ),
        (
            "case-folded alias",
            r#"{"version":"v1","entries":[],"Entries":[]}"#.into(),
        ),
        ("trailing data", format!("{} {{}}", with(&|_| {}))),
        ("null document", "null".into()),
        ("missing entries", r#"{"version":"v1"}"#.into()),
        ("null entries", r#"{"version":"v1","entries":null}"#.into()),
        (
            "missing instance",
            with(&|d| {
                d["entries"][0].as_object_mut().unwrap().remove("instance");
            }),
        ),
        (
            "null instance",
            with(&|d| d["entries"][0]["instance"] = Value::Null),
        ),
        ("version v2", with(&|d| d["version"] = json!("v2"))),
        (
            "over 512 KiB",
            with(&|d| d["entries"][0]["sourceFingerprint"] = json!("f".repeat(600 * 1024))),
        ),
        ("over 256 entries", journal(many)),
        ("duplicate uuid", journal(vec![good.clone(), good.clone()])),
        (
            "zero backoffUntil",
            with(&|d| d["backoffUntil"] = json!("0001-01-01T00:00:00Z")),
        ),
        (
            "not a UUID",
            with(&|d| d["entries"][0]["uuid"] = json!("not-a-uuid")),
        ),
        (
            "negative instance",
            with(&|d| d["entries"][0]["instance"] = json!(-1)),
        ),
        (
            "empty fromNode",
            with(&|d| d["entries"][0]["fromNode"] = json!("")),
        ),
        (
            "bad namespace",
            with(&|d| d["entries"][0]["workload"]["Namespace"] = json!("Team")),
        ),
        (
            "payload not JSON",
            with(&|d| d["entries"][0]["payload"] = json!("{")),
        ),
        (
            "empty fingerprint",
            with(&|d| d["entries"][0]["sourceFingerprint"] = json!("")),
        ),
        (
            "acknowledgedAt before createdAt",
            with(&|d| d["entries"][0]["acknowledgedAt"] = json!(ago(5))),
        ),
        (
            "unresolved with completedAt",
            with(&|d| d["entries"][0]["completedAt"] = json!(ago(0))),
        ),
        (
            "completed without completedAt",
            with(&|d| {
                d["entries"][0]["phase"] = json!("completed");
                d["entries"][0]["reason"] = json!("TerminalStatusObserved");
            }),
        ),
        (
            "reason of another phase",
            with(&|d| d["entries"][0]["reason"] = json!("UUIDStatusObserved")),
        ),
        (
            "submitted without reason",
            with(&|d| {
                d["entries"][0].as_object_mut().unwrap().remove("reason");
            }),
        ),
        (
            "unknown phase",
            with(&|d| d["entries"][0]["phase"] = json!("done")),
        ),
    ];
    for (what, text) in cases {
        let err = Journal::load(&text).expect_err(what);
        assert!(
            err.to_string()
                .contains("alfred-dispatch-state/state.json is unusable"),
            "{what}: {err}"
        );
    }
    // A prepared entry may carry no reason yet.
    let prepared = journal(vec![entry(UUID, "prepared", None, 1)]);
    assert!(Journal::load(&prepared).is_ok());
}

#[test]
fn prune_keeps_an_entry_that_ended_exactly_at_the_retention_boundary() {
    let mut j = Journal::load(&journal(vec![
        entry(UUID, "completed", Some("TerminalStatusObserved"), 60),
        entry(UUID2, "failed", Some("TerminalStatusObserved"), 61),
        entry(
            "11111111-2222-4333-8444-555555555555",
            "stalled",
            Some("AcknowledgementTimeout"),
            600,
        ),
    ]))
    .unwrap();
    j.backoff_until = Some(now() - mins(1));
    j.prune(now(), mins(60));
    let kept: Vec<&str> = j.entries.iter().map(|e| e.uuid.as_str()).collect();
    assert_eq!(
        kept,
        vec![UUID, "11111111-2222-4333-8444-555555555555"],
        "exactly 1h kept, 61 min pruned, unresolved never"
    );
    assert_eq!(j.backoff_until, Some(now() - mins(1)), "backoff untouched");
    // One nanosecond later the boundary entry goes too.
    j.prune(now() + SignedDuration::from_nanos(1), mins(60));
    assert_eq!(j.entries.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// The circuit breaker

#[test]
fn the_breaker_opens_past_half_of_at_least_four_outcomes_for_sixty_minutes() {
    use MigrationOutcome::*;
    let mut b = Breaker::default();
    for _ in 0..3 {
        b.record(Failure, now());
    }
    assert_eq!(b.open(now()), None, "three samples are too few");
    let mut b = Breaker::default();
    for o in [Success, Failure, Success, Failure] {
        b.record(o, now());
    }
    assert_eq!(b.open(now()), None, "half is not more than half");
    b.record(Failure, now());
    assert_eq!(b.open(now()), Some(now() + mins(60)), "3 of 5 failed");
    assert!(b.outcomes.is_empty(), "opening starts a fresh count");
    assert!(
        b.open(now() + mins(60) - SignedDuration::from_nanos(1))
            .is_some()
    );
    assert_eq!(
        b.open(now() + mins(60)),
        None,
        "the pause ends at 60 minutes"
    );
    // The window keeps the last 10.
    let mut b = Breaker::default();
    for _ in 0..12 {
        b.record(Success, now());
    }
    assert_eq!(b.outcomes.len(), 10);
    // It survives between runs as JSON, strictly read.
    let text = b.to_json();
    assert_eq!(Breaker::load(Some(&text)).unwrap(), b);
    assert!(Breaker::load(Some(r#"{"outcomes":[],"x":1}"#)).is_err());
    assert_eq!(Breaker::load(None).unwrap(), Breaker::default());
}

// ---------------------------------------------------------------------------------------------
// Reconcile

/// `team/a` instance 0 on n1, its InferenceReplica `a-engine`.
fn world() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 4)])
}

fn migration_row(
    phase: &str,
    started: i64,
    completed: Option<i64>,
    deadline: Option<i64>,
) -> Value {
    let mut row = json!({"requestUUID": UUID, "trigger": "Manual", "sourceInstance": 0,
        "fromNode": "n1", "phase": phase, "startedAt": ago(started)});
    if let Some(c) = completed {
        row["completedAt"] = json!(ago(c));
    }
    if let Some(d) = deadline {
        row["deadline"] = json!(ago(d));
    }
    row
}

fn with_rows(w: World, rows: Vec<Value>) -> World {
    w.edit("InferenceReplica", "a-engine", |r| {
        r["status"]["migrations"] = json!(rows)
    })
}

/// Reconciles one entry against `w`: the entry after, the transitions, the breaker, and the
/// journal's backoff.
fn reconcile_one(
    w: &World,
    e: Value,
) -> (
    alfred::execute::journal::Entry,
    Vec<Transition>,
    Breaker,
    Option<Timestamp>,
) {
    w.with_ctx(EXEC, |ctx| {
        let mut j = Journal::load(&journal(vec![e])).unwrap();
        let mut b = Breaker::default();
        let t = reconcile::reconcile(
            &mut j,
            &mut b,
            ctx.snapshot,
            Timing {
                now: now(),
                acknowledgement_timeout: mins(2),
                failure_backoff: mins(5),
            },
        );
        (j.entries[0].clone(), t, b, j.backoff_until)
    })
}

fn phase_reason(e: &alfred::execute::journal::Entry) -> (Phase, Option<EntryReason>) {
    (e.phase, e.reason)
}

#[test]
fn owner_and_replica_problems_stall_only_after_the_acknowledgement_timeout() {
    use EntryReason::*;
    let submitted = |minutes| entry(UUID, "submitted", Some("RequestSubmitted"), minutes);
    let cases: Vec<(&str, World, EntryReason)> = vec![
        (
            "InferenceService deleted",
            World {
                items: world()
                    .items
                    .into_iter()
                    .filter(|i| i["kind"] != "InferenceService")
                    .collect(),
                now: NOW.into(),
            },
            OwnerUnavailable,
        ),
        (
            "InferenceService replaced",
            world().edit("InferenceService", "a", |i| {
                i["metadata"]["uid"] = json!("other")
            }),
            OwnerUnavailable,
        ),
        (
            "InferenceReplica replaced",
            world().edit("InferenceReplica", "a-engine", |r| {
                r["metadata"]["uid"] = json!("other")
            }),
            ReplicaUnavailable,
        ),
        (
            "InferenceReplica owned by another",
            world().edit("InferenceReplica", "a-engine", |r| {
                r["metadata"]["ownerReferences"][0]["uid"] = json!("other")
            }),
            ReplicaIdentityChanged,
        ),
        (
            "InferenceReplica of another component",
            world().edit("InferenceReplica", "a-engine", |r| {
                r["spec"]["component"] = json!("decoder")
            }),
            ReplicaIdentityChanged,
        ),
        (
            "two status rows",
            with_rows(
                world(),
                vec![
                    migration_row("Accepted", 0, None, Some(-30)),
                    migration_row("Accepted", 0, None, Some(-30)),
                ],
            ),
            MigrationStatusInvalid,
        ),
        (
            "an Auto row",
            with_rows(
                world(),
                vec![{
                    let mut r = migration_row("Accepted", 0, None, Some(-30));
                    r["trigger"] = json!("Auto");
                    r
                }],
            ),
            MigrationStatusInvalid,
        ),
        (
            "another source",
            with_rows(
                world(),
                vec![{
                    let mut r = migration_row("Accepted", 0, None, Some(-30));
                    r["fromNode"] = json!("n2");
                    r
                }],
            ),
            MigrationStatusInvalid,
        ),
        (
            "in progress without a deadline",
            with_rows(world(), vec![migration_row("SurgePending", 0, None, None)]),
            MigrationStatusInvalid,
        ),
        (
            "completed in the future",
            with_rows(world(), vec![migration_row("Completed", 0, Some(-5), None)]),
            MigrationStatusInvalid,
        ),
        (
            "an unknown phase",
            with_rows(world(), vec![migration_row("Relocated", 0, Some(0), None)]),
            MigrationStatusInvalid,
        ),
    ];
    for (what, w, reason) in cases {
        // Within the timeout nothing changes: the evidence may still be catching up.
        let (e, t, _, backoff) = reconcile_one(&w, submitted(1));
        assert_eq!(
            phase_reason(&e),
            (Phase::Submitted, Some(RequestSubmitted)),
            "{what}"
        );
        assert!(t.is_empty() && backoff.is_none(), "{what}");
        let (e, t, _, backoff) = reconcile_one(&w, submitted(2));
        assert_eq!(phase_reason(&e), (Phase::Stalled, Some(reason)), "{what}");
        assert_eq!(t.len(), 1, "{what}");
        assert_eq!(
            backoff,
            Some(now() + mins(5)),
            "{what}: a stall starts the backoff"
        );
    }
}

#[test]
fn status_rows_acknowledge_complete_fail_and_time_out() {
    use EntryReason::*;
    let submitted = entry(UUID, "submitted", Some("RequestSubmitted"), 10);

    let (e, _, b, backoff) = reconcile_one(
        &with_rows(world(), vec![migration_row("Draining", 8, None, Some(-20))]),
        submitted.clone(),
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Acknowledged, Some(UUIDStatusObserved))
    );
    assert_eq!(e.acknowledged_at, Some(now() - mins(8)));
    assert!(b.outcomes.is_empty() && backoff.is_none());

    let (e, _, _, backoff) = reconcile_one(
        &with_rows(world(), vec![migration_row("SurgeReady", 8, None, Some(1))]),
        submitted.clone(),
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(ConsumerDeadlineExceeded))
    );
    assert!(backoff.is_some());

    let (e, t, b, backoff) = reconcile_one(
        &with_rows(world(), vec![migration_row("Completed", 8, Some(2), None)]),
        submitted.clone(),
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Completed, Some(TerminalStatusObserved))
    );
    assert_eq!(e.completed_at, Some(now() - mins(2)));
    assert_eq!(e.acknowledged_at, Some(now() - mins(8)));
    assert_eq!(b.outcomes, vec![MigrationOutcome::Success]);
    assert!(backoff.is_none());
    assert_eq!(
        t,
        vec![Transition {
            uuid: UUID.into(),
            from: Phase::Submitted,
            to: Phase::Completed,
            reason: TerminalStatusObserved
        }]
    );

    let (e, _, b, backoff) = reconcile_one(
        &with_rows(world(), vec![migration_row("Failed", 8, Some(2), None)]),
        submitted.clone(),
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Failed, Some(TerminalStatusObserved))
    );
    assert_eq!(b.outcomes, vec![MigrationOutcome::Failure]);
    assert_eq!(backoff, Some(now() + mins(5)));

    // A row that started before the request was created (to the second) is not its row.
    let (e, _, _, _) = reconcile_one(
        &with_rows(
            world(),
            vec![migration_row("Draining", 11, None, Some(-20))],
        ),
        submitted,
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(MigrationStatusInvalid))
    );
}

#[test]
fn without_a_status_row_the_annotation_decides() {
    use EntryReason::*;
    let annotated =
        |value: &str| world().annotate("a", &format!("ome.io/migration-request-v1-{UUID}"), value);
    let sent = payload("n1", "Fragmentation");

    // A prepared entry whose annotation is on the object counts as submitted.
    let prepared = entry(UUID, "prepared", Some("SubmissionPrepared"), 1);
    let (e, _, _, _) = reconcile_one(&annotated(&sent), prepared.clone());
    assert_eq!(
        phase_reason(&e),
        (Phase::Submitted, Some(RequestAnnotationObserved))
    );
    // ... and stalls once OME has not taken it within the timeout.
    let mut late = prepared.clone();
    late["createdAt"] = json!(ago(3));
    let (e, _, _, _) = reconcile_one(&annotated(&sent), late);
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(AcknowledgementTimeout))
    );
    // A changed payload stalls at once.
    let (e, _, _, _) = reconcile_one(&annotated("{}"), prepared.clone());
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(RequestPayloadChanged))
    );
    // No annotation: waiting until the timeout, exactly at which it stalls.
    let (e, t, _, _) = reconcile_one(&world(), prepared);
    assert_eq!(
        phase_reason(&e),
        (Phase::Prepared, Some(SubmissionPrepared))
    );
    assert!(t.is_empty());
    let (e, _, _, _) = reconcile_one(
        &world(),
        entry(UUID, "submitted", Some("RequestSubmitted"), 2),
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(AcknowledgementTimeout))
    );
    // Acknowledged once, then the row vanished: stalled at once.
    let mut acked = entry(UUID, "acknowledged", Some("UUIDStatusObserved"), 1);
    acked["acknowledgedAt"] = json!(ago(0));
    let (e, _, _, _) = reconcile_one(&world(), acked);
    assert_eq!(
        phase_reason(&e),
        (Phase::Stalled, Some(AcknowledgedStatusMissing))
    );
    // A stalled request still ends when OME reports its end.
    let stalled = entry(UUID, "stalled", Some("AcknowledgementTimeout"), 10);
    let (e, _, _, _) = reconcile_one(
        &with_rows(world(), vec![migration_row("Completed", 8, Some(2), None)]),
        stalled,
    );
    assert_eq!(
        phase_reason(&e),
        (Phase::Completed, Some(TerminalStatusObserved))
    );
}

// ---------------------------------------------------------------------------------------------
// The arbiter

/// n1 is Unhealthy and holds a (4 GPUs) and b (2); n2 holds c (4, free 4); n3 is empty.
fn evacuation() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .node("n3", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "b", &[("n1", 2)])
        .omenative("team", "c", &[("n2", 4)])
        .unhealthy("n1")
}

/// Each considered move as (workload, Ok(landing nodes) or Err(reason)), in arbiter order.
type Verdicts = Vec<(String, Result<Vec<String>, ArbiterReason>)>;

fn verdicts_of(plan: &dispatch::Plan) -> Verdicts {
    plan.verdicts
        .iter()
        .map(|v| {
            let row = &plan.decision.recommendations[v.recommendation].row;
            let result = match &v.result {
                Ok(a) => Ok(a.landings.iter().map(|(_, n)| n.clone()).collect()),
                Err(r) => Err(r.reason),
            };
            (format!("{}/{}", row.workload, row.instance), result)
        })
        .collect()
}

fn arbitrate(w: &World, config: &str, state: Option<&str>, breaker: Option<&str>) -> Verdicts {
    w.with_ctx(config, |ctx| {
        verdicts_of(&dispatch::plan(ctx, state, breaker))
    })
}

fn ok(nodes: &[&str]) -> Result<Vec<String>, ArbiterReason> {
    Ok(nodes.iter().map(|n| n.to_string()).collect())
}

fn v(
    workload: &str,
    r: Result<Vec<String>, ArbiterReason>,
) -> (String, Result<Vec<String>, ArbiterReason>) {
    (workload.to_string(), r)
}

#[test]
fn smaller_moves_first_and_one_landing_per_node() {
    assert_eq!(
        arbitrate(&evacuation(), EXEC, None, None),
        vec![v("team/b/0", ok(&["n2"])), v("team/a/0", ok(&["n3"]))],
        "b (2 GPUs) before a (4); a skips n2, where b lands"
    );
    // Priority outranks size.
    let w = evacuation().annotate("a", "alfred.ome.io/priority", "0.9");
    assert_eq!(
        arbitrate(&w, EXEC, None, None),
        vec![v("team/a/0", ok(&["n2"])), v("team/b/0", ok(&["n3"]))]
    );
    // Without n3, a finds its only target taken.
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "b", &[("n1", 2)])
        .unhealthy("n1");
    assert_eq!(
        arbitrate(&w, EXEC, None, None),
        vec![
            v("team/b/0", ok(&["n2"])),
            v("team/a/0", Err(ArbiterReason::TargetNodeBusy))
        ]
    );
}

#[test]
fn the_arbiter_orders_by_class_then_score_then_size() {
    use alfred::decision::{CandidateReason::*, PolicyName, Recommendation, Row};
    let rec = |name: &str, reason, score: f64, gpus: i64| {
        let row = Row::new(
            name,
            alfred::api::component::ComponentKind::Engine,
            0,
            PolicyName::Nodehealth,
            reason,
            "n1",
            score,
        );
        Recommendation::new(row, gpus, String::new())
    };
    let recs = vec![
        rec("defrag-best", Fragmentation, 0.9, 1),
        rec("maintenance", NodeMaintenance, 0.5, 1),
        rec("unhealthy-small", NodeUnhealthy, 0.5, 2),
        rec("unhealthy-big", NodeUnhealthy, 0.5, 8),
        rec("unhealthy-urgent", NodeUnhealthy, 0.9, 8),
        rec("unhealthy-small-too", NodeUnhealthy, 0.5, 2),
    ];
    let order: Vec<&str> = arbiter::order(&recs)
        .into_iter()
        .map(|i| recs[i].row.workload.as_str())
        .collect();
    assert_eq!(
        order,
        vec![
            "unhealthy-urgent",
            "unhealthy-small",
            "unhealthy-small-too",
            "unhealthy-big",
            "maintenance",
            "defrag-best"
        ]
    );
}

#[test]
fn caps_count_everyones_migrations() {
    use ArbiterReason::*;
    let one = format!("{EXEC}maxInFlightMigrations: 1\n");
    assert_eq!(
        arbitrate(&evacuation(), &one, None, None),
        vec![v("team/b/0", ok(&["n2"])), v("team/a/0", Err(InFlightCap))]
    );
    // A foreign request waiting on c fills the only slot.
    let w = evacuation().annotate(
        "c",
        &format!("ome.io/migration-request-v1-{UUID2}"),
        &payload("n2", "Fragmentation"),
    );
    assert_eq!(
        arbitrate(&w, &one, None, None),
        vec![
            v("team/b/0", Err(InFlightCap)),
            v("team/a/0", Err(InFlightCap))
        ]
    );
    // The hourly cap counts Alfred's journal and everyone's finished migrations.
    let hourly = format!("{EXEC}maxMigrationsPerHour: 2\n");
    let ours = journal(vec![entry(
        UUID,
        "completed",
        Some("TerminalStatusObserved"),
        59,
    )]);
    assert_eq!(
        arbitrate(&evacuation(), &hourly, Some(&ours), None),
        vec![v("team/b/0", ok(&["n2"])), v("team/a/0", Err(HourlyCap))]
    );
    let older = journal(vec![entry(
        UUID,
        "completed",
        Some("TerminalStatusObserved"),
        61,
    )]);
    assert_eq!(
        arbitrate(&evacuation(), &hourly, Some(&older), None),
        vec![v("team/b/0", ok(&["n2"])), v("team/a/0", ok(&["n3"]))],
        "an entry older than an hour no longer counts"
    );
    let c_migrated = with_migration(evacuation(), "c", 30);
    assert_eq!(
        arbitrate(&c_migrated, &hourly, None, None),
        vec![v("team/b/0", ok(&["n2"])), v("team/a/0", Err(HourlyCap))]
    );
}

/// `name`'s InferenceReplica reports a finished migration that ended `minutes` ago.
fn with_migration(w: World, name: &str, minutes: i64) -> World {
    w.edit("InferenceReplica", &format!("{name}-engine"), |r| {
        r["status"]["migrations"] = json!([{"requestUUID": UUID2, "trigger": "Manual",
            "sourceInstance": 0, "fromNode": "n9", "phase": "Completed",
            "startedAt": ago(minutes + 5), "completedAt": ago(minutes)}])
    })
}

fn started(w: World, pod: &str, minutes: i64) -> World {
    w.edit("Pod", pod, |p| {
        p["status"]["startTime"] = json!(ago(minutes))
    })
}

#[test]
fn health_moves_wait_only_the_floor_and_say_when_they_override_the_cooldown() {
    use ArbiterReason::*;
    let w = with_migration(evacuation(), "a", 4);
    assert_eq!(
        arbitrate(&w, EXEC, None, None)[1],
        v("team/a/0", Err(Cooldown)),
        "4 minutes is inside the 5-minute floor"
    );
    let w = with_migration(evacuation(), "a", 5);
    w.with_ctx(EXEC, |ctx| {
        let plan = dispatch::plan(ctx, None, None);
        let a = plan
            .verdicts
            .iter()
            .find(|v| plan.decision.recommendations[v.recommendation].row.workload == "team/a")
            .unwrap();
        assert!(
            a.result.as_ref().unwrap().cooldown_overridden,
            "admitted under the floor while the 30-minute window runs"
        );
    });
    let w = with_migration(evacuation(), "a", 30);
    w.with_ctx(EXEC, |ctx| {
        let plan = dispatch::plan(ctx, None, None);
        assert!(
            plan.verdicts
                .iter()
                .all(|v| !v.result.as_ref().unwrap().cooldown_overridden)
        );
    });
    let w = started(evacuation(), "a-engine-0-default-0", 4);
    assert_eq!(
        arbitrate(&w, EXEC, None, None)[1],
        v("team/a/0", Err(PlacementCooldown))
    );
    let w = started(evacuation(), "a-engine-0-default-0", 5);
    assert_eq!(
        arbitrate(&w, EXEC, None, None)[1],
        v("team/a/0", ok(&["n3"]))
    );
    // The node a health move leaves does not cool it.
    let left_n1 = journal(vec![{
        let mut e = entry(UUID, "completed", Some("TerminalStatusObserved"), 3);
        e["payload"] = json!(payload("n1", "Fragmentation"));
        e["targets"] = json!(["n9"]);
        e
    }]);
    assert_eq!(
        arbitrate(&evacuation(), EXEC, Some(&left_n1), None)[0],
        v("team/b/0", ok(&["n2"]))
    );
}

/// n1 is due for maintenance (label) and holds a and b; otherwise as `evacuation`.
fn maintenance() -> World {
    World::new()
        .node("n1", 8)
        .node("n2", 8)
        .node("n3", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "b", &[("n1", 2)])
        .omenative("team", "c", &[("n2", 4)])
        .label("n1", "maint", "yes")
}

const MAINTENANCE: &str = "mode: execute\nmigration: {apiVersion: v1}\npolicies: {nodeHealth: {maintenance: {triggers: [{name: planned, label: {key: maint}}]}}}\n";

#[test]
fn maintenance_moves_wait_out_every_cooldown_to_its_boundary() {
    use ArbiterReason::*;
    let b = |w: &World, state: Option<&str>| arbitrate(w, MAINTENANCE, state, None)[0].clone();
    assert_eq!(b(&maintenance(), None), v("team/b/0", ok(&["n2"])));
    assert_eq!(
        b(&with_migration(maintenance(), "b", 29), None),
        v("team/b/0", Err(Cooldown))
    );
    assert_eq!(
        b(&with_migration(maintenance(), "b", 30), None),
        v("team/b/0", ok(&["n2"]))
    );
    // Alfred's journal remembers an end OME no longer lists.
    let ended = journal(vec![{
        let mut e = entry(UUID, "completed", Some("TerminalStatusObserved"), 29);
        e["workload"] = json!({"Namespace": "team", "Name": "b"});
        e["fromNode"] = json!("n9");
        e["targets"] = json!(["n8"]);
        e["payload"] = json!(payload("n9", "Fragmentation"));
        e
    }]);
    assert_eq!(
        b(&maintenance(), Some(&ended)),
        v("team/b/0", Err(Cooldown))
    );
    // The annotation replaces the workload window; 0 means none.
    let w =
        with_migration(maintenance(), "b", 1).annotate("b", "alfred.ome.io/cooldown-minutes", "0");
    assert_eq!(b(&w, None), v("team/b/0", ok(&["n2"])));
    assert_eq!(
        b(&started(maintenance(), "b-engine-0-default-0", 9), None),
        v("team/b/0", Err(PlacementCooldown))
    );
    assert_eq!(
        b(&started(maintenance(), "b-engine-0-default-0", 10), None),
        v("team/b/0", ok(&["n2"]))
    );
    // A defragmentation request of Alfred's that left n1 9 minutes ago cools it; at 10 it no longer does.
    let left = |minutes| {
        journal(vec![{
            let mut e = entry(UUID, "completed", Some("TerminalStatusObserved"), minutes);
            e["targets"] = json!(["n9"]);
            e
        }])
    };
    assert_eq!(
        b(&maintenance(), Some(&left(9))),
        v("team/b/0", Err(NodeCooldown))
    );
    assert_eq!(
        b(&maintenance(), Some(&left(10))),
        v("team/b/0", ok(&["n2"]))
    );
    // One that landed on n2 cools n2 as a target; b goes on to n3.
    let landed = journal(vec![{
        let mut e = entry(UUID, "completed", Some("TerminalStatusObserved"), 9);
        e["fromNode"] = json!("n9");
        e["payload"] = json!(payload("n9", "Fragmentation"));
        e
    }]);
    assert_eq!(b(&maintenance(), Some(&landed)), v("team/b/0", ok(&["n3"])));
}

#[test]
fn the_open_breaker_and_the_first_checks() {
    use ArbiterReason::*;
    let open = format!(r#"{{"outcomes":[],"openUntil":"{}"}}"#, now() + mins(1));
    assert_eq!(
        arbitrate(&evacuation(), EXEC, None, Some(&open)),
        vec![
            v("team/b/0", Err(CircuitBreakerOpen)),
            v("team/a/0", Err(CircuitBreakerOpen))
        ]
    );
    let closed = format!(r#"{{"outcomes":[],"openUntil":"{}"}}"#, now());
    assert_eq!(arbitrate(&evacuation(), EXEC, None, Some(&closed)).len(), 2);
    assert!(
        arbitrate(&evacuation(), EXEC, None, Some(&closed))
            .iter()
            .all(|(_, r)| r.is_ok())
    );

    // Moves planned on one read, arbitrated on a later one where things changed.
    let planned = evacuation().with_ctx(EXEC, |ctx| alfred::decision::plan(ctx).recommendations);
    let later = |w: World| {
        w.with_ctx(EXEC, |ctx| {
            let history = DispatchHistory::default();
            let inputs = arbiter::Inputs {
                history: &history,
                breaker_open_until: None,
            };
            arbiter::admit(ctx, &planned, &inputs)
                .into_iter()
                .map(|v| {
                    (
                        planned[v.recommendation].row.workload.clone(),
                        v.result.map_err(|r| r.reason).map(|_| ()),
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    let first = |w: World| later(w)[0].1;
    let gone = World {
        items: evacuation()
            .items
            .into_iter()
            .filter(|i| i["metadata"]["name"] != "b-engine-0-default-0")
            .collect(),
        now: NOW.into(),
    }
    .edit("InferenceReplica", "b-engine", |r| {
        r["status"]["instanceStatuses"] = json!([])
    });
    assert_eq!(first(gone), Err(InstanceGone));
    assert_eq!(
        first(evacuation().annotate("b", "alfred.ome.io/movable", "false")),
        Err(NotMovable)
    );
    assert_eq!(
        first(evacuation().annotate("b", &format!("ome.io/migration-request-v1-{UUID2}"), "{")),
        Err(MalformedRequestPending)
    );
    assert_eq!(
        first(evacuation().edit("InferenceReplica", "b-engine", |r| r["status"]["migrations"] = json!([{"requestUUID": "", "trigger": "Manual", "sourceInstance": 0, "phase": "Completed"}]))),
        Err(MigrationStateInvalid)
    );
    assert_eq!(
        first(evacuation().edit(
            "Pod",
            "b-engine-0-default-0",
            |p| p["metadata"]["deletionTimestamp"] = json!(ago(0))
        )),
        Err(InstanceTerminating)
    );
    assert_eq!(
        first(evacuation().annotate(
            "b",
            &format!("ome.io/migration-request-v1-{UUID2}"),
            &payload("n1", "Fragmentation")
        )),
        Err(WorkloadBusy)
    );
    assert_eq!(
        first(evacuation().label("n2", "x", "y").edit(
            "Node",
            "n2",
            |n| n["spec"]["unschedulable"] = json!(true)
        )),
        Ok(()),
        "n3 still takes b"
    );
    let cordoned = evacuation()
        .edit("Node", "n2", |n| n["spec"]["unschedulable"] = json!(true))
        .edit("Node", "n3", |n| n["spec"]["unschedulable"] = json!(true));
    assert_eq!(first(cordoned), Err(TargetUnavailable));
}

#[test]
fn targets_under_evacuation_and_claimed_capacity_are_refused() {
    use ArbiterReason::*;
    // A maintenance candidate leaving n2 makes n2 no target, even though its row is advice.
    let mut planned =
        evacuation().with_ctx(EXEC, |ctx| alfred::decision::plan(ctx).recommendations);
    let mut leaving = planned[0].clone();
    leaving.row.reason = alfred::decision::CandidateReason::NodeMaintenance;
    leaving.row.from_node = "n2".into();
    leaving.row.advisory_reason = Some(alfred::decision::AdvisoryReason::NoSurgeHeadroom);
    planned.push(leaving);
    let results = evacuation()
        .edit("Node", "n3", |n| n["spec"]["unschedulable"] = json!(true))
        .with_ctx(EXEC, |ctx| {
            let history = DispatchHistory::default();
            let inputs = arbiter::Inputs {
                history: &history,
                breaker_open_until: None,
            };
            arbiter::admit(ctx, &planned, &inputs)
                .into_iter()
                .map(|v| v.result.map_err(|r| r.reason).map(|_| ()))
                .collect::<Vec<_>>()
        });
    assert_eq!(
        results[0],
        Err(TargetUnavailable),
        "n3 cordoned outranks n2 under evacuation"
    );
    let results = evacuation().with_ctx(EXEC, |ctx| {
        let history = DispatchHistory::default();
        let inputs = arbiter::Inputs {
            history: &history,
            breaker_open_until: None,
        };
        let mut only_n2 = planned.clone();
        for r in &mut only_n2 {
            r.placement_targets.retain(|t| t == "n2");
        }
        arbiter::admit(ctx, &only_n2, &inputs)
            .into_iter()
            .map(|v| v.result.map_err(|r| r.reason).map(|_| ()))
            .collect::<Vec<_>>()
    });
    assert_eq!(results[0], Err(TargetUnderEvacuation));
    // A request of ours not yet taken up claims c's 4 GPUs on n3, so a (4) has no room there
    // (with a one-minute node cooldown, so that the request's nodes no longer cool).
    let short = format!("{EXEC}perNodeCooldownMinutes: 1\n");
    let claim = journal(vec![{
        let mut e = entry(UUID, "submitted", Some("RequestSubmitted"), 1);
        e["workload"] = json!({"Namespace": "team", "Name": "c"});
        e["workloadUID"] = json!("uid-c");
        e["irName"] = json!("c-engine");
        e["irUID"] = json!("uid-c-engine");
        e["fromNode"] = json!("n2");
        e["targets"] = json!(["n3"]);
        e["payload"] = json!(payload("n2", "Fragmentation"));
        e
    }]);
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 4)])
        .omenative("team", "c", &[("n2", 4)])
        .unhealthy("n1");
    assert_eq!(
        arbitrate(&w, &short, None, None),
        vec![v("team/a/0", ok(&["n2"]))]
    );
    let claim = claim
        .replace("n3", "n2")
        .replace(r#""fromNode":"n2""#, r#""fromNode":"n9""#);
    assert_eq!(
        arbitrate(&w, &short, Some(&claim), None),
        vec![v("team/a/0", Err(NoCapacity))]
    );
}

#[test]
fn a_workload_moves_once_a_pass() {
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .node("n3", 8)
        .omenative("team", "a", &[("n1", 2), ("n1", 2)])
        .unhealthy("n1");
    assert_eq!(
        arbitrate(&w, EXEC, None, None),
        vec![
            v("team/a/0", ok(&["n2"])),
            v("team/a/1", Err(ArbiterReason::WorkloadBusy))
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The dispatcher's pass-wide reasons and the re-check on a fresh read

fn pass_reason(w: &World, config: &str, state: Option<&str>) -> Option<DispatchReason> {
    w.with_ctx(config, |ctx| {
        dispatch::plan(ctx, state, None).withheld.map(|w| w.reason)
    })
}

#[test]
fn pass_wide_reasons_in_order() {
    use DispatchReason::*;
    let w = evacuation();
    assert_eq!(pass_reason(&w, EXEC, None), None);
    assert_eq!(pass_reason(&w, EXEC, Some("{")), Some(JournalUnavailable));
    let two = journal(vec![
        entry(UUID, "submitted", Some("RequestSubmitted"), 1),
        entry(UUID2, "acknowledged", Some("UUIDStatusObserved"), 1),
    ]);
    assert_eq!(
        pass_reason(&w, EXEC, Some(&two)),
        Some(MultipleUnresolvedRequests)
    );
    let one = journal(vec![entry(
        UUID,
        "stalled",
        Some("AcknowledgementTimeout"),
        1,
    )]);
    assert_eq!(pass_reason(&w, EXEC, Some(&one)), Some(UnresolvedRequest));
    // Unresolved requests are reported even when execution is off.
    assert_eq!(pass_reason(&w, "", Some(&one)), Some(UnresolvedRequest));
    assert_eq!(pass_reason(&w, "", None), Some(ExecutionDisabled));
    assert_eq!(
        pass_reason(&w, "mode: execute\n", None),
        Some(ExecutionDisabled)
    );
    assert_eq!(
        pass_reason(
            &w,
            &format!("{EXEC}omenativeMigrationEnabled: false\n"),
            None
        ),
        Some(ExecutionDisabled)
    );
    let bad = w
        .clone()
        .annotate("c", "alfred.ome.io/cooldown-minutes", "ten");
    assert_eq!(pass_reason(&bad, EXEC, None), Some(InvalidCooldown));
    let backoff = |until: Timestamp| {
        json!({"version": "v1", "entries": [], "backoffUntil": until.to_string()}).to_string()
    };
    assert_eq!(
        pass_reason(&w, EXEC, Some(&backoff(now() + mins(1)))),
        Some(FailureBackoff)
    );
    assert_eq!(
        pass_reason(&w, EXEC, Some(&backoff(now()))),
        None,
        "the backoff ends at its time"
    );
    // A prepared entry is retried, not reported as unresolved.
    let prepared = journal(vec![entry(UUID, "prepared", None, 1)]);
    w.with_ctx(EXEC, |ctx| {
        let plan = dispatch::plan(ctx, Some(&prepared), None);
        assert_eq!(plan.withheld, None);
        assert_eq!(plan.retry.as_deref(), Some(UUID));
    });
}

/// The first admitted move planned on `before`, re-checked on `after`.
fn recheck(
    before: &World,
    after: &World,
) -> Result<alfred::execute::dispatch::Prepared, DispatchReason> {
    recheck_with(before, after, None)
}

fn recheck_with(
    before: &World,
    after: &World,
    state: Option<&str>,
) -> Result<alfred::execute::dispatch::Prepared, DispatchReason> {
    before.with_ctx(EXEC, |ctx| {
        let plan = dispatch::plan(ctx, state, None);
        let (i, _) = plan.admitted().next().expect("an admitted move");
        let rec = plan.decision.recommendations[i].clone();
        let instance = ctx
            .cluster
            .instance_of(&rec.row.workload, rec.row.component, rec.row.instance)
            .unwrap();
        let fingerprint = dispatch::fingerprint(ctx, instance);
        after.with_ctx(EXEC, |fresh_ctx| {
            let fresh = dispatch::plan(fresh_ctx, state, None);
            dispatch::preflight(&rec, &fingerprint, fresh_ctx, &fresh, UUID).map_err(|w| w.reason)
        })
    })
}

#[test]
fn the_fresh_read_must_still_support_the_move() {
    use DispatchReason::*;
    let w = evacuation();
    let p = recheck(&w, &w).unwrap();
    assert_eq!(p.entry.workload.to_string(), "team/b");
    assert_eq!(
        (p.entry.phase, p.entry.reason),
        (Phase::Prepared, Some(EntryReason::SubmissionPrepared))
    );
    // The arbiter plans n2 (fullest first), but kube-scheduler's default LeastAllocated
    // scoring puts the pod on the emptier n3: the request hints where it will land.
    assert_eq!(
        p.entry.targets,
        vec!["n3"],
        "the simulation's predicted node"
    );
    assert_eq!(p.resource_version, "1");
    assert_eq!(
        p.entry.payload,
        format!(
            r#"{{"schemaVersion":"v1","component":"engine","instance":0,"from_node":"n1","hint_target_nodes":["n3"],"reason":"NodeUnhealthy","requested_at":"{NOW}","requested_by":"alfred"}}"#
        )
    );
    // n1 healed: no move any more.
    let healed = w.clone().edit("Node", "n1", |n| {
        n["status"]["conditions"][1] =
            json!({"type": "GpuUnhealthy", "status": "False", "lastTransitionTime": ago(600)})
    });
    assert_eq!(recheck(&w, &healed).unwrap_err(), PolicyNoLongerEligible);
    // b's pod was replaced by one of the same name on the same node.
    let replaced = w.clone().edit("Pod", "b-engine-0-default-0", |p| {
        p["metadata"]["uid"] = json!("new")
    });
    assert_eq!(recheck(&w, &replaced).unwrap_err(), SourceChanged);
    // The scheduler would not place b anywhere: its pods do not tolerate a taint on n2 and n3.
    let tainted = ["n2", "n3"].iter().fold(w.clone(), |w, n| {
        w.edit("Node", n, |n| {
            n["spec"]["taints"] = json!([{"key": "gpu-reserved", "effect": "NoSchedule"}])
        })
    });
    assert_eq!(recheck(&w, &tainted).unwrap_err(), SimulationNotFeasible);
    // Pods of a scheduler no profile simulates: the source is unsupported.
    let other = w.clone().edit("Pod", "b-engine-0-default-0", |p| {
        p["spec"]["schedulerName"] = json!("volcano")
    });
    assert_eq!(recheck(&w, &other).unwrap_err(), SourceUnsupported);
    // The arbiter of the fresh read refuses it.
    // Someone else's three requests on c fill every in-flight slot.
    let full = ["1", "2", "3"].iter().fold(w.clone(), |w, i| {
        w.annotate(
            "c",
            &format!("ome.io/migration-request-v1-0b5f1c2e-3d4a-4b6c-8d7e-00000000000{i}"),
            &payload("n2", "Fragmentation"),
        )
    });
    assert_eq!(
        recheck(&w, &full).unwrap_err(),
        Arbiter(ArbiterReason::InFlightCap)
    );
    // One is enough at dispatch: Alfred sends nothing while any request waits or runs, though
    // the arbiter's cap of 3 still admits the move.
    let one = w.clone().annotate(
        "c",
        &format!("ome.io/migration-request-v1-{UUID2}"),
        &payload("n2", "Fragmentation"),
    );
    let admitted = one.with_ctx(EXEC, |ctx| {
        dispatch::plan(ctx, None, None).admitted().count()
    });
    assert_eq!(admitted, 2);
    assert_eq!(
        recheck(&w, &one).unwrap_err(),
        Arbiter(ArbiterReason::InFlightCap)
    );
    // The surge prefers the move's targets (OME renders the hints as preferred node affinity),
    // but a's pod prefers n3 as much, and n3 is emptier: the scheduler would pick n3.
    let prefers_n3 = w.clone().edit("Pod", "a-engine-0-default-0", |p| {
        p["spec"]["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n3"]}]}}]}})
    });
    // The policy keeps moves off preemptible n3, but the scheduler would pick it.
    let spot = prefers_n3
        .clone()
        .label("n3", "node.kubernetes.io/preemptible", "true");
    assert_eq!(recheck(&spot, &spot).unwrap_err(), PredictedTargetUnsafe);
    // Without its own preference, the surge lands on the move's target.
    let spot = w
        .clone()
        .label("n3", "node.kubernetes.io/preemptible", "true");
    assert!(recheck(&spot, &spot).is_ok());
    // Alfred's own move onto n3 nine minutes ago cools it; the arbiter plans n2 instead, but
    // the scheduler would still pick n3.
    let landed_n3 = journal(vec![{
        let mut e = entry(UUID2, "completed", Some("TerminalStatusObserved"), 9);
        e["fromNode"] = json!("n9");
        e["targets"] = json!(["n3"]);
        e["payload"] = json!(payload("n9", "Fragmentation"));
        e
    }]);
    assert_eq!(
        recheck_with(&prefers_n3, &prefers_n3, Some(&landed_n3)).unwrap_err(),
        TargetCooldown
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// On any cluster: never more admissions than the free in-flight slots, never two moves of
    /// one InferenceService, never two moves landing on one node, never more GPUs on a node
    /// than it has free.
    #[test]
    fn the_arbiter_never_exceeds_its_bounds(
        unhealthy in proptest::collection::vec(proptest::bool::ANY, 4),
        placements in proptest::collection::vec((0usize..4, proptest::sample::select(vec![1i64, 2, 4]), 1usize..3), 1..8),
        max_in_flight in 1i64..4,
        foreign in 0usize..3,
    ) {
        let mut w = World::new();
        for n in 0..4 {
            w = w.node(&format!("n{n}"), 8);
        }
        let mut used = [0i64; 4];
        for (i, (node, gpus, instances)) in placements.iter().enumerate() {
            let fits = used[*node] + gpus * *instances as i64 <= 8;
            if !fits {
                continue;
            }
            used[*node] += gpus * *instances as i64;
            let name = format!("w{i}");
            let node = format!("n{node}");
            let at: Vec<(&str, i64)> = (0..*instances).map(|_| (node.as_str(), *gpus)).collect();
            w = w.omenative("team", &name, &at);
            if i < foreign {
                w = w.annotate(&name, &format!("ome.io/migration-request-v1-0b5f1c2e-3d4a-4b6c-8d7e-00000000000{i}"), &payload(&node, "Fragmentation"));
            }
        }
        for (n, bad) in unhealthy.iter().enumerate() {
            if *bad {
                w = w.unhealthy(&format!("n{n}"));
            }
        }
        let config = format!("{EXEC}maxInFlightMigrations: {max_in_flight}\npolicies: {{defragmentation: {{aggressiveness: aggressive}}}}\n");
        w.with_ctx(&config, |ctx| {
            let plan = dispatch::plan(ctx, None, None);
            let admitted: Vec<_> = plan.admitted().collect();
            let in_flight = ctx.cluster.migrations.len() as i64;
            assert!(admitted.len() as i64 <= (max_in_flight - in_flight).max(0), "{} admitted with {in_flight} in flight", admitted.len());
            let mut workloads = std::collections::HashSet::new();
            let mut nodes: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
            let mut gpus_on: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
            for (i, a) in &admitted {
                let row = &plan.decision.recommendations[*i].row;
                assert!(workloads.insert(row.workload.clone()), "two moves of {}", row.workload);
                for (pod, node) in &a.landings {
                    nodes.entry(node.as_str()).or_default().push(*i);
                    let p = ctx.cluster.pods.iter().find(|p| p.name == pod).unwrap();
                    *gpus_on.entry(node.clone()).or_default() += p.gpus;
                }
            }
            for (node, moves) in &nodes {
                let mut moves = moves.clone();
                moves.dedup();
                assert_eq!(moves.len(), 1, "two moves land on {node}");
            }
            for (node, gpus) in &gpus_on {
                let free = ctx.cluster.node(node).unwrap().gpu_free;
                assert!(*gpus <= free, "{gpus} GPUs land on {node} with {free} free");
            }
        });
    }
}

#[test]
fn the_first_failing_check_is_the_reason() {
    use ArbiterReason::*;
    // b fails several checks at once; each fix reveals the next in the reference's order.
    let planned = maintenance().with_ctx(MAINTENANCE, |ctx| {
        alfred::decision::plan(ctx).recommendations
    });
    let reason_for_b = |w: World| {
        w.with_ctx(MAINTENANCE, |ctx| {
            let history = DispatchHistory::default();
            let inputs = arbiter::Inputs {
                history: &history,
                breaker_open_until: None,
            };
            arbiter::admit(ctx, &planned, &inputs)
                .into_iter()
                .find(|v| planned[v.recommendation].row.workload == "team/b")
                .map(|v| v.result.map(|_| ()).map_err(|r| r.reason))
                .unwrap()
        })
    };
    let all = with_migration(started(maintenance(), "b-engine-0-default-0", 1), "b", 1)
        .annotate("b", "alfred.ome.io/movable", "false")
        .edit("Pod", "b-engine-0-default-0", |p| {
            p["metadata"]["deletionTimestamp"] = json!(ago(0))
        });
    assert_eq!(reason_for_b(all.clone()), Err(NotMovable));
    let all = all.annotate("b", "alfred.ome.io/movable", "true");
    assert_eq!(reason_for_b(all.clone()), Err(InstanceTerminating));
    let all = all.edit("Pod", "b-engine-0-default-0", |p| {
        p["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("deletionTimestamp");
    });
    assert_eq!(reason_for_b(all.clone()), Err(Cooldown));
    let all = all.annotate("b", "alfred.ome.io/cooldown-minutes", "0");
    assert_eq!(reason_for_b(all.clone()), Err(PlacementCooldown));
    let all = started(all, "b-engine-0-default-0", 60);
    assert_eq!(reason_for_b(all), Ok(()));
}

#[test]
fn each_row_gets_the_reference_event() {
    use alfred::decision::{
        AdvisoryReason, CandidateReason, PolicyName, Recommendation, Row, RowOutcome,
    };
    use alfred::execute::events::{event_name, workload_events};
    let base = |policy, reason| {
        Row::new(
            "prod/chat",
            alfred::api::component::ComponentKind::Engine,
            3,
            policy,
            reason,
            "node-a",
            0.5,
        )
    };
    let mut advice = base(PolicyName::Nodehealth, CandidateReason::NodeUnhealthy);
    advice.advisory_reason = Some(AdvisoryReason::NoSurgeHeadroom);
    let mut raw = base(PolicyName::Defragmentation, CandidateReason::Fragmentation);
    raw.advisory_reason = Some(AdvisoryReason::RawDeploymentMigrationUnsupported);
    let mut defrag = base(PolicyName::Defragmentation, CandidateReason::Fragmentation);
    defrag.advisory_reason = Some(AdvisoryReason::NonExecutableObservedFragmentation);
    let mut rejected = base(PolicyName::Defragmentation, CandidateReason::Fragmentation);
    rejected.outcome = RowOutcome::Rejected;
    rejected.reject_reason = Some(ArbiterReason::HourlyCap);
    let mut submitted = base(PolicyName::Defragmentation, CandidateReason::Fragmentation);
    submitted.outcome = RowOutcome::Submitted;
    submitted.dispatch_status = Some(RowOutcome::Submitted);
    submitted.request_uuid = Some(UUID.into());
    submitted.dispatch_reason = Some(EntryReason::RequestSubmitted.into());
    let mut stalled = submitted.clone();
    stalled.outcome = RowOutcome::Stalled;
    stalled.dispatch_reason = Some(EntryReason::AcknowledgementTimeout.into());
    let mut overridden = base(PolicyName::Nodehealth, CandidateReason::NodeUnhealthy);
    overridden.outcome = RowOutcome::Withheld;
    overridden.dispatch_reason = Some(DispatchReason::SerialDispatchLimit);
    overridden.cooldown_overridden = true;
    let rows = vec![
        advice.clone(),
        raw,
        defrag,
        rejected,
        submitted,
        stalled,
        overridden,
    ];
    let recs: Vec<Recommendation> = rows
        .iter()
        .map(|r| Recommendation::new(r.clone(), 4, String::new()))
        .collect();
    let events = workload_events(&rows, &recs);
    let got: Vec<(&str, bool, &str)> = events
        .iter()
        .map(|e| (e.reason.as_str(), e.warning, e.message.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "EvacuationRecommendationProduced",
                false,
                "nodehealth advisory for prod/chat/engine: NoSurgeHeadroom (from node-a, footprint 4 GPUs)"
            ),
            (
                "RawDeploymentMigrationUnsupported",
                false,
                "defragmentation advisory for prod/chat/engine: RawDeploymentMigrationUnsupported (from node-a, footprint 0 GPUs)"
            ),
            (
                "FragmentationRecommendationProduced",
                false,
                "defragmentation advisory for prod/chat/engine: NonExecutableObservedFragmentation (from node-a, footprint 0 GPUs)"
            ),
            (
                "RecommendationRejected",
                false,
                "defragmentation recommendation for prod/chat/engine rejected: HourlyCap"
            ),
            (
                "MigrationSubmitted",
                false,
                "defragmentation migration request uuid=7c9e6679-7425-40de-944b-e07fc1f90ae7 for prod/chat/engine instance 3: submitted (RequestSubmitted)"
            ),
            (
                "MigrationStalled",
                true,
                "defragmentation migration request uuid=7c9e6679-7425-40de-944b-e07fc1f90ae7 for prod/chat/engine instance 3: stalled (AcknowledgementTimeout)"
            ),
            (
                "RecommendationWithheld",
                false,
                "nodehealth migration request uuid= for prod/chat/engine instance 3: withheld (SerialDispatchLimit)"
            ),
            (
                "CooldownOverriddenForEvacuation",
                false,
                "health evacuation of prod/chat/engine admitted under the cooldown floor while the standard window was still running"
            ),
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| (e.namespace.as_str(), e.name.as_str()) == ("prod", "chat"))
    );
    // A repeat has the same name; another event on the object another.
    assert_eq!(event_name("chat", "A", "m"), event_name("chat", "A", "m"));
    assert_ne!(event_name("chat", "A", "m"), event_name("chat", "A", "n"));
    assert!(event_name(&"x".repeat(300), "A", "m").len() <= 253);
}

#[test]
fn a_request_off_the_wire_contract_is_never_sent() {
    use alfred::migration::{MigrationRequest, payload as wire, validate_request};
    let ok = MigrationRequest {
        schema_version: "v1".into(),
        component: "engine".into(),
        instance: 3,
        from_node: Some("node-a".into()),
        hint_target_nodes: vec!["n2".into(), "n3".into()],
        reason: Some("Fragmentation".into()),
        requested_at: Some("2026-09-28T10:15:02.418093721Z".into()),
        requested_by: Some("alfred".into()),
    };
    let text = wire(&ok);
    assert_eq!(
        text,
        r#"{"schemaVersion":"v1","component":"engine","instance":3,"from_node":"node-a","hint_target_nodes":["n2","n3"],"reason":"Fragmentation","requested_at":"2026-09-28T10:15:02.418093721Z","requested_by":"alfred"}"#
    );
    assert_eq!(validate_request(&ok, &text), Ok(()));
    let bad = |f: &dyn Fn(&mut MigrationRequest)| {
        let mut r = ok.clone();
        f(&mut r);
        validate_request(&r, &wire(&r)).unwrap_err().to_string()
    };
    assert!(bad(&|r| r.component = "worker".into()).contains("component"));
    assert!(bad(&|r| r.instance = -1).contains("instance"));
    assert!(bad(&|r| r.from_node = Some("Node_A".into())).contains("from_node"));
    assert!(bad(&|r| r.hint_target_nodes = vec!["n2".into(); 2]).contains("twice"));
    assert!(bad(&|r| r.hint_target_nodes = vec!["node-a".into()]).contains("source node"));
    assert!(
        bad(&|r| r.hint_target_nodes = (0..9).map(|i| format!("n{i}")).collect())
            .contains("more than 8")
    );
    assert!(bad(&|r| r.reason = Some("x".repeat(5000))).contains("4096"));
    // The JSON Patch tests the object and escapes the key.
    let patch = serde_json::to_value(alfred::migration::request_patch(
        "uid-1", "42", false, UUID, &text,
    ))
    .unwrap();
    assert_eq!(
        patch,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": format!("/metadata/annotations/ome.io~1migration-request-v1-{UUID}"), "value": text},
        ])
    );
    // A node whose name breaks the contract makes the move's request invalid.
    let w = World::new()
        .node("GPU_1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("GPU_1", 4)])
        .unhealthy("GPU_1");
    assert_eq!(recheck(&w, &w).unwrap_err(), DispatchReason::InvalidRequest);
}
