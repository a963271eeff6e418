//! The migration request wire format OME consumes (omenative-reference.md §5): the value of
//! the InferenceService annotation `ome.io/migration-request-v1-<uuid>`.

use serde::{Deserialize, Serialize};

use crate::input::quoted;
use crate::reasons::AdmissionCode;

pub const SCHEMA_VERSION: &str = "v1";

/// One request. Unknown extra fields are ignored, as OME ignores them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MigrationRequest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: String,
    pub component: String,
    pub instance: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_node: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hint_target_nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// Why a request payload is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not the request's JSON (the parser's message, cut).
    #[error("{0}")]
    Json(String),
    #[error("{}: {}", AdmissionCode::UnsupportedSchemaVersion, quoted(.0))]
    UnsupportedSchemaVersion(String),
    /// Breaks one of the checks Alfred makes before sending.
    #[error("{0}")]
    Invalid(String),
}

/// The shape of a request, as messages show it (alfred-reference.md §3.3).
pub const EXAMPLE: &str =
    r#"{"schemaVersion":"v1","component":"engine","instance":3,"from_node":"node-a"}"#;

/// Reads a request payload.
pub fn parse_request(payload: &str) -> Result<MigrationRequest, RequestError> {
    let mut de = serde_json::Deserializer::from_str(payload);
    let request: MigrationRequest = match serde_path_to_error::deserialize(&mut de) {
        Ok(request) => request,
        Err(e) => {
            let why = not_a_request(payload, &e.path().to_string(), e.inner());
            return Err(RequestError::Json(why));
        }
    };
    de.end()
        .map_err(|e| RequestError::Json(not_a_request(payload, "", &e)))?;
    if request.schema_version != SCHEMA_VERSION {
        return Err(RequestError::UnsupportedSchemaVersion(
            request.schema_version,
        ));
    }
    Ok(request)
}

/// Why a payload is not a request, in words: where it goes wrong and what was expected.
fn not_a_request(payload: &str, field: &str, e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let message = crate::input::without_position(e);
    // serde's "invalid type: string \"3\", expected i64": what was found, in the payload's words.
    let found = message
        .strip_prefix("invalid type: ")
        .and_then(|m| m.split(", expected").next());
    let what = match (e.classify(), field) {
        (Category::Eof, _) => "the JSON ends before the request is complete".to_string(),
        (Category::Syntax, _) => {
            // Requests are one line; count characters on the error's line.
            let at = payload
                .lines()
                .nth(e.line().saturating_sub(1))
                .map_or(0, |line| line.chars().take(e.column()).count());
            let reason = match message.as_str() {
                "expected ident" | "expected value" => "a JSON object was expected",
                "trailing characters" => "something follows the request object",
                "key must be a string" => "a field name in double quotes was expected",
                other => other,
            };
            format!(
                "it is not JSON: {reason} at character {at} of {}",
                quoted(payload)
            )
        }
        (Category::Data, "." | "") => match (message.strip_prefix("missing field `"), found) {
            (Some(name), _) => format!("field {} is missing", name.trim_end_matches('`')),
            (None, Some(found)) => format!("it is JSON but {found}, not an object"),
            (None, None) => message,
        },
        (Category::Data, field) => {
            let wanted = match field {
                "instance" => "a whole number",
                "hint_target_nodes" => "a list of node names",
                _ => "a string",
            };
            match found {
                Some(found) => format!("field {field} must be {wanted}, not {found}"),
                None => format!("field {field}: {message}"),
            }
        }
        (Category::Io, _) => message,
    };
    format!("{what}; a request is compact JSON such as {EXAMPLE}")
}

/// The most hint target nodes a request may carry.
pub const MAX_HINTS: usize = 8;
/// The most bytes a request payload may take.
pub const MAX_PAYLOAD_BYTES: usize = 4096;
/// `requested_by` on Alfred's requests.
pub const REQUESTED_BY: &str = "alfred";

/// The annotation value: compact JSON, fields in the wire order.
pub fn payload(request: &MigrationRequest) -> String {
    serde_json::to_string(request).expect("a request always serializes")
}

/// The checks a request must pass before Alfred sends it (alfred-reference.md §3.3).
pub fn validate_request(request: &MigrationRequest, payload: &str) -> Result<(), RequestError> {
    if request.schema_version != SCHEMA_VERSION {
        return Err(RequestError::Invalid(format!(
            "schemaVersion must be {SCHEMA_VERSION}"
        )));
    }
    if crate::api::component::ComponentKind::parse(&request.component).is_none() {
        return Err(RequestError::Invalid(format!(
            "component {} is not engine, decoder or router",
            quoted(&request.component)
        )));
    }
    if request.instance < 0 {
        return Err(RequestError::Invalid(format!(
            "instance must be >= 0, got {}",
            request.instance
        )));
    }
    let from = request.from_node.as_deref().unwrap_or_default();
    if !crate::kubernetes::names::is_dns1123_subdomain(from) {
        return Err(RequestError::Invalid(format!(
            "from_node {} is not a DNS-1123 subdomain",
            quoted(from)
        )));
    }
    if request.hint_target_nodes.len() > MAX_HINTS {
        return Err(RequestError::Invalid(format!(
            "more than {MAX_HINTS} hint target nodes"
        )));
    }
    for (i, hint) in request.hint_target_nodes.iter().enumerate() {
        if !crate::kubernetes::names::is_dns1123_subdomain(hint) {
            return Err(RequestError::Invalid(format!(
                "hint target node {} is not a DNS-1123 subdomain",
                quoted(hint)
            )));
        }
        if hint == from {
            return Err(RequestError::Invalid(format!(
                "hint target node {} is the source node",
                quoted(hint)
            )));
        }
        if request.hint_target_nodes[..i].contains(hint) {
            return Err(RequestError::Invalid(format!(
                "hint target node {} is listed twice",
                quoted(hint)
            )));
        }
    }
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(RequestError::Invalid(format!(
            "the payload is {} bytes, more than {MAX_PAYLOAD_BYTES}",
            payload.len()
        )));
    }
    Ok(())
}

/// The annotation key of a request.
pub fn annotation_key(uuid: &str) -> String {
    format!("{}{uuid}", crate::api::keys::MIGRATION_REQUEST_PREFIX)
}

/// The JSON Patch that adds a request to an InferenceService: it applies only to the object
/// the decision read (uid and resourceVersion tested), and creates the annotations map when the
/// object has none.
pub fn request_patch(
    uid: &str,
    resource_version: &str,
    has_annotations: bool,
    uuid: &str,
    payload: &str,
) -> json_patch::Patch {
    let pointer_key = annotation_key(uuid).replace('~', "~0").replace('/', "~1");
    let mut ops = vec![
        serde_json::json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
    ];
    if !has_annotations {
        ops.push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops.push(serde_json::json!({
        "op": "add",
        "path": format!("/metadata/annotations/{pointer_key}"),
        "value": payload,
    }));
    serde_json::from_value(serde_json::Value::Array(ops)).expect("a well-formed patch")
}
