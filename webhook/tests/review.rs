//! The review handler on AdmissionReview fixtures, as the API server sends them.

use alfred::api::InferenceService;
use alfred::api::component::ComponentKind;
use alfred::api::lifecycle::LifecycleSpec;
use alfred::api::runtime::RuntimeFields;
use alfred::strategy::OperatorDefaults;
use alfred_webhook::review::{Context, Hook, Runtimes, review};
use serde_json::{Value, json};

/// Runtimes as a test knows them: none, or a RecreatePod runtime with maxUnavailable 2.
struct Known(bool);

impl Runtimes for Known {
    fn lifecycle(&self, _: &str, _: &str, _: ComponentKind) -> Option<LifecycleSpec> {
        self.0.then(|| {
            serde_json::from_value(json!({"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}})).unwrap()
        })
    }
    fn fields(&self, _: &str, _: &InferenceService) -> Option<RuntimeFields> {
        None
    }
}

fn run(fixture: &str, hook: Hook, runtimes: &dyn Runtimes) -> Value {
    let path = format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read(&path).unwrap();
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: &chart,
        default_inference_services: false,
        runtimes,
    };
    let out = review(&body, hook, &ctx).unwrap();
    let answer: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    let request: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["response"]["uid"], request["request"]["uid"],
        "the answer carries the request's uid"
    );
    answer["response"].clone()
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
        &Known(false),
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
        &Known(false),
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
        &Known(false),
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
    let r = run("irep-create-type-only.json", Hook::Mutate, &Known(false));
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": "25%"}}])
    );
    // The runtime's budget wins over the operator default.
    let r = run("irep-create-type-only.json", Hook::Mutate, &Known(true));
    assert_eq!(
        patch(&r),
        json!([{"op": "add", "path": "/spec/lifecycle/updateStrategy/rollingUpdate",
        "value": {"maxUnavailable": 2}}])
    );
    // Validation of the same object passes.
    assert_eq!(
        run("irep-create-type-only.json", Hook::Validate, &Known(false))["allowed"],
        true
    );
}

#[test]
fn runtimes_may_carry_zeros() {
    assert_eq!(
        run("runtime-zero-budgets.json", Hook::Validate, &Known(false))["allowed"],
        true
    );
}

#[test]
fn other_kinds_are_refused_and_deletes_pass() {
    let r = run("configmap-create.json", Hook::Validate, &Known(false));
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("alfred-webhook does not review ConfigMap")
    );
    assert_eq!(
        run("isvc-delete.json", Hook::Validate, &Known(false))["allowed"],
        true
    );
}

#[test]
fn unreadable_reviews_are_errors_not_panics() {
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: &chart,
        default_inference_services: false,
        runtimes: &Known(false),
    };
    assert!(
        review(b"{", Hook::Validate, &ctx)
            .unwrap_err()
            .starts_with("the body is not an AdmissionReview")
    );
    let v1beta1 =
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":null}"#;
    assert!(
        review(v1beta1, Hook::Validate, &ctx)
            .unwrap_err()
            .contains("admissionReviewVersions: [v1]")
    );
    let empty = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
    assert!(review(empty, Hook::Mutate, &ctx).is_err());
    // A well-formed review of an object that is not a valid InferenceService is refused, not allowed.
    let bad = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceService"},
        "resource": {"group": "ome.io", "version": "v1beta1", "resource": "inferenceservices"},
        "name": "x", "namespace": "prod", "operation": "CREATE", "userInfo": {},
        "object": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "x"},
                   "spec": {"engine": {"minReplicas": "two"}}}}});
    let out: Value =
        serde_json::from_slice(&review(bad.to_string().as_bytes(), Hook::Validate, &ctx).unwrap())
            .unwrap();
    assert_eq!(out["response"]["allowed"], false);
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot read the InferenceService")
    );
}

proptest::proptest! {
    /// Whatever the body, the handler answers or errs; it never panics.
    #[test]
    fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let chart = OperatorDefaults::chart();
        let ctx = Context { defaults: &chart, default_inference_services: true, runtimes: &Known(true) };
        let _ = review(&body, Hook::Validate, &ctx);
        let _ = review(&body, Hook::Mutate, &ctx);
    }
}
