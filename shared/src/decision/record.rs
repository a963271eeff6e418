//! The recommendations ConfigMap's data after a pass (alfred-reference.md §3.1, §3.4): the
//! `last-cycle.json` document, the `node.<name>` records with their episode stamps carried over
//! from the records already there, stale records removed, every other key kept.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::Row;
use super::nodehealth::NodeRecord;
use crate::model::health::HealthState;
use crate::reasons::EventReason;

pub const LAST_CYCLE_KEY: &str = "last-cycle.json";

#[derive(Serialize)]
struct LastCycle<'a> {
    timestamp: String,
    mode: &'a str,
    /// `null` when there are none, as the reference writes it.
    recommendations: Option<Vec<&'a Row>>,
}

fn is_node_key(key: &str) -> bool {
    key.starts_with("node.") || key.starts_with("node-hash.")
}

/// The ConfigMap's data after a pass, and the node events its new episode stamps call for.
pub struct Updated {
    pub data: BTreeMap<String, String>,
    pub events: Vec<NodeEvent>,
}

/// An event on a Node (alfred-reference.md §3.4), recorded once per episode: when the stamp
/// it stands for is first set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub node: String,
    pub warning: bool,
    pub reason: EventReason,
    pub message: String,
}

/// The data to write: `existing` with this pass's rows and node records (their episode stamps
/// carried over), and the events for the stamps set in this pass.
pub fn updated_data(
    existing: &BTreeMap<String, String>,
    rows: &[Row],
    nodes: &BTreeMap<String, NodeRecord>,
    mode: &str,
    now: Timestamp,
) -> Updated {
    let mut data = existing.clone();
    let doc = LastCycle {
        timestamp: now.to_string(),
        mode,
        recommendations: (!rows.is_empty()).then(|| rows.iter().collect()),
    };
    data.insert(
        LAST_CYCLE_KEY.into(),
        serde_json::to_string(&doc).expect("rows serialize"),
    );
    // A record no longer observed goes, unless it was written from a newer observation.
    data.retain(|key, value| {
        if !is_node_key(key) || nodes.contains_key(key) {
            return true;
        }
        serde_json::from_str::<NodeRecord>(value).is_ok_and(|old| old.observed_at > now)
    });
    let mut events = Vec::new();
    for (key, record) in nodes {
        let old = existing
            .get(key)
            .and_then(|v| serde_json::from_str::<NodeRecord>(v).ok());
        if old.as_ref().is_some_and(|o| o.observed_at > now) {
            continue;
        }
        let record = carry_episode(record.clone(), old.as_ref());
        events.extend(episode_events(&record, old.as_ref()));
        data.insert(
            key.clone(),
            serde_json::to_string(&record).expect("records serialize"),
        );
    }
    Updated { data, events }
}

/// The events for stamps this record sets that the previous record of the node lacked.
fn episode_events(new: &NodeRecord, old: Option<&NodeRecord>) -> Vec<NodeEvent> {
    let old = old.filter(|o| o.node_uid == new.node_uid);
    let name = &new.name;
    let unoccupied =
        "has no observed OME GPU occupants; this does not establish whole-node maintenance safety";
    let mut events = Vec::new();
    let mut fire = |stamp: fn(&NodeRecord) -> Option<Timestamp>, warning, reason, what: &str| {
        if stamp(new).is_some() && old.and_then(stamp).is_none() {
            events.push(NodeEvent {
                node: name.clone(),
                warning,
                reason,
                message: format!("node {name} {what}"),
            });
        }
    };
    fire(
        |r| r.signaled_at,
        true,
        EventReason::NodeRepairNeeded,
        "has an observed health concern; repair investigation requested",
    );
    fire(
        |r| r.drained_at,
        false,
        EventReason::NodeDrainedForRepair,
        unoccupied,
    );
    fire(
        |r| r.maintenance_requested_at,
        false,
        EventReason::NodeMaintenanceRequested,
        "has planned maintenance requested; no hardware damage is implied",
    );
    fire(
        |r| r.maintenance_drained_at,
        false,
        EventReason::NodeDrainedForMaintenance,
        unoccupied,
    );
    events
}

/// The episode stamps of a node record: when repair was signalled and the node seen drained,
/// when maintenance was requested and seen drained; kept from the previous record of the same
/// node (same UID) while the episode lasts.
pub fn carry_episode(mut new: NodeRecord, old: Option<&NodeRecord>) -> NodeRecord {
    let now = new.observed_at;
    let old = old.filter(|o| o.node_uid == new.node_uid);
    let occupied = new.ome_gpu_occupants_present;
    let stamp = |old: Option<Timestamp>| Some(old.unwrap_or(now));
    match HealthState::parse(&new.state) {
        Some(HealthState::Clear) => {}
        state => {
            let repair = matches!(state, Some(HealthState::Unhealthy | HealthState::Unknown));
            let signaled = old.and_then(|o| o.signaled_at);
            new.signaled_at = if repair { stamp(signaled) } else { signaled };
            // Drained: a pass after the signal, no OME GPU pods left, and not Unknown.
            new.drained_at = match (signaled, occupied, state) {
                (Some(_), false, s) if s != Some(HealthState::Unknown) => {
                    stamp(old.and_then(|o| o.drained_at))
                }
                _ => None,
            };
        }
    }
    if new.maintenance.requested {
        let requested = old.and_then(|o| o.maintenance_requested_at);
        new.maintenance_requested_at = stamp(requested);
        new.maintenance_drained_at = match (requested, occupied) {
            (Some(_), false) => stamp(old.and_then(|o| o.maintenance_drained_at)),
            _ => None,
        };
    }
    new
}
