//! `scheduling.profiles`: the scheduler each profile names and how it scores nodes.

use std::collections::BTreeMap;

use super::raw::{RawScheduling, RawScoringResource};
use super::resolve::invalid;
use super::*;

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

pub(super) fn resolve_profiles(
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
