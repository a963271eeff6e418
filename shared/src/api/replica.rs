//! InferenceReplica (ome.io/v1beta1, short name `irep`): one per OMENative component; its
//! status carries the per-Instance rows, retry blocks and migrations (omenative-reference.md
//! §1.5-§1.7).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::component::{ComponentKind, Runner};
use super::lifecycle::LifecycleSpec;
use super::schema;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "InferenceReplica",
    plural = "inferencereplicas",
    singular = "inferencereplica",
    shortname = "irep",
    namespaced,
    status = "InferenceReplicaStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn = r#"{"name":"Component","type":"string","jsonPath":".spec.component"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.component) || self.component == oldSelf.component", "message": "component is immutable"},
    {"rule": "!(has(self.runners) && size(self.runners) > 0 && (has(self.modelRef) || has(self.runtimeRef)))",
     "message": "runners and modelRef/runtimeRef are mutually exclusive"}
]))]
pub struct InferenceReplicaSpec {
    pub component: ComponentKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_ref: Option<ParentRef>,
    /// Desired Instances; unset or 0 runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runners: Vec<Runner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub model_ref: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub runtime_ref: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<PauseMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision_history_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread: Option<TopologySpreadMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairing_protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::open_object")]
    pub autoscaler: Option<serde_json::Value>,
}

impl InferenceReplicaSpec {
    /// Desired Instances: `replicas`, where nil or 0 runs one.
    pub fn desired_instances(&self) -> i32 {
        match self.replicas {
            None | Some(0) => 1,
            Some(n) => n,
        }
    }

    /// Pods of one Instance: the sum over runners.
    pub fn pods_per_instance(&self) -> i64 {
        if self.runners.is_empty() {
            1
        } else {
            self.runners.iter().map(Runner::pods_per_instance).sum()
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ParentRef {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pacing {
    /// Overrides `rollingUpdate.partition` when set; an explicit 0 releases all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub partition: Option<i32>,
    /// Reserved; no effect in v1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    pub max_unavailable: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to_revision: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PauseMode {
    Recover,
    Freeze,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TopologySpreadMode {
    Preferred,
    Required,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(has(self.instanceStatuses) && size(self.instanceStatuses) > 0 && has(self.instanceStatusColumns))",
     "message": "instanceStatuses and instanceStatusColumns are mutually exclusive"}
]))]
pub struct InferenceReplicaStatus {
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_hold: Option<RolloutHold>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_statuses: Vec<InstanceStatus>,
    /// `ColumnarV2` when the rows are encoded in `instanceStatusColumns`; absent (or
    /// `DenseV1`) for the plain list. Read the rows with [`InferenceReplicaStatus::rows`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_status_encoding: Option<String>,
    /// Kept as stored and decoded by [`InferenceReplicaStatus::rows`], so a malformed payload
    /// makes the component's observation invalid rather than the object unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<super::columnar::InstanceStatusColumns>")]
    pub instance_status_columns: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_blocks: Vec<RetryBlock>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<MigrationStatus>,
}

/// A status condition, read leniently (OME and Kubernetes fill different subsets).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHold {
    pub gate: HoldGate,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub since: Option<Time>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HoldGate {
    Plan,
    Pairing,
    Ratio,
    Sequential,
    Budget,
    RetryBlock,
    Held,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InstancePhase {
    Pending,
    Creating,
    Ready,
    Updating,
    Restarting,
    Migrating,
    Failed,
    Deleting,
}

// Without the compat fields readyPodCount, scheduledPodCount and nodesOccupied: OME computes
// them but never stores them, so a row read from the API server does not carry them.
/// One Instance's row (OMENativeInstanceStatus), as OME persists it; its ready pods are counted
/// from the pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub index: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<InstancePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_pod_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_pod_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub ready_since: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<InstanceOperation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub active_ordinal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub announced: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OperationType {
    Create,
    Update,
    Restart,
    Migrate,
    Delete,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceOperation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub type_: OperationType,
    /// `CreatePods`, `InPlace`, `Drain`, `Surge`, `SurgeDrain`, `SurgeDrainSettle`,
    /// `GangSurgeTarget`, `GangSurgeTargetCleanup`, `Parked`, `CreateSurge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_progress_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub deadline: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_index: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_node: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hint_target_nodes: Vec<String>,
    #[serde(
        default,
        rename = "requestUUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub request_uuid: Option<String>,
    /// The strategy pinned for this attempt (newer controllers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<super::lifecycle::UpdateStrategyType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub time: Option<Time>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RetryBlockState {
    Backoff,
    Held,
    RetryInProgress,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryBlock {
    pub target_revision: String,
    pub state: RetryBlockState,
    #[serde(default)]
    pub attempts_started: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub next_retry_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub first_failure_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_failure_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MigrationTrigger {
    Manual,
    Auto,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MigrationPhase {
    Accepted,
    SurgePending,
    SurgeReady,
    Draining,
    Completed,
    Failed,
    Relocated,
    Pending,
    InProgress,
}

impl MigrationPhase {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Relocated)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    #[serde(rename = "requestUUID")]
    pub request_uuid: String,
    pub trigger: MigrationTrigger,
    pub source_instance: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_instance: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub allocated_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_node: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hint_target_nodes: Vec<String>,
    pub phase: MigrationPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub deadline: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub completed_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
}
