//! The GPU pool picture (`kubectl alfred pools`): per pool, each node's GPUs and state.

use serde::Serialize;

use crate::model::cluster::{Cluster, NodeView};
use crate::model::health::HealthState;

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    pub pool: String,
    pub nodes: Vec<NodeRow>,
    pub totals: PoolTotals,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    pub gpu_resource: String,
    pub gpus: i64,
    pub used: i64,
    pub free: i64,
    /// Why the node is special: unhealthy, unknown, suspect, maintenance:<trigger>, cordoned,
    /// scale-down, preemptible, not-ready.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<String>,
    /// Alfred would place new pods here (and its free GPUs count in the score).
    pub schedulable: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolTotals {
    pub nodes: usize,
    pub gpus: i64,
    pub used: i64,
    pub free: i64,
    /// Free GPUs on nodes that can take new pods.
    pub schedulable_free: i64,
    /// The most free GPUs on one schedulable node.
    pub largest_free_block: i64,
}

/// The markers of a node, worst first.
pub fn node_markers(n: &NodeView<'_>) -> Vec<String> {
    let mut markers = Vec::new();
    match n.health.state {
        HealthState::Unhealthy => markers.push("unhealthy".to_string()),
        HealthState::Unknown => markers.push("unknown".to_string()),
        HealthState::Suspect => markers.push("suspect".to_string()),
        HealthState::Clear => {}
    }
    markers.extend(n.maintenance.iter().map(|t| format!("maintenance:{t}")));
    if n.cordoned {
        markers.push("cordoned".into());
    }
    if n.scale_down_marked {
        markers.push("scale-down".into());
    }
    if n.preemptible {
        markers.push("preemptible".into());
    }
    if !n.ready {
        markers.push("not-ready".into());
    }
    markers
}

/// One report per pool, pools and nodes by name. `avoid_preemptible` leaves preemptible nodes'
/// free GPUs out of the schedulable count, as `spotPolicy.avoidAsTarget` does for the score.
pub fn pool_reports(cluster: &Cluster<'_>, avoid_preemptible: bool) -> Vec<PoolReport> {
    cluster
        .pools
        .iter()
        .map(|pool| {
            let nodes: Vec<NodeRow> = pool
                .nodes
                .iter()
                .map(|&i| {
                    let n = &cluster.nodes[i];
                    NodeRow {
                        name: n.name.to_string(),
                        gpu_resource: n.gpu_resource.clone().unwrap_or_default(),
                        gpus: n.gpu_total,
                        used: n.gpu_used.min(n.gpu_total),
                        free: n.gpu_free,
                        markers: node_markers(n),
                        schedulable: n.is_bin(avoid_preemptible),
                    }
                })
                .collect();
            let schedulable = nodes.iter().filter(|n| n.schedulable);
            let totals = PoolTotals {
                nodes: nodes.len(),
                gpus: nodes.iter().map(|n| n.gpus).sum(),
                used: nodes.iter().map(|n| n.used).sum(),
                free: nodes.iter().map(|n| n.free).sum(),
                schedulable_free: schedulable.clone().map(|n| n.free).sum(),
                largest_free_block: schedulable.map(|n| n.free).max().unwrap_or(0),
            };
            PoolReport {
                pool: pool.name.clone(),
                nodes,
                totals,
            }
        })
        .collect()
}
