//! `policies.nodeHealth` (its maintenance triggers) and `maintenanceWindows`.

use std::collections::BTreeSet;

use super::raw::{RawNodeHealth, RawTrigger, RawWindow};
use super::resolve::{aggressiveness, invalid, minutes_or_default};
use super::*;

pub(super) fn resolve_node_health(
    raw: RawNodeHealth,
    d: &Config,
) -> Result<NodeHealth, ConfigError> {
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

pub(super) fn resolve_window(i: usize, raw: RawWindow) -> Result<MaintenanceWindow, ConfigError> {
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
