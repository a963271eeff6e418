//! The per-move re-check (alfred-reference.md §4 "Per-move re-check"): a move chosen on the
//! pass's first read must still hold on a fresh read before its request is journaled. Each
//! check is a function, run in the order [`preflight`] lists them; the first that fails
//! withholds the move with its reason.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::arbiter::{ArbiterReason, Verdict};
use super::dispatch::{self, Plan, Withhold};
use super::journal::{Entry, EntryReason, Phase, WorkloadRef};
use crate::api::replica::InferenceReplica;
use crate::decision::{Recommendation, Row};
use crate::migration::{self, MigrationRequest};
use crate::model::Context;
use crate::reasons::{DispatchReason, SchedulingStatus};
use crate::simulate::{self, Placement};

/// A move that passed every re-check: the entry to journal and the patch to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// Index of the recommendation in the fresh plan.
    pub recommendation: usize,
    pub entry: Entry,
    /// The InferenceService's resourceVersion the patch tests.
    pub resource_version: String,
    pub has_annotations: bool,
}

/// The one notion of the same move: the same Instance leaving the same node. Between two rows
/// (alfred-reference.md §3.1) also for the same policy and reason; a journal entry keeps
/// neither, so a prepared request is the move of any row that takes its Instance off its node.
pub fn same_move(row: &Row, other: Move<'_>) -> bool {
    match other {
        Move::Row(o) => {
            (o.policy, o.reason) == (row.policy, row.reason)
                && (&o.workload, o.component, o.instance, &o.from_node)
                    == (&row.workload, row.component, row.instance, &row.from_node)
        }
        Move::Entry(e) => {
            row.workload.split_once('/')
                == Some((e.workload.namespace.as_str(), e.workload.name.as_str()))
                && (row.component, row.instance, &row.from_node)
                    == (e.component, e.instance, &e.from_node)
        }
    }
}

/// What a row is compared with in [`same_move`].
#[derive(Clone, Copy)]
pub enum Move<'a> {
    Row(&'a Row),
    Entry(&'a Entry),
}

/// Re-checks `chosen` (planned on the first read, whose source had `chosen_fingerprint`)
/// against the fresh read (`ctx`, `fresh`), and prepares its request under `uuid`.
pub fn preflight(
    chosen: &Recommendation,
    chosen_fingerprint: &str,
    ctx: &Context<'_>,
    fresh: &Plan,
    uuid: &str,
) -> Result<Prepared, Withhold> {
    let index = still_produced(chosen, fresh)?;
    still_admitted(fresh, index)?;
    nothing_in_flight(ctx, fresh)?;
    let rec = &fresh.decision.recommendations[index];
    let instance = source_unchanged(ctx, &rec.row, chosen_fingerprint)?;
    let replica = replica_serves(ctx, instance)?;
    let placements = simulation_feasible(ctx, instance, rec)?;
    let targets = targets_safe(ctx, fresh, rec, &placements)?;
    let payload = request_payload(&rec.row, &targets, ctx.now())?;
    let checked = Checked {
        index,
        row: &rec.row,
        instance,
        replica,
        targets,
        payload,
    };
    Ok(prepare(ctx, checked, chosen_fingerprint, uuid))
}

/// What the checks found out about a move that passed them.
struct Checked<'a> {
    index: usize,
    row: &'a Row,
    instance: usize,
    replica: &'a InferenceReplica,
    targets: Vec<String>,
    payload: String,
}

/// The policies still produce the move, executable: its index in the fresh plan.
fn still_produced(chosen: &Recommendation, fresh: &Plan) -> Result<usize, Withhold> {
    fresh
        .decision
        .recommendations
        .iter()
        .position(|r| same_move(&r.row, Move::Row(&chosen.row)) && r.executable())
        .ok_or_else(|| {
            Withhold::new(
                DispatchReason::PolicyNoLongerEligible,
                "on a fresh read the policies no longer produce this move",
            )
        })
}

/// The arbiter still admits it.
fn still_admitted(fresh: &Plan, index: usize) -> Result<(), Withhold> {
    match fresh.verdicts.iter().find(|v| v.recommendation == index) {
        Some(Verdict { result: Ok(_), .. }) => Ok(()),
        Some(Verdict {
            result: Err(rejection),
            ..
        }) => Err(Withhold::new(rejection.reason, rejection.detail.clone())),
        None => Err(Withhold::new(
            DispatchReason::PolicyNoLongerEligible,
            "the arbiter no longer considers this move",
        )),
    }
}

/// One at a time: nothing while any request in the cluster waits or runs.
fn nothing_in_flight(ctx: &Context<'_>, fresh: &Plan) -> Result<(), Withhold> {
    if let Some(m) = ctx.cluster.migrations.first() {
        return Err(Withhold::new(
            ArbiterReason::InFlightCap,
            format!(
                "migration {} of {} is {}; Alfred sends one request at a time, when none is waiting or in progress",
                m.uuid,
                m.workload,
                m.phase
                    .map_or("waiting for OME".to_string(), |p| format!("{p:?}"))
            ),
        ));
    }
    let ours_unresolved = fresh.journal.as_ref().map_or(0, |s| {
        s.journal
            .unresolved()
            .filter(|e| Some(e.uuid.as_str()) != fresh.retry.as_deref())
            .count()
    });
    if ours_unresolved > 0 {
        return Err(Withhold::new(
            DispatchReason::UnresolvedRequest,
            "a request of Alfred's is unresolved",
        ));
    }
    Ok(())
}

/// The Instance still stands, and nothing the decision relied on about it changed: the
/// Instance's index in the fresh cluster.
fn source_unchanged(
    ctx: &Context<'_>,
    row: &Row,
    chosen_fingerprint: &str,
) -> Result<usize, Withhold> {
    let Some(instance) = ctx
        .cluster
        .instance_of(&row.workload, row.component, row.instance)
    else {
        return Err(Withhold::new(
            DispatchReason::PolicyNoLongerEligible,
            "the Instance is gone",
        ));
    };
    if dispatch::fingerprint(ctx, instance) != chosen_fingerprint {
        return Err(Withhold::new(
            DispatchReason::SourceChanged,
            "the InferenceService, its InferenceReplica or the Instance's pods changed since the move was planned",
        ));
    }
    Ok(instance)
}

/// An InferenceReplica serves the component: the executor of the request.
fn replica_serves<'c>(
    ctx: &'c Context<'_>,
    instance: usize,
) -> Result<&'c InferenceReplica, Withhold> {
    let cluster = &ctx.cluster;
    cluster.components[cluster.instances[instance].component]
        .replica
        .ok_or_else(|| {
            Withhold::new(
                DispatchReason::SourceUnsupported,
                "no InferenceReplica serves the component",
            )
        })
}

/// The scheduler simulation places every pod off the source node: the placements. The pods are
/// simulated as OME creates the surge, preferring the move's targets, which the request names
/// as its hints.
fn simulation_feasible(
    ctx: &Context<'_>,
    instance: usize,
    rec: &Recommendation,
) -> Result<Vec<Placement>, Withhold> {
    let cluster = &ctx.cluster;
    let exclude: Vec<usize> = cluster.node_index(&rec.row.from_node).into_iter().collect();
    let outcome = simulate::simulate(
        ctx,
        &simulate::Ledger::new(cluster),
        &simulate::surge_pods(cluster, instance, &rec.surge_hints()),
        &exclude,
    );
    let refusal = match outcome.status {
        SchedulingStatus::Feasible => return Ok(outcome.placements),
        // No profile fits the pods (alfred-policies.md "Simulation"): the source is unsupported.
        SchedulingStatus::Unsupported | SchedulingStatus::Unavailable => {
            DispatchReason::SourceUnsupported
        }
        SchedulingStatus::Infeasible => DispatchReason::SimulationNotFeasible,
    };
    Err(Withhold::new(
        refusal,
        format!(
            "simulation: {}/{}: {}",
            outcome.status, outcome.reason, outcome.message
        ),
    ))
}

/// Every predicted node is one of the move's targets, ready, available, and outside its
/// cooldown: the target nodes, sorted.
fn targets_safe(
    ctx: &Context<'_>,
    fresh: &Plan,
    rec: &Recommendation,
    placements: &[Placement],
) -> Result<Vec<String>, Withhold> {
    let history = match &fresh.journal {
        Ok(s) => dispatch::history(ctx, &s.journal, fresh.retry.as_deref()),
        Err(e) => {
            return Err(Withhold::new(
                DispatchReason::JournalUnavailable,
                e.to_string(),
            ));
        }
    };
    let node_window = SignedDuration::from_mins(ctx.config.per_node_cooldown_minutes);
    let mut targets: Vec<String> = Vec::new();
    for p in placements {
        let allowed = rec.placement_targets.contains(&p.node);
        let safe = ctx
            .cluster
            .node(&p.node)
            .is_some_and(|n| n.ready && !n.unavailable_as_target());
        if !allowed || !safe {
            return Err(Withhold::new(
                DispatchReason::PredictedTargetUnsafe,
                format!(
                    "pod {} is predicted on node {}, which is {}",
                    p.pod,
                    p.node,
                    if allowed {
                        "not ready or not available as a target"
                    } else {
                        "not one of the move's allowed targets"
                    }
                ),
            ));
        }
        if let Some(d) = history.cooling(&p.node, ctx.now(), node_window) {
            return Err(Withhold::new(
                DispatchReason::TargetCooldown,
                format!(
                    "pod {} is predicted on node {}, used by request {} at {}",
                    p.pod, p.node, d.uuid, d.at
                ),
            ));
        }
        targets.push(p.node.clone());
    }
    targets.sort();
    targets.dedup();
    Ok(targets)
}

/// The request's payload, checked as OME would read it.
fn request_payload(row: &Row, targets: &[String], now: Timestamp) -> Result<String, Withhold> {
    let request = MigrationRequest {
        schema_version: migration::SCHEMA_VERSION.to_string(),
        component: row.component.as_str().to_string(),
        instance: i64::from(row.instance),
        from_node: Some(row.from_node.clone()),
        hint_target_nodes: targets
            .iter()
            .filter(|t| **t != row.from_node)
            .take(migration::MAX_HINTS)
            .cloned()
            .collect(),
        reason: Some(row.reason.as_str().to_string()),
        requested_at: Some(now.to_string()),
        requested_by: Some(migration::REQUESTED_BY.to_string()),
    };
    let payload = migration::payload(&request);
    migration::validate_request(&request, &payload)
        .map_err(|why| Withhold::new(DispatchReason::InvalidRequest, why.to_string()))?;
    Ok(payload)
}

/// The journal entry of the request, and what its patch tests.
fn prepare(
    ctx: &Context<'_>,
    checked: Checked<'_>,
    chosen_fingerprint: &str,
    uuid: &str,
) -> Prepared {
    let Checked {
        index,
        row,
        instance,
        replica,
        targets,
        payload,
    } = checked;
    let cluster = &ctx.cluster;
    let component = &cluster.components[cluster.instances[instance].component];
    let workload = &cluster.workloads[component.workload];
    let isvc = &workload.isvc.metadata;
    Prepared {
        recommendation: index,
        entry: Entry {
            uuid: uuid.to_string(),
            workload: WorkloadRef {
                namespace: workload.namespace.to_string(),
                name: workload.name.to_string(),
            },
            workload_uid: isvc.uid.clone().unwrap_or_default(),
            ir_name: replica.metadata.name.clone().unwrap_or_default(),
            ir_uid: replica.metadata.uid.clone().unwrap_or_default(),
            component: row.component,
            instance: row.instance,
            from_node: row.from_node.clone(),
            targets,
            payload,
            source_fingerprint: chosen_fingerprint.to_string(),
            created_at: ctx.now(),
            last_attempt: None,
            acknowledged_at: None,
            completed_at: None,
            phase: Phase::Prepared,
            reason: Some(EntryReason::SubmissionPrepared),
        },
        resource_version: isvc.resource_version.clone().unwrap_or_default(),
        has_annotations: isvc.annotations.as_ref().is_some_and(|a| !a.is_empty()),
    }
}
