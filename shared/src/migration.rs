//! The migration request wire format OME consumes (omenative-reference.md §5): the value of
//! the InferenceService annotation `ome.io/migration-request-v1-<uuid>`.

use serde::{Deserialize, Serialize};

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

/// Reads a request payload: the JSON error, or `UnsupportedSchemaVersion: "<v>"`.
pub fn parse_request(payload: &str) -> Result<MigrationRequest, String> {
    let request: MigrationRequest = serde_json::from_str(payload).map_err(|e| e.to_string())?;
    if request.schema_version != SCHEMA_VERSION {
        return Err(format!(
            "UnsupportedSchemaVersion: {:?}",
            request.schema_version
        ));
    }
    Ok(request)
}
