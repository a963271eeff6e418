//! BaseModel and ClusterBaseModel: OME's own kinds, of which Alfred reads only where a
//! model lives. The CRDs generated from these are minimal copies for tests and the demo.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// The fields both model kinds share.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ModelFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<ModelStorage>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ModelStorage {
    /// For example `hf://org/model`, `oci://...`, or `pvc://<claim>/<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Nodes the model agent downloads to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub node_selector: BTreeMap<String, String>,
}

impl ModelStorage {
    /// The claim name when the model is served from a PersistentVolumeClaim (`pvc://claim/path`).
    pub fn pvc_claim(&self) -> Option<&str> {
        let rest = self.storage_uri.as_deref()?.strip_prefix("pvc://")?;
        let claim = rest.split('/').next().unwrap_or_default();
        (!claim.is_empty()).then_some(claim)
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "BaseModel",
    plural = "basemodels",
    namespaced
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BaseModelSpec {
    #[serde(flatten)]
    pub fields: ModelFields,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "ClusterBaseModel",
    plural = "clusterbasemodels"
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterBaseModelSpec {
    #[serde(flatten)]
    pub fields: ModelFields,
}

/// The node label OME's model agent sets to `Ready` where a ClusterBaseModel is present.
pub fn cluster_model_label(name: &str) -> String {
    format!("models.ome.io/clusterbasemodel.{name}")
}

/// The node label OME's model agent sets to `Ready` where a namespaced BaseModel is present.
pub fn namespaced_model_label(namespace: &str, name: &str) -> String {
    format!("models.ome.io/{namespace}.basemodel.{name}")
}
