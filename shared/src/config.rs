//! Alfred's configuration: `alfredConfig` in the chart's shape (alfred-reference.md §1), read
//! from YAML (a file, or key `config.yaml` of the `alfred-config` ConfigMap). Every default lives
//! in [`Config::default`]; [`Config::parse`] reports the first violation in the documented form.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::SignedDuration;
use serde::Deserialize;

use crate::kubernetes::duration::{format_go_duration, parse_go_duration};

/// The ConfigMap holding the configuration, and its key.
pub const CONFIG_MAP_NAME: &str = "alfred-config";
pub const CONFIG_MAP_KEY: &str = "config.yaml";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not YAML, an unknown or duplicate key, or a wrong type.
    #[error("parse config.yaml: {0}")]
    Parse(String),
    #[error("unsupported schemaVersion {0} (supported: 1)")]
    SchemaVersion(i64),
    /// The first rule the document breaks, e.g.
    /// `policies.defragmentation.fragmentationThreshold must be in [0, 1], got 1.5`.
    #[error("{0}")]
    Invalid(String),
}

crate::named! {
    /// Alfred's `mode`: advice only, or moves under the arbiter (not a workload's
    /// [`crate::mode::DeploymentMode`]).
    pub enum OperatingMode {
        RecommendOnly = "recommend-only",
        Execute = "execute",
    }
}

crate::named! {
    #[derive(PartialOrd, Ord)]
    pub enum Aggressiveness {
        Conservative = "conservative",
        Balanced = "balanced",
        Aggressive = "aggressive",
    }
}

impl Aggressiveness {
    /// The cost weight applied to the base move cost of 0.15.
    pub fn cost_weight(self) -> f64 {
        match self {
            Self::Conservative => 1.5,
            Self::Balanced => 1.0,
            Self::Aggressive => 0.5,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyTick {
    NodeConditionChange,
    NodeMaintenanceChange,
}

/// The resolved configuration, every key with its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub mode: OperatingMode,
    pub decision_loop_interval: SignedDuration,
    pub observation_loop_interval: SignedDuration,
    pub early_tick_on: Vec<EarlyTick>,
    pub defragmentation: Defragmentation,
    pub node_health: NodeHealth,
    pub default_movable: bool,
    pub recent_placement_cooldown_minutes: i64,
    pub per_workload_cooldown_minutes: i64,
    pub per_node_cooldown_minutes: i64,
    pub raw_deployment_migration_enabled: bool,
    pub omenative_migration_enabled: bool,
    pub lws_recommendations_enabled: bool,
    pub recommendations_config_map_enabled: bool,
    pub recommendations_config_map_name: String,
    pub max_in_flight_migrations: i64,
    pub max_migrations_per_hour: i64,
    pub emergency_pending_age_minutes: i64,
    pub maintenance_windows: Vec<MaintenanceWindow>,
    pub spot_policy: SpotSettings,
    pub allow_cross_tenant_optimization: bool,
    pub log_level: String,
    pub structured_logging: bool,
    pub scheduling_profiles: BTreeMap<String, SchedulingProfile>,
    /// The chart's `migration.*` values, which a plugin user sets here.
    pub migration: Migration,
    /// Keys of OME's Alfred that load but that this plugin does not act on, with the reason;
    /// the plugin reports each once.
    pub unused: Vec<UnusedKey>,
}

/// Keys that were read and are not used (those of one feature together), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnusedKey {
    pub keys: Vec<&'static str>,
    pub reason: &'static str,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Defragmentation {
    pub enabled: bool,
    pub fragmentation_threshold: f64,
    pub aggressiveness: Aggressiveness,
    pub size_ladder: Vec<i64>,
    pub demand_blend_lambda: f64,
    /// Prior weight per ladder size, normalised to sum to 1.
    pub size_prior: BTreeMap<i64, f64>,
    pub pending_urgency_tau_minutes: i64,
    /// Beyond the reference (`followPlan`, off by default): each pool's defragmentation
    /// candidate is the next step of the fewest-move consolidation plan, valued at the
    /// plan's fragmentation drop in the pool instead of the single move's.
    pub follow_plan: bool,
    /// Beyond the reference (`holdMinutes`, 0 and off by default; needs `followPlan`): execute
    /// mode holds the node a plan action empties for the waiting pod it is for, for at most
    /// this many minutes (the consolidation plan's `persist`).
    pub hold_minutes: i64,
}

impl Defragmentation {
    /// Holds are on: the policy runs, follows the plan, and `holdMinutes` is set.
    pub fn holding(&self) -> bool {
        self.enabled && self.follow_plan && self.hold_minutes > 0
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeHealth {
    pub enabled: bool,
    pub aggressiveness: Aggressiveness,
    pub trigger_conditions: Vec<String>,
    pub signal_only: bool,
    pub health_cooldown_floor_minutes: i64,
    pub node_suspicion_window_minutes: i64,
    pub maintenance_triggers: Vec<MaintenanceTrigger>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceTrigger {
    pub name: String,
    pub matcher: TriggerMatcher,
    /// OME's `cordon`: a node this trigger puts under maintenance is cordoned (only by
    /// `migrate --enable-maintenance-cordon`, never uncordoned).
    pub cordon: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerMatcher {
    Condition {
        type_: String,
        status: String,
    },
    Label {
        key: String,
        value: LabelValue,
    },
    Taint {
        key: String,
        value: Option<String>,
        effect: Option<String>,
    },
}

/// What a label trigger asks of the label's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelValue {
    /// `value` absent: any value.
    Any,
    /// `value: X`: exactly X (`""` only the empty value).
    Exactly(String),
    /// `valueIsStartTime: true`: the value is the Unix time, in whole seconds, from which the
    /// trigger matches; a value that is not such a number matches at once (a start time may
    /// delay maintenance, never cancel it).
    StartTime,
}

/// Days are Monday = 0 .. Sunday = 6; times are minutes after midnight UTC, start < end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceWindow {
    pub days: BTreeSet<u8>,
    pub start_minute: u32,
    pub end_minute: u32,
}

pub const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// How spot nodes are treated cluster-wide; a workload's own choice is its
/// [`crate::annotations::SpotPolicy`].
#[derive(Clone, Debug, PartialEq)]
pub struct SpotSettings {
    pub avoid_as_target: bool,
    pub prefer_as_source: bool,
    pub preemptible_labels: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulingProfile {
    pub backend: String,
    pub scheduler_version: String,
    pub configuration_id: String,
    pub gang_scheduling: bool,
    /// How the profile's NodeResourcesFit scores nodes (our extension of the key set; the
    /// built-in simulator needs it to predict placements).
    pub scoring_strategy: ScoringStrategy,
    /// The resources that score weighs, with their weights: kube-scheduler's
    /// `scoringStrategy.resources`, cpu and memory (1 each) unless set.
    pub scoring_resources: Vec<(String, i64)>,
}

/// kube-scheduler's default `scoringStrategy.resources`.
pub fn default_scoring_resources() -> Vec<(String, i64)> {
    vec![("cpu".into(), 1), ("memory".into(), 1)]
}

/// NodeResourcesFit's scoring: spread (kube-scheduler's default) or bin-pack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoringStrategy {
    #[default]
    LeastAllocated,
    MostAllocated,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Migration {
    /// `Some("v1")` enables OMENative migration requests; empty by default.
    pub api_version: Option<String>,
    pub acknowledgement_timeout: SignedDuration,
    pub failure_backoff: SignedDuration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: OperatingMode::RecommendOnly,
            decision_loop_interval: SignedDuration::from_mins(5),
            observation_loop_interval: SignedDuration::from_secs(30),
            early_tick_on: vec![
                EarlyTick::NodeConditionChange,
                EarlyTick::NodeMaintenanceChange,
            ],
            defragmentation: Defragmentation {
                enabled: true,
                fragmentation_threshold: 0.25,
                aggressiveness: Aggressiveness::Balanced,
                size_ladder: default_size_ladder(),
                demand_blend_lambda: 0.3,
                size_prior: default_size_prior(),
                pending_urgency_tau_minutes: 30,
                follow_plan: false,
                hold_minutes: 0,
            },
            node_health: NodeHealth {
                enabled: true,
                aggressiveness: Aggressiveness::Balanced,
                trigger_conditions: vec!["GpuUnhealthy".into()],
                signal_only: false,
                health_cooldown_floor_minutes: 5,
                node_suspicion_window_minutes: 30,
                maintenance_triggers: Vec::new(),
            },
            default_movable: true,
            recent_placement_cooldown_minutes: 10,
            per_workload_cooldown_minutes: 30,
            per_node_cooldown_minutes: 10,
            raw_deployment_migration_enabled: false,
            omenative_migration_enabled: true,
            lws_recommendations_enabled: true,
            recommendations_config_map_enabled: true,
            recommendations_config_map_name: "alfred-recommendations".into(),
            max_in_flight_migrations: 3,
            max_migrations_per_hour: 10,
            emergency_pending_age_minutes: 10,
            maintenance_windows: Vec::new(),
            spot_policy: SpotSettings {
                avoid_as_target: true,
                prefer_as_source: true,
                preemptible_labels: vec![
                    "node.kubernetes.io/preemptible".into(),
                    "cloud.google.com/gke-preemptible".into(),
                ],
            },
            allow_cross_tenant_optimization: true,
            log_level: "info".into(),
            structured_logging: true,
            scheduling_profiles: BTreeMap::new(),
            migration: Migration {
                api_version: None,
                acknowledgement_timeout: SignedDuration::from_mins(2),
                failure_backoff: SignedDuration::from_mins(5),
            },
            unused: Vec::new(),
        }
    }
}

fn default_size_ladder() -> Vec<i64> {
    vec![1, 2, 4, 8]
}

fn default_size_prior() -> BTreeMap<i64, f64> {
    [(1, 0.1), (2, 0.1), (4, 0.2), (8, 0.6)].into()
}

impl Config {
    /// How many of the consolidation plan's actions the budget feeds at once with holds on
    /// (`holdMinutes`; 0 with holds off): as many nodes as the hourly budget can feed a move
    /// each while each waits out its node cooldown, so no budget is left behind one cooldown.
    pub fn emptied_at_once(&self) -> usize {
        if !self.defragmentation.holding() {
            return 0;
        }
        let moves = self.max_migrations_per_hour.max(1) * self.per_node_cooldown_minutes.max(0);
        ((moves + 59) / 60).max(1) as usize
    }

    /// True when moves may be requested: execute mode with the v1 migration API.
    pub fn migration_api_available(&self) -> bool {
        self.migration.api_version.as_deref() == Some("v1")
    }

    /// Reads and validates a `config.yaml` document.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            crate::input::read_one(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        raw.resolve()
    }
}

// ---------------------------------------------------------------------------------------------
// The document as written: every key optional, unknown keys refused.

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    schema_version: Option<i64>,
    mode: Option<String>,
    decision_loop_interval: Option<String>,
    observation_loop_interval: Option<String>,
    early_tick_on: Option<Vec<String>>,
    policies: Option<RawPolicies>,
    default_movable: Option<bool>,
    recent_placement_cooldown_minutes: Option<i64>,
    per_workload_cooldown_minutes: Option<i64>,
    per_node_cooldown_minutes: Option<i64>,
    raw_deployment_migration_enabled: Option<bool>,
    omenative_migration_enabled: Option<bool>,
    lws_recommendations_enabled: Option<bool>,
    recommendations_config_map_enabled: Option<bool>,
    recommendations_config_map_name: Option<String>,
    max_in_flight_migrations: Option<i64>,
    max_migrations_per_hour: Option<i64>,
    emergency_pending_age_minutes: Option<i64>,
    maintenance_windows: Option<Vec<RawWindow>>,
    spot_policy: Option<RawSpotPolicy>,
    allow_cross_tenant_optimization: Option<bool>,
    log_level: Option<String>,
    structured_logging: Option<bool>,
    scheduling: Option<RawScheduling>,
    migration: Option<RawMigration>,
    // Keys of OME's newer Alfred that load and are reported as not used.
    omenative_capability_lease_name: Option<String>,
    omenative_capability_lease_namespace: Option<String>,
    omenative_capability_max_staleness: Option<String>,
    tpu_slice_migration_enabled: Option<bool>,
    tpu_slice_partitions: Option<RawTpuSlicePartitions>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTpuSlicePartitions {
    topology_label: Option<String>,
    id_label: Option<String>,
    state_label: Option<String>,
    healthy_state: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPolicies {
    defragmentation: Option<RawDefragmentation>,
    node_health: Option<RawNodeHealth>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDefragmentation {
    enabled: Option<bool>,
    fragmentation_threshold: Option<f64>,
    aggressiveness: Option<String>,
    scoring: Option<RawScoring>,
    follow_plan: Option<bool>,
    hold_minutes: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawScoring {
    size_ladder: Option<Vec<i64>>,
    demand_blend_lambda: Option<f64>,
    size_prior: Option<BTreeMap<String, f64>>,
    pending_urgency_tau_minutes: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNodeHealth {
    enabled: Option<bool>,
    aggressiveness: Option<String>,
    trigger_conditions: Option<Vec<String>>,
    signal_only: Option<bool>,
    health_cooldown_floor_minutes: Option<i64>,
    node_suspicion_window_minutes: Option<i64>,
    maintenance: Option<RawMaintenance>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMaintenance {
    triggers: Option<Vec<RawTrigger>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrigger {
    name: Option<String>,
    condition: Option<RawConditionMatch>,
    label: Option<RawLabelMatch>,
    taint: Option<RawTaintMatch>,
    cordon: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConditionMatch {
    #[serde(rename = "type")]
    type_: Option<String>,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLabelMatch {
    key: Option<String>,
    value: Option<String>,
    value_is_start_time: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTaintMatch {
    key: Option<String>,
    value: Option<String>,
    effect: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    days: Option<Vec<String>>,
    start: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSpotPolicy {
    avoid_as_target: Option<bool>,
    prefer_as_source: Option<bool>,
    preemptible_labels: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawScheduling {
    profiles: Option<BTreeMap<String, RawProfile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProfile {
    backend: Option<String>,
    scheduler_version: Option<String>,
    #[serde(rename = "configurationID")]
    configuration_id: Option<String>,
    gang_scheduling: Option<bool>,
    scoring_strategy: Option<String>,
    scoring_resources: Option<Vec<RawScoringResource>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScoringResource {
    name: String,
    weight: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMigration {
    api_version: Option<String>,
    acknowledgement_timeout: Option<String>,
    failure_backoff: Option<String>,
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid(message)
}

/// An integer key where 0 (or absent) means the default and negatives fail.
fn positive_or_default(key: &str, value: Option<i64>, default: i64) -> Result<i64, ConfigError> {
    match value {
        None | Some(0) => Ok(default),
        Some(v) if v < 0 => Err(invalid(format!(
            "{key} must be > 0 (0 means the default {default}), got {v}"
        ))),
        Some(v) => Ok(v),
    }
}

/// The longest window a minutes key may give: ten years. Longer is a typo, and past about
/// 1.5e17 minutes a duration cannot even hold it.
pub const MAX_MINUTES: i64 = 10 * 365 * 24 * 60;

/// A minutes key: 0 (or absent) means the default, negatives fail, and so does a window over
/// [`MAX_MINUTES`].
fn minutes_or_default(key: &str, value: Option<i64>, default: i64) -> Result<i64, ConfigError> {
    let minutes = positive_or_default(key, value, default)?;
    if minutes > MAX_MINUTES {
        return Err(invalid(format!(
            "{key} must be at most {MAX_MINUTES} (ten years), got {minutes}"
        )));
    }
    Ok(minutes)
}

/// A duration key where 0 (or absent) means the default and negatives fail.
fn duration_or_default(
    key: &str,
    value: Option<&str>,
    default: SignedDuration,
    min: SignedDuration,
    max: Option<SignedDuration>,
) -> Result<SignedDuration, ConfigError> {
    let Some(text) = value else {
        return Ok(default);
    };
    let d = parse_go_duration(text).map_err(|e| invalid(format!("{key}: {e}")))?;
    if d.is_zero() {
        return Ok(default);
    }
    if d.is_negative() || d < min {
        let bound = if min <= SignedDuration::from_nanos(1) {
            "> 0s".to_string()
        } else {
            format!(">= {}", format_go_duration(min))
        };
        return Err(invalid(format!("{key} must be {bound}, got {text}")));
    }
    if let Some(max) = max
        && d > max
    {
        return Err(invalid(format!(
            "{key} must be <= {}, got {text}",
            format_go_duration(max)
        )));
    }
    Ok(d)
}

fn unit_interval(key: &str, value: Option<f64>, default: f64) -> Result<f64, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Some(v) => Err(invalid(format!("{key} must be in [0, 1], got {v}"))),
    }
}

fn aggressiveness(key: &str, value: Option<&str>) -> Result<Aggressiveness, ConfigError> {
    match value {
        None => Ok(Aggressiveness::Balanced),
        Some(text) => Aggressiveness::parse(text).ok_or_else(|| {
            invalid(format!(
                "{key} must be one of conservative, balanced, aggressive, got {text:?}"
            ))
        }),
    }
}

impl RawConfig {
    fn resolve(self) -> Result<Config, ConfigError> {
        let d = Config::default();
        match self.schema_version {
            Some(1) => {}
            Some(v) => return Err(ConfigError::SchemaVersion(v)),
            None => return Err(invalid("schemaVersion is required and must be 1".into())),
        }
        let mode = match self.mode.as_deref() {
            None => OperatingMode::RecommendOnly,
            Some(text) => OperatingMode::parse(text).ok_or_else(|| {
                invalid(format!(
                    "mode must be one of recommend-only, execute, got {text:?}"
                ))
            })?,
        };
        let second = SignedDuration::from_secs(1);
        let decision_loop_interval = duration_or_default(
            "decisionLoopInterval",
            self.decision_loop_interval.as_deref(),
            d.decision_loop_interval,
            second,
            None,
        )?;
        let observation_loop_interval = duration_or_default(
            "observationLoopInterval",
            self.observation_loop_interval.as_deref(),
            d.observation_loop_interval,
            second,
            None,
        )?;
        let early_tick_on = match self.early_tick_on {
            None => d.early_tick_on.clone(),
            Some(list) => {
                let mut out = Vec::new();
                for item in list {
                    let tick = match item.as_str() {
                        "NodeConditionChange" => EarlyTick::NodeConditionChange,
                        "NodeMaintenanceChange" => EarlyTick::NodeMaintenanceChange,
                        _ => {
                            return Err(invalid(format!(
                                "earlyTickOn entries must be NodeConditionChange or NodeMaintenanceChange, got {item:?}"
                            )));
                        }
                    };
                    if out.contains(&tick) {
                        return Err(invalid(format!("earlyTickOn lists {item} twice")));
                    }
                    out.push(tick);
                }
                out
            }
        };
        let policies = self.policies.unwrap_or_default();
        let defragmentation =
            resolve_defragmentation(policies.defragmentation.unwrap_or_default(), &d)?;
        let node_health = resolve_node_health(policies.node_health.unwrap_or_default(), &d)?;
        let recent_placement_cooldown_minutes = minutes_or_default(
            "recentPlacementCooldownMinutes",
            self.recent_placement_cooldown_minutes,
            d.recent_placement_cooldown_minutes,
        )?;
        let per_workload_cooldown_minutes = minutes_or_default(
            "perWorkloadCooldownMinutes",
            self.per_workload_cooldown_minutes,
            d.per_workload_cooldown_minutes,
        )?;
        let per_node_cooldown_minutes = minutes_or_default(
            "perNodeCooldownMinutes",
            self.per_node_cooldown_minutes,
            d.per_node_cooldown_minutes,
        )?;
        let recommendations_config_map_name = match self.recommendations_config_map_name {
            None => d.recommendations_config_map_name.clone(),
            Some(name) if crate::kubernetes::names::is_dns1123_subdomain(&name) => name,
            Some(name) => {
                return Err(invalid(format!(
                    "recommendationsConfigMapName must be a DNS-1123 subdomain, got {name:?}"
                )));
            }
        };
        let max_in_flight_migrations = positive_or_default(
            "maxInFlightMigrations",
            self.max_in_flight_migrations,
            d.max_in_flight_migrations,
        )?;
        let max_migrations_per_hour = positive_or_default(
            "maxMigrationsPerHour",
            self.max_migrations_per_hour,
            d.max_migrations_per_hour,
        )?;
        let emergency_pending_age_minutes = minutes_or_default(
            "emergencyPendingAgeMinutes",
            self.emergency_pending_age_minutes,
            d.emergency_pending_age_minutes,
        )?;
        let maintenance_windows = self
            .maintenance_windows
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, w)| resolve_window(i, w))
            .collect::<Result<Vec<_>, _>>()?;
        let spot = self.spot_policy.unwrap_or_default();
        let preemptible_labels = match spot.preemptible_labels {
            None => d.spot_policy.preemptible_labels.clone(),
            Some(labels) => {
                for (i, label) in labels.iter().enumerate() {
                    if !crate::kubernetes::names::is_qualified_name(label) {
                        return Err(invalid(format!(
                            "spotPolicy.preemptibleLabels[{i}] must be a label key (a Kubernetes qualified name), got {label:?}"
                        )));
                    }
                }
                labels
            }
        };
        let scheduling_profiles = resolve_profiles(self.scheduling.unwrap_or_default())?;
        let migration = resolve_migration(self.migration.unwrap_or_default(), &d)?;
        let unused = [
            resolve_capability_lease(
                self.omenative_capability_lease_name,
                self.omenative_capability_lease_namespace,
                self.omenative_capability_max_staleness,
            )?,
            resolve_tpu_slices(self.tpu_slice_migration_enabled, self.tpu_slice_partitions)?,
            (defragmentation.hold_minutes > 0 && !defragmentation.follow_plan).then_some(
                UnusedKey {
                    keys: vec!["policies.defragmentation.holdMinutes"],
                    reason: "a hold keeps the room a plan action frees, so it needs \
                        policies.defragmentation.followPlan: true",
                },
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(Config {
            mode,
            decision_loop_interval,
            observation_loop_interval,
            early_tick_on,
            defragmentation,
            node_health,
            default_movable: self.default_movable.unwrap_or(d.default_movable),
            recent_placement_cooldown_minutes,
            per_workload_cooldown_minutes,
            per_node_cooldown_minutes,
            raw_deployment_migration_enabled: self
                .raw_deployment_migration_enabled
                .unwrap_or(d.raw_deployment_migration_enabled),
            omenative_migration_enabled: self
                .omenative_migration_enabled
                .unwrap_or(d.omenative_migration_enabled),
            lws_recommendations_enabled: self
                .lws_recommendations_enabled
                .unwrap_or(d.lws_recommendations_enabled),
            recommendations_config_map_enabled: self
                .recommendations_config_map_enabled
                .unwrap_or(d.recommendations_config_map_enabled),
            recommendations_config_map_name,
            max_in_flight_migrations,
            max_migrations_per_hour,
            emergency_pending_age_minutes,
            maintenance_windows,
            spot_policy: SpotSettings {
                avoid_as_target: spot
                    .avoid_as_target
                    .unwrap_or(d.spot_policy.avoid_as_target),
                prefer_as_source: spot
                    .prefer_as_source
                    .unwrap_or(d.spot_policy.prefer_as_source),
                preemptible_labels,
            },
            allow_cross_tenant_optimization: self
                .allow_cross_tenant_optimization
                .unwrap_or(d.allow_cross_tenant_optimization),
            log_level: self.log_level.unwrap_or(d.log_level),
            structured_logging: self.structured_logging.unwrap_or(d.structured_logging),
            scheduling_profiles,
            migration,
            unused,
        })
    }
}

/// OME's executor capability Lease keys: checked as OME checks them, then reported unused.
fn resolve_capability_lease(
    name: Option<String>,
    namespace: Option<String>,
    max_staleness: Option<String>,
) -> Result<Option<UnusedKey>, ConfigError> {
    let mut keys = Vec::new();
    if let Some(name) = name {
        if !crate::kubernetes::names::is_dns1123_subdomain(&name) {
            return Err(invalid(format!(
                "omenativeCapabilityLeaseName must be a non-empty DNS-1123 subdomain, got {name:?}"
            )));
        }
        keys.push("omenativeCapabilityLeaseName");
    }
    if let Some(namespace) = namespace {
        if !crate::kubernetes::names::is_dns1123_label(&namespace) {
            return Err(invalid(format!(
                "omenativeCapabilityLeaseNamespace must be a non-empty namespace name (a DNS-1123 label), got {namespace:?}"
            )));
        }
        keys.push("omenativeCapabilityLeaseNamespace");
    }
    if let Some(text) = max_staleness {
        // OME's bound: three heartbeats of 10 s; unlike other durations, 0 is refused.
        let d = parse_go_duration(&text)
            .map_err(|e| invalid(format!("omenativeCapabilityMaxStaleness: {e}")))?;
        if d < SignedDuration::from_secs(30) {
            return Err(invalid(format!(
                "omenativeCapabilityMaxStaleness must be >= 30s, got {text}"
            )));
        }
        keys.push("omenativeCapabilityMaxStaleness");
    }
    Ok((!keys.is_empty()).then_some(UnusedKey {
        keys,
        reason: "the plugin learns whether OME executes migration requests from \
            migration.apiVersion and each request's acknowledgement, not from OME's executor \
            capability Lease",
    }))
}

/// OME's TPU slice keys: checked as OME checks them, then reported unused.
fn resolve_tpu_slices(
    enabled: Option<bool>,
    partitions: Option<RawTpuSlicePartitions>,
) -> Result<Option<UnusedKey>, ConfigError> {
    const P: &str = "tpuSlicePartitions";
    // Off (OME's default) is nothing to report.
    let mut keys: Vec<&'static str> = Vec::new();
    if enabled == Some(true) {
        keys.push("tpuSliceMigrationEnabled");
    }
    if let Some(p) = partitions {
        let topology = p
            .topology_label
            .unwrap_or_else(|| "cloud.google.com/gke-tpu-topology".into());
        if !crate::kubernetes::names::is_qualified_name(&topology) {
            return Err(invalid(format!(
                "{P}.topologyLabel must be a label key (a Kubernetes qualified name), got {topology:?}"
            )));
        }
        for (field, format) in [("idLabel", p.id_label), ("stateLabel", p.state_label)] {
            let Some(format) = format else { continue };
            if format.matches("%s").count() != 1 || format.matches('%').count() != 1 {
                return Err(invalid(format!(
                    "{P}.{field} must contain exactly one %s (where the topology goes), got {format:?}"
                )));
            }
            if !crate::kubernetes::names::is_qualified_name(&format.replacen("%s", "2x2x2", 1)) {
                return Err(invalid(format!(
                    "{P}.{field} does not form a label key once %s is a topology, got {format:?}"
                )));
            }
        }
        if let Some(state) = p.healthy_state
            && (state.is_empty() || !crate::kubernetes::names::is_label_value(&state))
        {
            return Err(invalid(format!(
                "{P}.healthyState must be a non-empty label value, got {state:?}"
            )));
        }
        keys.push(P);
    }
    Ok((!keys.is_empty()).then_some(UnusedKey {
        keys,
        reason: "TPU slices are not modelled: TPU pods still occupy their nodes, and the plugin \
            never plans a move onto a new slice",
    }))
}

fn resolve_defragmentation(
    raw: RawDefragmentation,
    d: &Config,
) -> Result<Defragmentation, ConfigError> {
    const P: &str = "policies.defragmentation";
    let fragmentation_threshold = unit_interval(
        &format!("{P}.fragmentationThreshold"),
        raw.fragmentation_threshold,
        d.defragmentation.fragmentation_threshold,
    )?;
    let aggressiveness = aggressiveness(
        &format!("{P}.aggressiveness"),
        raw.aggressiveness.as_deref(),
    )?;
    let scoring = raw.scoring.unwrap_or_default();
    let size_ladder = match scoring.size_ladder {
        None => default_size_ladder(),
        Some(l) if l.is_empty() => default_size_ladder(),
        Some(l) => {
            for (i, size) in l.iter().enumerate() {
                if *size <= 0 {
                    return Err(invalid(format!(
                        "{P}.scoring.sizeLadder[{i}] must be a positive number of GPUs, got {size}"
                    )));
                }
                if i > 0 && *size <= l[i - 1] {
                    return Err(invalid(format!(
                        "{P}.scoring.sizeLadder must be strictly ascending without duplicates, got {size} after {}",
                        l[i - 1]
                    )));
                }
            }
            l
        }
    };
    let demand_blend_lambda = unit_interval(
        &format!("{P}.scoring.demandBlendLambda"),
        scoring.demand_blend_lambda,
        d.defragmentation.demand_blend_lambda,
    )?;
    let size_prior = match scoring.size_prior {
        None => default_size_prior(),
        Some(m) if m.is_empty() => default_size_prior(),
        Some(m) => resolve_size_prior(m, &size_ladder)?,
    };
    let pending_urgency_tau_minutes = minutes_or_default(
        &format!("{P}.scoring.pendingUrgencyTauMinutes"),
        scoring.pending_urgency_tau_minutes,
        d.defragmentation.pending_urgency_tau_minutes,
    )?;
    Ok(Defragmentation {
        enabled: raw.enabled.unwrap_or(d.defragmentation.enabled),
        fragmentation_threshold,
        aggressiveness,
        size_ladder,
        demand_blend_lambda,
        size_prior,
        pending_urgency_tau_minutes,
        follow_plan: raw.follow_plan.unwrap_or(d.defragmentation.follow_plan),
        hold_minutes: minutes_or_default(
            &format!("{P}.holdMinutes"),
            raw.hold_minutes,
            d.defragmentation.hold_minutes,
        )?,
    })
}

fn resolve_size_prior(
    raw: BTreeMap<String, f64>,
    ladder: &[i64],
) -> Result<BTreeMap<i64, f64>, ConfigError> {
    const K: &str = "policies.defragmentation.scoring.sizePrior";
    let mut prior = BTreeMap::new();
    for (key, weight) in &raw {
        let canonical =
            !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) && !key.starts_with('0');
        let size = canonical.then(|| key.parse::<i64>().ok()).flatten();
        let Some(size) = size else {
            return Err(invalid(format!(
                "{K} keys must be positive whole numbers written plainly (like \"8\"), got {key:?}"
            )));
        };
        if !ladder.contains(&size) {
            return Err(invalid(format!(
                "{K} key {key:?} is not a size in sizeLadder {ladder:?}"
            )));
        }
        if weight.is_nan() || *weight < 0.0 || !weight.is_finite() {
            return Err(invalid(format!("{K}[{key:?}] must be >= 0, got {weight}")));
        }
        prior.insert(size, *weight);
    }
    let sum: f64 = prior.values().sum();
    if !(0.99..=1.01).contains(&sum) {
        return Err(invalid(format!(
            "{K} weights must sum to 1 (within 0.01), got {sum}"
        )));
    }
    Ok(prior.into_iter().map(|(k, v)| (k, v / sum)).collect())
}

fn resolve_node_health(raw: RawNodeHealth, d: &Config) -> Result<NodeHealth, ConfigError> {
    const P: &str = "policies.nodeHealth";
    let aggressiveness = aggressiveness(
        &format!("{P}.aggressiveness"),
        raw.aggressiveness.as_deref(),
    )?;
    let trigger_conditions = match raw.trigger_conditions {
        None => d.node_health.trigger_conditions.clone(),
        Some(l) if l.is_empty() => d.node_health.trigger_conditions.clone(),
        Some(l) => {
            for (i, c) in l.iter().enumerate() {
                if !crate::kubernetes::names::is_qualified_name(c) {
                    return Err(invalid(format!(
                        "{P}.triggerConditions[{i}] must be a condition type (a Kubernetes qualified name), got {c:?}"
                    )));
                }
                if l[..i].contains(c) {
                    return Err(invalid(format!("{P}.triggerConditions lists {c:?} twice")));
                }
            }
            l
        }
    };
    let health_cooldown_floor_minutes = minutes_or_default(
        &format!("{P}.healthCooldownFloorMinutes"),
        raw.health_cooldown_floor_minutes,
        d.node_health.health_cooldown_floor_minutes,
    )?;
    let node_suspicion_window_minutes = minutes_or_default(
        &format!("{P}.nodeSuspicionWindowMinutes"),
        raw.node_suspicion_window_minutes,
        d.node_health.node_suspicion_window_minutes,
    )?;
    let triggers = raw.maintenance.and_then(|m| m.triggers).unwrap_or_default();
    let mut maintenance_triggers: Vec<MaintenanceTrigger> = Vec::new();
    for (i, t) in triggers.into_iter().enumerate() {
        let trigger = resolve_trigger(i, t)?;
        let key = format!("{P}.maintenance.triggers[{i}]");
        if let Some(other) = maintenance_triggers.iter().find(|o| o.name == trigger.name) {
            return Err(invalid(format!(
                "{key}.name {:?} is already used by another trigger; names must be unique",
                other.name
            )));
        }
        if let Some(other) = maintenance_triggers
            .iter()
            .find(|o| o.matcher == trigger.matcher)
        {
            return Err(invalid(format!(
                "{key} matches exactly what trigger {:?} matches; remove one of them",
                other.name
            )));
        }
        maintenance_triggers.push(trigger);
    }
    Ok(NodeHealth {
        enabled: raw.enabled.unwrap_or(d.node_health.enabled),
        aggressiveness,
        trigger_conditions,
        signal_only: raw.signal_only.unwrap_or(d.node_health.signal_only),
        health_cooldown_floor_minutes,
        node_suspicion_window_minutes,
        maintenance_triggers,
    })
}

fn resolve_trigger(i: usize, raw: RawTrigger) -> Result<MaintenanceTrigger, ConfigError> {
    let key = format!("policies.nodeHealth.maintenance.triggers[{i}]");
    let name = raw.name.unwrap_or_default();
    if name.is_empty() || name.trim() != name {
        return Err(invalid(format!(
            "{key}.name must be non-empty without leading or trailing spaces, got {name:?}"
        )));
    }
    let require_name = |field: &str, value: Option<String>| -> Result<String, ConfigError> {
        let value = value.unwrap_or_default();
        if crate::kubernetes::names::is_qualified_name(&value) {
            Ok(value)
        } else {
            Err(invalid(format!(
                "{key}.{field} must be a Kubernetes qualified name, got {value:?}"
            )))
        }
    };
    let matcher = match (raw.condition, raw.label, raw.taint) {
        (Some(c), None, None) => {
            let type_ = require_name("condition.type", c.type_)?;
            let status = c.status.unwrap_or_default();
            if !["True", "False", "Unknown"].contains(&status.as_str()) {
                return Err(invalid(format!(
                    "{key}.condition.status must be one of True, False, Unknown, got {status:?}"
                )));
            }
            TriggerMatcher::Condition { type_, status }
        }
        (None, Some(l), None) => {
            let value = match (l.value, l.value_is_start_time.unwrap_or(false)) {
                (None, false) => LabelValue::Any,
                (Some(v), false) => LabelValue::Exactly(v),
                (None, true) => LabelValue::StartTime,
                (Some(_), true) => {
                    return Err(invalid(format!(
                        "{key}.label cannot set both value and valueIsStartTime"
                    )));
                }
            };
            TriggerMatcher::Label {
                key: require_name("label.key", l.key)?,
                value,
            }
        }
        (None, None, Some(t)) => {
            if let Some(effect) = &t.effect
                && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect.as_str())
            {
                return Err(invalid(format!(
                    "{key}.taint.effect must be one of NoSchedule, PreferNoSchedule, NoExecute, got {effect:?}"
                )));
            }
            TriggerMatcher::Taint {
                key: require_name("taint.key", t.key)?,
                value: t.value,
                effect: t.effect,
            }
        }
        (c, l, t) => {
            let set = [c.is_some(), l.is_some(), t.is_some()]
                .iter()
                .filter(|s| **s)
                .count();
            return Err(invalid(format!(
                "{key} must set exactly one of condition, label or taint, got {set}"
            )));
        }
    };
    Ok(MaintenanceTrigger {
        name,
        matcher,
        cordon: raw.cordon.unwrap_or(false),
    })
}

fn resolve_window(i: usize, raw: RawWindow) -> Result<MaintenanceWindow, ConfigError> {
    let key = format!("maintenanceWindows[{i}]");
    let days_raw = raw.days.unwrap_or_default();
    if days_raw.is_empty() {
        return Err(invalid(format!(
            "{key}.days must list at least one of Mon..Sun"
        )));
    }
    let mut days = BTreeSet::new();
    for day in &days_raw {
        let Some(index) = DAY_NAMES.iter().position(|d| d == day) else {
            return Err(invalid(format!(
                "{key}.days must be among Mon, Tue, Wed, Thu, Fri, Sat, Sun, got {day:?}"
            )));
        };
        days.insert(index as u8);
    }
    let clock = |field: &str, value: Option<String>| -> Result<u32, ConfigError> {
        let value = value.unwrap_or_default();
        parse_clock(&value).ok_or_else(|| {
            invalid(format!(
                "{key}.{field} must be a UTC time HH:MM (like \"01:00\"), got {value:?}"
            ))
        })
    };
    let start_minute = clock("start", raw.start)?;
    let end_minute = clock("end", raw.end)?;
    if start_minute >= end_minute {
        return Err(invalid(format!(
            "{key}: start must come before end (a window cannot cross midnight; split it in two), got {} to {}",
            format_clock(start_minute),
            format_clock(end_minute)
        )));
    }
    Ok(MaintenanceWindow {
        days,
        start_minute,
        end_minute,
    })
}

/// `HH:MM` as Go's `15:04` layout reads it: two-digit hour 00-23, two-digit minute 00-59.
fn parse_clock(text: &str) -> Option<u32> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

pub fn format_clock(minute: u32) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// A profile's `scoringResources`, checked as kube-scheduler checks its own: named, each once,
/// weights 1 to 100 (1 when unset).
fn scoring_resources(
    key: &str,
    list: Vec<RawScoringResource>,
) -> Result<Vec<(String, i64)>, ConfigError> {
    if list.is_empty() {
        return Err(invalid(format!(
            "{key}.scoringResources must name at least one resource (leave it out for cpu and memory)"
        )));
    }
    let mut out: Vec<(String, i64)> = Vec::new();
    for (i, r) in list.into_iter().enumerate() {
        let at = format!("{key}.scoringResources[{i}]");
        if r.name.trim().is_empty() {
            return Err(invalid(format!(
                "{at}.name must name a resource, got {:?}",
                r.name
            )));
        }
        if out.iter().any(|(n, _)| *n == r.name) {
            return Err(invalid(format!("{at}.name {:?} is listed twice", r.name)));
        }
        let weight = r.weight.unwrap_or(1);
        if !(1..=100).contains(&weight) {
            return Err(invalid(format!(
                "{at}.weight must be 1 to 100, got {weight}"
            )));
        }
        out.push((r.name, weight));
    }
    Ok(out)
}

fn resolve_profiles(
    raw: RawScheduling,
) -> Result<BTreeMap<String, SchedulingProfile>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, p) in raw.profiles.unwrap_or_default() {
        let key = format!("scheduling.profiles[{name:?}]");
        if !crate::kubernetes::names::is_dns1123_subdomain(&name) {
            return Err(invalid(format!(
                "scheduling.profiles key {name:?} must be a DNS-1123 subdomain (a scheduler name)"
            )));
        }
        let required = |field: &str, value: Option<String>| -> Result<String, ConfigError> {
            match value {
                Some(v) if !v.trim().is_empty() && v.trim() == v => Ok(v),
                other => Err(invalid(format!(
                    "{key}.{field} is required, non-blank, without surrounding spaces, got {:?}",
                    other.unwrap_or_default()
                ))),
            }
        };
        let profile = SchedulingProfile {
            backend: required("backend", p.backend)?,
            scheduler_version: required("schedulerVersion", p.scheduler_version)?,
            configuration_id: required("configurationID", p.configuration_id)?,
            gang_scheduling: p.gang_scheduling.unwrap_or(false),
            scoring_strategy: match p.scoring_strategy.as_deref() {
                None | Some("LeastAllocated") => ScoringStrategy::LeastAllocated,
                Some("MostAllocated") => ScoringStrategy::MostAllocated,
                Some(other) => {
                    return Err(invalid(format!(
                        "{key}.scoringStrategy must be LeastAllocated or MostAllocated, got {other:?}"
                    )));
                }
            },
            scoring_resources: match p.scoring_resources {
                None => default_scoring_resources(),
                Some(list) => scoring_resources(&key, list)?,
            },
        };
        out.insert(name, profile);
    }
    Ok(out)
}

fn resolve_migration(raw: RawMigration, d: &Config) -> Result<Migration, ConfigError> {
    let api_version = match raw.api_version.as_deref() {
        None | Some("") => None,
        Some("v1") => Some("v1".to_string()),
        Some(other) => {
            return Err(invalid(format!(
                "migration.apiVersion must be empty or \"v1\", got {other:?}"
            )));
        }
    };
    let hour = Some(SignedDuration::from_hours(1));
    let tiny = SignedDuration::from_nanos(1);
    Ok(Migration {
        api_version,
        acknowledgement_timeout: duration_or_default(
            "migration.acknowledgementTimeout",
            raw.acknowledgement_timeout.as_deref(),
            d.migration.acknowledgement_timeout,
            tiny,
            hour,
        )?,
        failure_backoff: duration_or_default(
            "migration.failureBackoff",
            raw.failure_backoff.as_deref(),
            d.migration.failure_backoff,
            tiny,
            hour,
        )?,
    })
}
