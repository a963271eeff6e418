//! One AdmissionReview in, one out: parse, dispatch by kind to the core's rules or defaulting,
//! answer. A review that cannot be read gets an error that says why; one for a kind this
//! webhook does not handle is refused, never silently allowed.

use alfred::admission::{
    inference_service_defaults, replica_defaults, review_inference_service, review_replica,
    review_runtime,
};
use alfred::api::component::ComponentKind;
use alfred::api::lifecycle::LifecycleSpec;
use alfred::api::runtime::RuntimeFields;
use alfred::api::{ClusterServingRuntime, InferenceReplica, InferenceService, ServingRuntime};
use alfred::strategy::OperatorDefaults;
use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Which webhook configuration called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Validate,
    Mutate,
}

/// The runtime config a replica's component inherits (looked up through the API, cached).
pub trait Runtimes {
    /// The runtime's lifecycle for `component` of the InferenceService `namespace/isvc`.
    fn lifecycle(
        &self,
        namespace: &str,
        isvc: &str,
        component: ComponentKind,
    ) -> Option<LifecycleSpec>;
    /// The runtime's component configs for an InferenceService.
    fn fields(&self, namespace: &str, isvc: &InferenceService) -> Option<RuntimeFields>;
}

pub struct Context<'a> {
    pub defaults: &'a OperatorDefaults,
    /// Also default OMENative components in InferenceServices (off by default: GitOps drift).
    pub default_inference_services: bool,
    pub runtimes: &'a dyn Runtimes,
}

/// Answers a review body; Err is a body that is not an AdmissionReview v1 (HTTP 400).
pub fn review(body: &[u8], hook: Hook, ctx: &Context<'_>) -> Result<Vec<u8>, String> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    if review.types.api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "unsupported AdmissionReview apiVersion {:?}; register the webhook with admissionReviewVersions: [v1]",
            review.types.api_version
        ));
    }
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e| format!("the AdmissionReview carries no request: {e}"))?;
    let response = respond(&request, hook, ctx);
    let mut answer = serde_json::to_value(response.into_review())
        .map_err(|e| format!("cannot write the answer: {e}"))?;
    // kube-core writes `patch` as an array of numbers; the API server reads a Go []byte, which
    // JSON carries as a base64 string (kube-rs/kube#1781).
    if let Some(patch) = answer.pointer_mut("/response/patch") {
        let bytes: Vec<u8> = serde_json::from_value(patch.take())
            .map_err(|e| format!("cannot write the patch: {e}"))?;
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    serde_json::to_vec(&answer).map_err(|e| format!("cannot write the answer: {e}"))
}

fn respond(
    request: &AdmissionRequest<DynamicObject>,
    hook: Hook,
    ctx: &Context<'_>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(object) = request.object.as_ref() else {
        return response; // DELETE and CONNECT carry no object: nothing to check
    };
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return response;
    }
    let (group, kind) = (request.kind.group.as_str(), request.kind.kind.as_str());
    if group != "ome.io" {
        return response.deny(unsupported(group, kind));
    }
    let raw = match serde_json::to_value(object) {
        Ok(v) => v,
        Err(e) => return response.deny(format!("cannot read the {kind}: {e}")),
    };
    let result = match (hook, kind) {
        (Hook::Validate, "InferenceService") => typed::<InferenceService>(&raw, kind).map(|new| {
            let old = request
                .old_object
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok())
                .and_then(|o| serde_json::from_value::<InferenceService>(o).ok());
            (review_inference_service(&new, old.as_ref()), Vec::new())
        }),
        (Hook::Validate, "ServingRuntime") => typed::<ServingRuntime>(&raw, kind)
            .map(|r| (review_runtime(&r.spec.fields), Vec::new())),
        (Hook::Validate, "ClusterServingRuntime") => typed::<ClusterServingRuntime>(&raw, kind)
            .map(|r| (review_runtime(&r.spec.fields), Vec::new())),
        (Hook::Validate, "InferenceReplica") => {
            typed::<InferenceReplica>(&raw, kind).map(|r| (review_replica(&r), Vec::new()))
        }
        (Hook::Mutate, "InferenceReplica") => typed::<InferenceReplica>(&raw, kind).map(|r| {
            let namespace = request.namespace.as_deref().unwrap_or("default");
            let runtime = r
                .spec
                .parent_ref
                .as_ref()
                .and_then(|p| ctx.runtimes.lifecycle(namespace, &p.name, r.spec.component));
            let ops = replica_defaults(&raw, &r, runtime.as_ref(), ctx.defaults);
            (Default::default(), ops)
        }),
        (Hook::Mutate, "InferenceService") => typed::<InferenceService>(&raw, kind).map(|i| {
            let ops = if ctx.default_inference_services {
                let namespace = request.namespace.as_deref().unwrap_or("default");
                let runtime = ctx.runtimes.fields(namespace, &i);
                inference_service_defaults(&raw, &i, runtime.as_ref(), ctx.defaults)
            } else {
                Vec::new()
            };
            (Default::default(), ops)
        }),
        (Hook::Mutate, "ServingRuntime" | "ClusterServingRuntime") => {
            Ok((Default::default(), Vec::new()))
        }
        _ => return response.deny(unsupported(group, kind)),
    };
    let (verdict, ops) = match result {
        Ok(r) => r,
        Err(message) => return response.deny(message),
    };
    let mut response = match verdict.denied {
        Some(message) => response.deny(message),
        None if ops.is_empty() => response,
        None => match response.clone().with_patch(json_patch::Patch(ops)) {
            Ok(r) => r,
            Err(e) => response.deny(format!("cannot write the defaults patch: {e}")),
        },
    };
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    response
}

fn typed<T: DeserializeOwned>(raw: &serde_json::Value, kind: &str) -> Result<T, String> {
    T::deserialize(raw).map_err(|e| format!("cannot read the {kind}: {e}"))
}

fn unsupported(group: &str, kind: &str) -> String {
    format!(
        "alfred-webhook does not review {kind}.{group}; the webhook configuration should send only ome.io InferenceServices, ServingRuntimes, ClusterServingRuntimes and InferenceReplicas"
    )
}
