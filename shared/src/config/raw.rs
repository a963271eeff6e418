//! The configuration document as written: every key optional, unknown keys refused.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    pub(super) schema_version: Option<i64>,
    pub(super) mode: Option<String>,
    pub(super) decision_loop_interval: Option<String>,
    pub(super) observation_loop_interval: Option<String>,
    pub(super) early_tick_on: Option<Vec<String>>,
    pub(super) policies: Option<RawPolicies>,
    pub(super) default_movable: Option<bool>,
    pub(super) recent_placement_cooldown_minutes: Option<i64>,
    pub(super) per_workload_cooldown_minutes: Option<i64>,
    pub(super) per_node_cooldown_minutes: Option<i64>,
    pub(super) raw_deployment_migration_enabled: Option<bool>,
    pub(super) omenative_migration_enabled: Option<bool>,
    pub(super) lws_recommendations_enabled: Option<bool>,
    pub(super) recommendations_config_map_enabled: Option<bool>,
    pub(super) recommendations_config_map_name: Option<String>,
    pub(super) max_in_flight_migrations: Option<i64>,
    pub(super) max_migrations_per_hour: Option<i64>,
    pub(super) emergency_pending_age_minutes: Option<i64>,
    pub(super) maintenance_windows: Option<Vec<RawWindow>>,
    pub(super) spot_policy: Option<RawSpotPolicy>,
    pub(super) allow_cross_tenant_optimization: Option<bool>,
    pub(super) log_level: Option<String>,
    pub(super) structured_logging: Option<bool>,
    pub(super) scheduling: Option<RawScheduling>,
    pub(super) migration: Option<RawMigration>,
    // Keys of OME's newer Alfred that load and are reported as not used.
    pub(super) omenative_capability_lease_name: Option<String>,
    pub(super) omenative_capability_lease_namespace: Option<String>,
    pub(super) omenative_capability_max_staleness: Option<String>,
    pub(super) tpu_slice_migration_enabled: Option<bool>,
    pub(super) tpu_slice_partitions: Option<RawTpuSlicePartitions>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawTpuSlicePartitions {
    pub(super) topology_label: Option<String>,
    pub(super) id_label: Option<String>,
    pub(super) state_label: Option<String>,
    pub(super) healthy_state: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPolicies {
    pub(super) defragmentation: Option<RawDefragmentation>,
    pub(super) node_health: Option<RawNodeHealth>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDefragmentation {
    pub(super) enabled: Option<bool>,
    pub(super) fragmentation_threshold: Option<f64>,
    pub(super) aggressiveness: Option<String>,
    pub(super) scoring: Option<RawScoring>,
    pub(super) follow_plan: Option<bool>,
    pub(super) hold_minutes: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawScoring {
    pub(super) size_ladder: Option<Vec<i64>>,
    pub(super) demand_blend_lambda: Option<f64>,
    pub(super) size_prior: Option<BTreeMap<String, f64>>,
    pub(super) pending_urgency_tau_minutes: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNodeHealth {
    pub(super) enabled: Option<bool>,
    pub(super) aggressiveness: Option<String>,
    pub(super) trigger_conditions: Option<Vec<String>>,
    pub(super) signal_only: Option<bool>,
    pub(super) health_cooldown_floor_minutes: Option<i64>,
    pub(super) node_suspicion_window_minutes: Option<i64>,
    pub(super) maintenance: Option<RawMaintenance>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMaintenance {
    pub(super) triggers: Option<Vec<RawTrigger>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTrigger {
    pub(super) name: Option<String>,
    pub(super) condition: Option<RawConditionMatch>,
    pub(super) label: Option<RawLabelMatch>,
    pub(super) taint: Option<RawTaintMatch>,
    pub(super) cordon: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConditionMatch {
    #[serde(rename = "type")]
    pub(super) type_: Option<String>,
    pub(super) status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawLabelMatch {
    pub(super) key: Option<String>,
    pub(super) value: Option<String>,
    pub(super) value_is_start_time: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTaintMatch {
    pub(super) key: Option<String>,
    pub(super) value: Option<String>,
    pub(super) effect: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    pub(super) days: Option<Vec<String>>,
    pub(super) start: Option<String>,
    pub(super) end: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSpotPolicy {
    pub(super) avoid_as_target: Option<bool>,
    pub(super) prefer_as_source: Option<bool>,
    pub(super) preemptible_labels: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduling {
    pub(super) profiles: Option<BTreeMap<String, RawProfile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProfile {
    pub(super) backend: Option<String>,
    pub(super) scheduler_version: Option<String>,
    #[serde(rename = "configurationID")]
    pub(super) configuration_id: Option<String>,
    pub(super) gang_scheduling: Option<bool>,
    pub(super) scoring_strategy: Option<String>,
    pub(super) scoring_resources: Option<Vec<RawScoringResource>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScoringResource {
    pub(super) name: String,
    pub(super) weight: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMigration {
    pub(super) api_version: Option<String>,
    pub(super) acknowledgement_timeout: Option<String>,
    pub(super) failure_backoff: Option<String>,
}
