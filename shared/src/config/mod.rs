//! Alfred's configuration: `alfredConfig` in the chart's shape (alfred-reference.md §1), read
//! from YAML (a file, or key `config.yaml` of the `alfred-config` ConfigMap). Every default lives
//! in [`Config::default`]; [`Config::parse`] reports the first violation in the documented form.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::SignedDuration;

mod maintenance;
mod raw;
mod resolve;
mod scheduling;

pub use maintenance::format_clock;
pub use resolve::MAX_MINUTES;

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
    /// this many minutes (the consolidation plan's `holds`).
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
        let raw: raw::RawConfig =
            crate::input::read_one(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        raw.resolve()
    }
}
