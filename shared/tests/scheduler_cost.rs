//! What the scheduler costs (`simulate::packing`): the GPU pods of a spreading profile placed
//! again in creation order with GPU-packing scores, every other pod where it runs.

mod common;

use alfred::simulate::packing::{SchedulerCost, scheduler_cost};
use common::{World, ago};
use serde_json::json;

/// Gives the pod the creation time the API server would have set, `minutes` ago.
fn created(w: World, pod: &str, minutes: i64) -> World {
    w.edit("Pod", pod, |p| {
        p["metadata"]["creationTimestamp"] = json!(ago(minutes))
    })
}

/// Four 1-GPU Instances spread two and two over nodes a and b, as the default profile left
/// them; an 8-GPU pod created after them waits.
fn spread() -> World {
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .omenative("team", "small", &[("a", 1), ("b", 1), ("a", 1), ("b", 1)])
        .pending("team", "big-0", 8, 30, "big");
    (0..4).fold(w, |w, i| {
        created(w, &format!("small-engine-{i}-default-0"), 300 - i)
    })
}

const PACKING: &str = "scheduling: {profiles: {default-scheduler: {backend: kube-scheduler, schedulerVersion: v1.37, configurationID: gpu-packing, scoringStrategy: MostAllocated, scoringResources: [{name: cpu}, {name: memory}, {name: nvidia.com/gpu, weight: 3}]}}}\n";

fn cost(w: &World, config: &str) -> Option<SchedulerCost> {
    w.with_ctx(config, scheduler_cost)
}

#[test]
fn a_packing_profile_would_have_seated_the_pod_spreading_left_waiting() {
    let cost = cost(&spread(), "").expect("a GPU pod waits under the default (spreading) profile");
    assert_eq!(
        cost,
        SchedulerCost {
            schedulers: vec!["default-scheduler".into()],
            waiting_pods: 1,
            waiting_gpus: 8,
            packed_waiting_pods: 0,
            packed_waiting_gpus: 0,
            avoided_gpus: 8,
        }
    );
}

#[test]
fn nothing_is_said_when_the_profile_packs_gpus_already_or_nothing_waits() {
    assert_eq!(cost(&spread(), PACKING), None);
    let nothing_waits = World::new()
        .node("a", 8)
        .omenative("team", "small", &[("a", 1)]);
    assert_eq!(cost(&nothing_waits, ""), None);
}

#[test]
fn the_filters_hold_in_the_replay_so_packing_can_do_no_better() {
    // Each small Instance may only run on its own node: packing cannot put them together.
    let w = spread()
        .label("a", "rack", "a")
        .label("b", "rack", "b")
        .edit("Pod", "small-engine-1-default-0", |p| {
            p["spec"]["nodeSelector"] = json!({"rack": "b"})
        })
        .edit("Pod", "small-engine-3-default-0", |p| {
            p["spec"]["nodeSelector"] = json!({"rack": "b"})
        });
    let cost = cost(&w, "").unwrap();
    assert_eq!(
        (
            cost.waiting_gpus,
            cost.packed_waiting_gpus,
            cost.avoided_gpus
        ),
        (8, 8, 0)
    );
}

#[test]
fn pods_on_a_cordoned_node_stay_where_they_run() {
    // s0, created first, runs on cordoned a. Placed again, it would go to b before s1 (7 GPUs)
    // and s2, and then s2 would take c; staying, it leaves s1 and s2 to fill b, and c to the
    // 8-GPU pod.
    let w = World::new()
        .node("a", 8)
        .node("b", 8)
        .node("c", 8)
        .edit("Node", "a", |n| n["spec"]["unschedulable"] = json!(true))
        .omenative("team", "s", &[("a", 1), ("b", 7), ("c", 1)])
        .pending("team", "big-0", 8, 30, "big");
    let w = (0..3).fold(w, |w, i| {
        created(w, &format!("s-engine-{i}-default-0"), 300 - i)
    });
    let cost = cost(&w, "").unwrap();
    assert_eq!((cost.waiting_gpus, cost.packed_waiting_gpus), (8, 0));
}
