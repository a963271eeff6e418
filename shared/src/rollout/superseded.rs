//! What happens to a surge in flight when the roll target moves (omenative-reference.md §4.1,
//! §4.2): the single-pod decision and the gang abandon message.

use crate::api::component::ComponentKind;
use crate::api::replica::{InstancePhase, InstanceStatus};

use super::messages::event_key;
use super::pass::step_is;

/// What a template change does to a single-pod surge in flight (omenative-reference.md §4.1),
/// and the `SurgeAbandoned` event it records, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MidSurge {
    /// The new pod is torn down; the row goes Ready on its running revision and the next pass
    /// starts afresh (unless the new target is the running revision).
    Abandon { event: String },
    /// The source is gone: the surge finishes on its pinned revision, the newer one rolls next.
    Finish,
    /// Handed over (`SurgeDrain`): promote on the pinned revision, then a second update.
    Continue,
    /// The replacement was lost after taking over: the source returns to rotation.
    SourceReturns { event: String },
    /// The replacement was lost and no source stands: a fresh start at the newest target.
    FreshStart { event: String },
    /// A Failed row: nothing to abandon; the next attempt goes to the newest target.
    NextAttempt,
}

/// Facts about the pods of a surge in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SurgePods {
    /// The source (old) pod still stands.
    pub source_stands: bool,
    /// The source pod is being deleted.
    pub source_terminating: bool,
    /// The replacement pod was lost.
    pub replacement_lost: bool,
}

/// The single-pod decision when the target moves to `new_target` during a surge pinned to
/// `pinned`.
pub fn mid_surge(
    component: ComponentKind,
    row: &InstanceStatus,
    pinned: &str,
    new_target: &str,
    pods: SurgePods,
) -> MidSurge {
    let key = event_key(component, row.index);
    let running = row.running_revision.as_deref().unwrap_or("");
    if row.phase == Some(InstancePhase::Failed) {
        return MidSurge::NextAttempt;
    }
    if step_is(row, "Surge") {
        if !pods.source_stands {
            return MidSurge::Finish;
        }
        let event = if new_target == running {
            format!(
                "OMENative {key} abandoned surge to withdrawn revision {pinned}; the Instance stays on revision {running}"
            )
        } else {
            format!(
                "OMENative {key} abandoned superseded surge to {pinned}; re-surging toward {new_target}"
            )
        };
        return MidSurge::Abandon { event };
    }
    if !pods.replacement_lost {
        return MidSurge::Continue;
    }
    let lost = format!(
        "OMENative {key} abandoned surge to withdrawn revision {pinned}: the replacement was lost after it took over serving"
    );
    if pods.source_stands && !pods.source_terminating {
        MidSurge::SourceReturns {
            event: format!(
                "{lost} and nothing is rebuilt at it; the source returns to rotation on revision {running}"
            ),
        }
    } else {
        MidSurge::FreshStart {
            event: format!(
                "{lost} and no source pod stands, so the Instance re-enters as a fresh start at revision {new_target}"
            ),
        }
    }
}

/// How an abandoned gang surge leaves the source (the `{reset}` of §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangReset<'a> {
    /// Back to its running revision for a fresh rollout.
    Reset { running: &'a str },
    /// The roll target moved away: the source returns to rotation.
    SourceReturns { running: &'a str },
    /// The source's pods are gone.
    SourceGone,
    /// The source never ran a revision.
    NeverRan,
}

impl GangReset<'_> {
    fn text(self) -> String {
        match self {
            Self::Reset { running } => {
                format!("resetting to revision {running} for a fresh rollout")
            }
            Self::SourceReturns { running } => {
                format!("the source returns to rotation on revision {running}")
            }
            Self::SourceGone => {
                "the source's pods are gone and it re-enters as a fresh start at the roll target"
                    .into()
            }
            Self::NeverRan => {
                "the source never ran a revision and re-enters as a fresh start".into()
            }
        }
    }
}

/// Why a gang surge was abandoned, for the `GangSurgeAbandoned` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangAbandon<'a> {
    /// The replacement failed (a Warning).
    Failed,
    /// A newer revision superseded it.
    Superseded,
    /// The roll target moved off `pinned` while the replacement was short of members.
    Withdrawn { pinned: &'a str },
}

/// The `GangSurgeAbandoned` message for a multi-pod Instance.
pub fn gang_abandoned(
    component: ComponentKind,
    index: i32,
    surge_index: i32,
    why: GangAbandon<'_>,
    reset: GangReset<'_>,
) -> String {
    let key = event_key(component, index);
    let reset = reset.text();
    match why {
        GangAbandon::Failed => {
            format!(
                "OMENative {key} abandoned failed gang surge (surge-index={surge_index}); {reset}"
            )
        }
        GangAbandon::Superseded => {
            format!(
                "OMENative {key} abandoned superseded gang surge (surge-index={surge_index}); {reset}"
            )
        }
        GangAbandon::Withdrawn { pinned } => format!(
            "OMENative {key} abandoned gang surge (surge-index={surge_index}): the roll target moved off revision {pinned} while the replacement gang was short of members, so nothing is rebuilt at it; {reset}"
        ),
    }
}
