//! The recommendations ConfigMap's data after a pass (alfred-reference.md §3.1, §3.4): the
//! `last-cycle.json` document, the `node.<name>` records with their episode stamps carried over
//! from the records already there, stale records removed, every other key kept.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::nodehealth::NodeRecord;
use super::{PolicyName, Row, RowOutcome};
use crate::model::health::HealthState;
use crate::reasons::EventReason;

pub const LAST_CYCLE_KEY: &str = "last-cycle.json";

/// The most a ConfigMap's data may hold, keys and values together, as the API server
/// validates it.
pub const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LastCycle<'a> {
    timestamp: String,
    mode: &'a str,
    /// `null` when there are none, as the reference writes it.
    recommendations: Option<Vec<&'a Row>>,
    /// Rows left out so that the ConfigMap stays within its limit; absent when none were.
    #[serde(skip_serializing_if = "is_zero")]
    rows_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_node_key(key: &str) -> bool {
    key.starts_with("node.") || key.starts_with("node-hash.")
}

/// The ConfigMap's data after a pass, and the node events its new episode stamps call for.
pub struct Updated {
    pub data: BTreeMap<String, String>,
    pub events: Vec<NodeEvent>,
    /// Rows left out of `last-cycle.json` to keep the ConfigMap within
    /// [`CONFIG_MAP_MAX_BYTES`] (a first pass over 10,000 nodes has 10 MB of them).
    pub rows_omitted: usize,
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
    // The rows get what the other keys leave of the ConfigMap.
    let others: usize = data
        .iter()
        .filter(|(key, _)| *key != LAST_CYCLE_KEY)
        .map(|(key, value)| key.len() + value.len())
        .sum();
    let room = CONFIG_MAP_MAX_BYTES.saturating_sub(others + LAST_CYCLE_KEY.len());
    let (text, rows_omitted) = last_cycle(rows, mode, now, room);
    data.insert(LAST_CYCLE_KEY.into(), text);
    Updated {
        data,
        events,
        rows_omitted,
    }
}

/// The `last-cycle.json` text within `room` bytes, and how many rows it leaves out: when all
/// do not fit, the most telling rows that do (requests, then node health, then the arbiter's
/// verdicts, then advice; each in the pass's order), shown in the pass's order.
fn last_cycle(rows: &[Row], mode: &str, now: Timestamp, room: usize) -> (String, usize) {
    let text = |kept: Vec<&Row>, rows_omitted| {
        let doc = LastCycle {
            timestamp: now.to_string(),
            mode,
            recommendations: (!kept.is_empty()).then_some(kept),
            rows_omitted,
        };
        serde_json::to_string(&doc).expect("rows serialize")
    };
    let whole = text(rows.iter().collect(), 0);
    if whole.len() <= room {
        return (whole, 0);
    }
    // Each row costs its text and a comma; the rest is the envelope at its widest (`null`
    // stands in for the brackets).
    let envelope = text(Vec::new(), rows.len()).len();
    let size = |row: &Row| serde_json::to_string(row).expect("rows serialize").len() + 1;
    let rank = |row: &Row| {
        (
            row.dispatch_status.is_none(),
            row.policy != PolicyName::Nodehealth,
            row.outcome == RowOutcome::Advisory,
        )
    };
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| rank(&rows[i]));
    let mut keep = vec![false; rows.len()];
    let mut used = envelope;
    for i in order {
        used += size(&rows[i]);
        if used > room {
            break;
        }
        keep[i] = true;
    }
    let kept: Vec<&Row> = rows
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(r, _)| r)
        .collect();
    let omitted = rows.len() - kept.len();
    (text(kept, omitted), omitted)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn row(i: usize, policy: &str, outcome: &str, dispatch: bool) -> Row {
        let mut row = json!({
            "workload": format!("team/model-{i}"), "component": "engine", "instance": 0,
            "policy": policy, "reason": "Fragmentation", "outcome": outcome,
            "fromNode": format!("gpu-node-{i:05}"), "score": 0.5,
        });
        if outcome == "advisory" {
            row["advisoryReason"] = json!("NonExecutableObservedFragmentation");
        }
        if dispatch {
            row["dispatchStatus"] = json!(outcome);
            row["requestUUID"] = json!("6f1c2a8e-4d3b-4c6a-9e2f-0b1d2c3e4f50");
        }
        serde_json::from_value(row).unwrap()
    }

    #[test]
    fn a_pass_too_large_for_a_config_map_keeps_its_requests_and_says_how_many_rows_it_left_out() {
        let now: Timestamp = "2026-12-07T10:00:00Z".parse().unwrap();
        // 8,000 advisory rows (about 2 MB) with a request and a node-health row among them.
        let mut rows: Vec<Row> = (0..8000)
            .map(|i| row(i, "defragmentation", "advisory", false))
            .collect();
        rows.insert(6000, row(90001, "nodehealth", "rejected", false));
        rows.push(row(90000, "migration-dispatch", "submitted", true));
        let existing: BTreeMap<String, String> =
            [("owner-note".to_string(), "x".repeat(100_000))].into();
        let updated = updated_data(&existing, &rows, &BTreeMap::new(), "execute", now);
        let total: usize = updated.data.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(total <= CONFIG_MAP_MAX_BYTES, "{total} bytes");
        assert!(
            total > CONFIG_MAP_MAX_BYTES - 1000,
            "the room is used: {total}"
        );
        let doc: Value = serde_json::from_str(&updated.data[LAST_CYCLE_KEY]).unwrap();
        let kept = doc["recommendations"].as_array().unwrap();
        assert_eq!(doc["rowsOmitted"], updated.rows_omitted);
        assert_eq!(kept.len() + updated.rows_omitted, rows.len());
        let names: Vec<&str> = kept
            .iter()
            .map(|r| r["workload"].as_str().unwrap())
            .collect();
        assert_eq!(
            names.last(),
            Some(&"team/model-90000"),
            "the request is kept"
        );
        assert!(names.contains(&"team/model-90001"), "node health is kept");
        // The advice kept is the pass's first, in its order, and each row as it was.
        assert_eq!(names[..3], ["team/model-0", "team/model-1", "team/model-2"]);
        let back: Row = serde_json::from_value(kept[0].clone()).unwrap();
        assert_eq!(back, rows[0]);
        // A pass that fits is written whole, with no count.
        let small = updated_data(&existing, &rows[..10], &BTreeMap::new(), "execute", now);
        assert_eq!(small.rows_omitted, 0);
        let doc: Value = serde_json::from_str(&small.data[LAST_CYCLE_KEY]).unwrap();
        assert_eq!(doc["recommendations"].as_array().unwrap().len(), 10);
        assert!(doc.get("rowsOmitted").is_none());
    }
}
