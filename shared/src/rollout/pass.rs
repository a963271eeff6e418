//! One pass of OMENative rollout planning, as OME's controller runs it (omenative-reference.md
//! §3): which Instances the pass starts toward the target revision and by which mechanism,
//! which stay behind the partition, and what holds the rest back, with the controller's exact
//! hold texts. `kubectl alfred rollout` shows it before and during a rollout.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::messages::{budget_reason, event_key, not_serving_clause};
use super::strategy::{BudgetArm, PercentError, ResolvedStrategy};
use crate::api::component::ComponentKind;
use crate::api::lifecycle::UpdateStrategyType;
use crate::api::replica::{
    HoldGate, InstancePhase, InstanceStatus, OperationType, RetryBlock, RetryBlockState,
};

/// Operation steps of a surge in flight.
const SURGE_STEPS: [&str; 3] = ["Surge", "SurgeDrain", "SurgeDrainSettle"];

/// A pod listed for an Instance's index.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFact<'a> {
    pub name: &'a str,
    /// When its deletion grace ends, if it is being deleted.
    pub deletion: Option<Timestamp>,
    /// It runs the Instance's running revision (extra pods off it are named first).
    pub on_running_revision: bool,
    /// A container waits in `CrashLoopBackOff`.
    pub crash_looping: bool,
    /// When it turned Ready again after a container restart (None: no restart, or not Ready).
    pub ready_after_restart: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InstanceFacts<'a> {
    pub row: &'a InstanceStatus,
    pub pods: Vec<PodFact<'a>>,
}

/// What an edit of a component changes in its pods: `None` when the pod template is the same
/// (a strategy edit starts no rollout).
pub fn classify_change(
    old: &crate::api::ComponentSpec,
    new: &crate::api::ComponentSpec,
) -> Option<Change> {
    fn without_images(spec: &crate::api::ComponentSpec) -> serde_json::Value {
        let mut pod = serde_json::to_value(&spec.pod).unwrap_or_default();
        for key in ["containers", "runner"] {
            match pod.get_mut(key) {
                Some(serde_json::Value::Array(list)) => {
                    for c in list {
                        if let Some(c) = c.as_object_mut() {
                            c.remove("image");
                        }
                    }
                }
                Some(serde_json::Value::Object(c)) => {
                    c.remove("image");
                }
                _ => {}
            }
        }
        serde_json::json!({"pod": pod, "leader": spec.leader, "worker": spec.worker,
                           "labels": spec.labels, "annotations": spec.annotations})
    }
    let pods = |s: &crate::api::ComponentSpec| {
        serde_json::json!({"pod": s.pod, "leader": s.leader, "worker": s.worker,
                           "labels": s.labels, "annotations": s.annotations})
    };
    if pods(old) == pods(new) {
        None
    } else if without_images(old) == without_images(new) {
        Some(Change::ImagesOnly)
    } else {
        Some(Change::Other)
    }
}

/// What the target revision changes in a running revision's pod spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Only the images of regular containers: in-place strategies can patch the pod.
    ImagesOnly,
    /// Anything else (env, resources, init-container images, labels), or no recorded baseline.
    Other,
}

#[derive(Clone, Debug)]
pub struct PassInput<'a> {
    pub component: ComponentKind,
    /// The update revision, e.g. `chat-engine-7b4c2e19`.
    pub target: &'a str,
    /// Desired Instances (the IR's replicas; budgets scale against it).
    pub desired: u32,
    /// Pods per Instance: 1, or a leader and its workers.
    pub pods_per_instance: u32,
    /// In ascending index order.
    pub instances: Vec<InstanceFacts<'a>>,
    /// Pods of indices the component no longer lists (scaled away), by index: a Terminating
    /// one holds a surge slot until its deletion grace ends.
    pub unlisted: Vec<(i32, Vec<PodFact<'a>>)>,
    pub retry_blocks: &'a [RetryBlock],
    pub strategy: &'a ResolvedStrategy,
    /// The effective partition: `pacing.partition` if set, else `rollingUpdate.partition`.
    pub partition: Option<i32>,
    pub change: Change,
    pub now: Timestamp,
    /// How long an Instance that restarted after it was Ready still holds a slot once Ready
    /// again: max(minReadySeconds, stuckPodGracePeriod), see [`restart_window`].
    pub restart_window: SignedDuration,
}

/// max(minReadySeconds, the stuck-pod grace rounded up to whole seconds).
pub fn restart_window(min_ready_seconds: i32, stuck_pod_grace: SignedDuration) -> SignedDuration {
    let grace = SignedDuration::from_secs(
        stuck_pod_grace.as_secs() + i64::from(stuck_pod_grace.subsec_nanos() > 0),
    );
    SignedDuration::from_secs(i64::from(min_ready_seconds.max(0))).max(grace)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// A new pod at the Instance's other ordinal next to the old one.
    Surge {
        new_ordinal: i32,
    },
    /// A whole replacement leader and workers at a new index.
    GangSurge,
    Recreate,
    InPlace,
}

impl Mechanism {
    pub fn describe(self) -> String {
        match self {
            Self::Surge { new_ordinal } => format!("surge (new pod at ordinal {new_ordinal})"),
            Self::GangSurge => "gang surge (replacement Instance at a new index)".into(),
            Self::Recreate => "recreate".into(),
            Self::InPlace => "in place".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    pub gate: HoldGate,
    pub reason: String,
    pub target: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassPlan {
    /// Fresh starts admitted this pass, in the order they start.
    pub starts: Vec<(i32, Mechanism)>,
    /// Updates already in flight, which continue without a new charge.
    pub continuing: Vec<i32>,
    /// Held on the prior revision by the partition.
    pub partition_held: Vec<i32>,
    /// Refused by `InPlaceOnly`, with the controller's warning.
    pub refused: Vec<(i32, String)>,
    /// Waiting on the budget or a retry block.
    pub waiting: Vec<i32>,
    /// Crash-looping Instances the pass repairs (recreates), charged to `maxUnavailable`.
    pub repairs: Vec<i32>,
    /// Crash-loop repairs the unavailability budget holds, with the controller's `RepairHeld`
    /// warning.
    pub repairs_held: Vec<(i32, String)>,
    /// The first denial, as the InferenceReplica's `rolloutHold` reports it.
    pub hold: Option<Hold>,
    pub arm: Option<BudgetArm>,
    /// The budget the strategy reads, scaled; None is no cap.
    pub budget: Option<u32>,
    /// Slots held before this pass.
    pub prior: u32,
}

fn is_surge_step(row: &InstanceStatus) -> bool {
    row.operation
        .as_ref()
        .and_then(|op| op.step.as_deref())
        .is_some_and(|s| SURGE_STEPS.contains(&s))
}

fn has_update_op(row: &InstanceStatus) -> bool {
    row.operation
        .as_ref()
        .is_some_and(|op| op.type_ == OperationType::Update)
}

pub(super) fn step_is(row: &InstanceStatus, step: &str) -> bool {
    row.operation.as_ref().and_then(|op| op.step.as_deref()) == Some(step)
}

/// The Instance is fully serving: as many serving pods as it has pods.
fn serving(row: &InstanceStatus, pods_per_instance: u32) -> bool {
    row.serving_pod_count.unwrap_or(0) >= pods_per_instance as i32
}

fn on(row: &InstanceStatus, revision: &str) -> bool {
    row.running_revision.as_deref() == Some(revision)
}

/// The Instances the partition keeps on the prior revision: the lowest `partition` indices
/// among observed rows off the target that no update or migration surge owns.
pub fn partition_held(rows: &[&InstanceStatus], target: &str, partition: Option<i32>) -> Vec<i32> {
    let p = partition.unwrap_or(0);
    if p <= 0 {
        return Vec::new();
    }
    let mut candidates: Vec<i32> = rows
        .iter()
        .filter(|r| r.phase.is_some() && !on(r, target))
        .filter(|r| r.phase != Some(InstancePhase::Updating) && !has_update_op(r))
        .filter(|r| {
            !(r.operation
                .as_ref()
                .is_some_and(|op| op.type_ == OperationType::Migrate)
                && r.phase != Some(InstancePhase::Migrating))
        })
        .map(|r| r.index)
        .collect();
    candidates.sort_unstable();
    candidates.truncate(p as usize);
    candidates
}

/// `Staged at partition ...`, when a partition holds Instances and the rest are Ready on the
/// target.
pub fn staged_message(
    rows: &[&InstanceStatus],
    target: &str,
    partition: i32,
    replicas: u32,
) -> Option<String> {
    if partition <= 0 {
        return None;
    }
    let ready = |r: &&&InstanceStatus| r.phase == Some(InstancePhase::Ready);
    let on_target = rows.iter().filter(ready).filter(|r| on(r, target)).count() as i64;
    let held = rows.iter().filter(ready).filter(|r| !on(r, target)).count() as i64;
    let p = i64::from(partition).min(i64::from(replicas));
    (on_target == i64::from(replicas) - p && held == p).then(|| {
        format!(
            "Staged at partition {p}: {on_target}/{replicas} Instances on {target}, {p} held on the prior revision"
        )
    })
}

/// `InPlaceOnly` refusing a change beyond container images: the event OME records.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("OMENative {key} rejected update: InPlaceOnly strategy but diff exceeds container images")]
pub struct RejectedUpdate {
    /// The Instance, as OME's events name it.
    pub key: String,
}

/// The mechanism a fresh start uses, or the `InPlaceOnly` refusal.
pub fn mechanism(
    component: ComponentKind,
    row: &InstanceStatus,
    strategy: UpdateStrategyType,
    pods_per_instance: u32,
    change: Change,
) -> Result<Mechanism, RejectedUpdate> {
    let multi_pod = pods_per_instance > 1;
    let never_promoted = row.running_revision.as_deref().is_none_or(str::is_empty)
        && row.phase == Some(InstancePhase::Failed)
        && row.operation.is_none();
    if never_promoted {
        return Ok(Mechanism::Recreate);
    }
    match strategy {
        UpdateStrategyType::SurgeThenDrain if multi_pod => Ok(Mechanism::GangSurge),
        UpdateStrategyType::SurgeThenDrain => Ok(Mechanism::Surge {
            new_ordinal: 1 - row.active_ordinal.unwrap_or(0),
        }),
        UpdateStrategyType::RecreatePod => Ok(Mechanism::Recreate),
        _ if multi_pod => Ok(Mechanism::Recreate),
        _ if change == Change::ImagesOnly => Ok(Mechanism::InPlace),
        UpdateStrategyType::InPlaceIfPossible => Ok(Mechanism::Recreate),
        UpdateStrategyType::InPlaceOnly => Err(RejectedUpdate {
            key: event_key(component, row.index),
        }),
    }
}

/// Extra pods holding surge slots: per index, pods beyond the Instance's count, Terminating ones
/// only until their deletion grace ends. Returns (index, slots, terminating names, live names).
fn extra_pod_slots<'a>(
    input: &'a PassInput<'a>,
    skip: &[i32],
) -> Vec<(i32, u32, Vec<&'a str>, Vec<&'a str>)> {
    let per = input.pods_per_instance.max(1);
    let mut out = Vec::new();
    for i in &input.instances {
        if skip.contains(&i.row.index) {
            continue;
        }
        let counted: Vec<&PodFact> = i
            .pods
            .iter()
            .filter(|p| p.deletion.is_none_or(|d| d > input.now))
            .collect();
        let extra = (counted.len() as u32).saturating_sub(per);
        if extra == 0 {
            continue;
        }
        let mut terminating: Vec<&str> = counted
            .iter()
            .filter(|p| p.deletion.is_some())
            .map(|p| p.name)
            .collect();
        // Live extras: those off the running revision first, then the highest names.
        let mut live: Vec<&PodFact> = counted
            .iter()
            .copied()
            .filter(|p| p.deletion.is_none())
            .collect();
        live.sort_by(|a, b| {
            a.on_running_revision
                .cmp(&b.on_running_revision)
                .then(b.name.cmp(a.name))
        });
        let live_extra = (extra as usize).saturating_sub(terminating.len());
        let mut live: Vec<&str> = live.into_iter().take(live_extra).map(|p| p.name).collect();
        terminating.truncate(extra as usize);
        terminating.sort_unstable();
        live.sort_unstable();
        out.push((i.row.index, extra.div_ceil(per), terminating, live));
    }
    // An index without a row has no pods of its own: every pod is extra, and only Terminating
    // ones count (live extras count for planned indices alone).
    for (index, pods) in &input.unlisted {
        let mut terminating: Vec<&str> = pods
            .iter()
            .filter(|p| p.deletion.is_some_and(|d| d > input.now))
            .map(|p| p.name)
            .collect();
        if terminating.is_empty() || skip.contains(index) {
            continue;
        }
        terminating.sort_unstable();
        let slots = (terminating.len() as u32).div_ceil(per);
        out.push((*index, slots, terminating, Vec::new()));
    }
    out
}

/// Plans one pass: selection in index order, partition, budgets and the first hold.
pub fn plan_pass(input: &PassInput<'_>) -> Result<PassPlan, PercentError> {
    let strategy = input.strategy.type_.value;
    let arm = BudgetArm::of(strategy);
    let budget = input.strategy.budget(input.desired)?;
    let per = input.pods_per_instance;
    let rows: Vec<&InstanceStatus> = input.instances.iter().map(|i| i.row).collect();
    let mut plan = PassPlan {
        arm: Some(arm),
        budget,
        partition_held: partition_held(&rows, input.target, input.partition),
        ..PassPlan::default()
    };

    // Slots held before the pass.
    let rolled_not_serving: Vec<i32> = input
        .instances
        .iter()
        .filter(|i| on(i.row, input.target) && (!serving(i.row, per) || settling(i, input)))
        .map(|i| i.row.index)
        .collect();
    let unavailable_in_flight = rows
        .iter()
        .filter(|r| {
            let updating = r.phase == Some(InstancePhase::Updating) && !step_is(r, "Parked");
            let failed_claim = r.phase == Some(InstancePhase::Failed) && has_update_op(r);
            (updating || failed_claim) && !is_surge_step(r)
        })
        .count() as u32;
    let in_flight = match arm {
        BudgetArm::Surge => rows.iter().filter(|r| is_surge_step(r)).count() as u32,
        BudgetArm::Unavailability => unavailable_in_flight,
    };
    let mut skip_extra: Vec<i32> = rows
        .iter()
        .filter(|r| is_surge_step(r))
        .map(|r| r.index)
        .collect();
    skip_extra.extend(
        rows.iter()
            .filter_map(|r| r.operation.as_ref().and_then(|op| op.surge_index)),
    );
    skip_extra.extend(&rolled_not_serving);
    let extras = if arm == BudgetArm::Surge {
        extra_pod_slots(input, &skip_extra)
    } else {
        Vec::new()
    };
    let mut extra_slots: u32 = extras.iter().map(|e| e.1).sum();
    if let Some(b) = budget {
        extra_slots = extra_slots.min(b);
    }
    plan.prior = in_flight + rolled_not_serving.len() as u32 + extra_slots;

    // Selection in index order, then Instances out of rotation first.
    let mut selected: Vec<&InstanceStatus> = Vec::new();
    for r in &rows {
        if plan.partition_held.contains(&r.index) {
            continue;
        }
        let migrating = r.phase == Some(InstancePhase::Migrating)
            || r.operation
                .as_ref()
                .is_some_and(|op| op.type_ == OperationType::Migrate)
            || step_is(r, "GangSurgeTarget");
        if migrating {
            continue;
        }
        let off_target = matches!(r.phase, Some(InstancePhase::Ready | InstancePhase::Failed))
            && !on(r, input.target);
        if r.phase == Some(InstancePhase::Updating)
            || (r.phase == Some(InstancePhase::Failed) && has_update_op(r))
        {
            plan.continuing.push(r.index);
        } else if off_target {
            selected.push(r);
        }
    }
    selected.sort_by_key(|r| {
        (
            serving(r, per) && r.phase != Some(InstancePhase::Failed),
            r.index,
        )
    });

    let max_unavailable = crate::rollout::strategy::scale_budget(
        input.strategy.max_unavailable.as_ref().map(|b| &b.value),
        input.desired,
    )?;
    let restarting = rows
        .iter()
        .filter(|r| r.phase == Some(InstancePhase::Restarting))
        .count() as u32;
    let repair_hold = crash_loop_repairs(
        input,
        &selected,
        unavailable_in_flight + restarting,
        max_unavailable,
        &mut plan,
    );

    let block = input
        .retry_blocks
        .iter()
        .find(|b| b.target_revision == input.target);
    // A repair takes an Instance out of service like a recreate does (one rolled and not
    // serving already holds its slot).
    let mut charged = match arm {
        BudgetArm::Unavailability => plan
            .repairs
            .iter()
            .filter(|i| !rolled_not_serving.contains(i))
            .count() as u32,
        BudgetArm::Surge => 0,
    };
    // RetryInProgress lets one attempt run at a time: one toward the target already updating.
    let attempt_in_flight = rows.iter().any(|r| {
        r.phase == Some(InstancePhase::Updating)
            && r.operation.as_ref().is_some_and(|op| {
                op.type_ == OperationType::Update
                    && op
                        .target_revision
                        .as_deref()
                        .is_none_or(|t| t == input.target)
            })
    });
    for r in selected {
        if let Some(hold) =
            block.and_then(|b| retry_denial(b, input, attempt_in_flight, &rolled_not_serving))
        {
            plan.waiting.push(r.index);
            plan.hold.get_or_insert(hold);
            continue;
        }
        let mechanism = match mechanism(input.component, r, strategy, per, input.change) {
            Ok(m) => m,
            Err(message) => {
                plan.refused.push((r.index, message.to_string()));
                continue;
            }
        };
        // A start takes over the slots its own live extra pods hold.
        let own = extras
            .iter()
            .find(|e| e.0 == r.index && !e.3.is_empty())
            .map_or(0, |e| e.1);
        let projected = plan.prior + charged + 1 - own.min(plan.prior + charged);
        if budget.is_some_and(|b| projected > b) {
            plan.waiting.push(r.index);
            if plan.hold.is_none() {
                plan.hold = Some(Hold {
                    gate: HoldGate::Budget,
                    reason: budget_reason(
                        arm,
                        budget.unwrap_or(0),
                        projected,
                        input.target,
                        &rolled_not_serving,
                        &extras,
                    ),
                    target: Some(input.target.to_string()),
                });
            }
            continue;
        }
        charged += 1 - own.min(1);
        plan.starts.push((r.index, mechanism));
    }
    // Any admitted start clears the hold, unless rolled Instances are still not serving.
    if !plan.starts.is_empty() && rolled_not_serving.is_empty() {
        plan.hold = None;
    }
    // Nothing left to start, but rolled Instances not serving keep the budget used up: the
    // hold stands, without a projection.
    if let Some(b) = budget.filter(|&b| {
        plan.hold.is_none()
            && plan.starts.is_empty()
            && !rolled_not_serving.is_empty()
            && plan.prior >= b
    }) {
        plan.hold = Some(Hold {
            gate: HoldGate::Budget,
            reason: format!(
                "per-Component {} budget {b} exhausted{}",
                arm.as_str(),
                not_serving_clause(input.target, &rolled_not_serving)
            ),
            target: Some(input.target.to_string()),
        });
    }
    // Under SurgeThenDrain, more rolled Instances not serving than maxUnavailable allows keep
    // every surge source in rotation; a withheld drain is always reported.
    let draining = rows.iter().any(|r| is_surge_step(r));
    if let Some(b) = max_unavailable
        .filter(|b| arm == BudgetArm::Surge && draining && rolled_not_serving.len() as u32 > *b)
    {
        plan.hold = Some(Hold {
            gate: HoldGate::Budget,
            reason: format!(
                "per-Component unavailability budget {b} exhausted{}; no source leaves rotation",
                not_serving_clause(input.target, &rolled_not_serving)
            ),
            target: Some(input.target.to_string()),
        });
    }
    // A held repair is the component's hold when the rollout has none (it names no target).
    if plan.hold.is_none() {
        plan.hold = repair_hold;
    }
    Ok(plan)
}

/// Crash-loop repairs, whatever the strategy, are charged to maxUnavailable against the
/// Instances OME is already taking down (`out_of_service`: a crash-looping Instance serves
/// nothing, so the cap is on how many OME recreates at once); an update of the same Instance
/// (`selected`) replaces its repair. Fills `plan.repairs` and `plan.repairs_held`; returns the
/// hold of the first held repair.
fn crash_loop_repairs(
    input: &PassInput<'_>,
    selected: &[&InstanceStatus],
    out_of_service: u32,
    max_unavailable: Option<u32>,
    plan: &mut PassPlan,
) -> Option<Hold> {
    let mut hold = None;
    for i in &input.instances {
        let r = i.row;
        let crash_looping = i
            .pods
            .iter()
            .any(|p| p.crash_looping && p.deletion.is_none());
        if !crash_looping || r.operation.is_some() || selected.iter().any(|s| s.index == r.index) {
            continue;
        }
        let projected = out_of_service + plan.repairs.len() as u32 + 1;
        let Some(b) = max_unavailable.filter(|&b| projected > b) else {
            plan.repairs.push(r.index);
            continue;
        };
        let reason =
            format!("per-Component unavailability budget {b} exhausted (would become {projected})");
        plan.repairs_held.push((
            r.index,
            format!(
                "OMENative {} crash-loop repair held by Budget: {reason}",
                event_key(input.component, r.index),
            ),
        ));
        hold.get_or_insert(Hold {
            gate: HoldGate::Budget,
            reason,
            target: None,
        });
    }
    hold
}

/// The Instance serves, but a pod restarted a container after the Instance was Ready and has
/// not been Ready again for the restart window: it still holds a slot.
fn settling(instance: &InstanceFacts<'_>, input: &PassInput<'_>) -> bool {
    let Some(ready_since) = instance.row.ready_since.as_ref() else {
        return false;
    };
    instance.pods.iter().any(|p| {
        p.ready_after_restart.is_some_and(|t| {
            t > ready_since.0
                && t.checked_add(input.restart_window)
                    .is_ok_and(|end| end > input.now)
        })
    })
}

/// A retry block that denies a fresh start toward the target: Held, an attempt already in
/// flight while retrying one at a time, or Backoff before its next retry.
fn retry_denial(
    block: &RetryBlock,
    input: &PassInput<'_>,
    attempt_in_flight: bool,
    rolled_not_serving: &[i32],
) -> Option<Hold> {
    let (gate, state) = match block.state {
        RetryBlockState::Held => (HoldGate::Held, "held"),
        RetryBlockState::RetryInProgress if attempt_in_flight => {
            (HoldGate::RetryBlock, "retrying one attempt at a time")
        }
        RetryBlockState::Backoff
            if block.next_retry_at.as_ref().is_none_or(|t| input.now < t.0) =>
        {
            (HoldGate::RetryBlock, "in backoff")
        }
        _ => return None,
    };
    Some(Hold {
        gate,
        reason: format!(
            "update to {} {state} after {} failed attempt(s): {}{}",
            input.target,
            block.attempts_started,
            block.reason.as_deref().unwrap_or(""),
            not_serving_clause(input.target, rolled_not_serving)
        ),
        target: Some(input.target.to_string()),
    })
}
