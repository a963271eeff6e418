//! The review handler on AdmissionReview fixtures, as the API server sends them.

use alfred::rollout::strategy::OperatorDefaults;
use alfred_webhook::review::{Context, Found, Hook, Lookup, LookupError, ReviewOutcome, review};
use serde_json::{Value, json};

/// The runtime a test's lookup finds.
#[derive(Clone, Copy)]
enum Runtime {
    /// No runtime (the InferenceService names none).
    Absent,
    /// A runtime whose engine is RecreatePod with maxUnavailable 2.
    Recreate2,
    /// The API could not be read.
    Unreadable,
}

fn found(runtime: Runtime, lookup: &Lookup) -> Found {
    match runtime {
        Runtime::Absent => Ok(None),
        Runtime::Recreate2 => {
            if let Lookup::Replica { namespace, isvc } = lookup {
                assert_eq!((namespace.as_str(), isvc.as_str()), ("prod", "chat"));
            }
            Ok(Some(serde_json::from_value(json!({"engineConfig": {"lifecycle": {
                "updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}}}}))
            .unwrap()))
        }
        Runtime::Unreadable => Err(LookupError::Api {
            object: "ServingRuntime prod/vllm".into(),
            message: "timed out".into(),
        }),
    }
}

fn run_with(fixture: &str, hook: Hook, runtime: Runtime, ctx: &Context<'_>) -> Value {
    let path = format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read(&path).unwrap();
    let out = review(&body, hook, ctx, |l| found(runtime, l)).unwrap();
    let answer: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    let request: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["response"]["uid"], request["request"]["uid"],
        "the answer carries the request's uid"
    );
    let expected = match (
        answer["response"]["allowed"].as_bool(),
        answer["response"].get("patch"),
    ) {
        (Some(false), _) => ReviewOutcome::Denied,
        (_, Some(_)) => ReviewOutcome::Patched,
        _ => ReviewOutcome::Allowed,
    };
    assert_eq!(out.outcome, expected);
    answer["response"].clone()
}

fn run(fixture: &str, hook: Hook, runtime: Runtime) -> Value {
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: false,
    };
    run_with(fixture, hook, runtime, &ctx)
}

/// The patch as the API server reads it: a base64 string of JSON Patch.
fn patch(response: &Value) -> Value {
    use base64::Engine as _;
    let text = response["patch"]
        .as_str()
        .expect("the patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_zero_budget_is_refused_with_the_reference_message() {
    let r = run(
        "isvc-create-zero-budget.json",
        Hook::Validate,
        Runtime::Absent,
    );
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "spec.engine.lifecycle.updateStrategy.rollingUpdate: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout (RollingUpdateZeroBudget)"
    );
}

#[test]
fn deployment_strategy_is_admitted_with_a_warning() {
    let r = run(
        "isvc-create-deployment-strategy.json",
        Hook::Validate,
        Runtime::Absent,
    );
    assert_eq!(r["allowed"], true);
    assert_eq!(
        r["warnings"][0]
            .as_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap(),
        "engine.deploymentStrategy is set but deploymentMode is \"OMENative\""
    );
}

#[test]
fn an_invalid_cooldown_is_refused_on_update() {
    let r = run(
        "isvc-update-bad-cooldown.json",
        Hook::Validate,
        Runtime::Absent,
    );
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("annotation alfred.ome.io/cooldown-minutes=\"30m\" is invalid")
    );
}

#[test]
fn replicas_get_their_defaults_as_a_patch() {
    let r = run("irep-create-type-only.json", Hook::Mutate, Runtime::Absent);
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": "25%"}}])
    );
    // The runtime's budget wins over the operator default.
    let r = run(
        "irep-create-type-only.json",
        Hook::Mutate,
        Runtime::Recreate2,
    );
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": 2}}])
    );
    // Validation of the same object passes.
    assert_eq!(
        run(
            "irep-create-type-only.json",
            Hook::Validate,
            Runtime::Absent
        )["allowed"],
        true
    );
}

#[test]
fn runtimes_may_carry_zeros() {
    assert_eq!(
        run("runtime-zero-budgets.json", Hook::Validate, Runtime::Absent)["allowed"],
        true
    );
}

#[test]
fn other_kinds_are_refused_and_deletes_pass() {
    let r = run("configmap-create.json", Hook::Validate, Runtime::Absent);
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("alfred-webhook does not review ConfigMap")
    );
    assert_eq!(
        run("isvc-delete.json", Hook::Validate, Runtime::Absent)["allowed"],
        true
    );
}

#[test]
fn unreadable_reviews_are_errors_not_panics() {
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: false,
    };
    let review = |body: &[u8], hook| {
        review(body, hook, &ctx, |_| Ok(None))
            .map(|a| a.body)
            .map_err(|e| e.to_string())
    };
    assert!(
        review(b"{", Hook::Validate)
            .unwrap_err()
            .starts_with("the body is not an AdmissionReview")
    );
    // An object of the wrong shape (which the API server's schema check never lets through)
    // makes the review unreadable, and the error says which part.
    let misshapen = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceService"},
        "operation": "CREATE", "object": {"spec": {"engine": "big"}}}});
    let error = review(misshapen.to_string().as_bytes(), Hook::Validate).unwrap_err();
    assert!(
        error.contains(
            r#"invalid type: string "big", expected an object (a component of the spec)"#
        ),
        "{error}"
    );
    let v1beta1 =
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":null}"#;
    assert!(
        review(v1beta1, Hook::Validate)
            .unwrap_err()
            .contains("admissionReviewVersions: [v1]")
    );
    let empty = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
    assert!(review(empty, Hook::Mutate).is_err());
    // A well-formed review of an object whose fields the rules read do not read is refused, not
    // allowed (fields no rule reads are the CRD schema's to check).
    let bad = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceService"},
        "resource": {"group": "ome.io", "version": "v1beta1", "resource": "inferenceservices"},
        "name": "x", "namespace": "prod", "operation": "CREATE", "userInfo": {},
        "object": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "x"},
                   "spec": {"engine": {"lifecycle": {"updateStrategy": {"rollingUpdate": "fast"}}}}}}});
    let out: Value =
        serde_json::from_slice(&review(bad.to_string().as_bytes(), Hook::Validate).unwrap())
            .unwrap();
    assert_eq!(out["response"]["allowed"], false);
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot read the InferenceService: spec.engine.lifecycle: ")
    );
}

#[path = "../examples/loadgen/shape.rs"]
mod shape;

/// The webhook reads of an object only what the rules read (`view`); the core's types read all
/// of it. Every fixture must get the same answer both ways, as written and as the API server
/// sends it (compact, with containers, `managedFields` and `last-applied-configuration`).
#[test]
fn the_view_answers_as_the_full_types_do() {
    use alfred::admission::{
        replica_defaults, review_inference_service, review_replica, review_runtime,
    };
    use alfred::api::{ClusterServingRuntime, InferenceReplica, InferenceService, ServingRuntime};
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: false,
    };
    let full = |object: &Value, kind: &str| match kind {
        "InferenceService" => serde_json::from_value::<InferenceService>(object.clone()).ok(),
        _ => None,
    };
    let mut compared = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).unwrap()
    {
        let path = entry.unwrap().path();
        let written = std::fs::read(&path).unwrap();
        for body in [shape::as_apiserver_sends(&written).unwrap(), written] {
            let request = serde_json::from_slice::<Value>(&body).unwrap()["request"].take();
            let (object, kind) = (
                &request["object"],
                request["kind"]["kind"].as_str().unwrap(),
            );
            if object.is_null() || request["kind"]["group"] != "ome.io" {
                continue;
            }
            let name = format!("{} ({} bytes)", path.display(), body.len());
            let answer = |hook| {
                let out = review(&body, hook, &ctx, |_| Ok(None)).unwrap();
                serde_json::from_slice::<Value>(&out.body).unwrap()["response"].take()
            };
            let verdict = match kind {
                "InferenceService" => {
                    let old = full(&request["oldObject"], kind);
                    review_inference_service(
                        &full(object, kind).unwrap(),
                        old.as_ref().and_then(|o| o.metadata.annotations.as_ref()),
                    )
                }
                "ServingRuntime" => review_runtime(
                    &serde_json::from_value::<ServingRuntime>(object.clone())
                        .unwrap()
                        .spec
                        .fields,
                ),
                "ClusterServingRuntime" => review_runtime(
                    &serde_json::from_value::<ClusterServingRuntime>(object.clone())
                        .unwrap()
                        .spec
                        .fields,
                ),
                "InferenceReplica" => {
                    let replica: InferenceReplica = serde_json::from_value(object.clone()).unwrap();
                    let ops = replica_defaults(
                        object,
                        replica.spec.component,
                        replica.spec.lifecycle.as_ref(),
                        None,
                        &chart,
                    );
                    let patched = answer(Hook::Mutate);
                    assert_eq!(
                        patch(&patched),
                        serde_json::to_value(&ops).unwrap(),
                        "{name}"
                    );
                    review_replica(replica.spec.lifecycle.as_ref())
                }
                other => panic!("{name}: a fixture of kind {other}"),
            };
            let validated = answer(Hook::Validate);
            assert_eq!(
                validated["status"]["message"].as_str(),
                verdict.denied.as_deref(),
                "{name}"
            );
            let warnings: Vec<String> =
                serde_json::from_value(validated["warnings"].clone()).unwrap_or_default();
            assert_eq!(warnings, verdict.warnings, "{name}");
            compared += 1;
        }
    }
    assert!(compared >= 10, "only {compared} reviews compared");
}

proptest::proptest! {
    /// Whatever the body, the handler answers or errs; it never panics.
    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let chart = OperatorDefaults::chart();
        let ctx = Context { defaults: Some(&chart), default_inference_services: true };
        let _ = review(&body, Hook::Validate, &ctx, |l| found(Runtime::Recreate2, l));
        let _ = review(&body, Hook::Mutate, &ctx, |l| found(Runtime::Recreate2, l));
    }
}

#[test]
fn unreadable_runtimes_or_defaults_admit_without_a_patch_and_say_why() {
    let r = run(
        "irep-create-type-only.json",
        Hook::Mutate,
        Runtime::Unreadable,
    );
    assert_eq!(r["allowed"], true);
    assert!(r.get("patch").is_none(), "no guess is written: {r}");
    assert_eq!(
        r["warnings"][0],
        "alfred-webhook wrote no update-strategy defaults: cannot read ServingRuntime prod/vllm: timed out"
    );
    let ctx = Context {
        defaults: None,
        default_inference_services: false,
    };
    let r = run_with(
        "irep-create-type-only.json",
        Hook::Mutate,
        Runtime::Absent,
        &ctx,
    );
    assert!(r.get("patch").is_none());
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap()
            .contains("operator defaults could not be read")
    );
}

#[test]
fn inference_services_are_defaulted_only_when_opted_in() {
    let r = run("isvc-create-runtime.json", Hook::Mutate, Runtime::Recreate2);
    assert_eq!(r["allowed"], true);
    assert!(r.get("patch").is_none(), "off by default: {r}");

    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: true,
    };
    // The InferenceService's own type wins; the runtime supplies the budget the type reads.
    let r = run_with(
        "isvc-create-runtime.json",
        Hook::Mutate,
        Runtime::Recreate2,
        &ctx,
    );
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/engine/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": 2}}])
    );
    // Without the runtime, the operator default fills it.
    let r = run_with(
        "isvc-create-runtime.json",
        Hook::Mutate,
        Runtime::Absent,
        &ctx,
    );
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/engine/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": "25%"}}])
    );
}

#[test]
fn the_lookup_names_what_defaulting_needs() {
    use alfred_webhook::review::parse;
    let chart = OperatorDefaults::chart();
    let on = Context {
        defaults: Some(&chart),
        default_inference_services: true,
    };
    let read = |f: &str| {
        parse(&std::fs::read(format!("{}/tests/fixtures/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap())
            .unwrap()
    };
    assert_eq!(
        read("irep-create-type-only.json").lookup(Hook::Mutate, &on),
        Some(Lookup::Replica {
            namespace: "prod".into(),
            isvc: "chat".into()
        })
    );
    assert_eq!(
        read("irep-create-type-only.json").lookup(Hook::Validate, &on),
        None
    );
    let Some(Lookup::Runtime { namespace, runtime }) =
        read("isvc-create-runtime.json").lookup(Hook::Mutate, &on)
    else {
        panic!("an opted-in InferenceService looks up its runtime")
    };
    assert_eq!(
        (namespace.as_str(), runtime.name.as_str()),
        ("prod", "vllm")
    );
    assert_eq!(read("isvc-delete.json").lookup(Hook::Mutate, &on), None);
}

/// OME's CRD defaults `kind` onto every stored reference, and users write other casings: an
/// unexpected `kind` or `apiGroup` changes nothing, and never makes the object unreadable.
#[test]
fn any_reference_kind_reads_and_reviews_alike() {
    let path = format!(
        "{}/tests/fixtures/isvc-create-runtime.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: true,
    };
    let answer = |body: &Value| {
        let out = review(
            &serde_json::to_vec(body).unwrap(),
            Hook::Mutate,
            &ctx,
            |l| found(Runtime::Recreate2, l),
        )
        .expect("a readable review");
        let answer: Value = serde_json::from_slice(&out.body).unwrap();
        answer["response"].clone()
    };
    let plain = answer(&body);
    body["request"]["object"]["spec"]["runtime"] =
        json!({"name": "vllm", "kind": "clusterservingruntime", "apiGroup": "serving.example"});
    body["request"]["object"]["spec"]["model"] = json!({"name": "m", "kind": "Basemodel"});
    assert_eq!(answer(&body), plain);
    assert!(plain.get("patch").is_some(), "{plain}");
}

/// A create or update without its object is malformed: refused by both hooks, never allowed
/// unchecked (the API server always sends the object).
#[test]
fn a_create_or_update_without_its_object_is_refused() {
    let path = format!(
        "{}/tests/fixtures/isvc-create-zero-budget.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: true,
    };
    for operation in ["CREATE", "UPDATE"] {
        for object in [Some(Value::Null), None] {
            let mut body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            body["request"]["operation"] = json!(operation);
            match &object {
                Some(v) => body["request"]["object"] = v.clone(),
                None => {
                    body["request"].as_object_mut().unwrap().remove("object");
                }
            }
            for hook in [Hook::Validate, Hook::Mutate] {
                let out = review(&serde_json::to_vec(&body).unwrap(), hook, &ctx, |_| {
                    Ok(None)
                })
                .expect("a readable review");
                assert_eq!(out.outcome, ReviewOutcome::Denied, "{operation} {object:?}");
                let answer: Value = serde_json::from_slice(&out.body).unwrap();
                let message = answer["response"]["status"]["message"].as_str().unwrap();
                assert!(message.contains("carries no object"), "{message}");
            }
        }
    }
}

/// A huge value is quoted cut, with its length, in the refusal (and so in the log line), and
/// a huge wrong-typed value in an unreadable review likewise.
#[test]
fn echoed_values_are_cut() {
    let path = format!(
        "{}/tests/fixtures/isvc-update-bad-cooldown.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let huge = "9".repeat(7 << 20);
    body["request"]["object"]["metadata"]["annotations"]["alfred.ome.io/cooldown-minutes"] =
        json!(huge);
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: false,
    };
    let out = review(body.to_string().as_bytes(), Hook::Validate, &ctx, |_| {
        Ok(None)
    })
    .unwrap();
    let answer: Value = serde_json::from_slice(&out.body).unwrap();
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.len() < 1000, "{} bytes", message.len());
    assert!(message.contains("... (7340032 bytes)"), "{message}");

    body["request"]["object"]["spec"] = json!(huge);
    let error = review(body.to_string().as_bytes(), Hook::Validate, &ctx, |_| {
        Ok(None)
    })
    .map(|a| String::from_utf8_lossy(&a.body).into_owned())
    .unwrap_or_else(|e| e.to_string());
    assert!(error.len() < 2000, "{} bytes", error.len());
}

/// Every problem of an object in one answer: one line each in the message, and each with its
/// field in the status details, as the API server's own validation reports them.
#[test]
fn every_problem_is_reported_at_once() {
    let r = run(
        "isvc-create-several-problems.json",
        Hook::Validate,
        Runtime::Absent,
    );
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "spec.engine.lifecycle.updateStrategy.rollingUpdate: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout (RollingUpdateZeroBudget)\n\
         annotation alfred.ome.io/movable=\"yes\" is invalid: use true or false\n\
         annotation alfred.ome.io/priority=\"high\" is invalid: use a number from 0 to 1, such as 0.8"
    );
    let fields: Vec<&str> = r["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.engine.lifecycle.updateStrategy.rollingUpdate",
            "metadata.annotations[alfred.ome.io/movable]",
            "metadata.annotations[alfred.ome.io/priority]"
        ]
    );
    assert!(
        r["status"]["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["reason"] == "FieldValueInvalid")
    );
}
