//! Cordoning a node for maintenance (OME's `cordon: true` on a maintenance trigger), opt-in with
//! `migrate --enable-maintenance-cordon`: which write to make after re-reading the node, and
//! what to record. Alfred never uncordons; whoever owns the maintenance does.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::api::core::Node;
use crate::api::keys::CORDONED_FOR_MAINTENANCE;
use crate::config::Config;
use crate::decision::MaintenanceCordon;
use crate::model::health::cordon_rule;

/// What to do with a node the pass chose to cordon, judged on the node as read again now.
#[derive(Debug, PartialEq)]
pub enum CordonStep {
    /// Write this merge patch (it carries the read's resourceVersion, so a change in between
    /// fails it) and record the event.
    Write { patch: Value, rule: String },
    /// Nothing to write, and why.
    Skip(&'static str),
}

/// The step for `planned`, given the node read again (`None`: it is gone) and its
/// resourceVersion.
pub fn step(
    planned: &MaintenanceCordon,
    live: Option<&Node>,
    resource_version: &str,
    config: &Config,
    now: Timestamp,
) -> CordonStep {
    let Some(node) = live else {
        return CordonStep::Skip("the node is gone");
    };
    if node.metadata.uid != planned.uid {
        return CordonStep::Skip("the node was replaced since the pass read it");
    }
    if node.spec.unschedulable {
        return CordonStep::Skip("the node is already cordoned");
    }
    if node.metadata.deletion_timestamp.is_some() {
        return CordonStep::Skip("the node is being deleted");
    }
    match cordon_rule(node, &config.node_health.maintenance_triggers, now) {
        None => CordonStep::Skip("no trigger asking for a cordon matches the node any more"),
        Some(trigger) => CordonStep::Write {
            patch: json!({
                "metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {CORDONED_FOR_MAINTENANCE: trigger.name},
                },
                "spec": {"unschedulable": true},
            }),
            rule: trigger.name.clone(),
        },
    }
}

/// The `NodeCordonedForMaintenance` event's message.
pub fn event_message(node: &str, rule: &str) -> String {
    format!(
        "node {node} cordoned because maintenance rule {rule:?} requests maintenance; Alfred does not uncordon it"
    )
}
