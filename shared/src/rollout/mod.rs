//! OMENative rollouts (omenative-reference.md §3, §4; omenative-update-strategies.md): the
//! update strategy each component resolves to, one pass of the controller's rollout planning,
//! what a target change does to a surge in flight, the texts OME writes, and the report
//! `kubectl alfred rollout` shows.

pub mod messages;
pub mod pass;
pub mod report;
pub mod strategy;
pub mod superseded;

pub use messages::{in_place_pod_lost, indices, retry_held};
pub use pass::{
    Change, Hold, InstanceFacts, Mechanism, PassInput, PassPlan, PodFact, RejectedUpdate,
    classify_change, mechanism, partition_held, plan_pass, restart_window, staged_message,
};
pub use superseded::{GangAbandon, GangReset, MidSurge, SurgePods, gang_abandoned, mid_surge};
