//! The texts OME's controller writes while it rolls out (omenative-reference.md §3, §4): hold
//! reasons and event messages, word for word.

use crate::api::component::ComponentKind;
use crate::api::replica::RetryBlock;

use super::strategy::BudgetArm;

/// The key OME's events name an Instance by.
pub(super) fn event_key(component: ComponentKind, index: i32) -> String {
    format!("component={component} instance={index}")
}

/// Instance indices as the hold texts list them: `0, 2`.
pub fn indices(items: &[i32]) -> String {
    let names: Vec<String> = items.iter().map(i32::to_string).collect();
    list(&names)
}

pub(super) fn list(items: &[String]) -> String {
    items.join(", ")
}

/// The clause naming Instances rolled to the target that do not serve yet.
pub(super) fn not_serving_clause(target: &str, rolled_not_serving: &[i32]) -> String {
    if rolled_not_serving.is_empty() {
        return String::new();
    }
    format!(
        "; Instance(s) {} on revision {target} not serving",
        indices(rolled_not_serving)
    )
}

/// The hold text of an exhausted budget, naming the pods that still hold slots.
pub(super) fn budget_reason(
    arm: BudgetArm,
    budget: u32,
    projected: u32,
    target: &str,
    rolled_not_serving: &[i32],
    extras: &[(i32, u32, Vec<&str>, Vec<&str>)],
) -> String {
    let mut reason = format!(
        "per-Component {} budget {budget} exhausted (would become {projected}){}",
        arm.as_str(),
        not_serving_clause(target, rolled_not_serving)
    );
    let terminating: Vec<String> = extras
        .iter()
        .flat_map(|e| e.2.iter().map(|n| n.to_string()))
        .collect();
    let live: Vec<String> = extras
        .iter()
        .flat_map(|e| e.3.iter().map(|n| n.to_string()))
        .collect();
    match terminating.len() {
        0 => {}
        1 => reason.push_str(&format!(
            "; Terminating pod {} still counts against the surge budget until its deletion grace elapses",
            terminating[0]
        )),
        _ => reason.push_str(&format!(
            "; Terminating pods {} still count against the surge budget until their deletion grace elapses",
            list(&terminating)
        )),
    }
    match live.len() {
        0 => {}
        1 => reason.push_str(&format!(
            "; extra pod {} holds a surge slot until a start on its Instance replaces it",
            live[0]
        )),
        _ => reason.push_str(&format!(
            "; extra pods {} hold surge slots until a start on their Instance replaces them",
            list(&live)
        )),
    }
    reason
}

/// The Warning OME records once per Held retry block (omenative-reference.md §3.6).
pub fn retry_held(replica: &str, component: ComponentKind, block: &RetryBlock) -> String {
    format!(
        "InferenceReplica {replica} component={component} update to revision {} held after {} failed attempt(s) (last failure: {}); publish a corrected revision or raise lifecycle.updateRetry limits",
        block.target_revision,
        block.attempts_started,
        block.reason.as_deref().unwrap_or("unknown")
    )
}

/// The Warning (`InPlaceUpdateNotPossible`) when the pod an in-place update was patching is
/// gone: OME re-resolves the update to a recreate (omenative-reference.md §3.4).
pub fn in_place_pod_lost(component: ComponentKind, index: i32, revision: &str) -> String {
    format!(
        "OMENative {} lost the pod its in-place update to revision {revision} was patching; recreating instead",
        event_key(component, index)
    )
}
