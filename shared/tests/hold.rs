//! Holds (`holdMinutes`, beyond the reference): the node a plan action empties is kept for the
//! waiting pod it is for, the plan carries on with it pass after pass, and every release says
//! why; then the writes, judged on the objects as read again.

mod common;

use alfred::api::core::{Node, Pod};
use alfred::api::keys::{HELD_FOR, HELD_SINCE};
use alfred::decision::consolidate::holds::{HoldChange, HoldReason};
use alfred::execute::hold;
use common::{World, ago};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const FOLLOW: &str = "migration: {apiVersion: v1}\npolicies: {defragmentation: {followPlan: true, holdMinutes: 60}}\n";
/// Holds on with a budget of 6 moves an hour and the default 10-minute node cooldown: the budget
/// feeds one held node at a time (the default, 10 an hour, feeds two).
const ONE_AT_A_TIME: &str = "maxMigrationsPerHour: 6\nmigration: {apiVersion: v1}\npolicies: {defragmentation: {followPlan: true, holdMinutes: 60}}\n";

/// Node a holds three 1-GPU Instances, d one; b and c have 2 and 1 GPUs free next to an
/// Instance that never moves. Two 8-GPU pods wait. Emptying d takes one move, emptying a three
/// (the room for only one of them).
fn cluster() -> World {
    common::consolidation()
        .node("d", 8)
        .omenative("team", "y1", &[("d", 1)])
        .pending("team", "big-1", 8, 30, "big")
        .edit("Pod", "big-0", |p| {
            p["metadata"]["uid"] = json!("uid-big-0")
        })
        .edit("Pod", "big-1", |p| {
            p["metadata"]["uid"] = json!("uid-big-1")
        })
}

/// `node` held for pod `pod` (its toleration added), since `minutes` ago.
fn held(w: World, node: &str, pod: &str, minutes: i64) -> World {
    let uid = format!("uid-{pod}");
    w.edit("Node", node, |n| {
        n["spec"]["taints"] = json!([{"key": HELD_FOR, "value": uid, "effect": "NoSchedule"}]);
        n["metadata"]["annotations"] = json!({HELD_SINCE: ago(minutes)});
    })
    .edit("Pod", pod, |p| {
        p["spec"]["tolerations"] =
            json!([{"key": HELD_FOR, "operator": "Equal", "value": format!("uid-{pod}"), "effect": "NoSchedule"}]);
    })
}

fn holds(w: &World, config: &str) -> Vec<(String, String, bool, HoldReason)> {
    w.decide(config)
        .holds
        .into_iter()
        .map(|h| (h.node, h.pod, h.place, h.reason))
        .collect()
}

fn first_frees(w: &World, config: &str) -> String {
    w.with_ctx(config, |ctx| {
        let movable = alfred::decision::movable(ctx);
        let found = alfred::decision::consolidate::holds::kept_holds(ctx, true);
        let anchors: Vec<usize> = found.carried.iter().map(|k| k.0).collect();
        let plan = alfred::decision::consolidate::plan_from(ctx, &movable, None, &anchors);
        plan.steps[0].frees.clone()
    })
}

#[test]
fn a_hold_is_asked_for_the_node_a_plan_action_empties() {
    let w = cluster();
    let got = w.decide(FOLLOW).holds;
    assert_eq!(got.len(), 1, "{got:?}");
    let h = &got[0];
    assert_eq!(
        (h.node.as_str(), h.pod.as_str(), h.place, h.reason),
        ("d", "big-0", true, HoldReason::HoldPlaced),
        "the cheapest action empties d, for the first 8-GPU pod"
    );
    assert_eq!(h.pod_uid, "uid-big-0");
    // Off by default, and nothing without followPlan.
    let off = "migration: {apiVersion: v1}\npolicies: {defragmentation: {followPlan: true}}\n";
    assert!(holds(&w, off).is_empty());
    // A pod without a UID (a hand-written snapshot) cannot be named by a taint.
    let no_uid = w
        .clone()
        .edit("Pod", "big-0", |p| p["metadata"]["uid"] = json!(""));
    assert!(holds(&no_uid, FOLLOW).is_empty());
}

#[test]
fn the_plan_carries_on_with_the_held_node() {
    let w = cluster();
    assert_eq!(
        first_frees(&w, FOLLOW),
        "d",
        "unheld, the cheapest action first"
    );
    let on_a = held(w, "a", "big-0", 10);
    assert_eq!(
        first_frees(&on_a, FOLLOW),
        "a",
        "held, the node chosen before"
    );
    assert!(
        holds(&on_a, FOLLOW).is_empty(),
        "nothing to change while the plan carries on: {:?}",
        holds(&on_a, FOLLOW)
    );
}

#[test]
fn the_plan_carries_on_while_a_move_off_the_held_node_is_in_flight() {
    // x1 is leaving a: x2 and x3 are what is left to move, and the hold stands.
    let moving = held(cluster(), "a", "big-0", 10).edit("InferenceReplica", "x1-engine", |r| {
        r["status"]["migrations"] = json!([{"requestUUID": "9b2f4f4e-3c1d-4e59-9a57-0c6f8f1d2e3a",
            "trigger": "Manual", "sourceInstance": 0, "fromNode": "a", "phase": "SurgePending",
            "startedAt": ago(2), "deadline": "2099-01-01T00:00:00Z"}])
    });
    assert_eq!(first_frees(&moving, FOLLOW), "a");
    assert!(
        holds(&moving, FOLLOW).is_empty(),
        "{:?}",
        holds(&moving, FOLLOW)
    );
}

#[test]
fn every_release_says_why() {
    let on_a = || held(cluster(), "a", "big-0", 10);
    let release = |w: &World, config: &str| holds(w, config);
    let bound = on_a().edit("Pod", "big-0", |p| {
        p["spec"]["nodeName"] = json!("b");
        p["status"] = json!({"phase": "Running"});
    });
    assert_eq!(
        release(&bound, FOLLOW)[0],
        ("a".into(), "big-0".into(), false, HoldReason::HoldPodBound)
    );
    let mut gone = on_a();
    gone.items
        .retain(|o| o["metadata"]["name"] != "big-0" || o["kind"] != "Pod");
    assert_eq!(release(&gone, FOLLOW)[0].3, HoldReason::HoldPodGone);
    assert_eq!(
        release(&held(cluster(), "a", "big-0", 61), FOLLOW)[0].3,
        HoldReason::HoldExpired
    );
    let no_time = on_a().edit("Node", "a", |n| n["metadata"]["annotations"] = json!({}));
    assert_eq!(release(&no_time, FOLLOW)[0].3, HoldReason::HoldExpired);
    let off = "migration: {apiVersion: v1}\npolicies: {defragmentation: {followPlan: true}}\n";
    assert_eq!(release(&on_a(), off)[0].3, HoldReason::HoldDisabled);
    // Two holds for one pod: the older stands.
    let twice = held(on_a(), "d", "big-0", 5);
    assert_eq!(
        release(&twice, FOLLOW),
        vec![(
            "d".into(),
            "big-0".into(),
            false,
            HoldReason::HoldSuperseded
        )]
    );
    // Two holds, for which there is room for one: the nearer to empty (d, one move) stands.
    let two = held(on_a(), "d", "big-1", 5);
    assert_eq!(
        release(&two, FOLLOW),
        vec![("a".into(), "big-0".into(), false, HoldReason::HoldAbandoned)]
    );
    // a's Instances can no longer move: emptying a seats nobody.
    let stuck = on_a().annotate("x2", "alfred.ome.io/movable", "false");
    let got = release(&stuck, FOLLOW);
    assert_eq!(
        got[0],
        ("a".into(), "big-0".into(), false, HoldReason::HoldAbandoned),
        "{got:?}"
    );
}

#[test]
fn an_emptied_held_node_stands_until_the_pod_binds() {
    let mut emptied = held(cluster(), "a", "big-0", 20);
    emptied.items.retain(|o| {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        !(o["kind"] == "Pod" && name.starts_with('x'))
    });
    // Only the next action (emptying d) is asked for, for the other pod.
    assert_eq!(
        holds(&emptied, FOLLOW),
        vec![("d".into(), "big-1".into(), true, HoldReason::HoldPlaced)]
    );
}

/// `cluster()` with a emptied (its Instances gone) and held for big-0 since 20 minutes ago.
fn emptied_a() -> World {
    let mut w = held(cluster(), "a", "big-0", 20);
    w.items.retain(|o| {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        !(o["kind"] == "Pod" && name.starts_with('x'))
    });
    w
}

/// The writes when a goes to big-1, whose hold on d gives way first.
fn a_handed_to_big_1_for_d() -> Vec<(String, String, bool, HoldReason)> {
    vec![
        (
            "d".into(),
            "big-1".into(),
            false,
            HoldReason::HoldSuperseded,
        ),
        ("a".into(), "big-1".into(), true, HoldReason::HoldHandedOver),
    ]
}

#[test]
fn a_node_whose_pod_left_goes_to_the_next_waiting_pod_it_seats_now() {
    let mut gone = emptied_a();
    gone.items
        .retain(|o| o["metadata"]["name"] != "big-0" || o["kind"] != "Pod");
    let decision = gone.decide(FOLLOW);
    let handed = &decision.holds[0];
    assert_eq!(
        (handed.node.as_str(), handed.pod.as_str(), handed.place),
        ("a", "big-1", true),
        "{:?}",
        decision.holds
    );
    assert_eq!(handed.reason, HoldReason::HoldHandedOver);
    assert_eq!(handed.replaces.as_deref(), Some("uid-big-0"));
    assert!(
        handed
            .message
            .contains("which it seats now: the pod is gone"),
        "{}",
        handed.message
    );
    // Nothing else is held for big-1, and a is not held again.
    assert_eq!(decision.holds.len(), 1, "{:?}", decision.holds);

    // big-1 was held on d, which still needs a move: that hold gives way.
    let moved_over = held(gone, "d", "big-1", 5);
    assert_eq!(holds(&moved_over, FOLLOW), a_handed_to_big_1_for_d());
}

#[test]
fn two_nodes_are_never_handed_to_one_pod() {
    // a and d both emptied, each for a pod that has left; big-1 alone waits.
    let mut w = emptied_a().edit("Node", "d", |n| {
        n["spec"]["taints"] =
            json!([{"key": HELD_FOR, "value": "uid-left", "effect": "NoSchedule"}]);
        n["metadata"]["annotations"] = json!({HELD_SINCE: ago(30)});
    });
    w.items.retain(|o| {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        o["kind"] != "Pod" || (name != "big-0" && !name.starts_with("y1"))
    });
    let got = holds(&w, FOLLOW);
    let handed: Vec<_> = got.iter().filter(|h| h.2).collect();
    assert_eq!(handed.len(), 1, "{got:?}");
    assert_eq!(
        (handed[0].1.as_str(), handed[0].3),
        ("big-1", HoldReason::HoldHandedOver)
    );
    assert!(
        got.iter()
            .any(|h| !h.2 && h.3 == HoldReason::HoldPodGone && h.0 != handed[0].0),
        "{got:?}"
    );
}

#[test]
fn a_node_stays_held_while_the_pod_it_was_held_for_runs_there() {
    let running = emptied_a().edit("Pod", "big-0", |p| {
        p["spec"]["nodeName"] = json!("a");
        p["status"] = json!({"phase": "Running"});
    });
    // Nothing is written for a (full, so big-1 fits nowhere there now), and no other hold
    // is placed on it; emptying d for big-1 goes on as before.
    assert_eq!(
        holds(&running, FOLLOW),
        vec![("d".into(), "big-1".into(), true, HoldReason::HoldPlaced)]
    );
    // Once big-0 has finished, a goes to big-1 (which its hold on d does not seat yet): both
    // in one pass, the release first.
    let finished = held(
        running.edit("Pod", "big-0", |p| {
            p["status"]["phase"] = json!("Succeeded")
        }),
        "d",
        "big-1",
        5,
    );
    assert_eq!(holds(&finished, FOLLOW), a_handed_to_big_1_for_d());
    let handed = &finished.decide(FOLLOW).holds[1];
    assert!(
        handed
            .message
            .ends_with("which it seats now: the pod has finished"),
        "{}",
        handed.message
    );
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn node(value: Value) -> Node {
    serde_json::from_value(value).unwrap()
}

fn change(place: bool) -> HoldChange {
    HoldChange {
        node: "a".into(),
        pod: "big-0".into(),
        namespace: "team".into(),
        pod_uid: "uid-big-0".into(),
        place,
        replaces: None,
        reason: if place {
            HoldReason::HoldPlaced
        } else {
            HoldReason::HoldPodBound
        },
        message: String::new(),
    }
}

#[test]
fn the_toleration_is_added_to_the_waiting_pod_it_names() {
    let ours =
        json!({"key": HELD_FOR, "operator": "Equal", "value": "uid-big-0", "effect": "NoSchedule"});
    let other = json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
    let waiting = json!({"metadata": {"name": "big-0", "uid": "uid-big-0"},
        "spec": {"tolerations": [other]}});
    let patch = hold::toleration_patch(&change(true), Some(&pod(waiting.clone())), "7")
        .unwrap()
        .unwrap();
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"tolerations": [other, ours]}}),
        "the list keeps what was there (a pod may only gain tolerations)"
    );
    let mut tolerating = waiting.clone();
    tolerating["spec"]["tolerations"] = json!([ours]);
    assert_eq!(
        hold::toleration_patch(&change(true), Some(&pod(tolerating)), "7"),
        Ok(None)
    );
    let mut bound = waiting.clone();
    bound["spec"]["nodeName"] = json!("b");
    assert!(hold::toleration_patch(&change(true), Some(&pod(bound)), "7").is_err());
    let mut replaced = waiting;
    replaced["metadata"]["uid"] = json!("uid-other");
    assert!(hold::toleration_patch(&change(true), Some(&pod(replaced)), "7").is_err());
    assert!(hold::toleration_patch(&change(true), None, "7").is_err());
}

#[test]
fn the_taint_is_set_and_removed_beside_the_nodes_own() {
    let now: Timestamp = "2026-09-28T10:15:00Z".parse().unwrap();
    let own = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
    let ours = json!({"key": HELD_FOR, "value": "uid-big-0", "effect": "NoSchedule"});
    let plain = json!({"metadata": {"name": "a"}, "spec": {"taints": [own]}});
    let placed = hold::node_patch(&change(true), Some(&node(plain.clone())), "3", now)
        .unwrap()
        .unwrap();
    assert_eq!(
        placed,
        json!({"metadata": {"resourceVersion": "3", "annotations": {HELD_SINCE: "2026-09-28T10:15:00Z"}},
               "spec": {"taints": [own, ours]}})
    );
    let mut held = plain.clone();
    held["spec"]["taints"] = json!([own, ours]);
    assert_eq!(
        hold::node_patch(&change(true), Some(&node(held.clone())), "3", now),
        Ok(None),
        "placed already"
    );
    let released = hold::node_patch(&change(false), Some(&node(held)), "4", now)
        .unwrap()
        .unwrap();
    assert_eq!(
        released,
        json!({"metadata": {"resourceVersion": "4", "annotations": {HELD_SINCE: null}},
               "spec": {"taints": [own]}})
    );
    assert_eq!(
        hold::node_patch(&change(false), Some(&node(plain.clone())), "4", now),
        Ok(None),
        "nothing to release"
    );
    let mut other = plain.clone();
    other["spec"]["taints"] =
        json!([own, {"key": HELD_FOR, "value": "uid-big-1", "effect": "NoSchedule"}]);
    assert!(hold::node_patch(&change(true), Some(&node(other.clone())), "3", now).is_err());
    // Handed over from big-1: its taint is replaced in the same write.
    let handed = HoldChange {
        replaces: Some("uid-big-1".into()),
        ..change(true)
    };
    assert_eq!(
        hold::node_patch(&handed, Some(&node(other)), "5", now).unwrap(),
        Some(
            json!({"metadata": {"resourceVersion": "5", "annotations": {HELD_SINCE: "2026-09-28T10:15:00Z"}},
               "spec": {"taints": [own, ours]}})
        )
    );
    let mut cordoned = plain;
    cordoned["spec"]["unschedulable"] = json!(true);
    assert!(hold::node_patch(&change(true), Some(&node(cordoned)), "3", now).is_err());
    assert!(hold::node_patch(&change(true), None, "3", now).is_err());
}

#[test]
fn hold_minutes_is_checked_and_needs_follow_plan() {
    use alfred::config::Config;
    let parse = |policy: &str| {
        Config::parse(&format!(
            "schemaVersion: 1\npolicies: {{defragmentation: {{{policy}}}}}\n"
        ))
    };
    assert_eq!(
        parse("followPlan: true")
            .unwrap()
            .defragmentation
            .hold_minutes,
        0
    );
    let on = parse("followPlan: true, holdMinutes: 45").unwrap();
    assert_eq!((on.defragmentation.hold_minutes, on.unused.len()), (45, 0));
    let alone = parse("holdMinutes: 45").unwrap();
    assert_eq!(
        alone.unused[0].keys,
        vec!["policies.defragmentation.holdMinutes"],
        "reported as unused without followPlan"
    );
    let negative = parse("followPlan: true, holdMinutes: -5").unwrap_err();
    assert!(
        negative
            .to_string()
            .contains("policies.defragmentation.holdMinutes must be > 0"),
        "{negative}"
    );
}

#[test]
fn with_holds_on_the_plans_next_move_goes_first() {
    let rows = |w: &World, config: &str| -> Vec<(String, Option<&'static str>)> {
        w.with_ctx(config, alfred::decision::plan)
            .recommendations
            .iter()
            .filter(|r| r.row.workload != "team/pinned")
            .map(|r| {
                (
                    r.row.workload.clone(),
                    r.row.advisory_reason.map(|a| a.as_str()),
                )
            })
            .collect()
    };
    let follow_only =
        "migration: {apiVersion: v1}\npolicies: {defragmentation: {followPlan: true}}\n";
    let w = held(cluster(), "a", "big-0", 10);
    // Holds off: the plan chooses afresh (emptying d, y1 its one move).
    assert_eq!(rows(&w, follow_only)[0], ("team/y1".into(), None));
    // On: emptying a, the held node, goes first; y1's move, worth its cost alone (it empties
    // d), waits.
    assert_eq!(
        rows(&w, FOLLOW)[..2],
        [
            ("team/x1".into(), None),
            ("team/y1".into(), Some("PlanStepFirst"))
        ]
    );
}

#[test]
fn every_action_is_held_and_the_budget_feeds_as_many_as_cooldowns_allow() {
    // Node e like d: two actions of one move each (d, e) for two of the three 8-GPU pods.
    let w = cluster()
        .node("e", 8)
        .omenative("team", "z1", &[("e", 1)])
        .pending("team", "big-2", 8, 20, "big")
        .edit("Pod", "big-2", |p| {
            p["metadata"]["uid"] = json!("uid-big-2")
        });
    let placed: Vec<String> = holds(&w, FOLLOW)
        .into_iter()
        .filter(|h| h.2 && h.3 == HoldReason::HoldPlaced)
        .map(|h| h.0)
        .collect();
    assert_eq!(placed, ["d", "e"], "one for each action");
    assert_eq!(holds(&w, ONE_AT_A_TIME).len(), 2, "whatever the budget");
    let executable = |config: &str| -> Vec<String> {
        w.with_ctx(config, alfred::decision::plan)
            .recommendations
            .iter()
            .filter(|r| r.executable() && r.row.workload != "team/pinned")
            .map(|r| r.row.workload.clone())
            .collect()
    };
    // 10 an hour x 10-minute cooldown: the next moves of two actions may go; 6 an hour, one.
    assert_eq!(executable(FOLLOW), ["team/y1", "team/z1"]);
    assert_eq!(executable(ONE_AT_A_TIME).len(), 1);
    // One of two holds stands: the plan carries on with it and asks for the other.
    let one = held(w.clone(), "e", "big-2", 5);
    let got = holds(&one, FOLLOW);
    assert_eq!(
        got,
        vec![("d".into(), "big-0".into(), true, HoldReason::HoldPlaced)],
        "{got:?}"
    );
}
