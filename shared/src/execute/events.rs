//! The events a pass records on InferenceServices (alfred-reference.md §3.4): advice,
//! rejections, dispatch outcomes and cooldown overrides, with the reference's reasons and
//! message formats. Node events come from the node records (`decision::record`).

use sha2::{Digest, Sha256};

use crate::decision::{AdvisoryReason, PolicyName, Recommendation, Row, RowOutcome};
use crate::reasons::{ArbiterReason, DispatchReason, EventReason};

/// One event on an InferenceService.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadEvent {
    pub namespace: String,
    pub name: String,
    pub warning: bool,
    pub reason: EventReason,
    pub message: String,
}

/// The events of a pass's rows. `recommendations` are the pass's own rows (the first rows, in
/// order), for the footprint some messages name; the rest are journal rows.
pub fn workload_events(rows: &[Row], recommendations: &[Recommendation]) -> Vec<WorkloadEvent> {
    let mut events = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Some((namespace, name)) = row.workload.split_once('/') else {
            continue;
        };
        let footprint = recommendations.get(i).map_or(0, |r| r.footprint);
        let mut push = |warning, reason, message| {
            events.push(WorkloadEvent {
                namespace: namespace.to_string(),
                name: name.to_string(),
                warning,
                reason,
                message,
            })
        };
        let subject = format!("{}/{}", row.workload, row.component);
        match row.outcome {
            RowOutcome::Advisory => {
                let Some(advisory) = row.advisory_reason else {
                    continue;
                };
                let reason = match (advisory, row.policy) {
                    (AdvisoryReason::RawDeploymentMigrationUnsupported, _) => {
                        EventReason::RawDeploymentMigrationUnsupported
                    }
                    (_, PolicyName::Defragmentation) => {
                        EventReason::FragmentationRecommendationProduced
                    }
                    _ => EventReason::EvacuationRecommendationProduced,
                };
                let gpus = if advisory == AdvisoryReason::NoSurgeHeadroom {
                    footprint
                } else {
                    0
                };
                push(
                    false,
                    reason,
                    format!(
                        "{} advisory for {subject}: {} (from {}, footprint {gpus} GPUs)",
                        row.policy.as_str(),
                        advisory.as_str(),
                        row.from_node
                    ),
                );
            }
            RowOutcome::Rejected => push(
                false,
                EventReason::RecommendationRejected,
                format!(
                    "{} recommendation for {subject} rejected: {}",
                    row.policy.as_str(),
                    row.reject_reason.map_or("", ArbiterReason::as_str)
                ),
            ),
            outcome => {
                let (warning, reason) = match outcome {
                    RowOutcome::Withheld => (false, EventReason::RecommendationWithheld),
                    RowOutcome::Submitted => (false, EventReason::MigrationSubmitted),
                    RowOutcome::Acknowledged => (false, EventReason::MigrationAcknowledged),
                    RowOutcome::Completed => (false, EventReason::MigrationCompleted),
                    RowOutcome::Failed => (true, EventReason::MigrationFailed),
                    _ => (true, EventReason::MigrationStalled),
                };
                push(
                    warning,
                    reason,
                    format!(
                        "{} migration request uuid={} for {subject} instance {}: {} ({})",
                        row.policy.as_str(),
                        row.request_uuid.as_deref().unwrap_or_default(),
                        row.instance,
                        outcome.as_str(),
                        row.dispatch_reason.map_or("", DispatchReason::as_str)
                    ),
                );
            }
        }
        if row.cooldown_overridden {
            push(
                false,
                EventReason::CooldownOverriddenForEvacuation,
                format!(
                    "health evacuation of {subject} admitted under the cooldown floor while the standard window was still running"
                ),
            );
        }
    }
    events
}

/// Workload events recorded in one pass at most; the rest wait for a later pass (events are
/// lossy, alfred-reference.md §3.4). A first pass over a large cluster has an advisory row for
/// nearly every workload: recorded at once, 7,000 of them took two requests each, past the
/// pass's deadline.
pub const EVENTS_PER_PASS: usize = 50;

/// The events to record this pass, most telling first (warnings, then the life of a request,
/// then the arbiter's verdicts, then advice), leaving out those `recent` says were just
/// recorded, at most [`EVENTS_PER_PASS`]; and how many wait.
pub fn to_record(
    events: Vec<WorkloadEvent>,
    recent: impl Fn(&WorkloadEvent) -> bool,
) -> (Vec<WorkloadEvent>, usize) {
    let rank = |e: &WorkloadEvent| match e.reason {
        _ if e.warning => 0,
        EventReason::MigrationSubmitted
        | EventReason::MigrationAcknowledged
        | EventReason::MigrationCompleted
        | EventReason::CooldownOverriddenForEvacuation => 1,
        EventReason::RecommendationRejected | EventReason::RecommendationWithheld => 2,
        _ => 3,
    };
    let mut due: Vec<WorkloadEvent> = events.into_iter().filter(|e| !recent(e)).collect();
    due.sort_by_key(rank);
    let waiting = due.len().saturating_sub(EVENTS_PER_PASS);
    due.truncate(EVENTS_PER_PASS);
    (due, waiting)
}

/// A stable name for an event, so that a repeat of the same event on the same object is
/// counted on one Event object instead of creating another each pass.
pub fn event_name(object: &str, reason: &str, message: &str) -> String {
    let digest = Sha256::digest(format!("{reason}\n{message}").as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    // Object names are at most 253 characters; leave room for the suffix.
    let prefix = &object[..object.len().min(253 - 17)];
    format!("{prefix}.{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, warning: bool, reason: EventReason) -> WorkloadEvent {
        WorkloadEvent {
            namespace: "ns".into(),
            name: name.into(),
            warning,
            reason,
            message: String::new(),
        }
    }

    #[test]
    fn a_pass_records_the_telling_events_first_and_at_most_its_budget() {
        let mut events: Vec<WorkloadEvent> = (0..100)
            .map(|i| {
                event(
                    &format!("a{i}"),
                    false,
                    EventReason::FragmentationRecommendationProduced,
                )
            })
            .collect();
        events.push(event("sent", false, EventReason::MigrationSubmitted));
        events.push(event("failed", true, EventReason::MigrationFailed));
        events.push(event("just-recorded", true, EventReason::MigrationStalled));
        let (now, waiting) = to_record(events, |e| e.name == "just-recorded");
        assert_eq!(now.len(), EVENTS_PER_PASS);
        assert_eq!(waiting, 102 - EVENTS_PER_PASS);
        assert_eq!(now[0].name, "failed");
        assert_eq!(now[1].name, "sent");
        assert_eq!(now[2].name, "a0", "advice keeps its order");
        assert!(!now.iter().any(|e| e.name == "just-recorded"));
    }
}
