//! The admission rules with their exact messages (omenative-reference.md §1.4, alfred-reference.md §2).

use alfred::admission::{review_inference_service, review_replica, review_runtime};
use alfred::api::runtime::RuntimeFields;
use alfred::api::{InferenceReplica, InferenceService};
use serde_json::{Value, json};

fn isvc(spec: Value, annotations: Value) -> InferenceService {
    serde_json::from_value(json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "prod", "annotations": annotations}, "spec": spec}))
    .unwrap()
}

fn budgets(rolling: Value) -> InferenceService {
    isvc(
        json!({"deploymentMode": "OMENative", "engine": {"lifecycle": {"updateStrategy": {"rollingUpdate": rolling}}}}),
        json!({}),
    )
}

fn denied(i: &InferenceService) -> String {
    review_inference_service(i, None).denied.unwrap_or_default()
}

#[test]
fn budget_messages_and_check_order() {
    let p = "spec.engine.lifecycle.updateStrategy.rollingUpdate";
    assert_eq!(
        denied(&budgets(json!({"maxSurge": 0, "maxUnavailable": 0}))),
        format!(
            "{p}: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout (RollingUpdateZeroBudget)"
        )
    );
    assert_eq!(
        denied(&budgets(json!({"maxSurge": "0%", "maxUnavailable": 0}))),
        format!(
            "{p}: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout (RollingUpdateZeroBudget)"
        )
    );
    assert_eq!(
        denied(&budgets(json!({"maxUnavailable": -1}))),
        format!("{p}.maxUnavailable=-1 must be >= 0 (InvalidRollingUpdateInteger)")
    );
    assert_eq!(
        denied(&budgets(json!({"maxSurge": "abc"}))),
        format!(
            "{p}.maxSurge=\"abc\" must be an integer count or a percent string like \"25%\" (InvalidRollingUpdatePercent)"
        )
    );
    assert_eq!(
        denied(&budgets(json!({"maxSurge": "x%"}))),
        format!("{p}.maxSurge=\"x%\" has a malformed percent value (InvalidRollingUpdatePercent)")
    );
    assert_eq!(
        denied(&budgets(json!({"maxSurge": "120%"}))),
        format!(
            "{p}.maxSurge=\"120%\" percent must be between 0% and 100% (InvalidRollingUpdatePercent)"
        )
    );
    // maxUnavailable is checked before maxSurge, both before the zero rule.
    assert!(
        denied(&budgets(json!({"maxSurge": -1, "maxUnavailable": "bad"})))
            .contains("maxUnavailable=\"bad\"")
    );
    // A zero on one side is admitted; nil never counts as zero.
    for ok in [
        json!({"maxSurge": 0}),
        json!({"maxUnavailable": "0%", "maxSurge": 1}),
        json!({}),
    ] {
        assert_eq!(
            review_inference_service(&budgets(ok.clone()), None).denied,
            None,
            "{ok}"
        );
    }
    // Components in order: the engine's error wins over the router's.
    let both = isvc(
        json!({"deploymentMode": "OMENative",
        "engine": {"lifecycle": {"updateStrategy": {"rollingUpdate": {"maxSurge": -2}}}},
        "router": {"lifecycle": {"updateStrategy": {"rollingUpdate": {"maxSurge": -3}}}}}),
        json!({}),
    );
    assert!(denied(&both).starts_with("spec.engine."));
}

#[test]
fn runtimes_check_budgets_but_admit_zeros() {
    let fields: RuntimeFields = serde_json::from_value(json!({
        "engineConfig": {"lifecycle": {"updateStrategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}}})).unwrap();
    assert_eq!(review_runtime(&fields).denied, None);
    let fields: RuntimeFields = serde_json::from_value(json!({
        "decoderConfig": {"lifecycle": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "5"}}}}})).unwrap();
    assert_eq!(
        review_runtime(&fields).denied.unwrap(),
        "spec.decoderConfig.lifecycle.updateStrategy.rollingUpdate.maxUnavailable=\"5\" must be an integer count or a percent string like \"25%\" (InvalidRollingUpdatePercent)"
    );
}

#[test]
fn replicas_check_their_own_strategy() {
    let ir: InferenceReplica = serde_json::from_value(json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
        "metadata": {"name": "chat-engine", "namespace": "prod"},
        "spec": {"component": "engine", "lifecycle": {"updateStrategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}}})).unwrap();
    assert_eq!(
        review_replica(ir.spec.lifecycle.as_ref()).denied.unwrap(),
        "spec.lifecycle.updateStrategy.rollingUpdate: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout (RollingUpdateZeroBudget)"
    );
}

#[test]
fn engine_and_decoder_modes_must_match() {
    let leader_engine = isvc(
        json!({"engine": {"leader": {}, "worker": {"size": 1}}, "decoder": {}}),
        json!({}),
    );
    assert_eq!(
        denied(&leader_engine),
        "InvalidDeploymentModeCombination: engine deploymentMode=\"OMENative\" does not match decoder deploymentMode=\"\"; when either is OMENative, both must use the same value"
    );
    let both = isvc(
        json!({"deploymentMode": "OMENative", "engine": {}, "decoder": {}}),
        json!({}),
    );
    assert_eq!(review_inference_service(&both, None).denied, None);
    let raw = isvc(json!({"engine": {}, "decoder": {}}), json!({}));
    assert_eq!(
        review_inference_service(&raw, None).denied,
        None,
        "neither is OMENative"
    );
    let mixed = isvc(
        json!({"deploymentMode": "OMENative", "engine": {},
        "decoder": {"annotations": {"ome.io/deploymentMode": "RawDeployment"}}}),
        json!({}),
    );
    assert!(denied(&mixed).contains("decoder deploymentMode=\"RawDeployment\""));
}

#[test]
fn deployment_strategy_on_omenative_is_admitted_with_a_warning() {
    let i = isvc(
        json!({"deploymentMode": "OMENative", "engine": {"deploymentStrategy": {"type": "Recreate"}}}),
        json!({}),
    );
    let v = review_inference_service(&i, None);
    assert_eq!(v.denied, None);
    assert_eq!(v.warnings, vec![
        "engine.deploymentStrategy is set but deploymentMode is \"OMENative\"; deploymentStrategy applies only to RawDeployment and is ignored here — use engine.lifecycle.updateStrategy.rollingUpdate for rollout pacing".to_string()]);
    let raw = isvc(
        json!({"engine": {"deploymentStrategy": {"type": "Recreate"}}}),
        json!({}),
    );
    assert!(review_inference_service(&raw, None).warnings.is_empty());
}

#[test]
fn alfred_annotations_are_strict() {
    let cases = [
        ("alfred.ome.io/movable", "yes", "use true or false"),
        ("alfred.ome.io/priority", "2", "use a number from 0 to 1"),
        (
            "alfred.ome.io/cooldown-minutes",
            "10m",
            "use a whole number of minutes",
        ),
        (
            "alfred.ome.io/spot-policy",
            "evict",
            "use avoid, migrate or ignore",
        ),
        ("alfred.ome.io/tenant-group", "team a", "use a label value"),
        (
            "ome.io/revision-history-limit",
            "0",
            "use a positive whole number",
        ),
    ];
    for (key, value, accepted) in cases {
        let e = denied(&isvc(json!({"engine": {}}), json!({key: value})));
        assert!(
            e.starts_with(&format!("annotation {key}={value:?} is invalid: ")),
            "{e}"
        );
        assert!(e.contains(accepted), "{e}");
    }
    let fine = isvc(
        json!({"engine": {}}),
        json!({"alfred.ome.io/movable": "true", "alfred.ome.io/priority": "0.9",
        "alfred.ome.io/cooldown-minutes": "0", "alfred.ome.io/spot-policy": "avoid", "alfred.ome.io/tenant-group": "team-a",
        "alfred.ome.io/opt-out-reason": "anything", "ome.io/revision-history-limit": "5"}),
    );
    assert_eq!(review_inference_service(&fine, None).denied, None);
}

#[test]
fn migration_requests_are_checked_when_added_or_changed() {
    let key = "ome.io/migration-request-v1-6f1c2a4e-1b2c-4d5e-8f90-1234567890ab";
    let spec = json!({"deploymentMode": "OMENative", "engine": {}});
    let good = r#"{"schemaVersion":"v1","component":"engine","instance":0,"from_node":"gpu-a","requested_by":"kubectl-alfred"}"#;
    assert_eq!(
        review_inference_service(&isvc(spec.clone(), json!({key: good})), None).denied,
        None
    );
    let cases = [
        (
            r#"{"schemaVersion":"v2","component":"engine","instance":0}"#,
            "UnsupportedSchemaVersion: \"v2\"",
        ),
        (
            r#"{"schemaVersion":"v1","component":"decoder","instance":0}"#,
            "component \"decoder\" is not a component of this InferenceService",
        ),
        (
            r#"{"schemaVersion":"v1","component":"engine","instance":-1}"#,
            "instance must be >= 0, got -1",
        ),
    ];
    for (payload, want) in cases {
        let e = denied(&isvc(spec.clone(), json!({key: payload})));
        assert!(
            e.starts_with("migration request 6f1c2a4e-1b2c-4d5e-8f90-1234567890ab: "),
            "{e}"
        );
        assert!(e.contains(want), "{e}");
    }
    // A payload that is no request says which annotation, where it goes wrong, in words, and
    // the shape a request has.
    let shape = r#"; a request is compact JSON such as {"schemaVersion":"v1","component":"engine","instance":3,"from_node":"node-a"}"#;
    for (payload, why) in [
        (
            "not json",
            r#"it is not JSON: a JSON object was expected at character 2 of "not json""#,
        ),
        ("1234", "it is JSON but integer `1234`, not an object"),
        (
            r#"{"schemaVersion":"v1","component":"engine","instance":"3"}"#,
            r#"field instance must be a whole number, not string "3""#,
        ),
        (
            r#"{"schemaVersion":"v1","component":"engine""#,
            "the JSON ends before the request is complete",
        ),
        (
            r#"{"schemaVersion":"v1","instance":0}"#,
            "field component is missing",
        ),
        (
            r#"{"schemaVersion":"v1","component":"engine","instance":0} x"#,
            r#"it is not JSON: something follows the request object at character 58 of "{\"schemaVersion\":\"v1\",\"component\":\"engine\",\"instance\":0} x""#,
        ),
    ] {
        assert_eq!(
            denied(&isvc(spec.clone(), json!({key: payload}))),
            format!(
                "migration request 6f1c2a4e-1b2c-4d5e-8f90-1234567890ab: annotation {key} is not a migration request: {why}{shape}"
            )
        );
    }
    assert_eq!(
        denied(&isvc(
            spec.clone(),
            json!({"ome.io/migration-request-v1-": good})
        )),
        "migration request ome.io/migration-request-v1-: annotation key carries no request UUID"
    );
    // A bad request already stored passes an unrelated update; its removal always passes.
    let stored = isvc(spec.clone(), json!({key: "not json"}));
    let relabelled = isvc(spec.clone(), json!({key: "not json", "team": "a"}));
    assert_eq!(
        review_inference_service(&relabelled, stored.metadata.annotations.as_ref()).denied,
        None
    );
    let removed = isvc(spec, json!({}));
    assert_eq!(
        review_inference_service(&removed, stored.metadata.annotations.as_ref()).denied,
        None
    );
}

mod defaulting {
    use alfred::admission::{fill_patch, inference_service_defaults, replica_defaults};
    use alfred::api::lifecycle::LifecycleSpec;
    use alfred::api::runtime::RuntimeFields;
    use alfred::api::{InferenceReplica, InferenceService};
    use alfred::rollout::strategy::OperatorDefaults;
    use serde_json::{Value, json};

    fn replica(lifecycle: Option<Value>) -> Value {
        let mut spec =
            json!({"component": "engine", "replicas": 2, "runners": [{"name": "default"}]});
        if let Some(l) = lifecycle {
            spec["lifecycle"] = l;
        }
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
               "metadata": {"name": "chat-engine", "namespace": "prod"}, "spec": spec})
    }

    /// Applies the defaulting patch, checks a second pass patches nothing, and returns the
    /// resulting strategy.
    fn defaulted(
        object: Value,
        runtime: Option<&LifecycleSpec>,
        defaults: &OperatorDefaults,
    ) -> (usize, Value) {
        let typed: InferenceReplica = serde_json::from_value(object.clone()).unwrap();
        let read = |t: &InferenceReplica| (t.spec.component, t.spec.lifecycle.clone());
        let (component, lifecycle) = read(&typed);
        let ops = replica_defaults(&object, component, lifecycle.as_ref(), runtime, defaults);
        let n = ops.len();
        let mut patched = object;
        json_patch::patch(&mut patched, &ops).unwrap();
        let typed: InferenceReplica = serde_json::from_value(patched.clone()).unwrap();
        let (component, lifecycle) = read(&typed);
        assert!(
            replica_defaults(&patched, component, lifecycle.as_ref(), runtime, defaults).is_empty(),
            "not idempotent: {patched}"
        );
        (n, patched["spec"]["lifecycle"]["updateStrategy"].clone())
    }

    #[test]
    fn the_spec_example_on_the_replica() {
        let (n, s) = defaulted(
            replica(Some(
                json!({"updateStrategy": {"type": "InPlaceIfPossible"}}),
            )),
            None,
            &OperatorDefaults::chart(),
        );
        assert_eq!(n, 1);
        assert_eq!(
            s.to_string(),
            r#"{"rollingUpdate":{"maxUnavailable":"25%"},"type":"InPlaceIfPossible"}"#
        );
    }

    #[test]
    fn every_combination_fills_only_what_is_missing() {
        let runtime: LifecycleSpec = serde_json::from_value(json!({"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}})).unwrap();
        let own = [
            None,
            Some(json!({})),
            Some(json!({"updateStrategy": {}})),
            Some(json!({"updateStrategy": {"type": "SurgeThenDrain"}})),
            Some(json!({"updateStrategy": {"rollingUpdate": {"partition": 1}}})),
            Some(
                json!({"updateStrategy": {"type": "InPlaceOnly", "rollingUpdate": {"maxUnavailable": 1}, "futureField": true}}),
            ),
        ];
        for lifecycle in own {
            for runtime in [None, Some(&runtime)] {
                for defaults in [OperatorDefaults::default(), OperatorDefaults::chart()] {
                    let (_, s) = defaulted(replica(lifecycle.clone()), runtime, &defaults);
                    // A type is written only when someone set one: never OME's fallback.
                    let set = |l: Option<&Value>| {
                        l.and_then(|l| l.get("updateStrategy"))
                            .and_then(|u| u.get("type"))
                            .is_some()
                    };
                    let typed = set(lifecycle.as_ref())
                        || runtime.is_some()
                        || defaults != OperatorDefaults::default();
                    assert_eq!(
                        s["type"].is_string(),
                        typed,
                        "{lifecycle:?} {runtime:?}: {s}"
                    );
                    if let Some(own) = lifecycle.as_ref().and_then(|l| l.get("updateStrategy")) {
                        // What the object set is never changed, unknown fields included.
                        for (k, v) in own.as_object().unwrap() {
                            if !v.is_object() {
                                assert_eq!(&s[k], v);
                            }
                        }
                    }
                }
            }
        }
        let (_, s) = defaulted(replica(None), Some(&runtime), &OperatorDefaults::chart());
        assert_eq!(
            s,
            json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}})
        );
        // No type anywhere: nothing is written (readers resolve SurgeThenDrain themselves).
        let (n, s) = defaulted(replica(None), None, &OperatorDefaults::default());
        assert_eq!((n, s), (0, Value::Null));
    }

    /// Only the operator defaults that apply are written: an empty entry writes nothing, a
    /// budget alone writes the budget and no type.
    #[test]
    fn operator_defaults_without_a_type_write_no_type() {
        use alfred::api::component::ComponentKind;
        use alfred::rollout::strategy::ComponentDefaults;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let with = |entry: ComponentDefaults| OperatorDefaults {
            update_strategy: [(ComponentKind::Engine, entry)].into_iter().collect(),
            ..OperatorDefaults::default()
        };
        let (n, s) = defaulted(replica(None), None, &with(ComponentDefaults::default()));
        assert_eq!((n, s), (0, Value::Null));
        let budget = ComponentDefaults {
            max_surge: Some(IntOrString::Int(2)),
            ..ComponentDefaults::default()
        };
        let (_, s) = defaulted(replica(None), None, &with(budget));
        assert_eq!(s, json!({"rollingUpdate": {"maxSurge": 2}}));
    }

    #[test]
    fn inference_services_default_omenative_components_only() {
        let object = json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "prod"},
            "spec": {"engine": {"annotations": {"ome.io/deploymentMode": "OMENative"},
                                "lifecycle": {"updateStrategy": {"type": "RecreatePod"}}},
                     "router": {}}});
        let typed: InferenceService = serde_json::from_value(object.clone()).unwrap();
        let runtime: RuntimeFields = serde_json::from_value(json!({})).unwrap();
        let ops =
            inference_service_defaults(&object, &typed, Some(&runtime), &OperatorDefaults::chart());
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            json!([{"op": "add",
            "path": "/spec/engine/lifecycle/updateStrategy/rollingUpdate", "value": {"maxUnavailable": "25%"}}])
        );
    }

    #[test]
    fn pointers_are_escaped() {
        let object = json!({"metadata": {}});
        let ops = fill_patch(
            &object,
            &["metadata", "annotations"],
            &json!({"ome.io/a~b": "x"}),
        );
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"ome.io/a~b": "x"}}])
        );
        let object = json!({"metadata": {"annotations": {}}});
        let ops = fill_patch(
            &object,
            &["metadata", "annotations"],
            &json!({"ome.io/a~b": "x"}),
        );
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            json!([{"op": "add", "path": "/metadata/annotations/ome.io~1a~0b", "value": "x"}])
        );
    }
}
