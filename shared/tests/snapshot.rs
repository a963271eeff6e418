//! Every input shape loads; broken inputs name the document, object and field.

use alfred::snapshot::Snapshot;

const NODE_JSON: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},
  "status":{"allocatable":{"nvidia.com/gpu":"8"}}}"#;
const POD_JSON: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"ns"},
  "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}"#;

#[test]
fn json_list() {
    let text = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{NODE_JSON},{POD_JSON}]}}"#);
    let s = Snapshot::parse(&text).unwrap();
    assert_eq!((s.nodes.len(), s.pods.len()), (1, 1));
}

#[test]
fn typed_lists_single_objects_and_concatenated_json() {
    let text =
        format!(r#"{{"apiVersion":"v1","kind":"NodeList","items":[{NODE_JSON}]}} {POD_JSON}"#);
    let s = Snapshot::parse(&text).unwrap();
    assert_eq!((s.nodes.len(), s.pods.len()), (1, 1));
    let s = Snapshot::parse(POD_JSON).unwrap();
    assert_eq!(s.pods[0].metadata.name, "p1");
}

/// The API server's list responses leave `kind` and `apiVersion` out of the items.
#[test]
fn typed_lists_from_the_api_server_type_their_items() {
    let strip = |json: &str| json.replacen(r#""apiVersion":"v1","kind":"Node","#, "", 1);
    let items = strip(NODE_JSON);
    assert!(!items.contains("kind"));
    let text = format!(
        r#"{{"kind":"NodeList","apiVersion":"v1","metadata":{{"resourceVersion":"7"}},"items":[{items}]}}"#
    );
    let s = Snapshot::parse(&text).unwrap();
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.nodes[0].metadata.name, "n1");
    let isvcs = r#"{"kind":"InferenceServiceList","apiVersion":"ome.io/v1beta1","items":[
        {"metadata":{"name":"chat","namespace":"prod"},"spec":{"engine":{"minReplicas":1}}}]}"#;
    assert_eq!(Snapshot::parse(isvcs).unwrap().inference_services.len(), 1);
    // A plain List gives no type: its items must carry their own.
    let untyped = format!(r#"{{"kind":"List","apiVersion":"v1","items":[{items}]}}"#);
    assert!(
        Snapshot::parse(&untyped)
            .unwrap_err()
            .to_string()
            .contains("missing `kind`")
    );
}

#[test]
fn multi_document_yaml_with_mixed_kinds_and_lists() {
    let text = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {nvidia.com/gpu: 8}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: ome.io/v1beta1
  kind: InferenceService
  metadata: {name: chat, namespace: prod}
  spec:
    deploymentMode: OMENative
    engine: {minReplicas: 1}
- apiVersion: v1
  kind: Service
  metadata: {name: chat, namespace: prod}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d, namespace: prod}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: unrelated, namespace: prod}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: alfred-config, namespace: ome}
  data: {config.yaml: "schemaVersion: 1"}
---
apiVersion: ome.io/v1beta1
kind: InferenceReplica
metadata: {name: chat-engine, namespace: prod}
spec: {component: engine, replicas: 2}
"#;
    let s = Snapshot::parse(text).unwrap();
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.inference_services.len(), 1);
    assert_eq!(s.inference_replicas.len(), 1);
    assert_eq!(s.config_maps.len(), 1);
    assert!(s.config_map("alfred-config").is_some());
    assert_eq!(s.skipped.get("Service"), Some(&1));
    assert_eq!(s.skipped.get("Deployment"), Some(&1));
    assert_eq!(s.skipped.get("ConfigMap"), Some(&1));
    // An unquoted YAML number is a valid quantity, as kubectl reads it.
    let gpus = s.nodes[0].status.allocatable.get("nvidia.com/gpu").unwrap();
    assert_eq!(alfred::kubernetes::quantity::count(gpus), Some(8));
}

#[test]
fn same_kind_in_another_group_is_skipped() {
    let s =
        Snapshot::parse("apiVersion: other.io/v1\nkind: InferenceService\nmetadata: {name: x}\n")
            .unwrap();
    assert!(s.inference_services.is_empty());
    assert_eq!(s.skipped.get("InferenceService"), Some(&1));
}

#[test]
fn snapshot_round_trips_through_its_list_form() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/examples/demo-cluster.yaml"
    ))
    .unwrap();
    let s = Snapshot::parse(&text).unwrap();
    assert!(s.info.is_some());
    let json = serde_json::to_string(&s.to_list()).unwrap();
    let again = Snapshot::parse(&json).unwrap();
    assert_eq!(again.object_count(), s.object_count());
    assert_eq!(again.info, s.info);
    assert_eq!(again.nodes, s.nodes);
    assert_eq!(again.pods, s.pods);
    let json = |v: &dyn erased::Json| v.json();
    assert_eq!(json(&again.inference_services), json(&s.inference_services));
    assert_eq!(json(&again.inference_replicas), json(&s.inference_replicas));
}

#[test]
fn a_bad_field_names_document_object_and_path() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n\
                apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: ok}\n\
                - apiVersion: v1\n  kind: Pod\n  metadata: {name: p1, namespace: ns}\n  spec:\n    containers:\n    - name: c\n      resources: {limits: [1]}\n";
    let e = Snapshot::parse(text).unwrap_err();
    assert_eq!(e.document, 2);
    assert_eq!(e.item, Some(1));
    assert_eq!(e.object.as_deref(), Some("Pod ns/p1"));
    assert_eq!(
        e.path.as_deref(),
        Some("spec.containers[0].resources.limits")
    );
    let shown = e.to_string();
    assert!(
        shown.starts_with(
            "document 2, item 1 (Pod ns/p1), field spec.containers[0].resources.limits: "
        ),
        "{shown}"
    );
}

#[test]
fn a_bad_ome_field_names_its_path_and_costs_only_its_object() {
    let text = "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {name: chat, namespace: prod}\n\
                spec:\n  engine:\n    lifecycle:\n      updateStrategy: {type: Sideways}\n\
                ---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n";
    let s = Snapshot::parse(text).unwrap();
    assert_eq!(s.nodes.len(), 1, "the rest of the file is read");
    assert!(s.inference_services.is_empty());
    let u = &s.unreadable[0];
    assert_eq!(u.object(), "InferenceService prod/chat");
    assert_eq!(
        u.path.as_deref(),
        Some("spec.engine.lifecycle.updateStrategy.type")
    );
    assert!(u.message.contains("Sideways"), "{}", u.message);
    let notes = s.notes().join("\n");
    assert!(
        notes.contains("InferenceService prod/chat cannot be read (field spec.engine.lifecycle.updateStrategy.type: "),
        "{notes}"
    );
    // Written back as it was read, so a snapshot of this cluster holds it unchanged.
    let again = Snapshot::parse(&s.to_list().to_string()).unwrap();
    assert_eq!(again.unreadable[0].raw.get(), u.raw.get());
    assert_eq!(again.unreadable[0].path, u.path);
}

#[test]
fn malformed_documents_are_errors_not_panics() {
    let cases: &[(&str, &str)] = &[
        ("{\"kind\": \"Node\",", "not valid JSON"),
        ("kind: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "expected a Kubernetes object"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "missing `kind`"),
        ("\"a string\"", "expected a Kubernetes object"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [x]}\n",
            "not a Kubernetes object",
        ),
        (
            "apiVersion: v1\nkind: List\nitems: [3]\n",
            "not a Kubernetes object",
        ),
        (
            "apiVersion: alfred.ome.io/v1alpha1\nkind: SnapshotInfo\nmetadata: {name: s}\ncapturedAt: yesterday\n",
            "capturedAt",
        ),
    ];
    for (text, want) in cases {
        let e = Snapshot::parse(text).unwrap_err();
        assert!(e.to_string().contains(want), "{text:?}: {e}");
    }
}

/// A List big enough to be read on several threads: pods with a padding annotation, a Node and
/// an InferenceService in between, so each kind's order and the skipped count can be checked.
fn large_list(pods: usize, broken: &[usize]) -> String {
    let padding = "x".repeat(600);
    let items: Vec<serde_json::Value> = (0..pods)
        .map(|i| {
            if i == pods / 2 {
                return serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
            }
            let mut pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i:05}"), "namespace": "ns", "annotations": {"pad": padding}},
                "spec": {"containers": [{"name": "c"}]}});
            if broken.contains(&i) {
                pod["spec"]["containers"] = serde_json::json!("not a list");
            }
            pod
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

#[test]
fn nodes_and_pods_read_the_same_in_any_key_order() {
    // The one-pass reader needs apiVersion and kind first; other orders take the general path.
    let usual = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},
        "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2"}}}]},
        "status":{"phase":"Running"}}"#;
    let unusual = r#"{"status":{"phase":"Running"},"metadata":{"name":"p","labels":{"a":"1"}},
        "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"2"}}}]},
        "kind":"Pod","apiVersion":"v1"}"#;
    let (a, b) = (
        Snapshot::parse(usual).unwrap(),
        Snapshot::parse(unusual).unwrap(),
    );
    assert_eq!(a.pods, b.pods);
    assert_eq!(a.pods[0].spec.node_name, "n1");
    assert_eq!(a.pods[0].metadata.label("a"), Some("1"));
}

#[test]
fn large_lists_read_in_parallel_keep_item_order_and_report_the_first_error() {
    let text = large_list(8000, &[]);
    assert!(
        text.len() > 4 << 20,
        "the List must be large enough to be split"
    );
    let s = Snapshot::parse(&text).unwrap();
    assert_eq!(s.pods.len(), 7999);
    assert_eq!(s.skipped.get("Service"), Some(&1));
    let names: Vec<&str> = s.pods.iter().map(|p| p.metadata.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);

    // Two broken items far apart: the one with the lower index is reported.
    let e = Snapshot::parse(&large_list(8000, &[6100, 5200])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "document 1, item 5200 (Pod ns/p05200), field spec.containers: invalid type: string \"not a list\", expected a sequence"
    );
}

#[test]
fn empty_input_is_an_empty_snapshot() {
    assert_eq!(Snapshot::parse("").unwrap().object_count(), 0);
    assert_eq!(Snapshot::parse("---\n").unwrap().object_count(), 0);
}

proptest::proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let _ = Snapshot::parse(&text);
    }

    #[test]
    fn arbitrary_yaml_like_text_never_panics(text in "(apiVersion: v1\n|kind: (Pod|Node|List)\n|metadata: \\{name: [a-z]{1,3}\\}\n|items: \\[\\]\n|spec: [\\{\\}\\[\\]0-9a-z:, ]{0,20}\n|---\n){0,8}") {
        let _ = Snapshot::parse(&text);
    }
}

mod erased {
    /// Compares custom resources through their JSON (kube's generated types have no PartialEq).
    pub trait Json {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap()
        }
    }
}

#[test]
fn container_statuses_read_in_every_shape_the_api_writes() {
    let pod = |statuses: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p1","namespace":"ns"}},
            "spec":{{"containers":[{{"name":"c"}}]}},"status":{{"phase":"Running","containerStatuses":{statuses}}}}}"#
        )
    };
    let read = |statuses: &str| Snapshot::parse(&pod(statuses)).map(|s| s.pods[0].clone());
    let looping = read(
        r#"[{"name":"c","restartCount":4,"ready":false,"image":"i","imageID":"",
            "state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off"}},
            "lastState":{"terminated":{"exitCode":1}}}]"#,
    )
    .unwrap();
    assert!(looping.crash_looping() && looping.restarted());
    // Nulls and absent parts are "nothing to report", not errors.
    for quiet in [
        "null",
        "[]",
        r#"[{"name":"c"}]"#,
        r#"[{"name":"c","restartCount":null,"state":null}]"#,
        r#"[{"name":"c","state":{"waiting":null,"running":{"startedAt":"2026-09-28T10:00:00Z"}}}]"#,
        r#"[{"name":"c","state":{"waiting":{"reason":"ContainerCreating"}}}]"#,
    ] {
        let p = read(quiet).unwrap();
        assert!(!p.crash_looping() && !p.restarted(), "{quiet}");
    }
    // A wrong type is an error that names the field.
    let e = read(r#"[{"name":"c","restartCount":"four"}]"#).unwrap_err();
    assert_eq!(
        e.path.as_deref(),
        Some("status.containerStatuses[0].restartCount")
    );
}

/// Two captures concatenated: the same object twice is refused, naming both places.
#[test]
fn an_object_held_twice_is_refused_naming_both_places() {
    let list = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{NODE_JSON},{POD_JSON}]}}"#);
    let text = format!("{list}\n{POD_JSON}");
    let e = Snapshot::parse(&text).unwrap_err().to_string();
    assert_eq!(
        e,
        "document 2 (Pod ns/p1): the same object is also at document 1, item 1; a cluster holds \
         each object once, so the file joins two captures or repeats an object: keep one"
    );
    // YAML, and the same name in another namespace or of another kind is no repeat.
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: n1, namespace: a}\nspec: {containers: [{name: c}]}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: n1, namespace: b}\nspec: {containers: [{name: c}]}\n";
    assert_eq!(Snapshot::parse(yaml).unwrap().pods.len(), 2);
    let twice = format!("{yaml}---\napiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\n");
    let e = Snapshot::parse(&twice).unwrap_err().to_string();
    assert!(
        e.starts_with("document 4 (Node n1): the same object is also at document 1;"),
        "{e}"
    );
}

/// Runtime and model references are read whatever their `kind` says, and looked up as OME
/// does: the namespace's object first, then the cluster-wide one.
#[test]
fn references_are_looked_up_as_ome_does_whatever_their_kind() {
    let yaml = r#"
apiVersion: ome.io/v1beta1
kind: InferenceService
metadata: {name: chat, namespace: prod}
spec:
  model: {name: m, kind: clusterbasemodel, apiGroup: ome.io}
  runtime: {name: rt, kind: ClusterServingRuntime}
  engine: {minReplicas: 1}
---
apiVersion: ome.io/v1beta1
kind: ClusterServingRuntime
metadata: {name: rt}
spec: {engineConfig: {lifecycle: {updateStrategy: {type: RecreatePod}}}}
---
apiVersion: ome.io/v1beta1
kind: ServingRuntime
metadata: {name: rt, namespace: prod}
spec: {engineConfig: {lifecycle: {updateStrategy: {type: InPlaceOnly}}}}
"#;
    let s = Snapshot::parse(yaml).unwrap();
    let isvc = &s.inference_services[0];
    let (kind, name, _) = s.runtime("prod", isvc).unwrap();
    assert_eq!(
        (format!("{kind:?}"), name.as_str()),
        ("ServingRuntime".into(), "prod/rt")
    );
    let engine = s
        .runtime_component("prod", isvc, alfred::api::ComponentKind::Engine)
        .unwrap();
    let strategy = engine
        .lifecycle
        .as_ref()
        .unwrap()
        .update_strategy
        .as_ref()
        .unwrap();
    assert_eq!(
        strategy.type_,
        Some(alfred::api::UpdateStrategyType::InPlaceOnly)
    );
    // In another namespace the cluster-wide runtime serves.
    let (kind, name, _) = s.runtime("other", isvc).unwrap();
    assert_eq!(
        (format!("{kind:?}"), name.as_str()),
        ("ClusterServingRuntime".into(), "rt")
    );
}

/// A GPU count no machine has is an error naming the object and field, never a node that
/// silently leaves its pool, a rounded guess, or an overflow later.
#[test]
fn gpu_quantities_must_be_counts_a_machine_has() {
    for bad in ["eight", "0x10", "", "-8", "1.5", "1e30", "８"] {
        let node = format!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"n1"}},"status":{{"allocatable":{{"nvidia.com/gpu":"{bad}"}}}}}}"#
        );
        let e = Snapshot::parse(&node).unwrap_err().to_string();
        assert!(
            e.starts_with("document 1 (Node n1), field status.allocatable[\"nvidia.com/gpu\"]: "),
            "{bad:?}: {e}"
        );
        // The same in a List, read by the fast path.
        let list = format!(r#"{{"apiVersion":"v1","kind":"List","items":[{node}]}}"#);
        assert!(
            Snapshot::parse(&list)
                .unwrap_err()
                .to_string()
                .contains("(Node n1)")
        );
    }
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"ns"},
      "spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1.5"}}}]}}"#;
    let e = Snapshot::parse(pod).unwrap_err().to_string();
    assert!(
        e.contains("(Pod ns/p1), field spec.containers[0].resources.limits[\"nvidia.com/gpu\"]: \"1.5\" is not a whole number of GPUs"),
        "{e}"
    );
    // Memory-like GPU resources are not counts and stay as they are.
    let intel = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"},
      "status":{"allocatable":{"gpu.intel.com/i915":"8","gpu.intel.com/memory.max":"16Gi"}}}"#;
    assert_eq!(Snapshot::parse(intel).unwrap().nodes.len(), 1);
}

/// A List page's continue token is read in the same scan as its items (live reads page on
/// it); objects and last pages have none, and odd metadata is no error of the page's.
#[test]
fn a_list_page_gives_its_continue_token() {
    let node = r#"{"metadata":{"name":"n1"},"status":{"allocatable":{"nvidia.com/gpu":"8"}}}"#;
    let page = |metadata: &str| {
        format!(r#"{{"kind":"NodeList","apiVersion":"v1","metadata":{metadata},"items":[{node}]}}"#)
    };
    let mut s = Snapshot::default();
    let next = s
        .add_json_document(1, &page(r#"{"resourceVersion":"7","continue":"abc"}"#))
        .unwrap();
    assert_eq!(next.as_deref(), Some("abc"));
    assert_eq!(s.nodes.len(), 1);
    for last in [
        r#"{"resourceVersion":"7"}"#,
        r#"{"continue":""}"#,
        "[]",
        "null",
    ] {
        assert_eq!(
            Snapshot::default().add_json_document(1, &page(last)),
            Ok(None),
            "{last}"
        );
    }
    let object = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2","continue":"x"}}"#;
    assert_eq!(Snapshot::default().add_json_document(1, object), Ok(None));
}
