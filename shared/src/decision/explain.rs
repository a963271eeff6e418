//! `explain`: for each Instance of a workload, every eligibility check in order with its
//! verdict, where it runs, the best targets and what the pass recommends about it; the answer
//! to "why is Alfred not moving this?".

use serde::Serialize;

use super::eligibility::{self, Purpose};
use super::{AdvisoryReason, Decision, NotFound, Row, surge};
use crate::api::component::ComponentKind;
use crate::mode::DeploymentMode;
use crate::model::context::Context;
use crate::simulate;

/// Which Instances to explain: `NAMESPACE/NAME[/COMPONENT[/INSTANCE]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub workload: String,
    pub component: Option<ComponentKind>,
    pub instance: Option<i32>,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let parts: Vec<&str> = text.split('/').collect();
        if parts.len() < 2 || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
            return Err(SelectorError::Shape(text.to_string()));
        }
        let component = match parts.get(2) {
            None => None,
            Some(c) => Some(
                ComponentKind::parse(c).ok_or_else(|| SelectorError::Component {
                    text: text.to_string(),
                    component: c.to_string(),
                })?,
            ),
        };
        let instance = match parts.get(3) {
            None => None,
            Some(i) => Some(i.parse::<i32>().ok().filter(|i| *i >= 0).ok_or_else(|| {
                SelectorError::Instance {
                    text: text.to_string(),
                    instance: i.to_string(),
                }
            })?),
        };
        Ok(Selector {
            workload: format!("{}/{}", parts[0], parts[1]),
            component,
            instance,
        })
    }
}

/// A selector that names no Instance; the message shows the form to use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "{0:?} names no Instance: use NAMESPACE/NAME[/COMPONENT[/INSTANCE]], such as chat/llama/engine/0"
    )]
    Shape(String),
    #[error("{text:?}: component {component:?} is not engine, decoder or router")]
    Component { text: String, component: String },
    #[error("{text:?}: instance {instance:?} is not an index (0, 1, ...)")]
    Instance { text: String, instance: String },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckLine {
    pub check: &'static str,
    pub passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<AdvisoryReason>,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeShare {
    pub node: String,
    pub gpus: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub node: String,
    pub free_gpus: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub workload: String,
    pub component: ComponentKind,
    pub instance: i32,
    pub mode: &'static str,
    pub gpus: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub nodes: Vec<NodeShare>,
    pub checks: Vec<CheckLine>,
    /// Where its new pods could go, fullest first.
    pub targets: Vec<Target>,
    /// Where the scheduler would put its replacement now, off its current node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<crate::simulate::SimulationOutcome>,
    /// What this pass recommends about it (rows for the Instance or its whole component).
    pub recommendations: Vec<Row>,
    /// Its nodes that a maintenance trigger with `cordon: true` asks to cordon.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cordons: Vec<super::MaintenanceCordon>,
}

/// Explains the selected Instances, with the rows of a pass already run.
pub fn explain(
    ctx: &Context<'_>,
    decision: &Decision,
    selector: &Selector,
) -> Result<Vec<Explanation>, NotFound> {
    let cluster = &ctx.cluster;
    let workload = cluster.workload(&selector.workload).ok_or_else(|| {
        match cluster.unreadable_service(&selector.workload) {
            Some(u) => NotFound::Unreadable {
                workload: selector.workload.clone(),
                problem: u.problem(),
            },
            None => NotFound::Workload(selector.workload.clone()),
        }
    })?;
    let mut out = Vec::new();
    let mut components = 0;
    // Built on the first Instance that is simulated, then shared by the rest.
    let mut ledger: Option<simulate::Ledger> = None;
    for &c in &workload.components {
        let component = &cluster.components[c];
        if selector.component.is_some_and(|k| k != component.kind) {
            continue;
        }
        components += 1;
        if component.unobservable.is_some() {
            out.push(explain_unobservable(ctx, decision, c));
            continue;
        }
        for &i in &component.instances {
            let inst = &cluster.instances[i];
            if selector.instance.is_some_and(|want| want != inst.index) {
                continue;
            }
            out.push(explain_instance(ctx, decision, i, &mut ledger));
        }
    }
    if components == 0 {
        return Err(NotFound::Component {
            workload: selector.workload.clone(),
            component: selector.component.map_or("", |k| k.as_str()),
        });
    }
    for e in &mut out {
        e.cordons = decision
            .cordons
            .iter()
            .filter(|c| e.nodes.iter().any(|n| n.node == c.node))
            .cloned()
            .collect();
    }
    if out.is_empty() {
        return Err(match selector.instance {
            Some(index) => NotFound::Instance {
                workload: selector.workload.clone(),
                index,
            },
            None => NotFound::NoInstances(selector.workload.clone()),
        });
    }
    Ok(out)
}

/// A component whose Instances cannot be resolved, as one whole (instance -1): where its pods
/// hold GPUs, and why no Instance of it can be told.
fn explain_unobservable(ctx: &Context<'_>, decision: &Decision, c: usize) -> Explanation {
    let cluster = &ctx.cluster;
    let component = &cluster.components[c];
    let workload = cluster.workloads[component.workload].key.clone();
    let nodes = node_shares(ctx, &component.unjoined_pods);
    let why = component
        .unobservable
        .as_ref()
        .map_or(String::new(), ToString::to_string);
    Explanation {
        gpus: nodes.iter().map(|n| n.gpus).sum(),
        recommendations: rows_about(decision, &workload, component.kind, -1),
        workload,
        component: component.kind,
        instance: -1,
        mode: component.mode.as_str(),
        pool: None,
        nodes,
        checks: vec![CheckLine {
            check: "InferenceReplica",
            passed: false,
            reason: Some(AdvisoryReason::OMENativeObservationInvalid),
            detail: format!(
                "no Instance can be resolved: {why}; Alfred builds none from pod labels and moves nothing of this component until OME reports it"
            ),
        }],
        targets: Vec::new(),
        scheduling: None,
        cordons: Vec::new(),
    }
}

/// GPUs per node of the live pods given, in the order their nodes first appear.
fn node_shares(ctx: &Context<'_>, pods: &[usize]) -> Vec<NodeShare> {
    let mut nodes: Vec<NodeShare> = Vec::new();
    for &p in pods {
        let pod = &ctx.cluster.pods[p];
        if let (Some(node), false) = (pod.node, pod.terminal) {
            match nodes.iter_mut().find(|n| n.node == node) {
                Some(n) => n.gpus += pod.gpus,
                None => nodes.push(NodeShare {
                    node: node.to_string(),
                    gpus: pod.gpus,
                }),
            }
        }
    }
    nodes
}

/// The pass's rows about an Instance (`index`) or its whole component.
fn rows_about(decision: &Decision, workload: &str, kind: ComponentKind, index: i32) -> Vec<Row> {
    decision
        .recommendations
        .iter()
        .map(|r| &r.row)
        .filter(|r| {
            r.workload == workload
                && r.component == kind
                && (r.instance == index || r.instance == -1)
        })
        .cloned()
        .collect()
}

fn explain_instance(
    ctx: &Context<'_>,
    decision: &Decision,
    i: usize,
    ledger: &mut Option<simulate::Ledger>,
) -> Explanation {
    let cluster = &ctx.cluster;
    let inst = &cluster.instances[i];
    let component = &cluster.components[inst.component];
    let workload = ctx.workload_key(i).to_string();
    let nodes = node_shares(ctx, &inst.pods);
    let mode_check = |reason: AdvisoryReason, detail: &str| CheckLine {
        check: "deployment mode",
        passed: false,
        reason: Some(reason),
        detail: detail.to_string(),
    };
    let mut checks = Vec::new();
    let mut targets = Vec::new();
    let mut scheduling = None;
    match component.mode {
        DeploymentMode::OmeNative => {
            checks.push(CheckLine {
                check: "deployment mode",
                passed: true,
                reason: None,
                detail: "OMENative, declared in the InferenceService".into(),
            });
            for c in eligibility::all_checks(ctx, i, Purpose::Defragmentation) {
                let (passed, reason, detail) = match c.verdict {
                    Ok(text) => (true, None, text.into_owned()),
                    Err((reason, text)) => (false, Some(reason), text),
                };
                let detail = if c.name == "workload cooldown" && !passed {
                    format!("{detail} (node-health moves do not wait for it)")
                } else {
                    detail
                };
                checks.push(CheckLine {
                    check: c.name,
                    passed,
                    reason,
                    detail,
                });
            }
            let (passed, reason, detail) = if inst.gpus <= 0 {
                (true, None, "it holds no GPUs; defragmentation leaves it be".to_string())
            } else {
                match super::defrag::single_move(ctx, i) {
                    Ok(plan) => {
                        let to: Vec<String> = plan
                            .placements
                            .iter()
                            .map(|&(_, n)| cluster.nodes[n].name.to_string())
                            .collect();
                        (
                            true,
                            None,
                            format!("its new pods fit on {} while the old ones run", to.join(", ")),
                        )
                    }
                    Err(why) => (false, Some(AdvisoryReason::NoSurgeHeadroom), why.to_string()),
                }
            };
            checks.push(CheckLine {
                check: "surge headroom",
                passed,
                reason,
                detail,
            });
            if inst.gpus > 0 {
                let exclude: Vec<usize> = inst
                    .primary_node
                    .as_deref()
                    .and_then(|n| cluster.node_index(n))
                    .into_iter()
                    .collect();
                scheduling = Some(simulate::simulate(
                    ctx,
                    ledger.get_or_insert_with(|| simulate::Ledger::new(cluster)),
                    &simulate::instance_pods(cluster, i),
                    &exclude,
                ));
            }
            targets = surge::targets(ctx, i, &[], 5)
                .into_iter()
                .map(|n| Target {
                    node: cluster.nodes[n].name.to_string(),
                    free_gpus: cluster.nodes[n].gpu_free,
                })
                .collect();
        }
        DeploymentMode::MultiNode => checks.push(mode_check(
            AdvisoryReason::LWSMigrationUnsupported,
            "MultiNode (LeaderWorkerSet, deprecated): Alfred cannot migrate it; move it to OMENative",
        )),
        DeploymentMode::RawDeployment | DeploymentMode::VirtualDeployment => {
            checks.push(mode_check(
                AdvisoryReason::RawDeploymentMigrationUnsupported,
                "RawDeployment as the InferenceService declares it (OMENative only through the runtime counts as RawDeployment): declare OMENative in the InferenceService",
            ))
        }
    }
    let recommendations = rows_about(decision, &workload, component.kind, inst.index);
    Explanation {
        workload,
        component: component.kind,
        instance: inst.index,
        mode: component.mode.as_str(),
        gpus: inst.gpus,
        pool: inst.pool.clone(),
        nodes,
        checks,
        targets,
        scheduling,
        recommendations,
        cordons: Vec::new(),
    }
}
