//! From the document as written to the resolved [`Config`]: each key's default and rule.

use std::collections::BTreeMap;

use k8s_openapi::jiff::SignedDuration;

use super::maintenance::{resolve_node_health, resolve_window};
use super::raw::*;
use super::scheduling::resolve_profiles;
use super::*;
use crate::kubernetes::duration::{format_go_duration, parse_go_duration};

pub(super) fn invalid(message: String) -> ConfigError {
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
pub(super) fn minutes_or_default(
    key: &str,
    value: Option<i64>,
    default: i64,
) -> Result<i64, ConfigError> {
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

pub(super) fn aggressiveness(
    key: &str,
    value: Option<&str>,
) -> Result<Aggressiveness, ConfigError> {
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
    pub(super) fn resolve(self) -> Result<Config, ConfigError> {
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
