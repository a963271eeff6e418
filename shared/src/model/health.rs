//! Node health states and maintenance triggers (alfred-policies.md "Health states" and
//! "Planned maintenance"; alfred-reference.md §5).

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::core::Node;
use crate::config::{MaintenanceTrigger, NodeHealth, TriggerMatcher};

crate::named! {
    /// Ordered from best to worst, so the worst of several is the maximum.
    #[derive(PartialOrd, Ord)]
    pub enum HealthState {
        Clear,
        Suspect,
        Unknown,
        Unhealthy,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub state: HealthState,
    /// For Suspect: when the latest recovered condition leaves the suspicion window.
    pub suspect_until: Option<Timestamp>,
}

/// The node's health from its trigger conditions; the worst state wins.
pub fn node_health(node: &Node, policy: &NodeHealth, now: Timestamp) -> Health {
    let window = SignedDuration::from_mins(policy.node_suspicion_window_minutes);
    let mut state = HealthState::Clear;
    let mut suspect_until: Option<Timestamp> = None;
    for c in node
        .status
        .conditions
        .iter()
        .filter(|c| policy.trigger_conditions.contains(&c.type_))
    {
        let this = match (c.status.as_str(), c.last_transition_time) {
            ("True", _) => HealthState::Unhealthy,
            ("False", None) => HealthState::Unknown,
            ("False", Some(t)) => {
                let until = t.checked_add(window).unwrap_or(Timestamp::MAX);
                if now < until {
                    suspect_until = Some(suspect_until.map_or(until, |u| u.max(until)));
                    HealthState::Suspect
                } else {
                    HealthState::Clear
                }
            }
            _ => HealthState::Unknown,
        };
        state = state.max(this);
    }
    Health {
        state,
        suspect_until: (state == HealthState::Suspect)
            .then_some(suspect_until)
            .flatten(),
    }
}

/// The sorted names of the maintenance triggers the node matches (triggers are ORed).
pub fn maintenance_triggers(node: &Node, triggers: &[MaintenanceTrigger]) -> Vec<String> {
    let mut names: Vec<String> = triggers
        .iter()
        .filter(|t| matches_trigger(node, &t.matcher))
        .map(|t| t.name.clone())
        .collect();
    names.sort();
    names
}

fn matches_trigger(node: &Node, matcher: &TriggerMatcher) -> bool {
    match matcher {
        TriggerMatcher::Condition { type_, status } => node
            .status
            .conditions
            .iter()
            .any(|c| &c.type_ == type_ && &c.status == status),
        TriggerMatcher::Label { key, value } => node
            .metadata
            .label(key)
            .is_some_and(|v| value.as_deref().is_none_or(|want| want == v)),
        TriggerMatcher::Taint { key, value, effect } => node.spec.taints.iter().any(|t| {
            &t.key == key
                && value
                    .as_ref()
                    .is_none_or(|want| want == t.value.as_deref().unwrap_or(""))
                && effect.as_ref().is_none_or(|want| want == &t.effect)
        }),
    }
}
