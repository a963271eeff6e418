//! The scheduler simulation, filter by filter, with the Kubernetes documentation's examples.

use alfred::config::Config;
use alfred::model::Context;
use alfred::simulate::{
    Ledger, NewPod, Profile, SchedulingReason, SimulationOutcome, Status, kubernetes_minor,
    node_scores, simulate, tolerates,
};
use alfred::snapshot::Snapshot;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use serde_json::{Value, json};

const NOW: &str = "2026-09-28T10:15:00Z";

fn node(name: &str, gpus: i64, extra: Value) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "H100"}},
        "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string(), "cpu": "64", "memory": "512Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}});
    merge(&mut n, extra);
    n
}

fn running(name: &str, on: &str, gpus: i64, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {
            "requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Running"}})
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

fn new_pod(name: &str, gpus: i64, extra: Value) -> NewPod {
    let mut spec = json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
    merge(&mut spec, extra);
    NewPod {
        name: name.into(),
        namespace: "team".into(),
        labels: Default::default(),
        spec: serde_json::from_value(spec).unwrap(),
    }
}

fn run(items: Vec<Value>, config: &str, pods: &[NewPod], exclude: &[&str]) -> SimulationOutcome {
    let snapshot =
        Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
            .unwrap();
    let config = Config::parse(&format!("schemaVersion: 1\n{config}")).unwrap();
    let ctx = Context::build(&snapshot, &config, NOW.parse().unwrap());
    let cluster = &ctx.cluster;
    let exclude: Vec<usize> = exclude
        .iter()
        .map(|n| cluster.node_index(n).unwrap())
        .collect();
    simulate(&ctx, &Ledger::new(cluster), pods, &exclude)
}

fn placed(o: &SimulationOutcome) -> Vec<&str> {
    o.placements.iter().map(|p| p.node.as_str()).collect()
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some(value.into()).filter(|v: &String| !v.is_empty()),
        effect: effect.into(),
        time_added: None,
    }
}

fn toleration(v: Value) -> Toleration {
    serde_json::from_value(v).unwrap()
}

#[test]
fn toleration_matching_as_documented() {
    let t = taint("key1", "value1", "NoSchedule");
    assert!(tolerates(
        &toleration(
            json!({"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"})
        ),
        &t
    ));
    assert!(tolerates(
        &toleration(json!({"key": "key1", "operator": "Exists", "effect": "NoSchedule"})),
        &t
    ));
    assert!(
        tolerates(&toleration(json!({"key": "key1", "value": "value1"})), &t),
        "Equal is the default; no effect matches all"
    );
    assert!(
        tolerates(&toleration(json!({"operator": "Exists"})), &t),
        "an empty key with Exists tolerates everything"
    );
    assert!(!tolerates(
        &toleration(json!({"key": "key1", "operator": "Equal", "value": "other"})),
        &t
    ));
    assert!(!tolerates(
        &toleration(json!({"key": "key1", "operator": "Exists", "effect": "NoExecute"})),
        &t
    ));
    assert!(!tolerates(
        &toleration(json!({"key": "key2", "operator": "Exists"})),
        &t
    ));
}

#[test]
fn taints_cordons_and_node_names_filter() {
    let items = vec![
        node(
            "tainted",
            8,
            json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}}),
        ),
        node("cordoned", 8, json!({"spec": {"unschedulable": true}})),
        node(
            "soft",
            8,
            json!({"spec": {"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]}}),
        ),
    ];
    // PreferNoSchedule only scores: the one node left takes the pod.
    let o = run(items.clone(), "", &[new_pod("p", 1, json!({}))], &[]);
    assert_eq!((o.status, placed(&o)), (Status::Feasible, vec!["soft"]));
    let o = run(items.clone(), "", &[new_pod("p", 1, json!({}))], &["soft"]);
    assert_eq!(o.status, Status::Infeasible);
    assert_eq!(
        o.message,
        "pod p: 0/3 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were excluded from the simulation, 1 node(s) were unschedulable."
    );
    // Tolerating the taint opens the node; tolerating the cordon opens the other.
    let o = run(
        items.clone(),
        "",
        &[new_pod(
            "p",
            1,
            json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
        )],
        &["soft"],
    );
    assert_eq!(placed(&o), vec!["tainted"]);
    let o = run(
        items,
        "",
        &[new_pod(
            "p",
            1,
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
        )],
        &["soft"],
    );
    assert_eq!(placed(&o), vec!["cordoned"]);
}

#[test]
fn node_selector_and_affinity() {
    let items = vec![
        node(
            "a",
            8,
            json!({"metadata": {"labels": {"zone": "z1", "disk": "ssd"}}}),
        ),
        node("b", 8, json!({"metadata": {"labels": {"zone": "z2"}}})),
    ];
    let o = run(
        items.clone(),
        "",
        &[new_pod("p", 1, json!({"nodeSelector": {"disk": "ssd"}}))],
        &[],
    );
    assert_eq!(placed(&o), vec!["a"]);
    let affinity = |op: &str, values: Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": op, "values": values}]}]}}}})
    };
    assert_eq!(
        placed(&run(
            items.clone(),
            "",
            &[new_pod("p", 1, affinity("In", json!(["z2"])))],
            &[]
        )),
        vec!["b"]
    );
    assert_eq!(
        placed(&run(
            items.clone(),
            "",
            &[new_pod("p", 1, affinity("NotIn", json!(["z1"])))],
            &[]
        )),
        vec!["b"]
    );
    let o = run(
        items.clone(),
        "",
        &[new_pod("p", 1, affinity("In", json!(["z3"])))],
        &[],
    );
    assert_eq!(
        o.message,
        "pod p: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    );
    // Preferred terms pick among feasible nodes.
    let preferred = json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}}]}}});
    assert_eq!(
        placed(&run(items, "", &[new_pod("p", 1, preferred)], &[])),
        vec!["b"]
    );
}

#[test]
fn resources_fit_with_the_old_pods_still_running() {
    let items = vec![
        node("a", 8, json!({})),
        node("b", 8, json!({"status": {"allocatable": {"pods": "1"}}})),
        running("old-1", "a", 6, "1"),
        running("old-2", "b", 0, "1"),
    ];
    let o = run(items.clone(), "", &[new_pod("p", 4, json!({}))], &[]);
    assert_eq!(o.status, Status::Infeasible);
    assert_eq!(
        o.message,
        "pod p: 0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 Too many pods."
    );
    // cpu counts from requests; init containers as Kubernetes sums them.
    let big_init =
        json!({"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "64"}}}]});
    let o = run(items.clone(), "", &[new_pod("p", 1, big_init)], &["b"]);
    assert_eq!(
        o.message,
        "pod p: 0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were excluded from the simulation."
    );
    assert_eq!(
        placed(&run(items, "", &[new_pod("p", 2, json!({}))], &["b"])),
        vec!["a"]
    );
}

#[test]
fn scoring_spreads_or_packs_by_profile() {
    let items = vec![
        node("empty", 8, json!({})),
        node("busy", 8, json!({})),
        running("old", "busy", 6, "32"),
    ];
    let o = run(items.clone(), "", &[new_pod("p", 1, json!({}))], &[]);
    assert_eq!(
        placed(&o),
        vec!["empty"],
        "LeastAllocated, kube-scheduler's default, spreads"
    );
    let packing = "scheduling: {profiles: {default-scheduler: {backend: kube-scheduler, schedulerVersion: v1.34, configurationID: binpack, scoringStrategy: MostAllocated}}}\n";
    let o = run(items, packing, &[new_pod("p", 1, json!({}))], &[]);
    assert_eq!(placed(&o), vec!["busy"], "MostAllocated packs");
    assert_eq!(o.profile.unwrap().configuration_id, "binpack");
}

#[test]
fn volumes_bound_to_a_node_pin_the_pod() {
    let items = vec![
        node("a", 8, json!({})),
        node("b", 8, json!({})),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "team"},
               "spec": {"volumeName": "pv-data", "accessModes": ["ReadWriteMany"]}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
               "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                   {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b"]}]}]}}}}),
    ];
    let claim = json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    assert_eq!(
        placed(&run(
            items.clone(),
            "",
            &[new_pod("p", 1, claim.clone())],
            &[]
        )),
        vec!["b"]
    );
    let o = run(items.clone(), "", &[new_pod("p", 1, claim)], &["b"]);
    assert_eq!(
        o.message,
        "pod p: 0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 node(s) were excluded from the simulation."
    );
    // A claim not bound yet (or missing) would be bound by the scheduler: not simulated.
    let mut unbound = items;
    unbound[2]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("volumeName");
    let claim = json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    let o = run(unbound, "", &[new_pod("p", 1, claim)], &[]);
    assert_eq!(
        (o.status, o.reason),
        (Status::Unsupported, SchedulingReason::InputUnsupported)
    );
    assert_eq!(
        o.message,
        "pod p uses claim data, which is not bound to a volume; binding claims (WaitForFirstConsumer) is not simulated"
    );
}

#[test]
fn gangs_are_all_or_nothing_and_need_a_gang_profile() {
    let items = vec![
        node("a", 8, json!({})),
        node("b", 8, json!({})),
        running("old", "b", 4, "1"),
    ];
    let gang = [
        new_pod("leader", 8, json!({})),
        new_pod("worker", 8, json!({})),
    ];
    let o = run(items.clone(), "", &gang, &[]);
    assert_eq!(
        (o.status, o.reason),
        (Status::Unsupported, SchedulingReason::GangUnsupported)
    );
    let gangs = "scheduling: {profiles: {default-scheduler: {backend: ome-scheduler, schedulerVersion: v1.35, configurationID: gang, gangScheduling: true}}}\n";
    // The leader takes a; the worker fits nowhere, so nothing is placed.
    let o = run(items.clone(), gangs, &gang, &[]);
    assert_eq!(
        (o.status, o.reason),
        (Status::Infeasible, SchedulingReason::NoFeasiblePlacement)
    );
    assert!(o.placements.is_empty());
    assert!(
        o.message.starts_with("pod worker: 0/2 nodes are available"),
        "{}",
        o.message
    );
    // A live cluster without the PodGroup CRD cannot schedule the gang.
    let read_live = |pod_groups: Value| {
        let mut items = items.clone();
        items.push(
            json!({"apiVersion": "alfred.ome.io/v1alpha1", "kind": "SnapshotInfo",
            "metadata": {"name": "snapshot"}, "capturedAt": NOW, "podGroupResources": pod_groups}),
        );
        items
    };
    let small = [
        new_pod("leader", 4, json!({})),
        new_pod("worker", 4, json!({})),
    ];
    let o = run(read_live(json!([])), gangs, &small, &[]);
    assert_eq!(
        (o.status, o.reason),
        (Status::Unavailable, SchedulingReason::SimulationUnavailable)
    );
    assert!(
        o.message.contains("the PodGroup CRD is not installed"),
        "{}",
        o.message
    );
    let o = run(
        read_live(json!(["podgroups.scheduling.x-k8s.io"])),
        gangs,
        &small,
        &[],
    );
    assert_eq!(o.status, Status::Feasible);
    let o = run(items, gangs, &small, &[]);
    assert_eq!(o.status, Status::Feasible);
    assert_eq!(o.placements.len(), 2);
}

#[test]
fn profile_selection_and_its_reasons() {
    let items = vec![node("a", 8, json!({}))];
    let named = |s: &str| new_pod("p", 1, json!({"schedulerName": s}));
    let o = run(items.clone(), "", &[named("ome-scheduler")], &[]);
    assert_eq!(
        (o.status, o.reason),
        (Status::Unavailable, SchedulingReason::ProfileNotConfigured)
    );
    assert!(
        o.message.contains("add scheduling.profiles.ome-scheduler"),
        "{}",
        o.message
    );
    let o = run(
        items.clone(),
        "",
        &[named("a-sched"), named("b-sched")],
        &[],
    );
    assert_eq!(o.reason, SchedulingReason::MixedSchedulers);
    let o = run(items.clone(), "", &[], &[]);
    assert_eq!(o.reason, SchedulingReason::NoTemplates);
    let o = run(
        items.clone(),
        "",
        &[new_pod("p", 1, json!({"nodeName": "a"}))],
        &[],
    );
    assert_eq!(o.reason, SchedulingReason::TemplateBound);
    // Configured profiles replace the built-in one, even for default-scheduler.
    let other = "scheduling: {profiles: {ome-scheduler: {backend: ome, schedulerVersion: v1.35, configurationID: c1}}}\n";
    assert_eq!(
        run(items.clone(), other, &[named("")], &[]).reason,
        SchedulingReason::ProfileNotConfigured
    );
    assert_eq!(
        run(items.clone(), other, &[named("ome-scheduler")], &[]).reason,
        SchedulingReason::PlacementFound
    );
    let many: Vec<NewPod> = (0..129)
        .map(|k| new_pod(&format!("p{k}"), 0, json!({})))
        .collect();
    let gangs = "scheduling: {profiles: {default-scheduler: {backend: b, schedulerVersion: v, configurationID: c, gangScheduling: true}}}\n";
    assert_eq!(
        run(items, gangs, &many, &[]).reason,
        SchedulingReason::RecommendationTooLarge
    );
}

/// A reference implementation of the same filters, written plainly from the Kubernetes
/// documentation, for the differential test.
mod reference {
    use serde_json::Value;

    fn s(v: &Value) -> &str {
        v.as_str().unwrap_or_default()
    }

    fn tolerated(tolerations: &[Value], key: &str, value: &str, effect: &str) -> bool {
        tolerations.iter().any(|t| {
            let effect_ok = s(&t["effect"]).is_empty() || s(&t["effect"]) == effect;
            let op = if s(&t["operator"]).is_empty() {
                "Equal"
            } else {
                s(&t["operator"])
            };
            let key_ok = match op {
                "Exists" => s(&t["key"]).is_empty() || s(&t["key"]) == key,
                _ => s(&t["key"]) == key && s(&t["value"]) == value,
            };
            effect_ok && key_ok
        })
    }

    fn expression_holds(e: &Value, labels: &Value) -> bool {
        let have = labels.get(s(&e["key"])).map(s);
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|v| v.iter().map(s).collect())
            .unwrap_or_default();
        match s(&e["operator"]) {
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => have.is_none_or(|h| !values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    }

    /// (node JSON, GPUs used) -> does the pod (spec JSON) fit?
    pub fn fits(node: &Value, used_gpus: i64, pod: &Value, pod_gpus: i64) -> bool {
        let labels = &node["metadata"]["labels"];
        let tolerations = pod["tolerations"].as_array().cloned().unwrap_or_default();
        if node["spec"]["unschedulable"] == true
            && !tolerated(
                &tolerations,
                "node.kubernetes.io/unschedulable",
                "",
                "NoSchedule",
            )
        {
            return false;
        }
        for t in node["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let effect = s(&t["effect"]);
            if (effect == "NoSchedule" || effect == "NoExecute")
                && !tolerated(&tolerations, s(&t["key"]), s(&t["value"]), effect)
            {
                return false;
            }
        }
        if let Some(selector) = pod["nodeSelector"].as_object()
            && selector.iter().any(|(k, v)| labels.get(k) != Some(v))
        {
            return false;
        }
        let terms = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        if let Some(terms) = terms.as_array() {
            let any = terms.iter().any(|t| {
                let exprs = t["matchExpressions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                !exprs.is_empty() && exprs.iter().all(|e| expression_holds(e, labels))
            });
            if !any {
                return false;
            }
        }
        let capacity: i64 = s(&node["status"]["allocatable"]["nvidia.com/gpu"])
            .parse()
            .unwrap();
        capacity - used_gpus >= pod_gpus
    }
}

fn pick<T: Clone>(rng: &mut alfred::solver::SeededRng, from: &[T]) -> T {
    from[(rng.next_u64() % from.len() as u64) as usize].clone()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// The simulator's feasible set equals the reference implementation's on random clusters.
    #[test]
    fn feasible_sets_match_a_reference_implementation(seed in 0u64..u64::MAX) {
        use alfred::simulate::feasible_nodes;
        let mut rng = alfred::solver::SeededRng(seed);
        let zones = ["z1", "z2", "z3"];
        let taints = [
            json!([]),
            json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
            json!([{"key": "gpu", "effect": "NoExecute"}]),
            json!([{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]),
        ];
        let mut items = Vec::new();
        let mut used = Vec::new();
        for k in 0..(3 + rng.next_u64() % 6) {
            let name = format!("n{k}");
            let mut labels = json!({"kubernetes.io/hostname": name, "nvidia.com/gpu.product": "H100", "zone": pick(&mut rng, &zones)});
            if rng.next_u64().is_multiple_of(2) {
                labels["disk"] = json!("ssd");
            }
            let n = node(&name, 8, json!({"metadata": {"labels": labels},
                "spec": {"taints": pick(&mut rng, &taints), "unschedulable": rng.next_u64().is_multiple_of(5)}}));
            let gpus = (rng.next_u64() % 9) as i64;
            if gpus > 0 {
                items.push(running(&format!("old-{k}"), &name, gpus, "1"));
            }
            used.push(gpus);
            items.push(n);
        }
        let tolerations = [
            json!([]),
            json!([{"key": "dedicated", "operator": "Exists"}]),
            json!([{"operator": "Exists"}]),
            json!([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
            json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
        ];
        let affinities = [
            json!(null),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}]}}}),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]},
                {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}, {"key": "disk", "operator": "Exists"}]}]}}}),
        ];
        let selectors = [json!({}), json!({"disk": "ssd"}), json!({"zone": "z3"})];
        let pod_gpus = (1 + rng.next_u64() % 8) as i64;
        let mut spec = json!({"tolerations": pick(&mut rng, &tolerations), "nodeSelector": pick(&mut rng, &selectors)});
        let affinity = pick(&mut rng, &affinities);
        if !affinity.is_null() {
            spec["affinity"] = affinity;
        }
        let pod = new_pod("p", pod_gpus, spec.clone());

        let snapshot = Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()).unwrap();
        let config = Config::default();
        let ctx = Context::build(&snapshot, &config, NOW.parse().unwrap());
        let cluster = &ctx.cluster;
        let got: Vec<String> = feasible_nodes(&ctx, &Ledger::new(cluster), &pod)
            .into_iter()
            .map(|n| cluster.nodes[n].name.to_string())
            .collect();
        let mut want = Vec::new();
        for item in items.iter().filter(|i| i["kind"] == "Node") {
            let name = item["metadata"]["name"].as_str().unwrap();
            let k: usize = name[1..].parse().unwrap();
            if reference::fits(item, used[k], &spec, pod_gpus) {
                want.push(name.to_string());
            }
        }
        want.sort();
        proptest::prop_assert_eq!(got, want);
    }
}

fn labelled(mut pod: NewPod, labels: Value) -> NewPod {
    pod.labels = serde_json::from_value(labels).unwrap();
    pod
}

fn running_labelled(name: &str, on: &str, labels: Value, spec: Value) -> Value {
    let mut p = running(name, on, 0, "1");
    p["metadata"]["labels"] = labels;
    merge(&mut p["spec"], spec);
    p
}

/// n1, n2 in zone A; n3, n4 in zone B; foo pods on n1, n2 and n3, and a pod of another app
/// on n4, so every node scores the same on resources.
fn zones() -> Vec<Value> {
    let mut items: Vec<Value> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| {
            let zone = if *n <= "n2" { "A" } else { "B" };
            node(n, 8, json!({"metadata": {"labels": {"zone": zone}}}))
        })
        .collect();
    for (k, on) in ["n1", "n2", "n3"].iter().enumerate() {
        items.push(running_labelled(
            &format!("foo-{k}"),
            on,
            json!({"app": "foo"}),
            json!({}),
        ));
    }
    items.push(running_labelled(
        "other",
        "n4",
        json!({"app": "other"}),
        json!({}),
    ));
    items
}

#[test]
fn topology_spread_skew_and_min_domains() {
    let spread = |min_domains: Option<i32>| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": {"matchLabels": {"app": "foo"}}});
        if let Some(m) = min_domains {
            c["minDomains"] = json!(m);
        }
        labelled(
            new_pod("p", 1, json!({"topologySpreadConstraints": [c]})),
            json!({"app": "foo"}),
        )
    };
    // Zone A would hold 3 against zone B's 1: skew 2. Zone B: 2 against 2.
    let o = run(zones(), "", &[spread(None)], &[]);
    assert_eq!(o.status, Status::Feasible);
    assert!(["n3", "n4"].contains(&placed(&o)[0]), "{o:?}");
    // With minDomains 3 and two zones, the global minimum counts as 0: zone B's skew is 2.
    let o = run(zones(), "", &[spread(Some(3))], &[]);
    assert_eq!(o.status, Status::Infeasible);
    assert_eq!(
        o.message,
        "pod p: 0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints."
    );
    // A node without the topology label cannot take the pod.
    let mut items = zones();
    items.push(node("bare", 8, json!({})));
    let o = run(items, "", &[spread(None)], &["n3", "n4"]);
    assert!(
        o.message.contains(
            "1 node(s) didn't match pod topology spread constraints (missing required label)"
        ),
        "{}",
        o.message
    );
    // ScheduleAnyway constraints never filter.
    let soft = new_pod(
        "p",
        1,
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "foo"}}}]}),
    );
    assert_eq!(
        run(
            zones(),
            "",
            &[labelled(soft, json!({"app": "foo"}))],
            &["n3", "n4"]
        )
        .status,
        Status::Feasible
    );
}

#[test]
fn topology_spread_match_label_keys_and_node_taints_policy() {
    let constraint = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": {"matchLabels": {"app": "foo"}}});
        merge(&mut c, extra);
        c
    };
    let pod = |c: Value, labels: Value| {
        labelled(
            new_pod("p", 1, json!({"topologySpreadConstraints": [c]})),
            labels,
        )
    };
    // foo-0 and foo-1 (zone A) run revision r1, foo-2 (zone B) r2.
    let mut items = zones();
    for item in items.iter_mut().filter(|i| i["kind"] == "Pod") {
        let rev = if item["metadata"]["name"] == "foo-2" {
            "r2"
        } else {
            "r1"
        };
        item["metadata"]["labels"]["rev"] = json!(rev);
    }
    let r2 = json!({"app": "foo", "rev": "r2"});
    // Counting every foo pod, zone A (2) is full against zone B (1).
    let o = run(
        items.clone(),
        "",
        &[pod(constraint(json!({})), r2.clone())],
        &[],
    );
    assert!(["n3", "n4"].contains(&placed(&o)[0]), "{o:?}");
    // Counting only pods of its own revision, zone B (1) is full against zone A (0).
    let keyed = pod(constraint(json!({"matchLabelKeys": ["rev"]})), r2);
    let o = run(items, "", &[keyed], &[]);
    assert!(["n1", "n2"].contains(&placed(&o)[0]), "{o:?}");

    // A tainted zone C without foo pods: counted, it keeps the minimum at 0 and nothing fits.
    let mut items = zones();
    items.push(node(
        "n5",
        8,
        json!({"metadata": {"labels": {"zone": "C"}},
        "spec": {"taints": [{"key": "reserved", "effect": "NoSchedule"}]}}),
    ));
    let foo = json!({"app": "foo"});
    let o = run(
        items.clone(),
        "",
        &[pod(constraint(json!({})), foo.clone())],
        &[],
    );
    assert_eq!(o.status, Status::Infeasible, "{o:?}");
    // With nodeTaintsPolicy Honor, the zone the pod cannot use does not count.
    let honor = pod(constraint(json!({"nodeTaintsPolicy": "Honor"})), foo);
    let o = run(items, "", &[honor], &[]);
    assert!(["n3", "n4"].contains(&placed(&o)[0]), "{o:?}");
}

#[test]
fn preferred_pod_affinity_and_soft_spread_decide_among_feasible_nodes() {
    let pod = |extra: Value| labelled(new_pod("p", 1, extra), json!({"app": "foo"}));
    let weighted = |kind: &str, app: &str, key: &str, weight: i32| {
        json!({"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}}]}}})
    };
    // Every node scores the same on resources: the lowest name wins.
    assert_eq!(
        placed(&run(zones(), "", &[pod(json!({}))], &[])),
        vec!["n1"]
    );
    // Away from the zone with more foo pods.
    let o = run(
        zones(),
        "",
        &[pod(weighted("podAntiAffinity", "foo", "zone", 50))],
        &[],
    );
    assert_eq!(placed(&o), vec!["n3"]);
    // Toward the node running a bar pod.
    let mut items = zones();
    items.push(running_labelled(
        "bar",
        "n4",
        json!({"app": "bar"}),
        json!({}),
    ));
    let o = run(
        items,
        "",
        &[pod(weighted(
            "podAffinity",
            "bar",
            "kubernetes.io/hostname",
            10,
        ))],
        &[],
    );
    assert_eq!(placed(&o), vec!["n4"]);
    // A ScheduleAnyway spread prefers the zone with fewer foo pods.
    let soft = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "foo"}}}]});
    assert_eq!(placed(&run(zones(), "", &[pod(soft)], &[])), vec!["n3"]);
}

#[test]
fn inter_pod_affinity_both_ways_and_within_a_gang() {
    let term = |app: &str, key: &str| json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key});
    let anti = |app: &str| json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(app, "kubernetes.io/hostname")]}}});
    // Its own anti-affinity keeps a foo pod off the nodes running foo pods.
    let o = run(
        zones(),
        "",
        &[labelled(
            new_pod("p", 1, anti("foo")),
            json!({"app": "foo"}),
        )],
        &[],
    );
    assert_eq!(placed(&o), vec!["n4"]);
    let o = run(
        zones(),
        "",
        &[labelled(
            new_pod("p", 1, anti("foo")),
            json!({"app": "foo"}),
        )],
        &["n4"],
    );
    assert_eq!(
        o.message,
        "pod p: 0/4 nodes are available: 1 node(s) were excluded from the simulation, 3 node(s) didn't match pod anti-affinity rules."
    );
    // A running pod's anti-affinity keeps the new pod off its node.
    let mut items = zones();
    items.push(running_labelled(
        "guard",
        "n4",
        json!({"app": "guard"}),
        anti("foo"),
    ));
    let o = run(
        items,
        "",
        &[labelled(new_pod("p", 1, json!({})), json!({"app": "foo"}))],
        &["n1", "n2", "n3"],
    );
    assert!(
        o.message
            .contains("1 node(s) didn't satisfy existing pods anti-affinity rules"),
        "{}",
        o.message
    );
    // Affinity: next to a db pod's zone; with none anywhere, only a pod matching itself may start.
    let mut items = zones();
    items.push(running_labelled(
        "db-0",
        "n4",
        json!({"app": "db"}),
        json!({}),
    ));
    let near_db = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db", "zone")]}}});
    let o = run(items, "", &[new_pod("p", 1, near_db.clone())], &["n4"]);
    assert_eq!(placed(&o), vec!["n3"]);
    let o = run(zones(), "", &[new_pod("p", 1, near_db.clone())], &[]);
    assert!(
        o.message
            .contains("4 node(s) didn't match pod affinity rules"),
        "{}",
        o.message
    );
    assert_eq!(
        run(
            zones(),
            "",
            &[labelled(new_pod("p", 1, near_db), json!({"app": "db"}))],
            &[]
        )
        .status,
        Status::Feasible
    );
    // Within a gang: two pods that repel each other take two nodes, or none.
    let gangs = "scheduling: {profiles: {default-scheduler: {backend: b, schedulerVersion: v, configurationID: c, gangScheduling: true}}}\n";
    let member = |name: &str| labelled(new_pod(name, 1, anti("pair")), json!({"app": "pair"}));
    let o = run(zones(), gangs, &[member("a"), member("b")], &["n1", "n2"]);
    let mut nodes = placed(&o);
    nodes.sort();
    assert_eq!(nodes, vec!["n3", "n4"]);
    let o = run(
        zones(),
        gangs,
        &[member("a"), member("b")],
        &["n1", "n2", "n3"],
    );
    assert_eq!(o.status, Status::Infeasible);
    assert!(o.placements.is_empty());
}

#[test]
fn running_pods_preferred_terms_draw_or_repel_the_new_pod() {
    let term = |weight: i32| json!([{"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "new"}}, "topologyKey": "zone"}}]);
    let new = || labelled(new_pod("p", 1, json!({})), json!({"app": "new"}));
    // A pod in zone B prefers "new" pods near it.
    let mut items = zones();
    items.push(running_labelled("host", "n4", json!({"app": "host"}),
        json!({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": term(50)}}})));
    assert_eq!(placed(&run(items, "", &[new()], &[])), vec!["n3"]);
    // A pod in zone A keeps them away, so zone B wins too (n1 would win on resources).
    let mut items = zones();
    items.push(running_labelled("loner", "n1", json!({"app": "loner"}),
        json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": term(50)}}})));
    assert_eq!(placed(&run(items, "", &[new()], &[])), vec!["n3"]);
}

/// PodTopologySpread counts the pods of the nodes the pod may use only (nodeAffinityPolicy
/// Honor, the default): a foo pod on a node of zone A the pod's selector rules out does not
/// count, as kube-scheduler's PreFilter skips that node.
#[test]
fn topology_spread_counts_only_the_nodes_the_pod_may_use() {
    // n1, n2 in A with foo on both; n3, n4 in B with foo on n3. n1 is not a gpu=h100 node.
    let mut items = zones();
    for n in &mut items[1..4] {
        n["metadata"]["labels"]["gpu"] = json!("h100");
    }
    let constraint = |policy: &str| {
        json!({"nodeSelector": {"gpu": "h100"}, "topologySpreadConstraints": [{"maxSkew": 1,
            "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "nodeAffinityPolicy": policy,
            "labelSelector": {"matchLabels": {"app": "foo"}}}]})
    };
    let pod = |policy: &str| labelled(new_pod("p", 1, constraint(policy)), json!({"app": "foo"}));
    // Honor: A counts n2's foo only (1), B counts 1: n2 in A gives skew 1, allowed.
    let o = run(items.clone(), "", &[pod("Honor")], &["n3", "n4"]);
    assert_eq!(placed(&o), vec!["n2"], "{o:?}");
    // Ignore: A counts 2 against B's 1: n2 gives skew 2.
    let o = run(items, "", &[pod("Ignore")], &["n3", "n4"]);
    assert_eq!(
        o.message,
        "pod p: 0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) didn't match pod topology spread constraints, 2 node(s) were excluded from the simulation."
    );
}

/// A running pod's required anti-affinity with `namespaceSelector: {}` looks in every
/// namespace; without a selector and namespaces, in its own only.
#[test]
fn anti_affinity_with_an_empty_namespace_selector_covers_every_namespace() {
    let guard = |selector: Option<Value>| {
        let mut term = json!({"labelSelector": {"matchLabels": {"app": "foo"}},
                              "topologyKey": "kubernetes.io/hostname"});
        if let Some(s) = selector {
            term["namespaceSelector"] = s;
        }
        let mut p = running_labelled(
            "guard",
            "n4",
            json!({"app": "guard"}),
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}),
        );
        p["metadata"]["namespace"] = json!("infra");
        p
    };
    let foo = || labelled(new_pod("p", 1, json!({})), json!({"app": "foo"}));
    let mut items = zones();
    items.push(guard(None));
    assert_eq!(
        placed(&run(items, "", &[foo()], &["n1", "n2", "n3"])),
        vec!["n4"]
    );
    let mut items = zones();
    items.push(guard(Some(json!({}))));
    let o = run(items, "", &[foo()], &["n1", "n2", "n3"]);
    assert_eq!(
        o.message,
        "pod p: 0/4 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, 3 node(s) were excluded from the simulation."
    );
}

/// NodeResourcesFit names every shortage of a node, each counted on its own, and the reasons
/// are sorted as text ("10 …" before "2 …"), as kube-scheduler's FitError writes them.
#[test]
fn every_shortage_is_counted_and_the_reasons_sorted_as_text() {
    let mut items: Vec<Value> = (0..12)
        .map(|i| {
            node(
                &format!("n{i:02}"),
                8,
                json!({"status": {"allocatable": {"pods": "1"}}}),
            )
        })
        .collect();
    for i in 0..10 {
        items.push(running(&format!("old-{i}"), &format!("n{i:02}"), 6, "1"));
    }
    let big = json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "200"},
        "limits": {"nvidia.com/gpu": "4"}}}]});
    let mut pod = new_pod("p", 4, json!({}));
    pod.spec = serde_json::from_value(big).unwrap();
    let o = run(items, "", &[pod], &[]);
    assert_eq!(
        o.message,
        "pod p: 0/12 nodes are available: 10 Insufficient nvidia.com/gpu, 10 Too many pods, 12 Insufficient cpu."
    );
}

#[test]
fn balanced_allocation_follows_the_profiles_kubernetes_version() {
    // 64 cpu, 512Gi: 32 cpu and 64Gi held (fractions 0.5, 0.125: balance 81); the pod's 8 cpu
    // and 128Gi make it 0.625, 0.375 (balance 87).
    let mut old = running("old", "n", 0, "32");
    old["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("64Gi");
    let items = vec![node("n", 8, json!({})), old];
    let snapshot =
        Snapshot::parse(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
            .unwrap();
    let pod = new_pod(
        "p",
        1,
        json!({"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "8", "memory": "128Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}),
    );
    let balanced = |version: &str| {
        let config = Config::parse("schemaVersion: 1\n").unwrap();
        let ctx = Context::build(&snapshot, &config, NOW.parse().unwrap());
        let profile = Profile {
            kubernetes_minor: kubernetes_minor(version),
            ..Profile::built_in()
        };
        let scores = node_scores(&ctx, &Ledger::new(&ctx.cluster), &pod, &profile);
        scores[0].plugins[5]
    };
    // Up to v1.36: the balance with the pod.
    assert_eq!(balanced("v1.34"), 87);
    assert_eq!(balanced("v1.35.4"), 87);
    // From v1.37: how much the pod improves it, 50 + (50 + 87 - 81) / 2.
    assert_eq!(balanced("v1.37.2"), 78);
    assert_eq!(balanced("a future one"), 78, "the newest known");
}
