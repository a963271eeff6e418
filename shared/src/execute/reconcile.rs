//! What became of each unresolved request (alfred-reference.md §3.2 "Reconcile"): the journal
//! entry is compared with its InferenceService, its InferenceReplica's `status.migrations[]`
//! and the request annotation, and moved along its state machine.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::breaker::{Breaker, MigrationOutcome};
use super::journal::{Entry, EntryReason, Journal, Phase};
use crate::api::keys;
use crate::api::replica::{MigrationPhase, MigrationStatus, MigrationTrigger};
use crate::api::{InferenceReplica, InferenceService};
use crate::snapshot::Snapshot;

/// One entry's change of phase or reason in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub uuid: String,
    pub from: Phase,
    pub to: Phase,
    pub reason: EntryReason,
}

/// What reconcile needs besides the journal and the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub now: Timestamp,
    pub acknowledgement_timeout: SignedDuration,
    pub failure_backoff: SignedDuration,
}

/// Moves every unresolved entry along; failures and stalls set the backoff, finished
/// migrations feed the breaker. Returns the transitions, in journal order.
pub fn reconcile(
    journal: &mut Journal,
    breaker: &mut Breaker,
    snapshot: &Snapshot,
    timing: Timing,
) -> Vec<Transition> {
    let mut transitions = Vec::new();
    for entry in journal
        .entries
        .iter_mut()
        .filter(|e| !e.phase.is_terminal())
    {
        let (from, from_reason) = (entry.phase, entry.reason);
        step(entry, snapshot, timing);
        if (entry.phase, entry.reason) == (from, from_reason) {
            continue;
        }
        let reason = entry.reason.expect("every transition sets a reason");
        let entered_failure =
            entry.phase != from && matches!(entry.phase, Phase::Failed | Phase::Stalled);
        if entered_failure {
            journal.backoff_until = Some(
                timing
                    .now
                    .checked_add(timing.failure_backoff)
                    .unwrap_or(Timestamp::MAX),
            );
        }
        match entry.phase {
            Phase::Completed => breaker.record(MigrationOutcome::Success, timing.now),
            Phase::Failed => breaker.record(MigrationOutcome::Failure, timing.now),
            _ => {}
        }
        transitions.push(Transition {
            uuid: entry.uuid.clone(),
            from,
            to: entry.phase,
            reason,
        });
    }
    transitions
}

fn set(entry: &mut Entry, phase: Phase, reason: EntryReason) {
    entry.phase = phase;
    entry.reason = Some(reason);
}

/// Stalls the entry with `reason` once the acknowledgement timeout since its creation has
/// passed; before that the evidence may still be catching up.
fn stall_after_deadline(entry: &mut Entry, reason: EntryReason, timing: Timing) {
    let elapsed = timing.now.duration_since(entry.created_at);
    if elapsed >= timing.acknowledgement_timeout {
        set(entry, Phase::Stalled, reason);
    }
}

fn find_isvc<'s>(snapshot: &'s Snapshot, entry: &Entry) -> Option<&'s InferenceService> {
    snapshot
        .inference_services
        .iter()
        .find(|s| {
            s.metadata.namespace.as_deref() == Some(entry.workload.namespace.as_str())
                && s.metadata.name.as_deref() == Some(entry.workload.name.as_str())
        })
        .map(|s| s.as_ref())
}

fn find_replica<'s>(snapshot: &'s Snapshot, entry: &Entry) -> Option<&'s InferenceReplica> {
    snapshot
        .inference_replicas
        .iter()
        .find(|r| {
            r.metadata.namespace.as_deref() == Some(entry.workload.namespace.as_str())
                && r.metadata.name.as_deref() == Some(entry.ir_name.as_str())
        })
        .map(|r| r.as_ref())
}

fn controlled_by(replica: &InferenceReplica, owner_uid: &str) -> bool {
    replica
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

fn step(entry: &mut Entry, snapshot: &Snapshot, timing: Timing) {
    let Some(isvc) = find_isvc(snapshot, entry)
        .filter(|s| s.metadata.uid.as_deref() == Some(entry.workload_uid.as_str()))
    else {
        return stall_after_deadline(entry, EntryReason::OwnerUnavailable, timing);
    };
    let Some(replica) = find_replica(snapshot, entry)
        .filter(|r| r.metadata.uid.as_deref() == Some(entry.ir_uid.as_str()))
    else {
        return stall_after_deadline(entry, EntryReason::ReplicaUnavailable, timing);
    };
    if !controlled_by(replica, &entry.workload_uid) || replica.spec.component != entry.component {
        return stall_after_deadline(entry, EntryReason::ReplicaIdentityChanged, timing);
    }
    let rows: Vec<&MigrationStatus> = replica
        .status
        .iter()
        .flat_map(|s| &s.migrations)
        .filter(|m| m.request_uuid.eq_ignore_ascii_case(&entry.uuid))
        .collect();
    match rows.as_slice() {
        [] => no_status(entry, isvc, timing),
        [row] => match read_row(entry, row, timing.now) {
            Some(observed) => apply(entry, observed, timing.now),
            None => stall_after_deadline(entry, EntryReason::MigrationStatusInvalid, timing),
        },
        _ => stall_after_deadline(entry, EntryReason::MigrationStatusInvalid, timing),
    }
}

/// What a valid status row says about the request.
enum Observed {
    Ended {
        phase: Phase,
        started: Timestamp,
        completed: Timestamp,
    },
    InProgress {
        started: Timestamp,
        deadline: Timestamp,
    },
}

/// Reads the request's status row, or `None` when it is not a row OME would write for it.
fn read_row(entry: &Entry, row: &MigrationStatus, now: Timestamp) -> Option<Observed> {
    let created_second = Timestamp::from_second(entry.created_at.as_second()).ok()?;
    let started = row.started_at.as_ref()?.0;
    let valid = row.trigger == MigrationTrigger::Manual
        && row.source_instance == entry.instance
        && row.from_node.as_deref() == Some(entry.from_node.as_str())
        && started <= now
        && started >= created_second;
    if !valid {
        return None;
    }
    let completed = row.completed_at.as_ref().map(|t| t.0);
    match row.phase {
        MigrationPhase::Completed | MigrationPhase::Failed => {
            let completed = completed.filter(|&c| started <= c && c <= now)?;
            let phase = if row.phase == MigrationPhase::Completed {
                Phase::Completed
            } else {
                Phase::Failed
            };
            Some(Observed::Ended {
                phase,
                started,
                completed,
            })
        }
        MigrationPhase::Accepted
        | MigrationPhase::SurgePending
        | MigrationPhase::SurgeReady
        | MigrationPhase::Draining => {
            let deadline = row.deadline.as_ref()?.0;
            (deadline > started && completed.is_none())
                .then_some(Observed::InProgress { started, deadline })
        }
        _ => None,
    }
}

fn apply(entry: &mut Entry, observed: Observed, now: Timestamp) {
    match observed {
        Observed::Ended {
            phase,
            started,
            completed,
        } => {
            entry.completed_at = Some(completed.max(entry.created_at));
            entry
                .acknowledged_at
                .get_or_insert(started.max(entry.created_at));
            set(entry, phase, EntryReason::TerminalStatusObserved);
        }
        Observed::InProgress { started, deadline } => {
            entry
                .acknowledged_at
                .get_or_insert(started.max(entry.created_at));
            if now > deadline {
                set(entry, Phase::Stalled, EntryReason::ConsumerDeadlineExceeded);
            } else {
                set(entry, Phase::Acknowledged, EntryReason::UUIDStatusObserved);
            }
        }
    }
}

/// No status row for the request: it is waiting on the InferenceService, or lost.
fn no_status(entry: &mut Entry, isvc: &InferenceService, timing: Timing) {
    if entry.acknowledged_at.is_some() {
        return set(
            entry,
            Phase::Stalled,
            EntryReason::AcknowledgedStatusMissing,
        );
    }
    let key = format!("{}{}", keys::MIGRATION_REQUEST_PREFIX, entry.uuid);
    let annotation = isvc.metadata.annotations.as_ref().and_then(|a| a.get(&key));
    match annotation {
        Some(value) if *value != entry.payload => {
            return set(entry, Phase::Stalled, EntryReason::RequestPayloadChanged);
        }
        Some(_) if entry.phase == Phase::Prepared => {
            set(
                entry,
                Phase::Submitted,
                EntryReason::RequestAnnotationObserved,
            );
        }
        _ => {}
    }
    if entry.phase != Phase::Stalled {
        stall_after_deadline(entry, EntryReason::AcknowledgementTimeout, timing);
    }
}
