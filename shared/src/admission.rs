//! The admission rules `alfred-webhook` applies (omenative-reference.md §1.4, alfred-reference.md
//! §2): what crosses fields or needs the policy, with the exact messages. The CRD schema refuses
//! what a schema can; the webhook is a thin adapter over these functions.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::annotations;
use crate::api::InferenceService;
use crate::api::component::ComponentKind;
use crate::api::keys;
use crate::api::lifecycle::{LifecycleSpec, RollingUpdate};
use crate::api::runtime::RuntimeFields;
use crate::input::quoted;
use crate::migration;
use crate::mode::{self, DeploymentMode, ModeSource};
use crate::reasons::AdmissionCode;
use crate::rollout::strategy::{self, OperatorDefaults, parse_percent};

/// The answer to one object: refused with every problem it has at once (one line each, as
/// the API server's own validation lists them), or admitted with warnings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Every problem's line, joined; None when admitted.
    pub denied: Option<String>,
    /// The problems one by one, with the field each is about.
    pub causes: Vec<Denial>,
    pub warnings: Vec<String>,
}

impl Verdict {
    fn from(causes: Vec<Denial>, warnings: Vec<String>) -> Verdict {
        let lines: Vec<&str> = causes.iter().map(|d| d.message.as_str()).collect();
        Verdict {
            denied: (!causes.is_empty()).then(|| lines.join("\n")),
            causes,
            warnings,
        }
    }
}

/// One reason an object is refused: the field it is about and the message the API server
/// shows its author.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    pub field: String,
    pub message: String,
}

fn denial(field: impl Into<String>, message: String) -> Denial {
    Denial {
        field: field.into(),
        message,
    }
}

/// The field path of an annotation, as the API server writes it.
fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

/// Checks one `rollingUpdate`: each budget an integer of 0 or more or a percent from 0% to
/// 100% (`maxUnavailable` first), then, with `zero_rule`, not both zero.
fn check_budgets(path: &str, rolling: &RollingUpdate, zero_rule: bool) -> Result<(), Denial> {
    let mut zero = [false, false];
    for (i, (field, budget)) in [
        ("maxUnavailable", &rolling.max_unavailable),
        ("maxSurge", &rolling.max_surge),
    ]
    .into_iter()
    .enumerate()
    {
        match budget {
            None => {}
            Some(IntOrString::Int(n)) if *n < 0 => {
                return Err(denial(
                    format!("{path}.{field}"),
                    format!(
                        "{path}.{field}={n} must be >= 0 ({})",
                        AdmissionCode::InvalidRollingUpdateInteger
                    ),
                ));
            }
            Some(IntOrString::Int(n)) => zero[i] = *n == 0,
            Some(IntOrString::String(s)) => match parse_percent(s) {
                Ok(p) => zero[i] = p == 0,
                Err(e) => {
                    return Err(denial(
                        format!("{path}.{field}"),
                        format!(
                            "{path}.{field}={} {e} ({})",
                            quoted(s),
                            AdmissionCode::InvalidRollingUpdatePercent
                        ),
                    ));
                }
            },
        }
    }
    if zero_rule && zero == [true, true] {
        return Err(denial(
            path,
            format!(
                "{path}: maxSurge=0 and maxUnavailable=0 together yield an unstartable rollout ({})",
                AdmissionCode::RollingUpdateZeroBudget
            ),
        ));
    }
    Ok(())
}

fn rolling(lifecycle: Option<&LifecycleSpec>) -> Option<&RollingUpdate> {
    lifecycle
        .and_then(|l| l.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
}

/// The deployment mode a component declares, as the combination message prints it: empty when
/// nothing declares one.
fn declared_mode(isvc: &InferenceService, kind: ComponentKind) -> &'static str {
    match mode::resolve(&isvc.spec, kind, None) {
        (_, ModeSource::Fallback) => "",
        (m, _) => m.as_str(),
    }
}

/// True for the annotations the rules read: the Alfred family, revision retention and
/// migration requests. A reader may skip every other annotation.
pub fn reads_annotation(key: &str) -> bool {
    key.starts_with(keys::ALFRED_PREFIX)
        || key.starts_with(keys::MIGRATION_REQUEST_PREFIX)
        || key == keys::REVISION_HISTORY_LIMIT
}

/// Validates an InferenceService on create or update (`old_annotations`: the stored object's,
/// on update).
pub fn review_inference_service(
    new: &InferenceService,
    old_annotations: Option<&BTreeMap<String, String>>,
) -> Verdict {
    let mut warnings = Vec::new();
    for (kind, c) in new.spec.components() {
        let (m, _) = mode::resolve(&new.spec, kind, None);
        if c.deployment_strategy.is_some() && m == DeploymentMode::OmeNative {
            warnings.push(format!(
                "{kind}.deploymentStrategy is set but deploymentMode is \"OMENative\"; deploymentStrategy applies only to RawDeployment and is ignored here — use {kind}.lifecycle.updateStrategy.rollingUpdate for rollout pacing"
            ));
        }
    }
    Verdict::from(check_inference_service(new, old_annotations), warnings)
}

fn check_inference_service(
    new: &InferenceService,
    old_annotations: Option<&BTreeMap<String, String>>,
) -> Vec<Denial> {
    let mut problems = Vec::new();
    if new.spec.engine.is_some() && new.spec.decoder.is_some() {
        let (engine, decoder) = (
            declared_mode(new, ComponentKind::Engine),
            declared_mode(new, ComponentKind::Decoder),
        );
        let omenative = DeploymentMode::OmeNative.as_str();
        if (engine == omenative || decoder == omenative) && engine != decoder {
            problems.push(denial(
                "spec.decoder",
                format!(
                    "{}: engine deploymentMode={} does not match decoder deploymentMode={}; when either is OMENative, both must use the same value",
                    AdmissionCode::InvalidDeploymentModeCombination,
                    quoted(engine),
                    quoted(decoder)
                ),
            ));
        }
    }
    for (kind, c) in new.spec.components() {
        if let Some(r) = rolling(c.lifecycle.as_ref()) {
            let path = format!("spec.{kind}.lifecycle.updateStrategy.rollingUpdate");
            problems.extend(check_budgets(&path, r, true).err());
        }
    }
    let annotations = new.metadata.annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if let Some(v) = get(keys::REVISION_HISTORY_LIMIT)
        && let Err(e) = annotations::revision_history_limit(v)
    {
        problems.push(denial(
            annotation_field(keys::REVISION_HISTORY_LIMIT),
            e.to_string(),
        ));
    }
    for (key, value) in annotations.into_iter().flatten() {
        let Some(uuid) = key.strip_prefix(keys::MIGRATION_REQUEST_PREFIX) else {
            continue;
        };
        if old_annotations.and_then(|a| a.get(key)) == Some(value) {
            continue; // unchanged: only added or changed requests are checked
        }
        if let Err(refusal) = check_request(new, key, uuid, value) {
            problems.push(denial(annotation_field(key), refusal.to_string()));
        }
    }
    let refused = annotations::check_alfred(
        annotations
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    problems.extend(
        refused
            .into_iter()
            .map(|e| denial(annotation_field(e.key), e.to_string())),
    );
    problems
}

/// Why an added or changed migration request annotation is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefusal {
    #[error("migration request {key}: annotation key carries no request UUID")]
    NoUuid { key: String },
    #[error("migration request {uuid}: annotation {key} is not a migration request: {why}")]
    NotARequest {
        uuid: String,
        key: String,
        why: String,
    },
    #[error("migration request {uuid}: {error}")]
    Request {
        uuid: String,
        error: migration::RequestError,
    },
    #[error(
        "migration request {uuid}: component {} is not a component of this InferenceService",
        quoted(.component)
    )]
    UnknownComponent { uuid: String, component: String },
    #[error("migration request {uuid}: instance must be >= 0, got {instance}")]
    NegativeInstance { uuid: String, instance: i64 },
}

/// One added or changed migration request annotation.
fn check_request(
    new: &InferenceService,
    key: &str,
    uuid: &str,
    value: &str,
) -> Result<(), RequestRefusal> {
    if uuid.is_empty() {
        return Err(RequestRefusal::NoUuid { key: key.into() });
    }
    let request = migration::parse_request(value).map_err(|e| match e {
        migration::RequestError::Json(why) => RequestRefusal::NotARequest {
            uuid: uuid.into(),
            key: key.into(),
            why,
        },
        error => RequestRefusal::Request {
            uuid: uuid.into(),
            error,
        },
    })?;
    let known =
        ComponentKind::parse(&request.component).is_some_and(|k| new.spec.component(k).is_some());
    if !known {
        return Err(RequestRefusal::UnknownComponent {
            uuid: uuid.into(),
            component: request.component,
        });
    }
    if request.instance < 0 {
        return Err(RequestRefusal::NegativeInstance {
            uuid: uuid.into(),
            instance: request.instance,
        });
    }
    Ok(())
}

/// Validates a ServingRuntime's or ClusterServingRuntime's component configs: budgets must be
/// integers or percents, but a zero (even on both sides) is admitted in a runtime.
pub fn review_runtime(fields: &RuntimeFields) -> Verdict {
    let problems = ComponentKind::ALL.iter().copied().filter_map(|kind| {
        let r = rolling(fields.component(kind).and_then(|c| c.lifecycle.as_ref()))?;
        let path = format!("spec.{kind}Config.lifecycle.updateStrategy.rollingUpdate");
        check_budgets(&path, r, false).err()
    });
    Verdict::from(problems.collect(), Vec::new())
}

/// Validates an InferenceReplica's own strategy (its `spec.lifecycle`).
pub fn review_replica(lifecycle: Option<&LifecycleSpec>) -> Verdict {
    let problems = rolling(lifecycle)
        .and_then(|r| check_budgets("spec.lifecycle.updateStrategy.rollingUpdate", r, true).err());
    Verdict::from(problems.into_iter().collect(), Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Defaulting: fill a component's update strategy from the defaults chain, where OME shows it.

/// The JSON Patch that adds to `object` whatever of `desired` it lacks under `base` (a path of
/// keys), leaving every value already set alone, so a second pass yields no patch.
pub fn fill_patch(object: &Value, base: &[&str], desired: &Value) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if desired.as_object().is_some_and(|fields| fields.is_empty()) {
        return ops; // nothing to show: never an empty level nobody set
    }
    // Walk down `base`, adding the first missing level with the rest nested inside.
    let mut here = object;
    let mut path: Vec<String> = Vec::new();
    for (i, key) in base.iter().enumerate() {
        path.push(key.to_string());
        match here.get(key) {
            Some(next) if next.is_object() => here = next,
            Some(next) if !next.is_null() => return ops, // not an object: not ours to fix
            _ => {
                let mut value = desired.clone();
                for key in base[i + 1..].iter().rev() {
                    value = serde_json::json!({ *key: value });
                }
                ops.push(add(&path, value));
                return ops;
            }
        }
    }
    fill(here, desired, &mut path, &mut ops);
    ops
}

fn fill(current: &Value, desired: &Value, path: &mut Vec<String>, ops: &mut Vec<PatchOperation>) {
    let Some(desired) = desired.as_object() else {
        return;
    };
    for (key, want) in desired {
        path.push(key.clone());
        match current.get(key) {
            None | Some(Value::Null) => ops.push(add(path, want.clone())),
            Some(have) if have.is_object() => fill(have, want, path, ops),
            Some(_) => {}
        }
        path.pop();
    }
}

fn add(path: &[String], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(path.iter().map(String::as_str)),
        value,
    })
}

/// The patch that shows an InferenceReplica's update strategy in `spec.lifecycle.updateStrategy`
/// as OME projects it: its own (from the InferenceService), then the runtime's, then the
/// operator defaults that apply; never the fixed `SurgeThenDrain` fallback, which readers
/// resolve.
pub fn replica_defaults(
    replica: &Value,
    component: ComponentKind,
    lifecycle: Option<&LifecycleSpec>,
    runtime: Option<&LifecycleSpec>,
    defaults: &OperatorDefaults,
) -> Vec<PatchOperation> {
    let resolved = strategy::resolve_lifecycle(component, lifecycle, runtime, defaults);
    let desired = serde_json::to_value(resolved.projected()).unwrap_or_default();
    fill_patch(replica, &["spec", "lifecycle", "updateStrategy"], &desired)
}

/// The same fill on each OMENative component of an InferenceService (opt-in: it writes into
/// the user's object). RawDeployment components are never defaulted.
pub fn inference_service_defaults(
    isvc: &Value,
    typed: &InferenceService,
    runtime: Option<&RuntimeFields>,
    defaults: &OperatorDefaults,
) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    for (kind, c) in typed.spec.components() {
        if mode::resolve(&typed.spec, kind, None).0 != DeploymentMode::OmeNative {
            continue;
        }
        let runtime_lifecycle = runtime
            .and_then(|r| r.component(kind))
            .and_then(|c| c.lifecycle.as_ref());
        let resolved =
            strategy::resolve_lifecycle(kind, c.lifecycle.as_ref(), runtime_lifecycle, defaults);
        let desired = serde_json::to_value(resolved.projected()).unwrap_or_default();
        ops.extend(fill_patch(
            isvc,
            &["spec", kind.as_str(), "lifecycle", "updateStrategy"],
            &desired,
        ));
    }
    ops
}
