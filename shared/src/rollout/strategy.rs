//! OMENative update strategies as OME resolves them (omenative-update-strategies.md "Where the
//! defaults come from", "Pacing with rollingUpdate"; omenative-reference.md §1.3, §3.2, §4.4):
//! the defaults chain field by field, budget scaling, and revision retention. The webhook's
//! defaulting and the rollout commands both use these, so each rule lives here once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use crate::api::component::ComponentKind;
use crate::api::lifecycle::{
    InPlaceUpdateStrategy, LifecycleSpec, RollingUpdate, UpdateStrategy, UpdateStrategyType,
};

/// The ConfigMap OME's manager reads its defaults from.
pub const OPERATOR_CONFIG_MAP: &str = "inferenceservice-config";

crate::named! {
    /// Where a resolved field came from.
    #[derive(Serialize)]
    pub enum Source {
        /// The component in the InferenceService.
        InferenceService,
        /// The runtime's `engineConfig`, `decoderConfig` or `routerConfig`.
        Runtime = "runtime",
        /// The operator default (the chart's `ome.controller.updateStrategy`).
        OperatorDefault = "operator default",
        /// OME's fixed fallback: `SurgeThenDrain`.
        Fallback = "fallback",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

fn sourced<T: Clone>(isvc: Option<&T>, runtime: Option<&T>) -> Option<Sourced<T>> {
    isvc.map(|v| Sourced {
        value: v.clone(),
        source: Source::InferenceService,
    })
    .or_else(|| {
        runtime.map(|v| Sourced {
            value: v.clone(),
            source: Source::Runtime,
        })
    })
}

crate::named! {
    /// The budget a strategy reads; the other one is inert.
    #[derive(Serialize)]
    pub enum BudgetArm {
        /// `maxSurge`, read by `SurgeThenDrain`.
        Surge = "surge",
        /// `maxUnavailable`, read by the other strategies (and by crash-loop repairs).
        Unavailability = "unavailability",
    }
}

impl BudgetArm {
    pub fn of(strategy: UpdateStrategyType) -> BudgetArm {
        match strategy {
            UpdateStrategyType::SurgeThenDrain => BudgetArm::Surge,
            _ => BudgetArm::Unavailability,
        }
    }

    /// The field's name in `rollingUpdate`.
    pub fn field(self) -> &'static str {
        match self {
            Self::Surge => "maxSurge",
            Self::Unavailability => "maxUnavailable",
        }
    }
}

/// The operator's defaults for one component: flat, as the chart writes them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComponentDefaults {
    #[serde(rename = "type", default)]
    pub type_: Option<UpdateStrategyType>,
    #[serde(default)]
    pub max_surge: Option<IntOrString>,
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
}

/// What OME's manager is configured with, as far as strategies go.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperatorDefaults {
    pub update_strategy: BTreeMap<ComponentKind, ComponentDefaults>,
    /// Non-live revisions kept per component (`ome.controller.lifecycle.revisionHistoryLimit`).
    pub revision_history_limit: Option<u32>,
    /// How long a pod may stay stuck before its Instance fails
    /// (`ome.controller.lifecycle.stuckPodGracePeriod`); None is the chart's 60s.
    pub stuck_pod_grace_period: Option<SignedDuration>,
}

/// The chart's `stuckPodGracePeriod`.
pub const STUCK_POD_GRACE_PERIOD: SignedDuration = SignedDuration::from_secs(60);

impl OperatorDefaults {
    pub fn stuck_pod_grace(&self) -> SignedDuration {
        self.stuck_pod_grace_period
            .unwrap_or(STUCK_POD_GRACE_PERIOD)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DefaultsError(String);

impl OperatorDefaults {
    /// The `ome-resources` chart's values: `SurgeThenDrain`, 25% either way, 10 revisions.
    pub fn chart() -> OperatorDefaults {
        let component = ComponentDefaults {
            type_: Some(UpdateStrategyType::SurgeThenDrain),
            max_surge: Some(IntOrString::String("25%".into())),
            max_unavailable: Some(IntOrString::String("25%".into())),
        };
        OperatorDefaults {
            update_strategy: ComponentKind::ALL
                .iter()
                .copied()
                .map(|k| (k, component.clone()))
                .collect(),
            revision_history_limit: Some(10),
            stuck_pod_grace_period: Some(STUCK_POD_GRACE_PERIOD),
        }
    }

    /// Reads OME's `inferenceservice-config` ConfigMap: `deploy` holds
    /// `{"updateStrategy": {"engine": {"type", "maxSurge", "maxUnavailable"}, ...}}` and
    /// `lifecycle` holds `{"revisionHistoryLimit": N, "stuckPodGracePeriod": "60s"}`; other
    /// keys are OME's own business.
    pub fn from_config_map(config_map: &ConfigMap) -> Result<OperatorDefaults, DefaultsError> {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Deploy {
            #[serde(default)]
            update_strategy: BTreeMap<ComponentKind, ComponentDefaults>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Lifecycle {
            #[serde(default)]
            revision_history_limit: Option<u32>,
            #[serde(default)]
            stuck_pod_grace_period: Option<String>,
        }
        let data = config_map.data.as_ref();
        let key = |k: &str| data.and_then(|d| d.get(k));
        let deploy: Deploy = match key("deploy") {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| DefaultsError(format!("{OPERATOR_CONFIG_MAP} key deploy: {e}")))?,
            None => Deploy::default(),
        };
        let lifecycle: Lifecycle = match key("lifecycle") {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| DefaultsError(format!("{OPERATOR_CONFIG_MAP} key lifecycle: {e}")))?,
            None => Lifecycle::default(),
        };
        let stuck_pod_grace_period = lifecycle
            .stuck_pod_grace_period
            .map(|text| {
                crate::kubernetes::duration::parse_go_duration(&text)
                    .ok()
                    .filter(|d| d.is_positive())
                    .ok_or_else(|| {
                        DefaultsError(format!(
                            "{OPERATOR_CONFIG_MAP} key lifecycle: stuckPodGracePeriod {} is not a positive duration such as 60s",
                            crate::input::quoted(&text)
                        ))
                    })
            })
            .transpose()?;
        let defaults = OperatorDefaults {
            update_strategy: deploy.update_strategy,
            revision_history_limit: lifecycle.revision_history_limit,
            stuck_pod_grace_period,
        };
        defaults.validate()?;
        Ok(defaults)
    }

    /// The checks OME's manager runs at startup: a budget must be an integer or a percent and
    /// must not resolve to zero (a percent over 100 is accepted, and clamped where it is used).
    pub fn validate(&self) -> Result<(), DefaultsError> {
        for (kind, d) in &self.update_strategy {
            for (field, budget) in [
                ("maxSurge", &d.max_surge),
                ("maxUnavailable", &d.max_unavailable),
            ] {
                let Some(budget) = budget else { continue };
                let positive = match budget {
                    IntOrString::Int(n) => *n > 0,
                    IntOrString::String(s) => {
                        percent_number(s).map_err(|e| {
                            DefaultsError(format!(
                                "operator default updateStrategy.{kind}.{field}={}: {e}",
                                crate::input::quoted(s)
                            ))
                        })? > 0
                    }
                };
                if !positive {
                    return Err(DefaultsError(format!(
                        "operator default updateStrategy.{kind}.{field} resolves to 0; OME's manager \
                         refuses to start with it"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A component's update strategy with every field resolved and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedStrategy {
    #[serde(rename = "type")]
    pub type_: Sourced<UpdateStrategyType>,
    pub max_surge: Option<Sourced<IntOrString>>,
    pub max_unavailable: Option<Sourced<IntOrString>>,
    pub partition: Option<Sourced<i32>>,
    pub grace_period_seconds: Option<Sourced<i32>>,
    pub mark_not_ready_during_lifecycle: Option<Sourced<bool>>,
}

/// Resolves a component's strategy field by field: the InferenceService, then the runtime's
/// component config, then the operator default (type, and only the budget the resolved type
/// reads, only where unset), then `SurgeThenDrain`.
pub fn resolve(
    kind: ComponentKind,
    isvc: Option<&UpdateStrategy>,
    runtime: Option<&UpdateStrategy>,
    defaults: &OperatorDefaults,
) -> ResolvedStrategy {
    let operator = defaults.update_strategy.get(&kind);
    fn rolling(s: Option<&UpdateStrategy>) -> Option<&RollingUpdate> {
        s.and_then(|s| s.rolling_update.as_ref())
    }
    fn in_place(s: Option<&UpdateStrategy>) -> Option<&InPlaceUpdateStrategy> {
        s.and_then(|s| s.in_place_update_strategy.as_ref())
    }
    let type_ = sourced(
        isvc.and_then(|s| s.type_.as_ref()),
        runtime.and_then(|s| s.type_.as_ref()),
    )
    .or_else(|| {
        operator.and_then(|o| o.type_).map(|value| Sourced {
            value,
            source: Source::OperatorDefault,
        })
    })
    .unwrap_or(Sourced {
        value: UpdateStrategyType::SurgeThenDrain,
        source: Source::Fallback,
    });
    let budget = |field: fn(&RollingUpdate) -> Option<&IntOrString>,
                  arm: BudgetArm,
                  default: Option<&IntOrString>| {
        sourced(
            rolling(isvc).and_then(field),
            rolling(runtime).and_then(field),
        )
        .or_else(|| {
            (BudgetArm::of(type_.value) == arm)
                .then_some(default)
                .flatten()
                .map(|v| Sourced {
                    value: v.clone(),
                    source: Source::OperatorDefault,
                })
        })
    };
    ResolvedStrategy {
        max_surge: budget(
            |r| r.max_surge.as_ref(),
            BudgetArm::Surge,
            operator.and_then(|o| o.max_surge.as_ref()),
        ),
        max_unavailable: budget(
            |r| r.max_unavailable.as_ref(),
            BudgetArm::Unavailability,
            operator.and_then(|o| o.max_unavailable.as_ref()),
        ),
        partition: sourced(
            rolling(isvc).and_then(|r| r.partition.as_ref()),
            rolling(runtime).and_then(|r| r.partition.as_ref()),
        ),
        grace_period_seconds: sourced(
            in_place(isvc).and_then(|p| p.grace_period_seconds.as_ref()),
            in_place(runtime).and_then(|p| p.grace_period_seconds.as_ref()),
        ),
        mark_not_ready_during_lifecycle: sourced(
            in_place(isvc).and_then(|p| p.mark_not_ready_during_lifecycle.as_ref()),
            in_place(runtime).and_then(|p| p.mark_not_ready_during_lifecycle.as_ref()),
        ),
        type_,
    }
}

/// [`resolve`] from the lifecycle blocks of the InferenceService component and the runtime.
pub fn resolve_lifecycle(
    kind: ComponentKind,
    isvc: Option<&LifecycleSpec>,
    runtime: Option<&LifecycleSpec>,
    defaults: &OperatorDefaults,
) -> ResolvedStrategy {
    resolve(
        kind,
        isvc.and_then(|l| l.update_strategy.as_ref()),
        runtime.and_then(|l| l.update_strategy.as_ref()),
        defaults,
    )
}

impl ResolvedStrategy {
    pub fn arm(&self) -> BudgetArm {
        BudgetArm::of(self.type_.value)
    }

    /// The budget the strategy reads; None means no cap.
    pub fn read_budget(&self) -> Option<&Sourced<IntOrString>> {
        match self.arm() {
            BudgetArm::Surge => self.max_surge.as_ref(),
            BudgetArm::Unavailability => self.max_unavailable.as_ref(),
        }
    }

    /// How many Instances may start at once out of `instances`: None is no cap.
    pub fn budget(&self, instances: u32) -> Result<Option<u32>, PercentError> {
        scale_budget(self.read_budget().map(|b| &b.value), instances)
    }

    /// The strategy as OME projects it onto the InferenceReplica: what the InferenceService,
    /// the runtime and the operator's defaults set. OME's fixed fallback type is resolved by
    /// every reader and never written, so a spec holds no field nobody set.
    pub fn projected(&self) -> UpdateStrategy {
        let rolling = RollingUpdate {
            partition: self.partition.as_ref().map(|p| p.value),
            max_unavailable: self.max_unavailable.as_ref().map(|b| b.value.clone()),
            max_surge: self.max_surge.as_ref().map(|b| b.value.clone()),
        };
        let in_place = InPlaceUpdateStrategy {
            grace_period_seconds: self.grace_period_seconds.as_ref().map(|g| g.value),
            mark_not_ready_during_lifecycle: self
                .mark_not_ready_during_lifecycle
                .as_ref()
                .map(|m| m.value),
        };
        UpdateStrategy {
            type_: (self.type_.source != Source::Fallback).then_some(self.type_.value),
            rolling_update: (rolling != RollingUpdate::default()).then_some(rolling),
            in_place_update_strategy: (in_place != InPlaceUpdateStrategy::default())
                .then_some(in_place),
        }
    }
}

/// Why a budget string is not a percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PercentError {
    #[error("must be an integer count or a percent string like \"25%\"")]
    NotPercent,
    #[error("has a malformed percent value")]
    Malformed,
    #[error("percent must be between 0% and 100%")]
    OutOfRange,
}

/// The `n` of a budget string `"<n>%"`, read as Go's `strconv.Atoi` reads it (an optional sign,
/// decimal digits), whatever its range: what OME's planner and manager accept.
pub fn percent_number(text: &str) -> Result<i64, PercentError> {
    let number = text.strip_suffix('%').ok_or(PercentError::NotPercent)?;
    let digits = number.strip_prefix(['+', '-']).unwrap_or(number);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PercentError::Malformed);
    }
    number.parse().map_err(|_| PercentError::Malformed)
}

/// A budget string `"<n>%"` between 0% and 100%, as the webhook admits it.
pub fn parse_percent(text: &str) -> Result<i64, PercentError> {
    let n = percent_number(text)?;
    if (0..=100).contains(&n) {
        Ok(n)
    } else {
        Err(PercentError::OutOfRange)
    }
}

/// A budget as a number of Instances out of `instances`: None (unset) is no cap; an integer
/// counts as given (a negative one as 0, and it may exceed the Instances); a percent is
/// `ceil(instances × percent / 100)` with the percent clamped to 0..=100 as OME's planner does
/// (a runtime or the operator defaults may hold "150%": the webhook refuses it only on objects
/// it reviews), so 25% of two Instances is one.
pub fn scale_budget(
    budget: Option<&IntOrString>,
    instances: u32,
) -> Result<Option<u32>, PercentError> {
    Ok(match budget {
        None => None,
        Some(IntOrString::Int(n)) => Some((*n).max(0) as u32),
        Some(IntOrString::String(s)) => {
            let percent = percent_number(s)?.clamp(0, 100) as u64;
            Some((u64::from(instances) * percent).div_ceil(100) as u32)
        }
    })
}

/// Non-live revisions a component keeps: the InferenceService's `ome.io/revision-history-limit`
/// (a positive integer; anything else counts as unset), then the operator default; None keeps
/// every revision.
pub fn revision_history_limit(
    annotation: Option<&str>,
    defaults: &OperatorDefaults,
) -> Option<u32> {
    annotation
        .and_then(|a| crate::annotations::revision_history_limit(a).ok())
        .or(defaults.revision_history_limit)
}

/// Which revisions stay: every live one (current, update, and any an Instance runs or targets)
/// plus the `limit` newest others by revision number; the rest are pruned. Returns (kept,
/// pruned), each in ascending revision number.
pub fn retain_revisions<'a>(
    revisions: &[(&'a str, i64)],
    live: &[&str],
    limit: Option<u32>,
) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut sorted: Vec<(&'a str, i64)> = revisions.to_vec();
    sorted.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0)));
    let non_live: Vec<&'a str> = sorted
        .iter()
        .filter(|(name, _)| !live.contains(name))
        .map(|(name, _)| *name)
        .collect();
    let pruned_count = limit.map_or(0, |n| non_live.len().saturating_sub(n as usize));
    let pruned: Vec<&'a str> = non_live[..pruned_count].to_vec();
    let kept = sorted
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !pruned.contains(name))
        .collect();
    (kept, pruned)
}

/// `minReadySeconds`: the InferenceService's, then the runtime's, else 0 as OME projects it.
pub fn min_ready_seconds(isvc: Option<&LifecycleSpec>, runtime: Option<&LifecycleSpec>) -> i32 {
    isvc.and_then(|l| l.min_ready_seconds)
        .or_else(|| runtime.and_then(|l| l.min_ready_seconds))
        .unwrap_or(0)
}
