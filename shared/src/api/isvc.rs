//! InferenceService (ome.io/v1beta1, short name `isvc`): the fields Alfred reads.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::component::{ComponentKind, ComponentSpec};
use super::replica::{Condition, RolloutHold};
use super::schema;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "InferenceService",
    plural = "inferenceservices",
    shortname = "isvc",
    namespaced,
    status = "InferenceServiceStatus",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.deploymentMode"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InferenceServiceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_mode: Option<SpecDeploymentMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Box<ComponentSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<Box<ComponentSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Box<ComponentSpec>>,
}

impl InferenceServiceSpec {
    pub fn component(&self, kind: ComponentKind) -> Option<&ComponentSpec> {
        match kind {
            ComponentKind::Engine => self.engine.as_deref(),
            ComponentKind::Decoder => self.decoder.as_deref(),
            ComponentKind::Router => self.router.as_deref(),
        }
    }

    /// The components this InferenceService declares, in engine, decoder, router order.
    pub fn components(&self) -> impl Iterator<Item = (ComponentKind, &ComponentSpec)> {
        ComponentKind::ALL
            .iter()
            .copied()
            .filter_map(|k| self.component(k).map(|c| (k, c)))
    }
}

/// `spec.deploymentMode` as the CRD admits it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SpecDeploymentMode {
    #[serde(rename = "OMENative")]
    OmeNative,
    RawDeployment,
}

/// `spec.model`: a BaseModel of that name in the namespace, else the ClusterBaseModel, as OME's
/// controller looks it up. `kind` and `apiGroup` are kept as stored (OME's CRD defaults `kind:
/// ClusterBaseModel` onto every object) and change nothing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "ClusterBaseModel"))]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
}

/// `spec.runtime`: a ServingRuntime of that name in the namespace, else the
/// ClusterServingRuntime ([`RuntimeKind::LOOKUP_ORDER`]). `kind` and `apiGroup` are kept as
/// stored (OME's CRD defaults `kind: ClusterServingRuntime`) and change nothing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "ClusterServingRuntime"))]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RuntimeKind {
    ServingRuntime,
    ClusterServingRuntime,
}

impl RuntimeKind {
    /// Where OME looks for a runtime, whatever the reference's `kind` says: the namespace's
    /// ServingRuntime first, then the ClusterServingRuntime.
    pub const LOOKUP_ORDER: [RuntimeKind; 2] = [Self::ServingRuntime, Self::ClusterServingRuntime];
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InferenceServiceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Per component (`engine`, `decoder`, `router`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ComponentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleStatus>,
}

/// The InferenceReplica's status as mirrored on the InferenceService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LifecycleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_hold: Option<RolloutHold>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_transition_time: Option<Time>,
}
