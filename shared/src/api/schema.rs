//! Schema helpers for the generated CRDs: parts we type in Rust but leave open in the CRD.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose unknown fields the API server keeps (pod-spec parts we only partly read).
pub fn open_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A list of open objects.
pub fn open_object_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// A string map such as labels or annotations.
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "additionalProperties": { "type": "string" } })
}

/// A budget: an integer of 0 or more, or a percent string from "0%" to "100%".
pub fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [{
            "rule": "type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",
            "message": "must be an integer count of 0 or more or a percent string like \"25%\" between 0% and 100%"
        }]
    })
}

/// A Kubernetes duration string such as `45m` or `1h30m`.
pub fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
    })
}

/// An RFC 3339 timestamp.
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

/// An index set of the ColumnarV2 form: terms such as `7` or `0-3`, comma-separated.
pub fn index_set(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$"
    })
}
