//! The node-health policy (alfred-policies.md "Node health"; alfred-reference.md §3.1 node
//! records, §5 "Node-health policy"): a record for every node that is not Clear or is due for
//! maintenance, and a move for each Instance with a pod on an Unhealthy or maintenance node,
//! planned jointly so the moves off the same nodes never count on the same free GPUs.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::eligibility::{self, Purpose};
use super::{AdvisoryReason, CandidateReason, PolicyName, Recommendation, Row, joint};
use crate::mode::DeploymentMode;
use crate::model::cluster::NodeView;
use crate::model::context::{Context, DEFAULT_PRIORITY};
use crate::model::health::HealthState;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Timestamp>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RecordMaintenance {
    pub requested: bool,
    pub triggers: Vec<String>,
}

/// A `node.<name>` record of the recommendations ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    /// The node's name (not written: the key names the node).
    #[serde(skip)]
    pub name: String,
    #[serde(rename = "nodeUID")]
    pub node_uid: String,
    pub state: String,
    pub conditions: Vec<RecordCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect_until: Option<Timestamp>,
    pub maintenance: RecordMaintenance,
    pub workloads: Vec<String>,
    pub ome_gpu_occupants_present: bool,
    pub observed_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signaled_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_requested_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_drained_at: Option<Timestamp>,
}

/// The ConfigMap key of a node's record: `node.<name>`, or for names too long for a key,
/// `node-hash.<name prefix>.<sha256 hex>` cut to 253 bytes.
pub fn node_record_key(name: &str) -> String {
    const MAX: usize = 253;
    let plain = format!("node.{name}");
    if plain.len() <= MAX {
        return plain;
    }
    let digest: String = Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let prefix_len = MAX - "node-hash.".len() - 1 - digest.len();
    // Node names are ASCII (DNS subdomains), so any byte index is a char boundary.
    format!("node-hash.{}.{digest}", &name[..prefix_len.min(name.len())])
}

pub fn run(ctx: &Context<'_>) -> (Vec<Recommendation>, BTreeMap<String, NodeRecord>) {
    let cluster = &ctx.cluster;
    let config = ctx.config;
    let mut records = BTreeMap::new();
    for n in &cluster.nodes {
        if n.health.state == HealthState::Clear && n.maintenance.is_empty() {
            continue;
        }
        let (workloads, occupied) = cluster.gpu_occupants(n);
        let conditions = n
            .node
            .status
            .conditions
            .iter()
            .filter(|c| config.node_health.trigger_conditions.contains(&c.type_))
            .map(|c| RecordCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                last_transition_time: c.last_transition_time,
            })
            .collect();
        records.insert(
            node_record_key(n.name),
            NodeRecord {
                name: n.name.to_string(),
                node_uid: n.uid.unwrap_or_default().to_string(),
                state: n.health.state.as_str().to_string(),
                conditions,
                suspect_until: n.health.suspect_until,
                maintenance: RecordMaintenance {
                    requested: !n.maintenance.is_empty(),
                    triggers: n.maintenance.clone(),
                },
                workloads,
                ome_gpu_occupants_present: occupied,
                observed_at: cluster.now,
                signaled_at: None,
                drained_at: None,
                maintenance_requested_at: None,
                maintenance_drained_at: None,
            },
        );
    }
    if config.node_health.signal_only {
        return (Vec::new(), records);
    }
    (evacuations(ctx), records)
}

/// Why a node is being left: Unhealthy wins over maintenance.
fn leave_reason(ctx: &Context<'_>, node: &str) -> Option<CandidateReason> {
    reason_to_leave(ctx.cluster.node(node)?)
}

fn reason_to_leave(n: &NodeView<'_>) -> Option<CandidateReason> {
    if n.health.state == HealthState::Unhealthy {
        Some(CandidateReason::NodeUnhealthy)
    } else if !n.maintenance.is_empty() {
        Some(CandidateReason::NodeMaintenance)
    } else {
        None
    }
}

fn evacuations(ctx: &Context<'_>) -> Vec<Recommendation> {
    let cluster = &ctx.cluster;
    // Most passes find no node to leave: then no Instance is looked at.
    if cluster.nodes.iter().all(|n| reason_to_leave(n).is_none()) {
        return Vec::new();
    }
    let mut rows = Vec::new();
    let mut to_plan: Vec<(usize, CandidateReason, String)> = Vec::new();
    for (i, inst) in cluster.instances.iter().enumerate() {
        // An Instance without GPUs is left alone, unless it holds TPU chips: then it is told
        // why it is not moved.
        if inst.gpus <= 0 && eligibility::tpu_pod(ctx, i).is_none() {
            continue;
        }
        // The source: an Unhealthy node of the Instance first, then the lowest name.
        let Some((reason, from)) = inst
            .nodes
            .iter()
            .filter_map(|n| leave_reason(ctx, n).map(|r| (r, n)))
            .min_by_key(|&(r, n)| (r != CandidateReason::NodeUnhealthy, n))
            .map(|(r, n)| (r, n.clone()))
        else {
            continue;
        };
        let component = &cluster.components[inst.component];
        let settings = ctx.settings_of(i);
        let advice = |code: AdvisoryReason, detail: String| {
            Recommendation::advice(
                row(ctx, i, reason, &from, settings.priority),
                code,
                inst.gpus,
                detail,
            )
        };
        match component.mode {
            DeploymentMode::RawDeployment | DeploymentMode::VirtualDeployment => rows.push(advice(
                AdvisoryReason::RawDeploymentMigrationUnsupported,
                format!(
                    "must leave {from}, but it is a RawDeployment and Alfred moves only OMENative Instances (declare OMENative in the InferenceService to let Alfred move it)."
                ),
            )),
            DeploymentMode::MultiNode => {
                if ctx.config.lws_recommendations_enabled {
                    rows.push(advice(
                        AdvisoryReason::LWSMigrationUnsupported,
                        format!(
                            "must leave {from}, but LeaderWorkerSet (MultiNode) Instances cannot be migrated; move the workload to OMENative."
                        ),
                    ));
                }
            }
            DeploymentMode::OmeNative => {
                match eligibility::first_failure(ctx, i, Purpose::NodeHealth) {
                    Some((code, why)) => rows.push(advice(
                        code,
                        format!("must leave {from}, but cannot move: {why}."),
                    )),
                    None => to_plan.push((i, reason, from)),
                }
            }
        }
    }
    let instances: Vec<usize> = to_plan.iter().map(|t| t.0).collect();
    let plans = joint::plan_together(ctx, &instances, &joint::JointOptions::default());
    for ((i, reason, from), plan) in to_plan.into_iter().zip(plans) {
        let inst = &cluster.instances[i];
        let settings = ctx.settings_of(i);
        let mut r = Recommendation::new(
            row(ctx, i, reason, &from, settings.priority),
            inst.gpus,
            String::new(),
        );
        let why_leave = match reason {
            CandidateReason::NodeUnhealthy => format!("{from} is Unhealthy"),
            _ => format!(
                "{from} is due for maintenance ({})",
                cluster
                    .node(&from)
                    .map(|n| n.maintenance.join(", "))
                    .unwrap_or_default()
            ),
        };
        match plan {
            Ok(plan) => {
                r.set_plan(cluster, &plan);
                // The hints are the planned nodes: jointly planned, so no two moves share room.
                let mut hints: Vec<String> = Vec::new();
                for (_, node) in &r.planned {
                    if !hints.contains(node) {
                        hints.push(node.clone());
                    }
                }
                hints.truncate(super::defrag::MAX_HINTS);
                r.detail = format!("{why_leave}: move it to {}.", hints.join(", "));
                r.row.hint_targets = hints;
            }
            Err(why) => {
                r.row.advisory_reason = Some(AdvisoryReason::NoSurgeHeadroom);
                r.detail = format!("{why_leave}, but it cannot move: {why}.");
            }
        }
        rows.push(r);
    }
    rows.extend(unresolved_components(ctx));
    // Unhealthy nodes first, then maintenance; executable moves before advice in each.
    super::sort_rows(&mut rows, |r| {
        2 * u8::from(r.row.reason != CandidateReason::NodeUnhealthy) + u8::from(!r.executable())
    });
    rows
}

/// One component-wide row (instance -1, no target) for each component whose OME pods hold GPUs
/// on a node being left but that no Instance accounts for
/// ([`crate::model::cluster::Cluster::unheld_gpu_pods`]). The source is the component's
/// Unhealthy node first, then the lowest name.
fn unresolved_components(ctx: &Context<'_>) -> Vec<Recommendation> {
    let cluster = &ctx.cluster;
    let mut rows = Vec::new();
    for ((workload, kind), pods) in cluster.unheld_gpu_pods() {
        let source = pods
            .iter()
            .filter_map(|&p| {
                let node = cluster.pods[p].node?;
                leave_reason(ctx, node).map(|reason| (reason, node, p))
            })
            .min_by_key(|&(reason, node, _)| (reason != CandidateReason::NodeUnhealthy, node));
        let Some((reason, from, pod)) = source else {
            continue;
        };
        let priority = cluster
            .workload_index(&workload)
            .map_or(DEFAULT_PRIORITY, |w| ctx.workloads[w].priority);
        let why = cluster.why_no_instance(&workload, kind, pod);
        rows.push(Recommendation::advice(
            Row::new(&workload, kind, -1, PolicyName::Nodehealth, reason, from, priority),
            AdvisoryReason::OMENativeObservationInvalid,
            0,
            format!(
                "{workload} ({kind}) holds GPUs on {from}, which it must leave, but no Instance of it can be resolved: {why}; Alfred moves nothing it cannot observe."
            ),
        ));
    }
    rows
}

fn row(ctx: &Context<'_>, i: usize, reason: CandidateReason, from: &str, score: f64) -> Row {
    let inst = &ctx.cluster.instances[i];
    let kind = ctx.cluster.components[inst.component].kind;
    Row::new(
        ctx.workload_key(i),
        kind,
        inst.index,
        PolicyName::Nodehealth,
        reason,
        from,
        score,
    )
}
