//! Component specs (engine, decoder, router) as an InferenceService declares them and as a
//! serving runtime's `engineConfig`/`decoderConfig`/`routerConfig` carry them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, PodTemplateSpec, Toleration, TopologySpreadConstraint, Volume,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::lifecycle::LifecycleSpec;
use super::schema;

crate::named! {
    /// The three component kinds, in the order OME checks them.
    #[derive(Serialize, Deserialize, PartialOrd, Ord, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    pub enum ComponentKind {
        Engine = "engine",
        Decoder = "decoder",
        Router = "router",
    }
}

/// The pod-spec fields the policies read. Everything else in the pod spec is kept by the
/// API server (the CRD leaves these objects open) but ignored here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodParts {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::open_object_list")]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::open_object_list")]
    pub init_containers: Vec<Container>,
    /// OME's main container, merged over the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub runner: Option<Box<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub affinity: Option<Box<Affinity>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::open_object_list")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::open_object_list")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::open_object_list")]
    pub volumes: Vec<Volume>,
}

/// The leader of a multi-pod Instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderSpec {
    #[serde(flatten)]
    pub pod: PodParts,
}

/// The workers of a multi-pod Instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSpec {
    /// Worker pods per Instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size: Option<i32>,
    #[serde(flatten)]
    pub pod: PodParts,
}

/// A component as an InferenceService or a runtime declares it.
// The large optional parts are boxed: most components have none, and a snapshot may hold
// 20,000 InferenceServices.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ComponentSpec {
    /// Annotations for the component's pods; `ome.io/deploymentMode` here picks the mode.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_replicas: Option<i32>,
    #[serde(flatten)]
    pub pod: PodParts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<Box<LeaderSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Box<WorkerSpec>>,
    /// RawDeployment's rollout pacing; ignored on OMENative components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub deployment_strategy: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleSpec>,
}

impl ComponentSpec {
    /// True when the component runs a leader and workers (a multi-pod Instance).
    pub fn is_multi_pod(&self) -> bool {
        self.leader.is_some() || self.worker.is_some()
    }
}

/// A runner of an InferenceReplica: `default`, or `leader` and `worker`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Runner {
    pub name: RunnerName,
    /// Pods of this runner per Instance (default and leader: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub size: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub template: Option<PodTemplateSpec>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunnerName {
    #[default]
    Default,
    Leader,
    Worker,
}

impl Runner {
    pub fn pods_per_instance(&self) -> i64 {
        match self.name {
            RunnerName::Worker => i64::from(self.size.unwrap_or(1).max(1)),
            RunnerName::Default | RunnerName::Leader => 1,
        }
    }
}
