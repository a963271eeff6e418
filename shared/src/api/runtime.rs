//! ServingRuntime and ClusterServingRuntime: the component configs a runtime supplies.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::component::{ComponentKind, ComponentSpec};

/// The fields both runtime kinds share.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_config: Option<Box<ComponentSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_config: Option<Box<ComponentSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_config: Option<Box<ComponentSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

impl RuntimeFields {
    pub fn component(&self, kind: ComponentKind) -> Option<&ComponentSpec> {
        match kind {
            ComponentKind::Engine => self.engine_config.as_deref(),
            ComponentKind::Decoder => self.decoder_config.as_deref(),
            ComponentKind::Router => self.router_config.as_deref(),
        }
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "ServingRuntime",
    plural = "servingruntimes",
    namespaced
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ServingRuntimeSpec {
    #[serde(flatten)]
    pub fields: RuntimeFields,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "ClusterServingRuntime",
    plural = "clusterservingruntimes"
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterServingRuntimeSpec {
    #[serde(flatten)]
    pub fields: RuntimeFields,
}
