//! Every reason code Alfred writes (alfred-reference.md §4, omenative-reference.md §1.4, the
//! solver's end reasons): one vocabulary, each name declared once, carried typed from the
//! decision to the output and the journal.

use crate::{named, serde_by_name};

named! {
    /// Why a move was considered.
    #[derive(PartialOrd, Ord)]
    pub enum CandidateReason {
        Fragmentation,
        NodeUnhealthy,
        NodeMaintenance,
    }
}

named! {
    /// Why a row is not executable (alfred-reference.md §4 "Advisory reasons").
    pub enum AdvisoryReason {
        OMENativeUnavailable,
        RawDeploymentMigrationUnsupported,
        LWSMigrationUnsupported,
        NoSurgeHeadroom,
        VolumePinned,
        ModelUnresolved,
        MigrationSurfaceDisabled,
        OMENativeObservationInvalid,
        OMENativeStateIneligible,
        NonExecutableObservedFragmentation,
        SimulationRecommendOnly,
        AcceleratorPlacementUnmodeled,
        // Scheduler selection failed for the move's pods: the scheduling reason, as is.
        NoTemplates,
        MixedSchedulers,
        TemplateBound,
        ProfileNotConfigured,
        GangUnsupported,
        RecommendationTooLarge,
        // Beyond the reference (`holdMinutes`): the consolidation plan's next moves go first.
        PlanStepFirst,
    }
}

impl AdvisoryReason {
    /// The advisory reason of a scheduler-selection failure: the scheduling reason itself.
    pub fn of_selection(reason: SchedulingReason) -> Option<AdvisoryReason> {
        use SchedulingReason as S;
        match reason {
            S::NoTemplates => Some(Self::NoTemplates),
            S::MixedSchedulers => Some(Self::MixedSchedulers),
            S::TemplateBound => Some(Self::TemplateBound),
            S::ProfileNotConfigured => Some(Self::ProfileNotConfigured),
            S::GangUnsupported => Some(Self::GangUnsupported),
            S::RecommendationTooLarge => Some(Self::RecommendationTooLarge),
            _ => None,
        }
    }
}

named! {
    /// Why a hold (`holdMinutes`, beyond the reference) is placed or released.
    pub enum HoldReason {
        /// The next action of the plan empties the node for the pod.
        HoldPlaced = "HoldPlaced",
        /// The pod was scheduled (on the held node or elsewhere).
        HoldPodBound = "HoldPodBound",
        /// The pod was scheduled or left, and the node goes to the next waiting pod it can
        /// seat.
        HoldHandedOver = "HoldHandedOver",
        /// The pod is gone, was replaced, or has finished.
        HoldPodGone = "HoldPodGone",
        /// Held for `holdMinutes` without the pod binding.
        HoldExpired = "HoldExpired",
        /// Emptying the node no longer seats the pod (the filters refuse its moves, its
        /// Instances cannot move, or the pod no longer fits there).
        HoldAbandoned = "HoldAbandoned",
        /// Another hold stands: Alfred keeps one at a time.
        HoldSuperseded = "HoldSuperseded",
        /// `holdMinutes` is 0 or `followPlan` is off.
        HoldDisabled = "HoldDisabled",
    }
}

serde_by_name!(HoldReason);

named! {
    /// A simulation's `scheduling.status`.
    pub enum SchedulingStatus {
        Feasible,
        Infeasible,
        Unsupported,
        Unavailable,
    }
}

named! {
    /// A simulation's `scheduling.reason` (alfred-reference.md §4 "Scheduling results").
    pub enum SchedulingReason {
        PlacementFound,
        NoFeasiblePlacement,
        Unsupported,
        GangUnsupported,
        InputUnsupported,
        RecommendationTooLarge,
        ProfileNotConfigured,
        ProfileInvalid,
        SimulationUnavailable,
        MixedSchedulers,
        TemplateBound,
        NoTemplates,
        OMENativeObservationInvalid,
        SimulationBudgetExceeded,
        ObservationStale,
        CaptureFailed,
        SnapshotStale,
        SourceChanged,
        WorkerFailed,
        InvalidResponse,
    }
}

named! {
    /// Why the arbiter refused a move, in the order it checks them.
    #[derive(PartialOrd, Ord)]
    pub enum ArbiterReason {
        CircuitBreakerOpen,
        InstanceGone,
        NotMovable,
        MalformedRequestPending,
        MigrationStateInvalid,
        InstanceTerminating,
        WorkloadBusy,
        Cooldown,
        PlacementCooldown,
        NodeCooldown,
        TargetUnavailable,
        TargetUnderEvacuation,
        TargetNodeBusy,
        NoCapacity,
        InFlightCap,
        HourlyCap,
    }
}

named! {
    /// Why the dispatcher withheld an admitted move, or what its write found (alfred-reference.md
    /// §4 "Dispatch (withhold) reasons"): the dispatcher's own codes, the re-check's arbiter
    /// refusal, or the reason of the request's journal entry (a row's `dispatchReason`).
    pub enum DispatchReason {
        JournalUnavailable,
        MultipleUnresolvedRequests,
        UnresolvedRequest,
        ExecutionDisabled,
        InvalidCooldown,
        ConfigurationChanged,
        GuardUnavailable,
        FailureBackoff,
        PolicyNoLongerEligible,
        SourceUnsupported,
        SourceChanged,
        SimulationNotFeasible,
        PredictedTargetUnsafe,
        TargetCooldown,
        JournalPayloadInvalid,
        InvalidRequest,
        OwnerChanged,
        SubmissionJournalUncertain,
        SerialDispatchLimit;
        Arbiter(ArbiterReason),
        Entry(EntryReason),
    }
}

named! {
    /// Why a journal entry is in its phase.
    pub enum EntryReason {
        SubmissionPrepared,
        SubmissionUncertain,
        RequestSubmitted,
        RequestAnnotationObserved,
        UUIDStatusObserved,
        TerminalStatusObserved,
        AcknowledgementTimeout,
        ConsumerDeadlineExceeded,
        AcknowledgedStatusMissing,
        RequestPayloadChanged,
        OwnerUnavailable,
        ReplicaUnavailable,
        ReplicaIdentityChanged,
        MigrationStatusInvalid,
    }
}

named! {
    /// Why a solver search ended.
    pub enum EndReason {
        /// Every objective bucket is zero: nothing left to improve.
        Optimal,
        NoImprovingMove,
        TimeLimit,
        MoveLimit,
    }
}

named! {
    /// The code at the head of an admission refusal (omenative-reference.md §1.4,
    /// alfred-reference.md §2).
    pub enum AdmissionCode {
        InvalidDeploymentModeCombination,
        InvalidRollingUpdateInteger,
        InvalidRollingUpdatePercent,
        RollingUpdateZeroBudget,
        UnsupportedSchemaVersion,
    }
}

named! {
    /// The reason of an event Alfred records (alfred-reference.md §3.4).
    pub enum EventReason {
        FragmentationRecommendationProduced,
        EvacuationRecommendationProduced,
        RawDeploymentMigrationUnsupported,
        RecommendationRejected,
        RecommendationWithheld,
        MigrationSubmitted,
        MigrationAcknowledged,
        MigrationCompleted,
        MigrationFailed,
        MigrationStalled,
        MigrationRequestResolved,
        CooldownOverriddenForEvacuation,
        NodeRepairNeeded,
        NodeDrainedForRepair,
        NodeMaintenanceRequested,
        NodeDrainedForMaintenance,
        NodeCordonedForMaintenance,
        // On the caretaker's ConfigMap: a document that does not load (the last good stays).
        PolicyReloadFailed,
    }
}

serde_by_name!(
    CandidateReason,
    AdvisoryReason,
    SchedulingStatus,
    SchedulingReason,
    ArbiterReason,
    DispatchReason,
    EntryReason,
    EndReason,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arbiter_and_entry_names_read_back_as_dispatch_reasons() {
        let mut all: Vec<&str> = DispatchReason::NAMES.to_vec();
        all.extend(ArbiterReason::NAMES);
        all.extend(EntryReason::NAMES);
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "a name in two reads back ambiguously");
        for name in all {
            assert_eq!(DispatchReason::parse(name).map(|r| r.as_str()), Some(name));
        }
    }

    #[test]
    fn every_selection_advisory_is_its_scheduling_reason() {
        for s in SchedulingReason::ALL {
            if let Some(a) = AdvisoryReason::of_selection(*s) {
                assert_eq!(a.as_str(), s.as_str());
            }
        }
    }
}
