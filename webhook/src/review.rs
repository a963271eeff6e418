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
use alfred::rollout::strategy::OperatorDefaults;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::view::{self, Object};

alfred::named! {
    /// Which webhook configuration called.
    pub enum Hook {
        Validate = "validate",
        Mutate = "mutate",
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
pub type Found = Result<Option<RuntimeFields>, LookupError>;

/// Why the runtime a defaulting needs was not had (the review then says so in a warning).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The object is there, but a field the defaulting reads is not of its type.
    #[error("cannot read {object}: {field}: {message}")]
    Unreadable {
        /// Kind and name, e.g. `ServingRuntime vllm`.
        object: String,
        field: &'static str,
        message: String,
    },
    /// The API server failed the read.
    #[error("cannot read {object}: {message}")]
    Api { object: String, message: String },
    #[error("the API server did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The InferenceService `namespace/name` an InferenceReplica belongs to.
    #[error("its InferenceService {0} does not exist")]
    NoService(String),
    #[error("the runtime {name:?} it names does not exist in {namespace} or cluster-wide")]
    NoRuntime { name: String, namespace: String },
}

/// Why a request body is not a review this webhook can answer (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not an AdmissionReview: {0}")]
    NotReview(String),
    #[error(
        "unsupported {kind:?} of apiVersion {api_version:?}; register the webhook with admissionReviewVersions: [v1]"
    )]
    Unsupported { kind: String, api_version: String },
    #[error("the AdmissionReview carries no request")]
    NoRequest,
}

/// A review read from the wire, its object read once into what the rules read of it.
pub struct Parsed {
    request: Request,
    /// None when there is nothing to read: no object, not a create or update, or a kind this
    /// webhook does not review.
    object: Option<Result<Object, view::Unreadable>>,
}

// The wire format (admission.k8s.io/v1), read and written here rather than through kube-core's
// generic types: they parse every object twice and write `patch` as a number array (#1781).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    kind: Gvk,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    #[serde(default)]
    object: Option<view::Sent>,
    #[serde(default)]
    old_object: Option<view::Stored>,
}

#[derive(Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    kind: String,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    /// JSON Patch, base64 (the API server reads a Go []byte).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct Status {
    status: &'static str,
    message: String,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    code: u16,
}

/// The problems one by one (`metav1.StatusDetails.causes`), as the API server's own validation
/// reports each field.
#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    reason: &'static str,
    message: String,
    field: String,
}

impl<'a> Response<'a> {
    fn allow(uid: &'a str) -> Self {
        Response {
            uid,
            allowed: true,
            ..Default::default()
        }
    }

    fn deny(self, message: String) -> Self {
        self.refuse(message, Vec::new())
    }

    /// Refused with every field's problem in the status details too.
    fn refuse(mut self, message: String, causes: Vec<alfred::admission::Denial>) -> Self {
        self.allowed = false;
        self.patch_type = None;
        self.patch = None;
        let causes: Vec<Cause> = causes
            .into_iter()
            .map(|d| Cause {
                reason: "FieldValueInvalid",
                message: d.message,
                field: d.field,
            })
            .collect();
        self.status = Some(Status {
            status: "Failure",
            message,
            reason: "Forbidden",
            details: (!causes.is_empty()).then_some(Details { causes }),
            code: 403,
        });
        self
    }
}

alfred::named! {
    /// How a review ended, for metrics and logs.
    pub enum ReviewOutcome {
        Allowed = "allowed",
        Patched = "patched",
        Denied = "denied",
    }
}

pub struct Answer {
    /// The AdmissionReview to send back.
    pub body: Vec<u8>,
    pub outcome: ReviewOutcome,
    /// The refusal, or the warnings joined.
    pub message: Option<String>,
}

/// Reads a review body; Err is a body that is not an AdmissionReview v1 (HTTP 400).
pub fn parse(body: &[u8]) -> Result<Parsed, ReviewError> {
    let review: Envelope = serde_json::from_slice(body)
        .map_err(|e| ReviewError::NotReview(alfred::input::cut_message(&e.to_string())))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(ReviewError::Unsupported {
            kind: review.kind,
            api_version: review.api_version,
        });
    }
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    let object = match (&request.object, request.operation) {
        (Some(sent), Operation::Create | Operation::Update) if request.kind.group == "ome.io" => {
            sent.read(&request.kind.kind)
        }
        _ => None,
    };
    Ok(Parsed { request, object })
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
        if hook != Hook::Mutate || ctx.defaults.is_none() {
            return None;
        }
        let namespace = self.namespace_or_default().to_string();
        match self.object.as_ref()?.as_ref().ok()? {
            Object::Replica {
                parent: Some(isvc), ..
            } => Some(Lookup::Replica {
                namespace,
                isvc: isvc.clone(),
            }),
            Object::Service { isvc, .. } if ctx.default_inference_services => {
                Some(Lookup::Runtime {
                    namespace,
                    runtime: isvc.spec.runtime.clone()?,
                })
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
        (false, _) => ReviewOutcome::Denied,
        (true, Some(_)) => ReviewOutcome::Patched,
        (true, None) => ReviewOutcome::Allowed,
    };
    let message = match &response.status {
        Some(status) => Some(status.message.clone()),
        None if response.warnings.is_empty() => None,
        None => Some(response.warnings.join("; ")),
    };
    let review = ReviewOut {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response,
    };
    Answer {
        // Plain strings, bools and numbers: writing them cannot fail.
        body: serde_json::to_vec(&review).unwrap_or_default(),
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
) -> Result<Answer, ReviewError> {
    let parsed = parse(body)?;
    let found = parsed.lookup(hook, ctx).map_or(Ok(None), |l| resolve(&l));
    Ok(answer(&parsed, hook, ctx, found))
}

fn respond<'p>(parsed: &'p Parsed, hook: Hook, ctx: &Context<'_>, found: Found) -> Response<'p> {
    let request = &parsed.request;
    let response = Response::allow(&request.uid);
    // DELETE and CONNECT carry no object to check.
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return response;
    }
    let (group, kind) = (request.kind.group.as_str(), request.kind.kind.as_str());
    // The API server always sends the object of a create or update: a review without one is
    // malformed, and allowing it would let anything through unchecked.
    if request.object.is_none() {
        return response.deny(format!(
            "the {} review of {kind} carries no object (request.object is missing or null); a create or update is always sent with its object, so this review is refused as malformed",
            parsed.operation()
        ));
    }
    if group != "ome.io" {
        return response.deny(unsupported(group, kind));
    }
    match (hook, kind) {
        (Hook::Mutate, "ServingRuntime" | "ClusterServingRuntime") => return response,
        // Off by default: writing defaults into a user's object makes GitOps tools see drift.
        (Hook::Mutate, "InferenceService") if !ctx.default_inference_services => return response,
        _ => {}
    }
    let object = match &parsed.object {
        None => return response.deny(unsupported(group, kind)),
        Some(Err(unreadable)) => return response.deny(unreadable.to_string()),
        Some(Ok(object)) => object,
    };
    let verdict = match (hook, object) {
        (Hook::Validate, Object::Service { isvc, .. }) => {
            // An old object that does not read is judged as a create: every key is checked.
            let old = request
                .old_object
                .as_ref()
                .and_then(view::Stored::annotations);
            review_inference_service(isvc, old.as_ref())
        }
        (Hook::Validate, Object::Runtime(fields)) => review_runtime(fields),
        (Hook::Validate, Object::Replica { lifecycle, .. }) => review_replica(lifecycle.as_ref()),
        (Hook::Mutate, object) => return defaults(response, object, ctx, found),
    };
    let mut response = match verdict.denied {
        Some(message) => response.refuse(message, verdict.causes),
        None => response,
    };
    response.warnings = verdict.warnings;
    response
}

/// The defaulting patch. Defaults are a display of what OME resolves anyway, so when the
/// runtime or the operator defaults cannot be read the object is admitted unpatched with a
/// warning: writing a guess would outlive the outage.
fn defaults<'p>(
    response: Response<'p>,
    object: &Object,
    ctx: &Context<'_>,
    found: Found,
) -> Response<'p> {
    let skipped = |mut response: Response<'p>, why: String| {
        response.warnings = vec![format!(
            "alfred-webhook wrote no update-strategy defaults: {why}"
        )];
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
        Err(why) => return skipped(response, why.to_string()),
    };
    let ops = match object {
        Object::Replica {
            component,
            lifecycle,
            lifecycles,
            ..
        } => {
            let from_runtime = runtime
                .as_ref()
                .and_then(|f| f.component(*component))
                .and_then(|c| c.lifecycle.as_ref());
            replica_defaults(
                lifecycles,
                *component,
                lifecycle.as_ref(),
                from_runtime,
                operator,
            )
        }
        Object::Service { isvc, lifecycles } => {
            inference_service_defaults(lifecycles, isvc, runtime.as_ref(), operator)
        }
        Object::Runtime(_) => return response,
    };
    with_patch(response, ops)
}

fn with_patch(mut response: Response<'_>, ops: Vec<json_patch::PatchOperation>) -> Response<'_> {
    if ops.is_empty() {
        return response;
    }
    match serde_json::to_vec(&json_patch::Patch(ops)) {
        Ok(bytes) => {
            response.patch_type = Some("JSONPatch");
            response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            response
        }
        Err(e) => response.deny(format!("cannot write the defaults patch: {e}")),
    }
}

fn unsupported(group: &str, kind: &str) -> String {
    format!(
        "alfred-webhook does not review {kind}.{group}; the webhook configuration should send only ome.io InferenceServices, ServingRuntimes, ClusterServingRuntimes and InferenceReplicas"
    )
}
