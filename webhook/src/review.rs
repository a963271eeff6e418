//! One AdmissionReview in, one out: parse, dispatch by kind to the core's rules or defaulting,
//! answer. A review that cannot be read gets an error that says why; one for a kind this
//! webhook does not handle is refused, never silently allowed.
//!
//! Defaulting may need a runtime from the API, so a review is answered in two steps:
//! [`parse`], then [`Parsed::lookup`] says what to fetch, then [`answer`] with what was found.

use alfred::admission::{
    inference_service_defaults, replica_defaults, review_inference_service, review_replica,
    review_runtime,
};
use alfred::api::isvc::RuntimeRef;
use alfred::api::runtime::RuntimeFields;
use alfred::api::{ClusterServingRuntime, InferenceReplica, InferenceService, ServingRuntime};
use alfred::strategy::OperatorDefaults;
use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Which webhook configuration called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Validate,
    Mutate,
}

impl Hook {
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Validate => "validate",
            Hook::Mutate => "mutate",
        }
    }
}

pub struct Context<'a> {
    /// OME's operator defaults; None while they cannot be read (no defaults are written then).
    pub defaults: Option<&'a OperatorDefaults>,
    /// Also default OMENative components in InferenceServices (off by default: GitOps drift).
    pub default_inference_services: bool,
}

/// The runtime a defaulting needs, to be read from the API before answering.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Lookup {
    /// An InferenceReplica's: the runtime its InferenceService `namespace/isvc` names.
    Replica { namespace: String, isvc: String },
    /// An InferenceService's own reference.
    Runtime {
        namespace: String,
        runtime: RuntimeRef,
    },
}

/// What the lookup found: Ok(None) when there is no runtime, Err when it could not be read.
pub type Found = Result<Option<RuntimeFields>, String>;

/// A review read from the wire.
pub struct Parsed {
    request: AdmissionRequest<DynamicObject>,
}

/// How a review ended, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Patched,
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::Denied => "denied",
        }
    }
}

pub struct Answer {
    /// The AdmissionReview to send back.
    pub body: Vec<u8>,
    pub outcome: Outcome,
    /// The refusal, or the warnings joined.
    pub message: Option<String>,
}

/// Reads a review body; Err is a body that is not an AdmissionReview v1 (HTTP 400).
pub fn parse(body: &[u8]) -> Result<Parsed, String> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not an AdmissionReview: {e}"))?;
    if review.types.api_version != "admission.k8s.io/v1" {
        return Err(format!(
            "unsupported AdmissionReview apiVersion {:?}; register the webhook with admissionReviewVersions: [v1]",
            review.types.api_version
        ));
    }
    let request = review
        .try_into()
        .map_err(|e| format!("the AdmissionReview carries no request: {e}"))?;
    Ok(Parsed { request })
}

impl Parsed {
    pub fn uid(&self) -> &str {
        &self.request.uid
    }
    pub fn kind(&self) -> &str {
        &self.request.kind.kind
    }
    pub fn namespace(&self) -> &str {
        self.request.namespace.as_deref().unwrap_or("")
    }
    pub fn name(&self) -> &str {
        &self.request.name
    }
    pub fn operation(&self) -> &'static str {
        match self.request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The runtime the answer needs, if any.
    pub fn lookup(&self, hook: Hook, ctx: &Context<'_>) -> Option<Lookup> {
        let request = &self.request;
        let object = request.object.as_ref()?;
        if hook != Hook::Mutate
            || ctx.defaults.is_none()
            || request.kind.group != "ome.io"
            || matches!(request.operation, Operation::Delete | Operation::Connect)
        {
            return None;
        }
        let namespace = self.namespace_or_default().to_string();
        match request.kind.kind.as_str() {
            "InferenceReplica" => {
                let isvc = object.data.pointer("/spec/parentRef/name")?.as_str()?;
                Some(Lookup::Replica {
                    namespace,
                    isvc: isvc.to_string(),
                })
            }
            "InferenceService" if ctx.default_inference_services => {
                let runtime = object.data.pointer("/spec/runtime")?;
                let runtime = RuntimeRef::deserialize(runtime).ok()?;
                Some(Lookup::Runtime { namespace, runtime })
            }
            _ => None,
        }
    }

    fn namespace_or_default(&self) -> &str {
        self.request.namespace.as_deref().unwrap_or("default")
    }
}

/// Answers a parsed review with the runtime `found` for its [`Parsed::lookup`] (Ok(None) when
/// there was none to make).
pub fn answer(parsed: &Parsed, hook: Hook, ctx: &Context<'_>, found: Found) -> Answer {
    let response = respond(parsed, hook, ctx, found);
    let outcome = match (response.allowed, &response.patch) {
        (false, _) => Outcome::Denied,
        (true, Some(_)) => Outcome::Patched,
        (true, None) => Outcome::Allowed,
    };
    let message = if response.allowed {
        response.warnings.as_ref().map(|w| w.join("; "))
    } else {
        Some(response.result.message.clone())
    };
    Answer {
        body: write(response),
        outcome,
        message,
    }
}

/// Parse, look up with `resolve`, answer: the whole review in one synchronous call.
pub fn review(
    body: &[u8],
    hook: Hook,
    ctx: &Context<'_>,
    resolve: impl FnOnce(&Lookup) -> Found,
) -> Result<Answer, String> {
    let parsed = parse(body)?;
    let found = parsed.lookup(hook, ctx).map_or(Ok(None), |l| resolve(&l));
    Ok(answer(&parsed, hook, ctx, found))
}

fn write(response: AdmissionResponse) -> Vec<u8> {
    let mut answer = serde_json::to_value(response.into_review()).unwrap_or_default();
    // kube-core writes `patch` as an array of numbers; the API server reads a Go []byte, which
    // JSON carries as a base64 string (kube-rs/kube#1781).
    if let Some(patch) = answer.pointer_mut("/response/patch") {
        let bytes: Vec<u8> = serde_json::from_value(patch.take()).unwrap_or_default();
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    serde_json::to_vec(&answer).unwrap_or_default()
}

fn respond(parsed: &Parsed, hook: Hook, ctx: &Context<'_>, found: Found) -> AdmissionResponse {
    let request = &parsed.request;
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
        (Hook::Mutate, "InferenceReplica" | "InferenceService") => {
            return defaults(response, &raw, kind, ctx, found);
        }
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
        None => with_patch(response, ops),
    };
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    response
}

/// The defaulting patch. Defaults are a display of what OME resolves anyway, so when the
/// runtime or the operator defaults cannot be read the object is admitted unpatched with a
/// warning: writing a guess would outlive the outage.
fn defaults(
    response: AdmissionResponse,
    raw: &Value,
    kind: &str,
    ctx: &Context<'_>,
    found: Found,
) -> AdmissionResponse {
    enum Target {
        Replica(Box<InferenceReplica>),
        Service(Box<InferenceService>),
    }
    let target = match kind {
        "InferenceReplica" => typed(raw, kind).map(Target::Replica),
        _ if !ctx.default_inference_services => return response,
        _ => typed(raw, kind).map(Target::Service),
    };
    let target = match target {
        Ok(t) => t,
        Err(message) => return response.deny(message),
    };
    let skipped = |mut response: AdmissionResponse, why: String| {
        response.warnings = Some(vec![format!(
            "alfred-webhook wrote no update-strategy defaults: {why}"
        )]);
        response
    };
    let Some(operator) = ctx.defaults else {
        return skipped(
            response,
            "OME's operator defaults could not be read (see the webhook's log)".into(),
        );
    };
    let runtime = match found {
        Ok(f) => f,
        Err(why) => return skipped(response, why),
    };
    let ops = match target {
        Target::Replica(r) => {
            let lifecycle = runtime
                .as_ref()
                .and_then(|f| f.component(r.spec.component))
                .and_then(|c| c.lifecycle.as_ref());
            replica_defaults(raw, &r, lifecycle, operator)
        }
        Target::Service(i) => inference_service_defaults(raw, &i, runtime.as_ref(), operator),
    };
    with_patch(response, ops)
}

fn with_patch(
    response: AdmissionResponse,
    ops: Vec<json_patch::PatchOperation>,
) -> AdmissionResponse {
    if ops.is_empty() {
        return response;
    }
    match response.clone().with_patch(json_patch::Patch(ops)) {
        Ok(r) => r,
        Err(e) => response.deny(format!("cannot write the defaults patch: {e}")),
    }
}

fn typed<T: DeserializeOwned>(raw: &Value, kind: &str) -> Result<T, String> {
    T::deserialize(raw).map_err(|e| format!("cannot read the {kind}: {e}"))
}

fn unsupported(group: &str, kind: &str) -> String {
    format!(
        "alfred-webhook does not review {kind}.{group}; the webhook configuration should send only ome.io InferenceServices, ServingRuntimes, ClusterServingRuntimes and InferenceReplicas"
    )
}
