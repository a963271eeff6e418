//! One rollout pass: selection, partition, budgets, mechanisms and the exact hold texts
//! (omenative-reference.md §3).

use alfred::api::component::ComponentKind;
use alfred::api::lifecycle::UpdateStrategy;
use alfred::api::replica::{HoldGate, InstanceStatus, RetryBlock};
use alfred::rollout::strategy::{OperatorDefaults, ResolvedStrategy, resolve};
use alfred::rollout::{
    Change, InstanceFacts, Mechanism, PassInput, PassPlan, PodFact, mechanism, partition_held,
    plan_pass, restart_window, staged_message,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;

const OLD: &str = "chat-engine-1a2b3c4d";
const NEW: &str = "chat-engine-7b4c2e19";

fn now() -> Timestamp {
    "2026-09-28T10:15:00Z".parse().unwrap()
}

/// The restart window with no minReadySeconds and the chart's 60s stuck-pod grace.
fn window() -> SignedDuration {
    restart_window(0, OperatorDefaults::default().stuck_pod_grace())
}

fn strategy(value: serde_json::Value) -> ResolvedStrategy {
    let s: UpdateStrategy = serde_json::from_value(value).unwrap();
    resolve(
        ComponentKind::Engine,
        Some(&s),
        None,
        &OperatorDefaults::default(),
    )
}

/// A row: Ready and serving on a revision.
fn row(index: i32, revision: &str) -> InstanceStatus {
    serde_json::from_value(
        json!({"index": index, "phase": "Ready", "runningRevision": revision,
        "podCount": 1, "servingPodCount": 1, "activeOrdinal": 0}),
    )
    .unwrap()
}

fn with(mut r: InstanceStatus, patch: serde_json::Value) -> InstanceStatus {
    let mut v = serde_json::to_value(&r).unwrap();
    for (k, x) in patch.as_object().unwrap() {
        v[k] = x.clone();
    }
    r = serde_json::from_value(v).unwrap();
    r
}

fn facts(rows: &[InstanceStatus]) -> Vec<InstanceFacts<'_>> {
    rows.iter()
        .map(|row| InstanceFacts {
            row,
            pods: Vec::new(),
        })
        .collect()
}

fn pass<'a>(
    rows: Vec<InstanceFacts<'a>>,
    strategy: &'a ResolvedStrategy,
    partition: Option<i32>,
    blocks: &'a [RetryBlock],
) -> PassPlan {
    plan_pass(&PassInput {
        component: ComponentKind::Engine,
        target: NEW,
        desired: rows.len() as u32,
        pods_per_instance: 1,
        instances: rows,
        unlisted: Vec::new(),
        retry_blocks: blocks,
        strategy,
        partition,
        change: Change::ImagesOnly,
        now: now(),
        restart_window: window(),
    })
    .unwrap()
}

#[test]
fn a_zero_budget_starts_nothing_and_says_so() {
    let rows: Vec<InstanceStatus> = (0..2).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "InPlaceIfPossible", "rollingUpdate": {"maxUnavailable": 0}}));
    let p = pass(facts(&rows), &s, None, &[]);
    assert!(p.starts.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.gate, HoldGate::Budget);
    assert_eq!(
        hold.reason,
        "per-Component unavailability budget 0 exhausted (would become 1)"
    );
    assert_eq!(hold.target.as_deref(), Some(NEW));
}

#[test]
fn the_budget_admits_starts_in_index_order_and_then_holds() {
    let rows: Vec<InstanceStatus> = (0..4).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": "50%"}}));
    let p = pass(facts(&rows), &s, None, &[]);
    assert_eq!(
        p.starts,
        vec![(0, Mechanism::Recreate), (1, Mechanism::Recreate)]
    );
    assert_eq!(p.waiting, vec![2, 3]);
    assert_eq!(p.hold, None, "a pass that starts something clears the hold");

    // With two already in flight, the next pass starts nothing and holds.
    let rows = vec![
        with(
            row(0, OLD),
            json!({"phase": "Updating", "operation": {"type": "Update", "step": "Drain"}}),
        ),
        with(
            row(1, OLD),
            json!({"phase": "Updating", "operation": {"type": "Update", "step": "Drain"}}),
        ),
        row(2, OLD),
        row(3, OLD),
    ];
    let p = pass(facts(&rows), &s, None, &[]);
    assert_eq!(p.continuing, vec![0, 1]);
    assert!(p.starts.is_empty());
    assert_eq!(
        p.hold.unwrap().reason,
        "per-Component unavailability budget 2 exhausted (would become 3)"
    );
}

#[test]
fn instances_out_of_rotation_start_first() {
    let rows = vec![
        row(0, OLD),
        with(row(1, OLD), json!({"servingPodCount": 0})),
        row(2, OLD),
    ];
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}));
    let p = pass(facts(&rows), &s, None, &[]);
    assert_eq!(p.starts, vec![(1, Mechanism::Recreate)]);
}

#[test]
fn rolled_instances_not_serving_hold_a_slot_and_are_named() {
    let rows = vec![
        with(row(0, NEW), json!({"servingPodCount": 0})),
        row(1, OLD),
    ];
    let s = strategy(json!({"type": "InPlaceIfPossible", "rollingUpdate": {"maxUnavailable": 1}}));
    let p = pass(facts(&rows), &s, None, &[]);
    assert!(p.starts.is_empty());
    assert_eq!(
        p.hold.unwrap().reason,
        format!(
            "per-Component unavailability budget 1 exhausted (would become 2); Instance(s) 0 on revision {NEW} not serving"
        )
    );
}

#[test]
fn mechanisms() {
    let single = row(0, OLD);
    let e = ComponentKind::Engine;
    use alfred::api::lifecycle::UpdateStrategyType::*;
    assert_eq!(
        mechanism(e, &single, SurgeThenDrain, 1, Change::Other),
        Ok(Mechanism::Surge { new_ordinal: 1 })
    );
    let flipped = with(row(0, OLD), json!({"activeOrdinal": 1}));
    assert_eq!(
        mechanism(e, &flipped, SurgeThenDrain, 1, Change::Other),
        Ok(Mechanism::Surge { new_ordinal: 0 })
    );
    assert_eq!(
        mechanism(e, &single, SurgeThenDrain, 3, Change::Other),
        Ok(Mechanism::GangSurge)
    );
    assert_eq!(
        mechanism(e, &single, RecreatePod, 1, Change::ImagesOnly),
        Ok(Mechanism::Recreate)
    );
    // Image-only changes go in place on single-pod Instances; env, init images, resources do not.
    assert_eq!(
        mechanism(e, &single, InPlaceIfPossible, 1, Change::ImagesOnly),
        Ok(Mechanism::InPlace)
    );
    assert_eq!(
        mechanism(e, &single, InPlaceIfPossible, 1, Change::Other),
        Ok(Mechanism::Recreate)
    );
    assert_eq!(
        mechanism(e, &single, InPlaceOnly, 1, Change::ImagesOnly),
        Ok(Mechanism::InPlace)
    );
    assert_eq!(
        mechanism(e, &single, InPlaceOnly, 1, Change::Other).map_err(|r| r.to_string()),
        Err("OMENative component=engine instance=0 rejected update: InPlaceOnly strategy but diff exceeds container images".into())
    );
    // A leader and workers always recreate under the in-place strategies.
    assert_eq!(
        mechanism(e, &single, InPlaceOnly, 4, Change::ImagesOnly),
        Ok(Mechanism::Recreate)
    );
    assert_eq!(
        mechanism(e, &single, InPlaceIfPossible, 4, Change::ImagesOnly),
        Ok(Mechanism::Recreate)
    );
    // A never-promoted Instance recreates under every strategy.
    let never: InstanceStatus =
        serde_json::from_value(json!({"index": 3, "phase": "Failed"})).unwrap();
    for s in [SurgeThenDrain, RecreatePod, InPlaceIfPossible, InPlaceOnly] {
        assert_eq!(
            mechanism(e, &never, s, 1, Change::Other),
            Ok(Mechanism::Recreate),
            "{s:?}"
        );
    }
}

#[test]
fn in_place_only_refusals_do_not_start_or_charge() {
    let rows: Vec<InstanceStatus> = (0..2).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "InPlaceOnly", "rollingUpdate": {"maxUnavailable": 1}}));
    let p = plan_pass(&PassInput {
        component: ComponentKind::Engine,
        target: NEW,
        desired: 2,
        pods_per_instance: 1,
        instances: facts(&rows),
        unlisted: Vec::new(),
        retry_blocks: &[],
        strategy: &s,
        partition: None,
        change: Change::Other,
        now: now(),
        restart_window: window(),
    })
    .unwrap();
    assert!(p.starts.is_empty());
    assert_eq!(p.refused.len(), 2);
    assert_eq!(p.hold, None);
}

#[test]
fn partition_counts_candidates_in_every_phase() {
    let rows = vec![
        row(0, NEW), // on target: not a candidate
        with(
            row(1, OLD),
            json!({"phase": "Updating", "operation": {"type": "Update", "step": "Drain"}}),
        ), // in flight
        with(
            row(2, OLD),
            json!({"phase": "Failed", "operation": {"type": "Update", "step": "Drain"}}),
        ), // continuation
        row(3, OLD), // candidate
        with(row(4, OLD), json!({"phase": "Failed"})), // candidate
        with(
            row(5, OLD),
            json!({"phase": "Migrating", "operation": {"type": "Migrate"}}),
        ), // migrating source: candidate
        with(
            row(6, OLD),
            json!({"phase": "Creating", "operation": {"type": "Migrate"}}),
        ), // migration surge target
        serde_json::from_value(json!({"index": 7})).unwrap(), // unobserved
        with(row(8, ""), json!({"runningRevision": null})), // empty revision: candidate
        row(9, OLD),
    ];
    let refs: Vec<&InstanceStatus> = rows.iter().collect();
    assert_eq!(partition_held(&refs, NEW, Some(3)), vec![3, 4, 5]);
    assert_eq!(partition_held(&refs, NEW, Some(10)), vec![3, 4, 5, 8, 9]);
    assert!(partition_held(&refs, NEW, Some(0)).is_empty());
    assert!(partition_held(&refs, NEW, None).is_empty());

    let s = strategy(json!({"type": "RecreatePod"}));
    let p = pass(facts(&rows), &s, Some(3), &[]);
    assert_eq!(p.partition_held, vec![3, 4, 5]);
    let started: Vec<i32> = p.starts.iter().map(|s| s.0).collect();
    // Held, in-flight, migrating and unobserved rows do not start; an empty running revision
    // whose pods are not known to be on the target does.
    assert_eq!(started, vec![8, 9]);
    assert_eq!(p.continuing, vec![1, 2]);
}

#[test]
fn the_staged_message() {
    let rows = [row(0, OLD), row(1, NEW)];
    let refs: Vec<&InstanceStatus> = rows.iter().collect();
    assert_eq!(
        staged_message(&refs, "llama-3-2-3b-instruct-engine-7b4c2e19", 1, 2),
        None,
        "the rolled Instance is not on that target"
    );
    let rows = [row(0, OLD), row(1, "llama-3-2-3b-instruct-engine-7b4c2e19")];
    let refs: Vec<&InstanceStatus> = rows.iter().collect();
    assert_eq!(
        staged_message(&refs, "llama-3-2-3b-instruct-engine-7b4c2e19", 1, 2).as_deref(),
        Some(
            "Staged at partition 1: 1/2 Instances on llama-3-2-3b-instruct-engine-7b4c2e19, 1 held on the prior revision"
        )
    );
    assert_eq!(staged_message(&refs, NEW, 0, 2), None);
}

fn pod<'a>(name: &'a str, deletion: Option<&str>, on_running: bool) -> PodFact<'a> {
    PodFact {
        name,
        deletion: deletion.map(|d| d.parse().unwrap()),
        on_running_revision: on_running,
        crash_looping: false,
        ready_after_restart: None,
    }
}

#[test]
fn terminating_and_extra_pods_hold_surge_slots() {
    let rows: Vec<InstanceStatus> = (0..3).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 1}}));
    let terminating = || {
        let mut f = facts(&rows);
        f[0].pods = vec![
            pod("chat-engine-0-default-0", None, true),
            pod(
                "chat-engine-0-default-1",
                Some("2026-09-28T10:15:30Z"),
                false,
            ),
        ];
        f
    };
    let p = pass(terminating(), &s, None, &[]);
    assert!(p.starts.is_empty());
    assert_eq!(
        p.hold.unwrap().reason,
        "per-Component surge budget 1 exhausted (would become 2); Terminating pod chat-engine-0-default-1 still counts against the surge budget until its deletion grace elapses"
    );

    // Past its deletion grace, a lingering pod no longer counts.
    let mut late = facts(&rows);
    late[0].pods = vec![
        pod("chat-engine-0-default-0", None, true),
        pod(
            "chat-engine-0-default-1",
            Some("2026-09-28T10:14:00Z"),
            false,
        ),
    ];
    let p = pass(late, &s, None, &[]);
    assert_eq!(p.starts, vec![(0, Mechanism::Surge { new_ordinal: 1 })]);

    // A live extra pod on Instance 2 holds a slot, which a start on Instance 2 takes over.
    let mut live = facts(&rows);
    live[2].pods = vec![
        pod("chat-engine-2-default-0", None, true),
        pod("chat-engine-2-default-1", None, false),
    ];
    let p = pass(live, &s, None, &[]);
    assert_eq!(p.prior, 1);
    assert_eq!(p.starts, vec![(2, Mechanism::Surge { new_ordinal: 1 })]);
    assert_eq!(
        p.hold, None,
        "Instance 2's start replaces its extra pod; 0 and 1 wait behind the budget"
    );
    assert_eq!(p.waiting, vec![0, 1]);
}

#[test]
fn an_eight_pod_instance_draining_holds_one_slot() {
    let rows: Vec<InstanceStatus> = (0..2)
        .map(|i| with(row(i, OLD), json!({"podCount": 8, "servingPodCount": 8})))
        .collect();
    let names: Vec<String> = (0..16)
        .map(|k| format!("big-engine-0-pod-{k:02}"))
        .collect();
    let mut f = facts(&rows);
    f[0].pods = names
        .iter()
        .enumerate()
        .map(|(k, n)| pod(n, (k >= 8).then_some("2026-09-28T10:20:00Z"), k < 8))
        .collect();
    let s = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 2}}));
    let p = plan_pass(&PassInput {
        component: ComponentKind::Engine,
        target: NEW,
        desired: 2,
        pods_per_instance: 8,
        instances: f,
        unlisted: Vec::new(),
        retry_blocks: &[],
        strategy: &s,
        partition: None,
        change: Change::Other,
        now: now(),
        restart_window: window(),
    })
    .unwrap();
    assert_eq!(
        p.prior, 1,
        "eight draining pods of an eight-pod Instance are one slot"
    );
    assert_eq!(p.starts, vec![(0, Mechanism::GangSurge)]);
    assert_eq!(p.waiting, vec![1]);
}

#[test]
fn retry_blocks_hold_with_their_texts() {
    let rows: Vec<InstanceStatus> = (0..2).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "RecreatePod"}));
    let held: Vec<RetryBlock> =
        serde_json::from_value(json!([{"targetRevision": NEW, "state": "Held",
        "attemptsStarted": 3, "reason": "ImagePullBackOff"}]))
        .unwrap();
    let p = pass(facts(&rows), &s, None, &held);
    assert!(p.starts.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.gate, HoldGate::Held);
    assert_eq!(
        hold.reason,
        format!("update to {NEW} held after 3 failed attempt(s): ImagePullBackOff")
    );

    let backoff: Vec<RetryBlock> =
        serde_json::from_value(json!([{"targetRevision": NEW, "state": "Backoff",
        "attemptsStarted": 1, "nextRetryAt": "2026-09-28T10:16:00Z", "reason": "ErrImagePull"}]))
        .unwrap();
    let p = pass(facts(&rows), &s, None, &backoff);
    assert_eq!(
        p.hold.unwrap().reason,
        format!("update to {NEW} in backoff after 1 failed attempt(s): ErrImagePull")
    );

    let due: Vec<RetryBlock> =
        serde_json::from_value(json!([{"targetRevision": NEW, "state": "Backoff",
        "attemptsStarted": 1, "nextRetryAt": "2026-09-28T10:14:00Z"}]))
        .unwrap();
    assert_eq!(
        pass(facts(&rows), &s, None, &due).starts.len(),
        2,
        "past nextRetryAt the retry starts"
    );

    let other: Vec<RetryBlock> = serde_json::from_value(
        json!([{"targetRevision": OLD, "state": "Held", "attemptsStarted": 3}]),
    )
    .unwrap();
    assert_eq!(
        pass(facts(&rows), &s, None, &other).starts.len(),
        2,
        "a new target escapes the block"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// A pass never charges past the budget it reads, and never starts an Instance the partition
    /// or a retry block holds.
    #[test]
    fn plans_respect_the_budget_and_the_partition(
        phases in proptest::collection::vec(0u8..6, 1..10),
        budget in 0i32..4,
        partition in 0i32..5,
        surge in proptest::bool::ANY,
        crashes in proptest::collection::vec(proptest::bool::ANY, 10),
        block in 0u8..4,
    ) {
        let rows: Vec<InstanceStatus> = phases
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let i = i as i32;
                match p {
                    0 => row(i, OLD),
                    1 => row(i, NEW),
                    2 => with(row(i, NEW), json!({"servingPodCount": 0})),
                    3 => with(row(i, OLD), json!({"phase": "Updating", "operation": {"type": "Update", "step": if surge { "Surge" } else { "Drain" }}})),
                    4 => with(row(i, OLD), json!({"phase": "Failed"})),
                    _ => with(row(i, OLD), json!({"servingPodCount": 0})),
                }
            })
            .collect();
        let s = if surge {
            strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": budget}}))
        } else {
            strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": budget}}))
        };
        const NAMES: [&str; 10] = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
        let mut f = facts(&rows);
        for (k, fact) in f.iter_mut().enumerate() {
            if crashes[k] {
                fact.pods = vec![crash_looping(NAMES[k])];
            }
        }
        // No block, or one in each state on the target revision.
        let blocks: Vec<RetryBlock> = match block {
            0 => Vec::new(),
            k => {
                let state = ["Backoff", "Held", "RetryInProgress"][k as usize - 1];
                serde_json::from_value(json!([{"targetRevision": NEW, "state": state,
                    "attemptsStarted": 1, "nextRetryAt": "2026-09-28T10:20:00Z"}])).unwrap()
            }
        };
        let p = pass(f, &s, Some(partition), &blocks);
        let b = budget as u32;
        // A Held revision starts nothing; neither does one in backoff before its retry time.
        if block == 1 || block == 2 {
            proptest::prop_assert!(p.starts.is_empty(), "{:?} started under a block", p.starts);
        }
        // Repairs take the unavailability arm's slots too (those of Instances not already
        // holding one as rolled and not serving).
        let repair_charge = if surge {
            0
        } else {
            p.repairs.iter().filter(|&&i| phases[i as usize] != 2).count() as u32
        };
        proptest::prop_assert!(
            p.starts.is_empty() || p.prior + repair_charge + p.starts.len() as u32 <= b,
            "prior {} + repairs {:?} + starts {:?} over budget {}", p.prior, p.repairs, p.starts, b);
        for (i, _) in &p.starts {
            proptest::prop_assert!(!p.partition_held.contains(i));
            proptest::prop_assert!(!p.repairs.contains(i), "{i} both updated and repaired");
        }
        // Repairs: only crash-looping Instances no operation owns, within maxUnavailable
        // counted with the recreates in flight (SurgeThenDrain here sets no maxUnavailable).
        for &i in &p.repairs {
            proptest::prop_assert!(crashes[i as usize] && rows[i as usize].operation.is_none());
        }
        let recreating = if surge { 0 } else { phases.iter().filter(|&&x| x == 3).count() as u32 };
        proptest::prop_assert!(surge || p.repairs.is_empty() || recreating + p.repairs.len() as u32 <= b);
    }
}

mod mid_surge {
    use super::*;
    use alfred::rollout::{GangAbandon, GangReset, MidSurge, SurgePods, gang_abandoned, mid_surge};

    const PINNED: &str = "chat-engine-7b4c2e19";
    const NEWER: &str = "chat-engine-9d8e7f60";

    fn surging(step: &str) -> InstanceStatus {
        with(
            row(0, OLD),
            json!({"phase": "Updating",
            "operation": {"type": "Update", "step": step, "targetRevision": PINNED}}),
        )
    }

    fn pods(source_stands: bool, source_terminating: bool, replacement_lost: bool) -> SurgePods {
        SurgePods {
            source_stands,
            source_terminating,
            replacement_lost,
        }
    }

    #[test]
    fn every_row_of_the_single_pod_table() {
        let e = ComponentKind::Engine;
        assert_eq!(
            mid_surge(
                e,
                &surging("Surge"),
                PINNED,
                NEWER,
                pods(true, false, false)
            ),
            MidSurge::Abandon {
                event: format!(
                    "OMENative component=engine instance=0 abandoned superseded surge to {PINNED}; re-surging toward {NEWER}"
                )
            }
        );
        assert_eq!(
            mid_surge(e, &surging("Surge"), PINNED, OLD, pods(true, false, false)),
            MidSurge::Abandon {
                event: format!(
                    "OMENative component=engine instance=0 abandoned surge to withdrawn revision {PINNED}; the Instance stays on revision {OLD}"
                )
            }
        );
        assert_eq!(
            mid_surge(
                e,
                &surging("Surge"),
                PINNED,
                NEWER,
                pods(false, false, false)
            ),
            MidSurge::Finish
        );
        assert_eq!(
            mid_surge(
                e,
                &surging("SurgeDrain"),
                PINNED,
                NEWER,
                pods(true, true, false)
            ),
            MidSurge::Continue
        );
        assert_eq!(
            mid_surge(
                e,
                &surging("SurgeDrain"),
                PINNED,
                NEWER,
                pods(true, false, true)
            ),
            MidSurge::SourceReturns {
                event: format!(
                    "OMENative component=engine instance=0 abandoned surge to withdrawn revision {PINNED}: the replacement was lost after it took over serving and nothing is rebuilt at it; the source returns to rotation on revision {OLD}"
                )
            }
        );
        assert_eq!(
            mid_surge(
                e,
                &surging("SurgeDrain"),
                PINNED,
                NEWER,
                pods(false, false, true)
            ),
            MidSurge::FreshStart {
                event: format!(
                    "OMENative component=engine instance=0 abandoned surge to withdrawn revision {PINNED}: the replacement was lost after it took over serving and no source pod stands, so the Instance re-enters as a fresh start at revision {NEWER}"
                )
            }
        );
        let failed = with(surging("Surge"), json!({"phase": "Failed"}));
        assert_eq!(
            mid_surge(e, &failed, PINNED, NEWER, pods(true, false, false)),
            MidSurge::NextAttempt
        );
    }

    #[test]
    fn gang_messages() {
        let d = ComponentKind::Decoder;
        assert_eq!(
            gang_abandoned(
                d,
                1,
                4,
                GangAbandon::Failed,
                GangReset::Reset { running: OLD }
            ),
            format!(
                "OMENative component=decoder instance=1 abandoned failed gang surge (surge-index=4); resetting to revision {OLD} for a fresh rollout"
            )
        );
        assert_eq!(
            gang_abandoned(d, 1, 4, GangAbandon::Superseded, GangReset::SourceGone),
            "OMENative component=decoder instance=1 abandoned superseded gang surge (surge-index=4); the source's pods are gone and it re-enters as a fresh start at the roll target"
        );
        assert_eq!(
            gang_abandoned(
                d,
                1,
                4,
                GangAbandon::Withdrawn { pinned: PINNED },
                GangReset::SourceReturns { running: OLD }
            ),
            format!(
                "OMENative component=decoder instance=1 abandoned gang surge (surge-index=4): the roll target moved off revision {PINNED} while the replacement gang was short of members, so nothing is rebuilt at it; the source returns to rotation on revision {OLD}"
            )
        );
        assert!(
            gang_abandoned(d, 2, 5, GangAbandon::Failed, GangReset::NeverRan)
                .ends_with("the source never ran a revision and re-enters as a fresh start")
        );
    }
}

#[test]
fn a_standing_hold_when_rolled_instances_not_serving_use_up_the_budget() {
    // Every Instance is on the target; Instance 2 is not serving and holds the only slot.
    let rows = vec![
        row(0, NEW),
        row(1, NEW),
        with(row(2, NEW), json!({"servingPodCount": 0})),
    ];
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}));
    let p = pass(facts(&rows), &s, None, &[]);
    assert!(p.starts.is_empty());
    assert_eq!(
        p.hold.unwrap().reason,
        format!(
            "per-Component unavailability budget 1 exhausted; Instance(s) 2 on revision {NEW} not serving"
        )
    );
    // With room left, nothing holds.
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}));
    assert_eq!(pass(facts(&rows), &s, None, &[]).hold, None);
}

#[test]
fn a_surge_source_stays_in_rotation_below_the_floor() {
    // Two rolled Instances not serving exceed maxUnavailable 1: Instance 2's surge may not drain.
    let rows = vec![
        with(row(0, NEW), json!({"servingPodCount": 0})),
        with(row(1, NEW), json!({"servingPodCount": 0})),
        with(
            row(2, OLD),
            json!({"phase": "Updating", "operation": {"type": "Update", "step": "Surge"}}),
        ),
        row(3, OLD),
    ];
    let s = strategy(
        json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 4, "maxUnavailable": 1}}),
    );
    let p = pass(facts(&rows), &s, None, &[]);
    assert_eq!(
        p.hold.unwrap().reason,
        format!(
            "per-Component unavailability budget 1 exhausted; Instance(s) 0, 1 on revision {NEW} not serving; no source leaves rotation"
        )
    );
}

#[test]
fn plural_pod_clauses_and_retrying_one_at_a_time() {
    let rows: Vec<InstanceStatus> = (0..3).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 2}}));
    let mut f = facts(&rows);
    f[0].pods = vec![
        pod("c-0-default-0", None, true),
        pod("c-0-default-1", Some("2026-09-28T10:16:00Z"), false),
    ];
    f[1].pods = vec![
        pod("c-1-default-0", None, true),
        pod("c-1-default-1", Some("2026-09-28T10:16:00Z"), false),
    ];
    f[2].pods = vec![
        pod("c-2-default-0", None, true),
        pod("c-2-default-1", None, false),
    ];
    let p = pass(f, &s, None, &[]);
    // Instance 2's own extra pod is taken over by its start; 0 and 1 wait.
    assert_eq!(p.starts, vec![(2, Mechanism::Surge { new_ordinal: 1 })]);
    let mut f = facts(&rows);
    f[0].pods = vec![
        pod("c-0-default-0", None, true),
        pod("c-0-default-1", Some("2026-09-28T10:16:00Z"), false),
    ];
    f[1].pods = vec![
        pod("c-1-default-0", None, true),
        pod("c-1-default-1", Some("2026-09-28T10:16:00Z"), false),
    ];
    let s1 = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 2}}));
    let p = pass(f, &s1, None, &[]);
    assert_eq!(
        p.hold.unwrap().reason,
        "per-Component surge budget 2 exhausted (would become 3); Terminating pods c-0-default-1, c-1-default-1 still count against the surge budget until their deletion grace elapses"
    );

    let in_flight = vec![
        with(
            row(0, OLD),
            json!({"phase": "Updating", "operation": {"type": "Update", "step": "Drain"}}),
        ),
        row(1, OLD),
    ];
    let s2 = strategy(json!({"type": "RecreatePod"}));
    let retrying: Vec<RetryBlock> =
        serde_json::from_value(json!([{"targetRevision": NEW, "state": "RetryInProgress",
        "attemptsStarted": 2, "reason": "CreateContainerConfigError"}]))
        .unwrap();
    let p = pass(facts(&in_flight), &s2, None, &retrying);
    let hold = p.hold.unwrap();
    assert_eq!(hold.gate, HoldGate::RetryBlock);
    assert_eq!(
        hold.reason,
        format!(
            "update to {NEW} retrying one attempt at a time after 2 failed attempt(s): CreateContainerConfigError"
        )
    );
}

#[test]
fn what_an_edit_changes() {
    use alfred::api::ComponentSpec;
    use alfred::rollout::classify_change;
    let spec = |v: serde_json::Value| -> ComponentSpec { serde_json::from_value(v).unwrap() };
    let base = spec(
        json!({"minReplicas": 2, "runner": {"name": "ome-container", "image": "sglang:v0.5.3"},
        "initContainers": [{"name": "fetch", "image": "fetch:1"}]}),
    );
    let image = spec(
        json!({"minReplicas": 2, "runner": {"name": "ome-container", "image": "sglang:v0.5.4"},
        "initContainers": [{"name": "fetch", "image": "fetch:1"}]}),
    );
    let env = spec(
        json!({"minReplicas": 2, "runner": {"name": "ome-container", "image": "sglang:v0.5.3",
        "env": [{"name": "LOG", "value": "debug"}]}, "initContainers": [{"name": "fetch", "image": "fetch:1"}]}),
    );
    let init = spec(
        json!({"minReplicas": 2, "runner": {"name": "ome-container", "image": "sglang:v0.5.3"},
        "initContainers": [{"name": "fetch", "image": "fetch:2"}]}),
    );
    let strategy_only = spec(
        json!({"minReplicas": 3, "runner": {"name": "ome-container", "image": "sglang:v0.5.3"},
        "initContainers": [{"name": "fetch", "image": "fetch:1"}],
        "lifecycle": {"updateStrategy": {"type": "RecreatePod"}}}),
    );
    assert_eq!(classify_change(&base, &image), Some(Change::ImagesOnly));
    assert_eq!(classify_change(&base, &env), Some(Change::Other));
    assert_eq!(
        classify_change(&base, &init),
        Some(Change::Other),
        "an init container's image recreates"
    );
    assert_eq!(
        classify_change(&base, &strategy_only),
        None,
        "replicas and strategy are not in the template"
    );
}

fn crash_looping<'a>(name: &'a str) -> PodFact<'a> {
    PodFact {
        crash_looping: true,
        ..pod(name, None, true)
    }
}

/// A row on `revision` whose only pod crash-loops: it serves nothing.
fn crashing(index: i32, revision: &str) -> InstanceStatus {
    with(row(index, revision), json!({"servingPodCount": 0}))
}

#[test]
fn crash_loop_repairs_are_capped_by_max_unavailable_under_every_strategy() {
    let rows = vec![
        crashing(0, NEW),
        crashing(1, NEW),
        with(
            row(2, NEW),
            json!({"phase": "Restarting", "operation": {"type": "Restart", "step": "Drain"}}),
        ),
        row(3, NEW),
    ];
    let with_pods = || {
        let mut f = facts(&rows);
        f[0].pods = vec![crash_looping("c-0-default-0")];
        f[1].pods = vec![crash_looping("c-1-default-0")];
        // A pod already being deleted is OME's repair in progress, not a new one.
        f[2].pods = vec![PodFact {
            deletion: Some("2026-09-28T10:16:00Z".parse().unwrap()),
            ..crash_looping("c-2-default-0")
        }];
        f
    };
    // maxUnavailable 2 (SurgeThenDrain reads maxSurge for updates, never for repairs): the
    // repair in flight and one more.
    let s = strategy(
        json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 5, "maxUnavailable": 2}}),
    );
    let p = pass(with_pods(), &s, None, &[]);
    assert_eq!(p.repairs, vec![0]);
    assert_eq!(
        p.repairs_held,
        vec![(
            1,
            "OMENative component=engine instance=1 crash-loop repair held by Budget: per-Component unavailability budget 2 exhausted (would become 3)".to_string()
        )]
    );
    // The held repair is the component's hold, without a target revision, when the rollout
    // has none (with maxSurge 1 the two rolled Instances not serving would be the hold).
    let hold = p.hold.unwrap();
    assert_eq!(hold.gate, HoldGate::Budget);
    assert_eq!(
        hold.reason,
        "per-Component unavailability budget 2 exhausted (would become 3)"
    );
    assert_eq!(hold.target, None);

    // A zero maxUnavailable holds every repair; no cap repairs all.
    let zero =
        strategy(json!({"type": "InPlaceIfPossible", "rollingUpdate": {"maxUnavailable": 0}}));
    let p = pass(with_pods(), &zero, None, &[]);
    assert!(p.repairs.is_empty());
    assert_eq!(p.repairs_held.len(), 2);
    let uncapped = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 1}}));
    assert_eq!(pass(with_pods(), &uncapped, None, &[]).repairs, vec![0, 1]);
}

#[test]
fn a_repair_shares_the_unavailability_budget_with_recreates() {
    // Instance 0 crash-loops on the prior revision: the update recreates it, no repair.
    // Instance 2 crash-loops on the target: repaired, and it already holds its slot as a rolled
    // Instance not serving, so the repair costs nothing more.
    let rows = vec![crashing(0, OLD), row(1, OLD), crashing(2, NEW), row(3, OLD)];
    let mut f = facts(&rows);
    f[0].pods = vec![crash_looping("c-0-default-0")];
    f[2].pods = vec![crash_looping("c-2-default-0")];
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}));
    let p = pass(f, &s, None, &[]);
    assert_eq!(p.repairs, vec![2]);
    assert_eq!(p.starts, vec![(0, Mechanism::Recreate)]);
    assert_eq!(p.waiting, vec![1, 3]);
    assert_eq!(
        p.hold.unwrap().reason,
        format!(
            "per-Component unavailability budget 2 exhausted (would become 3); Instance(s) 2 on revision {NEW} not serving"
        )
    );
}

#[test]
fn an_instance_restarted_after_ready_holds_a_slot_for_the_restart_window() {
    // Ready since 10:00; its pod restarted a container and has been Ready again since 10:14:30.
    let rows = vec![
        with(row(0, NEW), json!({"readySince": "2026-09-28T10:00:00Z"})),
        row(1, OLD),
    ];
    let restarted = |ready_again: &str| {
        let mut f = facts(&rows);
        f[0].pods = vec![PodFact {
            ready_after_restart: Some(ready_again.parse().unwrap()),
            ..pod("c-0-default-0", None, true)
        }];
        f
    };
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}));
    // 30 s into the 60 s window (minReadySeconds 0, stuck-pod grace 60s): still a slot.
    let p = pass(restarted("2026-09-28T10:14:30Z"), &s, None, &[]);
    assert!(p.starts.is_empty());
    assert_eq!(
        p.hold.unwrap().reason,
        format!(
            "per-Component unavailability budget 1 exhausted (would become 2); Instance(s) 0 on revision {NEW} not serving"
        )
    );
    // Exactly at the window's end, and past it: the slot is free.
    for ready_again in ["2026-09-28T10:14:00Z", "2026-09-28T10:13:00Z"] {
        let p = pass(restarted(ready_again), &s, None, &[]);
        assert_eq!(p.starts, vec![(1, Mechanism::Recreate)], "{ready_again}");
    }
    // A restart before the Instance was Ready is part of its start, not a restart after Ready.
    let early = vec![
        with(row(0, NEW), json!({"readySince": "2026-09-28T10:14:50Z"})),
        row(1, OLD),
    ];
    let mut f = facts(&early);
    f[0].pods = vec![PodFact {
        ready_after_restart: Some("2026-09-28T10:14:30Z".parse().unwrap()),
        ..pod("c-0-default-0", None, true)
    }];
    assert_eq!(
        pass(f, &s, None, &[]).starts,
        vec![(1, Mechanism::Recreate)]
    );
    // The window is max(minReadySeconds, the stuck-pod grace in whole seconds up).
    let grace = SignedDuration::from_millis(60_500);
    assert_eq!(restart_window(0, grace), SignedDuration::from_secs(61));
    assert_eq!(restart_window(300, grace), SignedDuration::from_secs(300));
}

#[test]
fn retry_in_progress_waits_only_for_an_attempt_toward_its_revision() {
    let retrying: Vec<RetryBlock> =
        serde_json::from_value(json!([{"targetRevision": NEW, "state": "RetryInProgress",
        "attemptsStarted": 2, "reason": "CreateContainerConfigError"}]))
        .unwrap();
    let s = strategy(json!({"type": "RecreatePod"}));
    let updating_to = |revision: &str| {
        vec![
            with(
                row(0, OLD),
                json!({"phase": "Updating",
                       "operation": {"type": "Update", "step": "Drain", "targetRevision": revision}}),
            ),
            row(1, OLD),
        ]
    };
    // An attempt toward the blocked revision runs: the next one waits.
    let rows = updating_to(NEW);
    let p = pass(facts(&rows), &s, None, &retrying);
    assert_eq!(p.hold.unwrap().gate, HoldGate::RetryBlock);
    assert_eq!(p.waiting, vec![1]);
    // An update still running toward an older revision is no attempt of this one.
    let rows = updating_to("chat-engine-00000000");
    let p = pass(facts(&rows), &s, None, &retrying);
    assert_eq!(p.starts, vec![(1, Mechanism::Recreate)]);
    // A failed attempt keeping its claim is not in flight either.
    let rows = vec![
        with(
            row(0, OLD),
            json!({"phase": "Failed",
                   "operation": {"type": "Update", "step": "Drain", "targetRevision": NEW}}),
        ),
        row(1, OLD),
    ];
    let p = pass(facts(&rows), &s, None, &retrying);
    assert_eq!(p.starts, vec![(1, Mechanism::Recreate)]);
}

#[test]
fn the_retry_held_warning() {
    let block: RetryBlock =
        serde_json::from_value(json!({"targetRevision": "chat-engine-1f2a3b4c",
        "state": "Held", "attemptsStarted": 3, "reason": "ImagePullBackOff"}))
        .unwrap();
    assert_eq!(
        alfred::rollout::retry_held("prod/chat-engine", ComponentKind::Engine, &block),
        "InferenceReplica prod/chat-engine component=engine update to revision chat-engine-1f2a3b4c held after 3 failed attempt(s) (last failure: ImagePullBackOff); publish a corrected revision or raise lifecycle.updateRetry limits"
    );
}

/// An Instance scaled away leaves its pods terminating: the index has no row, yet a
/// Terminating pod holds a surge slot until its deletion grace ends; live ones do not count.
#[test]
fn a_terminating_pod_of_a_scaled_away_instance_holds_a_surge_slot() {
    let rows: Vec<InstanceStatus> = (0..2).map(|i| row(i, OLD)).collect();
    let s = strategy(json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 1}}));
    let input = |deletion: &str| PassInput {
        component: ComponentKind::Engine,
        target: NEW,
        desired: 2,
        pods_per_instance: 1,
        instances: facts(&rows),
        unlisted: vec![(
            2,
            vec![
                pod("chat-engine-2-default-0", Some(deletion), true),
                pod("chat-engine-2-default-1", None, true),
            ],
        )],
        retry_blocks: &[],
        strategy: &s,
        partition: None,
        change: Change::Other,
        now: now(),
        restart_window: window(),
    };
    let p = plan_pass(&input("2026-09-28T10:15:30Z")).unwrap();
    assert!(p.starts.is_empty());
    assert_eq!(p.prior, 1);
    assert_eq!(
        p.hold.unwrap().reason,
        "per-Component surge budget 1 exhausted (would become 2); Terminating pod chat-engine-2-default-0 still counts against the surge budget until its deletion grace elapses"
    );
    // Once its grace has elapsed it no longer counts, lingering or not.
    let p = plan_pass(&input("2026-09-28T10:14:00Z")).unwrap();
    assert_eq!(p.prior, 0);
    assert_eq!(p.starts, vec![(0, Mechanism::Surge { new_ordinal: 1 })]);
}
