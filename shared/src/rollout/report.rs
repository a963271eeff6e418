//! What `kubectl alfred rollout plan|status` shows for one component: the resolved strategy
//! with its sources, the Instances, the waves the remaining rollout would take under the
//! budgets, where it would stop, and the rollout hold with what to do about it.

use serde::Serialize;

use crate::api::component::ComponentKind;
use crate::api::replica::{
    HoldGate, InstancePhase, InstanceStatus, RetryBlock, RetryBlockState, RolloutHold,
};
use crate::model::Context;
use crate::model::cluster::Cluster;
use crate::rollout::strategy::{self, OperatorDefaults, ResolvedStrategy, Source};
use crate::rollout::{
    Change, InstanceFacts, Mechanism, PassInput, PodFact, plan_pass, staged_message,
};
use crate::simulate;
use crate::snapshot::Snapshot;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Passes simulated at most; a rollout that needs more is reported as unfinished.
const MAX_WAVES: usize = 100;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceLine {
    pub index: i32,
    pub phase: String,
    pub running_revision: String,
    pub step: String,
    pub serving: String,
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveStart {
    pub index: i32,
    pub mechanism: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    pub workload: String,
    pub component: ComponentKind,
    pub strategy: ResolvedStrategy,
    /// Where the operator defaults came from.
    pub operator_defaults: String,
    /// The runtime OME found for the InferenceService (a ServingRuntime in its namespace
    /// shadows the ClusterServingRuntime of the same name), if any.
    pub runtime: Option<String>,
    pub desired_instances: u32,
    pub pods_per_instance: u32,
    /// The budget the strategy reads, scaled to the desired Instances; None is no cap.
    pub budget: Option<u32>,
    pub current_revision: Option<String>,
    pub target_revision: String,
    pub instances: Vec<InstanceLine>,
    /// Fresh starts pass by pass, assuming each pass's updates finish before the next.
    pub waves: Vec<Vec<WaveStart>>,
    pub in_flight: Vec<i32>,
    /// In-place updates whose pod is gone, which OME finishes as recreates, with its warning.
    pub in_place_lost: Vec<String>,
    pub partition_held: Vec<i32>,
    /// `InPlaceOnly` refusals, with the controller's warning.
    pub refused: Vec<String>,
    /// Crash-looping Instances the next pass repairs (recreates), charged to maxUnavailable.
    pub repairs: Vec<i32>,
    /// Crash-loop repairs that budget holds, with the controller's `RepairHeld` warning.
    pub repairs_held: Vec<String>,
    /// Why the plan stops short of moving every Instance, if it does.
    pub stops: Option<String>,
    /// For a surge: where the first wave's extra pods would land, by the scheduler simulation.
    pub surge: Option<SurgeCheck>,
    pub hold: Option<RolloutHold>,
    pub advice: Option<String>,
    pub retry_blocks: Vec<RetryBlock>,
    /// OME's `RetryHeld` warning for each Held block.
    pub retry_held: Vec<String>,
    pub staged: Option<String>,
    pub revision_history_limit: Option<u32>,
    /// The component's revisions (when the snapshot holds them): kept and pruned, oldest first.
    pub revisions_kept: Vec<String>,
    pub revisions_pruned: Vec<String>,
}

/// Whether the extra pods of the first wave find room now: each surging Instance's new pods
/// are simulated in turn (like its current pods, the old ones still running), each reserving
/// what it takes before the next.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SurgeCheck {
    /// (Instance index, pod, predicted node) for the extra pods that fit.
    pub placed: Vec<(i32, String, String)>,
    /// (Instance index, why) for the Instances whose extra pods would stay Pending.
    pub pending: Vec<(i32, String)>,
}

/// Why no report can be made for what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("InferenceService {0} is not in the cluster (give it as NAMESPACE/NAME)")]
    NoWorkload(String),
    #[error("{workload} has no {kind} component (it has: {has})")]
    NoComponent {
        workload: String,
        kind: ComponentKind,
        has: String,
    },
    #[error(
        "{workload} {kind} runs as {mode}; update strategies apply to OMENative components (a RawDeployment uses deploymentStrategy)"
    )]
    NotOmeNative {
        workload: String,
        kind: ComponentKind,
        mode: crate::mode::DeploymentMode,
    },
    #[error(
        "{workload} {kind} cannot be observed: {why} (OMENativeObservationInvalid); a rollout is planned from its InferenceReplica's Instance rows, so none is planned until OME reports them"
    )]
    Unobservable {
        workload: String,
        kind: ComponentKind,
        why: crate::model::observation::Unobservable,
    },
    #[error(transparent)]
    Defaults(#[from] strategy::DefaultsError),
    /// The resolved budget has no value for this component's replicas.
    #[error("the {field} budget {error}")]
    Budget {
        field: &'static str,
        error: strategy::PercentError,
    },
    /// A budget the pass cannot read.
    #[error(transparent)]
    Pass(#[from] strategy::PercentError),
    /// A budget that is neither a count nor a percent, where it is written.
    #[error("{place}: {text:?} {error}")]
    NotABudget {
        place: String,
        text: String,
        error: strategy::PercentError,
    },
}

/// The operator defaults a snapshot implies: OME's ConfigMap when it holds one.
pub fn operator_defaults(
    snapshot: &Snapshot,
) -> Result<(OperatorDefaults, String), strategy::DefaultsError> {
    match snapshot.config_map(strategy::OPERATOR_CONFIG_MAP) {
        Some(cm) => OperatorDefaults::from_config_map(cm)
            .map(|d| (d, format!("ConfigMap {}", strategy::OPERATOR_CONFIG_MAP))),
        None => Ok((
            OperatorDefaults::default(),
            format!(
                "none ({} is not in the snapshot; a manifest install sets none)",
                strategy::OPERATOR_CONFIG_MAP
            ),
        )),
    }
}

/// A budget that is neither a count nor a percent stops the plan, naming where it is written,
/// its field path and its value.
fn check_budgets(
    resolved: &ResolvedStrategy,
    kind: ComponentKind,
    w: &crate::model::cluster::Workload<'_>,
    snapshot: &Snapshot,
    defaults_source: &str,
) -> Result<(), ReportError> {
    for (field, budget) in [
        ("maxUnavailable", &resolved.max_unavailable),
        ("maxSurge", &resolved.max_surge),
    ] {
        let Some(b) = budget else { continue };
        let IntOrString::String(text) = &b.value else {
            continue;
        };
        let Err(e) = strategy::percent_number(text) else {
            continue;
        };
        let path = format!("lifecycle.updateStrategy.rollingUpdate.{field}");
        let place = match b.source {
            Source::InferenceService => {
                format!(
                    "InferenceService {}/{}, field spec.{kind}.{path}",
                    w.namespace, w.name
                )
            }
            Source::Runtime => match snapshot.runtime(w.namespace, w.isvc) {
                Some((runtime, name, _)) => {
                    format!("{runtime:?} {name}, field spec.{kind}Config.{path}")
                }
                None => format!("the runtime's spec.{kind}Config.{path}"),
            },
            Source::OperatorDefault | Source::Fallback => {
                format!("operator defaults ({defaults_source}), updateStrategy.{kind}.{field}")
            }
        };
        return Err(ReportError::NotABudget {
            place,
            text: text.clone(),
            error: e,
        });
    }
    Ok(())
}

/// What to do about a hold, from the spec's "When a rollout doesn't move".
pub fn advice(hold: &RolloutHold) -> String {
    let reason = hold.reason.as_str();
    match hold.gate {
        // Only a crash-loop repair's hold names no target revision.
        HoldGate::Budget if hold.target.is_none() => {
            "crash-loop repairs wait for maxUnavailable: fix the crashing container (see its logs and the Instance's lastFailure), or raise maxUnavailable".into()
        }
        HoldGate::Budget if reason.contains(" pod ") || reason.contains(" pods ") => {
            "a pod holds the slot: wait for it to go (a Terminating pod stops counting when its deletion grace ends); do not raise the budget for this".into()
        }
        HoldGate::Budget => {
            "the budget the strategy reads is 0 or used up by other Instances: raise it (maxSurge for SurgeThenDrain, maxUnavailable otherwise)".into()
        }
        HoldGate::RetryBlock => {
            "an update failed and OME retries the revision after a backoff: fix the cause (see the Instances' lastFailure)".into()
        }
        HoldGate::Held => {
            "the revision used up its attempts: change the pod template, or release it with the InferenceReplica annotation ome.io/release-held-revision=<revision>".into()
        }
        _ => "a rollout group gate holds the component: see the group's status".into(),
    }
}

/// Builds the report for a workload's component. `change` plans a pod-template change not yet
/// applied (every Instance moves to a new revision); None plans the rest of the current rollout.
pub fn report(
    ctx: &Context<'_>,
    workload_key: &str,
    component: Option<ComponentKind>,
    change: Option<Change>,
) -> Result<RolloutReport, ReportError> {
    let (cluster, snapshot) = (&ctx.cluster, ctx.snapshot);
    let w = cluster
        .workload(workload_key)
        .ok_or_else(|| ReportError::NoWorkload(workload_key.to_string()))?;
    let kinds: Vec<ComponentKind> = w
        .components
        .iter()
        .map(|&c| cluster.components[c].kind)
        .collect();
    let kind = component.unwrap_or(ComponentKind::Engine);
    let ci = w
        .components
        .iter()
        .copied()
        .find(|&c| cluster.components[c].kind == kind)
        .ok_or_else(|| {
            let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            ReportError::NoComponent {
                workload: workload_key.to_string(),
                kind,
                has: names.join(", "),
            }
        })?;
    let c = &cluster.components[ci];
    if c.mode != crate::mode::DeploymentMode::OmeNative {
        return Err(ReportError::NotOmeNative {
            workload: workload_key.to_string(),
            kind,
            mode: c.mode,
        });
    }
    if let Some(why) = &c.unobservable {
        return Err(ReportError::Unobservable {
            workload: workload_key.to_string(),
            kind,
            why: why.clone(),
        });
    }
    let spec = w.isvc.spec.component(kind);
    let runtime = snapshot.runtime_component(w.namespace, w.isvc, kind);
    let (defaults, defaults_source) = operator_defaults(snapshot)?;
    let resolved = strategy::resolve_lifecycle(
        kind,
        spec.and_then(|s| s.lifecycle.as_ref()),
        runtime.and_then(|s| s.lifecycle.as_ref()),
        &defaults,
    );
    check_budgets(&resolved, kind, w, snapshot, &defaults_source)?;
    let replica = c.replica;
    let desired = replica
        .and_then(|r| r.spec.replicas)
        .filter(|n| *n > 0)
        .or(spec.and_then(|s| s.min_replicas))
        .unwrap_or(1)
        .max(1) as u32;
    let pods_per_instance = replica
        .map(|r| {
            r.spec
                .runners
                .iter()
                .map(|run| run.pods_per_instance())
                .sum::<i64>()
        })
        .filter(|n| *n > 0)
        .unwrap_or(1) as u32;
    let status = replica.and_then(|r| r.status.as_ref());
    let retry_blocks: &[RetryBlock] = status.map_or(&[], |s| s.retry_blocks.as_slice());
    let current = status.and_then(|s| s.current_revision.clone());
    let target = match change {
        Some(_) => format!("{}-{kind}-<new>", w.name),
        None => status
            .and_then(|s| s.update_revision.clone())
            .or(current.clone())
            .unwrap_or_default(),
    };
    let rows: Vec<InstanceStatus> = c
        .instances
        .iter()
        .filter_map(|&i| cluster.instances[i].row.as_deref().cloned())
        .collect();
    // A pod runs a revision when its `ome.io/revision-hash` label ends the revision's name.
    let pods_of = |index: i32| -> Vec<PodFact<'_>> {
        c.instances
            .iter()
            .map(|&i| &cluster.instances[i])
            .filter(|inst| inst.index == index)
            .flat_map(|inst| {
                let running = inst
                    .row
                    .as_deref()
                    .and_then(|r| r.running_revision.as_deref());
                inst.pods.iter().map(move |&p| (&cluster.pods[p], running))
            })
            .map(|(p, running)| PodFact {
                name: p.name,
                deletion: p.pod.metadata.deletion_timestamp,
                on_running_revision: match (
                    p.pod.metadata.label(crate::api::keys::LABEL_REVISION_HASH),
                    running,
                ) {
                    (Some(hash), Some(revision)) => revision.ends_with(&format!("-{hash}")),
                    _ => true,
                },
                crash_looping: p.pod.crash_looping(),
                ready_after_restart: p
                    .pod
                    .condition("Ready")
                    .filter(|c| c.status == "True" && p.pod.restarted())
                    .and_then(|c| c.last_transition_time),
            })
            .collect()
    };
    let partition = replica
        .and_then(|r| r.spec.pacing.as_ref())
        .and_then(|p| p.partition)
        .or(resolved.partition.as_ref().map(|p| p.value));
    let budget = resolved
        .budget(desired)
        .map_err(|error| ReportError::Budget {
            field: resolved.arm().field(),
            error,
        })?;

    let restart_window = crate::rollout::restart_window(
        replica
            .and_then(|r| r.spec.min_ready_seconds)
            .unwrap_or_else(|| {
                strategy::min_ready_seconds(
                    spec.and_then(|s| s.lifecycle.as_ref()),
                    runtime.and_then(|s| s.lifecycle.as_ref()),
                )
            }),
        defaults.stuck_pod_grace(),
    );

    // Pods of indices without a row (an Instance scaled away while its pods terminate).
    let unlisted: Vec<(i32, Vec<PodFact<'_>>)> = c
        .instances
        .iter()
        .map(|&i| &cluster.instances[i])
        .filter(|inst| inst.row.is_none())
        .map(|inst| (inst.index, pods_of(inst.index)))
        .collect();
    // Pass by pass until nothing more starts.
    let mut state = rows.clone();
    let mut waves = Vec::new();
    let mut first = None;
    let mut stops = None;
    for wave in 0..MAX_WAVES {
        let facts: Vec<InstanceFacts<'_>> = state
            .iter()
            .map(|row| InstanceFacts {
                row,
                pods: if wave == 0 {
                    pods_of(row.index)
                } else {
                    Vec::new()
                },
            })
            .collect();
        let plan = plan_pass(&PassInput {
            component: kind,
            target: &target,
            desired,
            pods_per_instance,
            instances: facts,
            unlisted: if wave == 0 {
                unlisted.clone()
            } else {
                Vec::new()
            },
            retry_blocks,
            strategy: &resolved,
            partition,
            change: change.unwrap_or(Change::Other),
            now: cluster.now,
            restart_window,
        })?;
        let done: Vec<i32> = plan
            .starts
            .iter()
            .map(|s| s.0)
            .chain(plan.continuing.iter().copied())
            .collect();
        if plan.starts.is_empty() {
            stops = plan.hold.as_ref().map(|h| h.reason.clone());
            first.get_or_insert(plan);
            if done.is_empty() {
                break;
            }
        } else {
            waves.push(
                plan.starts
                    .iter()
                    .map(|(index, m)| WaveStart {
                        index: *index,
                        mechanism: m.describe(),
                    })
                    .collect(),
            );
            first.get_or_insert(plan);
        }
        for row in state.iter_mut().filter(|r| done.contains(&r.index)) {
            finish(row, &target, pods_per_instance);
        }
        if wave + 1 == MAX_WAVES {
            stops = Some(format!("more than {MAX_WAVES} passes"));
        }
    }
    let first = first.unwrap_or_default();
    if stops.is_none() && !first.partition_held.is_empty() {
        stops = Some(format!(
            "partition {} keeps Instance(s) {} on the prior revision",
            partition.unwrap_or(0),
            crate::rollout::indices(&first.partition_held)
        ));
    }
    if stops.is_none() && !first.refused.is_empty() {
        stops = Some("InPlaceOnly refuses a change beyond container images".into());
    }
    let surge_starts: Vec<i32> = first
        .starts
        .iter()
        .filter(|(_, m)| matches!(m, Mechanism::Surge { .. } | Mechanism::GangSurge))
        .map(|(index, _)| *index)
        .collect();
    let surge = (!surge_starts.is_empty()).then(|| surge_check(ctx, ci, &surge_starts));
    let hold = status.and_then(|s| s.rollout_hold.clone());
    let limit = strategy::revision_history_limit(
        w.isvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::api::keys::REVISION_HISTORY_LIMIT))
            .map(String::as_str),
        &defaults,
    );
    let replica_name = replica
        .and_then(|r| r.metadata.name.as_deref())
        .unwrap_or_default();
    let owned: Vec<(&str, i64)> = snapshot
        .controller_revisions
        .iter()
        .filter(|r| {
            r.metadata.namespace == w.namespace && r.owner("InferenceReplica") == Some(replica_name)
        })
        .map(|r| (r.metadata.name.as_str(), r.revision))
        .collect();
    let mut live: Vec<&str> = current.iter().map(String::as_str).collect();
    if let Some(u) = status.and_then(|s| s.update_revision.as_deref()) {
        live.push(u);
    }
    for r in &rows {
        live.extend(r.running_revision.as_deref());
        live.extend(r.target_revision.as_deref());
    }
    let (kept, pruned) = strategy::retain_revisions(&owned, &live, limit);
    let refs: Vec<&InstanceStatus> = rows.iter().collect();
    Ok(RolloutReport {
        workload: workload_key.to_string(),
        component: kind,
        operator_defaults: defaults_source,
        runtime: snapshot
            .runtime(w.namespace, w.isvc)
            .map(|(kind, name, _)| format!("{kind:?} {name}")),
        desired_instances: desired,
        pods_per_instance,
        budget,
        current_revision: current,
        instances: c
            .instances
            .iter()
            .map(|&i| instance_line(cluster, i, pods_per_instance))
            .collect(),
        waves,
        // A snapshot without pods (OME's objects alone) cannot tell a lost pod.
        in_place_lost: rows
            .iter()
            .filter(|r| {
                !snapshot.pods.is_empty()
                    && r.phase == Some(InstancePhase::Updating)
                    && r.operation.as_ref().and_then(|op| op.step.as_deref()) == Some("InPlace")
                    && pods_of(r.index).iter().all(|p| p.deletion.is_some())
            })
            .map(|r| {
                let revision = r
                    .operation
                    .as_ref()
                    .and_then(|op| op.target_revision.as_deref());
                crate::rollout::in_place_pod_lost(kind, r.index, revision.unwrap_or(&target))
            })
            .collect(),
        in_flight: first.continuing.clone(),
        partition_held: first.partition_held.clone(),
        refused: first.refused.iter().map(|r| r.1.clone()).collect(),
        repairs: first.repairs.clone(),
        repairs_held: first.repairs_held.iter().map(|r| r.1.clone()).collect(),
        stops,
        surge,
        advice: hold.as_ref().map(advice),
        hold,
        retry_blocks: retry_blocks.to_vec(),
        retry_held: retry_blocks
            .iter()
            .filter(|b| b.state == RetryBlockState::Held)
            .map(|b| {
                crate::rollout::retry_held(&format!("{}/{replica_name}", w.namespace), kind, b)
            })
            .collect(),
        staged: partition.and_then(|p| staged_message(&refs, &target, p, desired)),
        revision_history_limit: limit,
        revisions_kept: kept.into_iter().map(str::to_string).collect(),
        revisions_pruned: pruned.into_iter().map(str::to_string).collect(),
        target_revision: target,
        strategy: resolved,
    })
}

/// An Instance as it stands once its update is through.
fn finish(row: &mut InstanceStatus, target: &str, pods_per_instance: u32) {
    row.running_revision = Some(target.to_string());
    row.phase = Some(InstancePhase::Ready);
    row.operation = None;
    row.serving_pod_count = Some(pods_per_instance as i32);
}

fn instance_line(cluster: &Cluster<'_>, i: usize, pods_per_instance: u32) -> InstanceLine {
    let inst = &cluster.instances[i];
    let row = inst.row.as_deref();
    InstanceLine {
        index: inst.index,
        phase: row
            .and_then(|r| r.phase)
            .map_or("-".into(), |p| format!("{p:?}")),
        running_revision: row
            .and_then(|r| r.running_revision.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "-".into()),
        step: row
            .and_then(|r| r.operation.as_ref())
            .map_or("-".into(), |op| {
                format!("{:?}/{}", op.type_, op.step.as_deref().unwrap_or("-"))
            }),
        serving: format!(
            "{}/{pods_per_instance}",
            row.and_then(|r| r.serving_pod_count).unwrap_or(0)
        ),
        nodes: inst.nodes.clone(),
    }
}

fn surge_check(ctx: &Context<'_>, component: usize, starts: &[i32]) -> SurgeCheck {
    let cluster = &ctx.cluster;
    let mut ledger = simulate::Ledger::new(cluster);
    let mut check = SurgeCheck {
        placed: Vec::new(),
        pending: Vec::new(),
    };
    for &index in starts {
        let Some(&i) = cluster.components[component]
            .instances
            .iter()
            .find(|&&i| cluster.instances[i].index == index)
        else {
            continue;
        };
        let pods = simulate::instance_pods(cluster, i);
        let outcome = simulate::simulate(ctx, &ledger, &pods, &[]);
        if outcome.status != simulate::Status::Feasible {
            check.pending.push((
                index,
                format!(
                    "{:?}/{}: {}",
                    outcome.status, outcome.reason, outcome.message
                ),
            ));
            continue;
        }
        for (pod, placement) in pods.iter().zip(&outcome.placements) {
            if let Some(n) = cluster.node_index(&placement.node) {
                let request = ledger.requests_of(&pod.spec);
                ledger.add(n, &request);
            }
            check
                .placed
                .push((index, placement.pod.clone(), placement.node.clone()));
        }
    }
    check
}
