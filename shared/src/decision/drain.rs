//! `drain`: the joint plan that empties nodes of OME Instances (a ToFreeSpec over the nodes),
//! each Instance's targets or the reason it cannot move, and whether each node empties.

use serde::Serialize;

use super::eligibility::{self, Purpose};
use super::joint::{self, JointOptions};
use super::{AdvisoryReason, NotFound};
use crate::api::component::ComponentKind;
use crate::mode::DeploymentMode;
use crate::model::context::Context;
use crate::solver::ToFreeFormula;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub pod: String,
    pub node: String,
    pub gpus: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainMove {
    pub workload: String,
    pub component: ComponentKind,
    pub instance: i32,
    pub gpus: i64,
    /// The nodes it runs on now.
    pub from: Vec<String>,
    /// Where each GPU pod goes; empty when it cannot move.
    pub placements: Vec<Placement>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<AdvisoryReason>,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainNode {
    pub node: String,
    /// Every OME Instance on it has a move.
    pub emptied: bool,
    pub instances: usize,
    pub staying: usize,
    /// GPU pods that belong to no OME workload: not Alfred's to move.
    pub other_gpu_pods: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainReport {
    pub nodes: Vec<DrainNode>,
    pub moves: Vec<DrainMove>,
    /// Every listed node empties of OME Instances.
    pub complete: bool,
}

#[derive(Clone, Debug, Default)]
pub struct DrainOptions {
    pub nodes: Vec<String>,
    /// Empty the nodes' pod count rather than their GPUs (matters only with a goal).
    pub count_pods: bool,
    /// As a goal rather than a constraint, with this formula.
    pub goal: Option<ToFreeFormula>,
}

pub fn drain(ctx: &Context<'_>, options: &DrainOptions) -> Result<DrainReport, NotFound> {
    let cluster = &ctx.cluster;
    let mut listed: Vec<usize> = Vec::new();
    for name in &options.nodes {
        let n = cluster
            .node_index(name)
            .ok_or_else(|| NotFound::Node(name.clone()))?;
        if !listed.contains(&n) {
            listed.push(n);
        }
    }
    listed.sort_unstable();
    let on_listed = |i: usize| {
        cluster.instances[i].pods.iter().any(|&p| {
            !cluster.pods[p].terminal && cluster.pods[p].host.is_some_and(|n| listed.contains(&n))
        })
    };
    let mut moves: Vec<DrainMove> = Vec::new();
    let mut to_plan: Vec<(usize, usize)> = Vec::new(); // (instance, index into moves)
    for (i, inst) in cluster.instances.iter().enumerate() {
        if inst.gpus <= 0 || !on_listed(i) {
            continue;
        }
        let component = &cluster.components[inst.component];
        let mut m = DrainMove {
            workload: ctx.workload_key(i).to_string(),
            component: component.kind,
            instance: inst.index,
            gpus: inst.gpus,
            from: inst.nodes.clone(),
            placements: Vec::new(),
            reason: None,
            detail: String::new(),
        };
        match component.mode {
            DeploymentMode::OmeNative => match eligibility::first_failure(ctx, i, Purpose::Drain) {
                Some((reason, why)) => {
                    m.reason = Some(reason);
                    m.detail = format!("cannot move: {why}");
                }
                None => to_plan.push((i, moves.len())),
            },
            DeploymentMode::MultiNode => {
                m.reason = Some(AdvisoryReason::LWSMigrationUnsupported);
                m.detail = "cannot move: a LeaderWorkerSet (MultiNode) Instance; move the workload to OMENative".into();
            }
            DeploymentMode::RawDeployment | DeploymentMode::VirtualDeployment => {
                m.reason = Some(AdvisoryReason::RawDeploymentMigrationUnsupported);
                m.detail =
                    "cannot move: a RawDeployment; declare OMENative in the InferenceService"
                        .into();
            }
        }
        moves.push(m);
    }
    // OME pods holding GPUs on the nodes that no Instance holds stay: never count the node empty.
    for ((workload, kind), pods) in cluster.unheld_gpu_pods() {
        let here: Vec<usize> = pods
            .into_iter()
            .filter(|&p| cluster.pods[p].host.is_some_and(|n| listed.contains(&n)))
            .collect();
        let Some(&first) = here.first() else { continue };
        let mut from: Vec<String> = here
            .iter()
            .filter_map(|&p| cluster.pods[p].node.map(str::to_string))
            .collect();
        from.dedup();
        moves.push(DrainMove {
            detail: format!(
                "cannot move: no Instance can be resolved: {}",
                cluster.why_no_instance(&workload, kind, first)
            ),
            workload,
            component: kind,
            instance: -1,
            gpus: here.iter().map(|&p| cluster.pods[p].gpus).sum(),
            from,
            placements: Vec::new(),
            reason: Some(AdvisoryReason::OMENativeObservationInvalid),
        });
    }
    let instances: Vec<usize> = to_plan.iter().map(|t| t.0).collect();
    let joint_options = JointOptions {
        exclude: listed.clone(),
        count_pods: options.count_pods,
        goal: options.goal,
        filtered: true,
    };
    let plans = joint::plan_together(ctx, &instances, &joint_options);
    for ((_, k), plan) in to_plan.iter().zip(plans) {
        let m = &mut moves[*k];
        match plan {
            Ok(plan) => {
                m.placements = plan
                    .placements
                    .iter()
                    .map(|&(p, n)| Placement {
                        pod: cluster.pods[p].name.to_string(),
                        node: cluster.nodes[n].name.to_string(),
                        gpus: cluster.pods[p].gpus,
                    })
                    .collect();
                let mut to: Vec<&str> = m.placements.iter().map(|p| p.node.as_str()).collect();
                to.dedup();
                m.detail = format!("moves to {}", to.join(", "));
            }
            Err(why) => {
                m.reason = Some(AdvisoryReason::NoSurgeHeadroom);
                m.detail = format!("cannot move: {why}");
            }
        }
    }
    let nodes: Vec<DrainNode> = listed
        .iter()
        .map(|&n| {
            let node = &cluster.nodes[n];
            let here: Vec<&DrainMove> = moves
                .iter()
                .filter(|m| m.from.iter().any(|f| f == node.name))
                .collect();
            let staying = here.iter().filter(|m| m.placements.is_empty()).count();
            let other_gpu_pods = node
                .pods
                .iter()
                .map(|&p| &cluster.pods[p])
                .filter(|p| p.gpus > 0 && p.owner.is_none())
                .map(|p| format!("{}/{}", p.namespace, p.name))
                .collect();
            DrainNode {
                node: node.name.to_string(),
                emptied: staying == 0,
                instances: here.len(),
                staying,
                other_gpu_pods,
            }
        })
        .collect();
    Ok(DrainReport {
        complete: nodes.iter().all(|n| n.emptied),
        nodes,
        moves,
    })
}
