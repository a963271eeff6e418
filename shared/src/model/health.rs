//! Node health states and maintenance triggers (alfred-policies.md "Health states" and
//! "Planned maintenance"; alfred-reference.md §5).

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::core::Node;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{
    Config, EarlyTick, LabelValue, MaintenanceTrigger, NodeHealth, TriggerMatcher,
};

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

/// The sorted names of the maintenance triggers the node matches at `now` (triggers are ORed).
pub fn maintenance_triggers(
    node: &Node,
    triggers: &[MaintenanceTrigger],
    now: Timestamp,
) -> Vec<String> {
    let mut names: Vec<String> = triggers
        .iter()
        .filter(|t| matches_trigger(node, &t.matcher, now))
        .map(|t| t.name.clone())
        .collect();
    names.sort();
    names
}

/// The maintenance trigger that asks for this node to be cordoned now (OME's `cordon: true`):
/// the first by name among those it matches, while it is schedulable and not being deleted.
pub fn cordon_rule<'c>(
    node: &Node,
    triggers: &'c [MaintenanceTrigger],
    now: Timestamp,
) -> Option<&'c MaintenanceTrigger> {
    if node.spec.unschedulable || node.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let matched = maintenance_triggers(node, triggers, now);
    matched
        .iter()
        .filter_map(|name| triggers.iter().find(|t| &t.name == name))
        .find(|t| t.cordon)
}

fn matches_trigger(node: &Node, matcher: &TriggerMatcher, now: Timestamp) -> bool {
    match matcher {
        TriggerMatcher::Condition { type_, status } => node
            .status
            .conditions
            .iter()
            .any(|c| &c.type_ == type_ && &c.status == status),
        TriggerMatcher::Label { key, value } => {
            node.metadata.label(key).is_some_and(|v| match value {
                LabelValue::Any => true,
                LabelValue::Exactly(want) => want == v,
                LabelValue::StartTime => start_time(v).is_none_or(|start| now.as_second() >= start),
            })
        }
        TriggerMatcher::Taint { key, value, effect } => node.spec.taints.iter().any(|t| {
            &t.key == key
                && value
                    .as_ref()
                    .is_none_or(|want| want == t.value.as_deref().unwrap_or(""))
                && effect.as_ref().is_none_or(|want| want == &t.effect)
        }),
    }
}

/// A label value read as a Unix time in whole seconds (an optional sign and decimal digits,
/// as Go's `strconv.ParseInt(v, 10, 64)` reads it); `None` when it is not such a number.
pub fn start_time(value: &str) -> Option<i64> {
    value.parse().ok()
}

/// What `earlyTickOn` watches on each node, as OME's Alfred does: the status of each of its
/// conditions (`NodeConditionChange`; heartbeats alone are no change) and the maintenance
/// triggers it matches (`NodeMaintenanceChange`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSignals(BTreeMap<String, Signals>);

/// One node's (condition type, status) pairs by type, and its matched maintenance triggers.
type Signals = (Vec<(String, String)>, Vec<String>);

impl NodeSignals {
    pub fn observe(nodes: &[Arc<Node>], config: &Config, now: Timestamp) -> NodeSignals {
        let triggers = &config.node_health.maintenance_triggers;
        NodeSignals(
            nodes
                .iter()
                .map(|node| {
                    let mut conditions: Vec<(String, String)> = node
                        .status
                        .conditions
                        .iter()
                        .map(|c| (c.type_.clone(), c.status.clone()))
                        .collect();
                    conditions.sort();
                    let maintenance = maintenance_triggers(node, triggers, now);
                    (node.metadata.name.clone(), (conditions, maintenance))
                })
                .collect(),
        )
    }

    /// The first of `ticks` whose signal differs between `self` (earlier) and `now` on a node
    /// in both, with that node. A node that comes or goes is no event: nothing runs on a new
    /// node, and nothing is left to move off a gone one.
    pub fn changed(&self, now: &NodeSignals, ticks: &[EarlyTick]) -> Option<(EarlyTick, String)> {
        ticks.iter().find_map(|&tick| {
            self.0.iter().find_map(|(name, before)| {
                let after = now.0.get(name)?;
                let differs = match tick {
                    EarlyTick::NodeConditionChange => before.0 != after.0,
                    EarlyTick::NodeMaintenanceChange => before.1 != after.1,
                };
                differs.then(|| (tick, name.clone()))
            })
        })
    }
}
