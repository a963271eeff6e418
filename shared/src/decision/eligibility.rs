//! Can an OMENative Instance move? Every condition of alfred-policies.md "Which Instances Alfred
//! can move", in the order alfred-reference.md §4 checks them; the first failure is the row's
//! advisory reason, and `explain` shows them all.

use std::borrow::Cow;

use super::AdvisoryReason::{self, *};
use crate::api::lifecycle::MigrationMode;
use crate::api::replica::InstancePhase;
use crate::model::access::ModelAccess;
use crate::model::context::Context;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Defragmentation also waits out the workload's cooldown.
    Defragmentation,
    /// Node health does not (the arbiter applies its floor).
    NodeHealth,
    /// A drain plan: what it takes to empty nodes, whether or not OME's migration API is
    /// configured yet (the plan says so once, not per Instance).
    Drain,
}

pub type Verdict = Result<Cow<'static, str>, (AdvisoryReason, String)>;

/// One condition and its verdict: what holds, or the reason and what failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
}

/// The first failing condition, if any.
pub fn first_failure(
    ctx: &Context<'_>,
    instance: usize,
    purpose: Purpose,
) -> Option<(AdvisoryReason, String)> {
    let mut failure = None;
    evaluate(ctx, instance, purpose, |_, verdict| match verdict {
        Ok(_) => true,
        Err(f) => {
            failure = Some(f);
            false
        }
    });
    failure
}

/// Every condition in order, failures included (for `explain`).
pub fn all_checks(ctx: &Context<'_>, instance: usize, purpose: Purpose) -> Vec<Check> {
    let mut checks = Vec::new();
    evaluate(ctx, instance, purpose, |name, verdict| {
        checks.push(Check { name, verdict });
        true
    });
    checks
}

/// The resource of Cloud TPU chips (OME's TPU slices).
const TPU: &str = "google.com/tpu";

/// The first of the Instance's pods that requests TPU chips.
pub(super) fn tpu_pod<'c>(ctx: &'c Context<'_>, i: usize) -> Option<&'c str> {
    let cluster = &ctx.cluster;
    cluster.instances[i]
        .pods
        .iter()
        .map(|&p| &cluster.pods[p])
        .find(|p| {
            p.requests
                .iter()
                .any(|&(name, amount)| name == TPU && amount > 0)
        })
        .map(|p| p.name)
}

fn pass(text: &'static str) -> Verdict {
    Ok(Cow::Borrowed(text))
}

fn fail(reason: AdvisoryReason, text: String) -> Verdict {
    Err((reason, text))
}

/// Feeds each check to `visit` in order until it returns false.
fn evaluate(
    ctx: &Context<'_>,
    i: usize,
    purpose: Purpose,
    mut visit: impl FnMut(&'static str, Verdict) -> bool,
) {
    let cluster = &ctx.cluster;
    let config = ctx.config;
    let now = ctx.now();
    let instance = &cluster.instances[i];
    let c = instance.component;
    let component = &cluster.components[c];
    let settings = ctx.settings_of(i);
    let spec = cluster.workloads[component.workload]
        .isvc
        .spec
        .component(component.kind);

    macro_rules! check {
        ($name:expr, $verdict:expr) => {
            if !visit($name, $verdict) {
                return;
            }
        };
    }

    check!(
        "accelerators",
        match tpu_pod(ctx, i) {
            None => pass("its pods hold no TPU chips"),
            Some(pod) => fail(
                AcceleratorPlacementUnmodeled,
                format!(
                    "pod {pod} holds TPU chips ({TPU}); TPU slices are not modelled, so it is \
                     never planned onto another slice"
                ),
            ),
        }
    );
    let access = &ctx.access[c];
    check!(
        "model location",
        match access {
            ModelAccess::Pinned { .. } =>
                fail(VolumePinned, format!("the model is {}", access.describe())),
            ModelAccess::Unresolved(why) => fail(ModelUnresolved, why.clone()),
            _ => Ok(Cow::Owned(format!("the model is {}", access.describe()))),
        }
    );
    check!(
        "migration surface",
        if config.omenative_migration_enabled {
            pass("omenativeMigrationEnabled is true")
        } else {
            fail(
                MigrationSurfaceDisabled,
                "omenativeMigrationEnabled is false in Alfred's configuration".into(),
            )
        }
    );
    if purpose == Purpose::Defragmentation {
        check!(
            "workload cooldown",
            match settings.in_cooldown(now) {
                None => pass("no migration within the workload cooldown"),
                Some(until) => fail(
                    OMENativeStateIneligible,
                    format!(
                        "its last migration ended at {}; the {}-minute cooldown runs until {until}",
                        settings.last_migration.unwrap_or(now),
                        settings.cooldown_minutes
                    ),
                ),
            }
        );
    }
    check!(
        "movable",
        if settings.movable {
            pass("movable")
        } else {
            fail(
                OMENativeStateIneligible,
                "opted out: alfred.ome.io/movable is false (or unset with defaultMovable false)"
                    .into(),
            )
        }
    );
    check!(
        "migration requests",
        match &settings.malformed_request {
            None => pass("no malformed migration request"),
            Some(why) => fail(OMENativeStateIneligible, why.clone()),
        }
    );
    check!(
        "migration in flight",
        match &settings.active_migration {
            None => pass("no migration requested or in progress"),
            Some(what) => fail(OMENativeStateIneligible, what.clone()),
        }
    );
    // The model builds no Instance for a component it cannot observe (model/observation.rs);
    // this says why, should a caller ask about one anyway.
    let observed = component
        .replica
        .and_then(|r| Some((r, r.status.as_ref()?)));
    let (replica, status) = match (&component.unobservable, observed) {
        (None, Some(found)) if component.unjoined_pods.is_empty() => found,
        (why, found) => {
            let why = match (why, found) {
                (Some(why), _) => why.to_string(),
                (None, Some(_)) => format!(
                    "{} pod(s) of the component carry no Instance index",
                    component.unjoined_pods.len()
                ),
                (None, None) => format!(
                    "no InferenceReplica with a status serves the {} component",
                    component.kind
                ),
            };
            visit("InferenceReplica", fail(OMENativeObservationInvalid, why));
            return;
        }
    };
    let ir_name = replica.metadata.name.as_deref().unwrap_or_default();
    check!(
        "InferenceReplica",
        pass("InferenceReplica observed and current")
    );
    check!(
        "not paused",
        if replica.spec.paused == Some(true) {
            fail(
                OMENativeStateIneligible,
                format!("InferenceReplica {ir_name} is paused"),
            )
        } else {
            pass("not paused")
        }
    );
    let policy_mode = |s: Option<&crate::api::ComponentSpec>| {
        s.and_then(|s| s.lifecycle.as_ref())
            .and_then(|l| l.migration_policy.as_ref())
            .and_then(|p| p.mode)
    };
    check!(
        "migration policy",
        match policy_mode(spec).or_else(|| policy_mode(ctx.runtime[c])) {
            Some(MigrationMode::Never) => fail(
                OMENativeStateIneligible,
                "lifecycle.migrationPolicy.mode is Never".into()
            ),
            _ => pass("migrationPolicy allows migration"),
        }
    );
    let desired = replica.spec.replicas.unwrap_or(1);
    let counts = [
        ("Instances", Some(component.instances.len() as i32)),
        ("replicas", status.replicas),
        ("readyReplicas", status.ready_replicas),
        ("servingReplicas", status.serving_replicas),
        ("availableReplicas", status.available_replicas),
        ("updatedReplicas", status.updated_replicas),
        ("updatedReadyReplicas", status.updated_ready_replicas),
    ];
    check!(
        "component steady",
        if desired <= 0 {
            fail(
                OMENativeStateIneligible,
                "the component is scaled to zero".into(),
            )
        } else if let Some((name, n)) = counts.iter().find(|(_, n)| *n != Some(desired)) {
            fail(
                OMENativeStateIneligible,
                format!(
                    "the component is not steady: {name} is {} of {desired} desired (a rollout, scaling or recovery is under way)",
                    n.unwrap_or(0)
                ),
            )
        } else {
            pass("all Instances ready and serving")
        }
    );
    let current = status.current_revision.as_deref().unwrap_or_default();
    check!(
        "revision",
        if current.is_empty() {
            fail(
                OMENativeStateIneligible,
                "the component reports no current revision".into(),
            )
        } else if status.update_revision.as_deref() != Some(current) {
            fail(
                OMENativeStateIneligible,
                format!(
                    "a rollout is under way: current revision {current}, update revision {}",
                    status.update_revision.as_deref().unwrap_or("(none)")
                ),
            )
        } else {
            pass("no rollout under way")
        }
    );
    if purpose != Purpose::Drain {
        check!(
            "migration API",
            if config.migration_api_available() {
                pass("migration.apiVersion is v1")
            } else {
                fail(
                    OMENativeUnavailable,
                    "migration.apiVersion is not v1: OMENative migration is not configured, so every move is advice".into(),
                )
            }
        );
    }
    let Some(row) = instance
        .row
        .as_deref()
        .filter(|_| !instance.pods.is_empty())
    else {
        visit(
            "Instance observed",
            fail(
                OMENativeObservationInvalid,
                if instance.row.is_none() {
                    format!(
                        "InferenceReplica {ir_name} has no row for Instance {}",
                        instance.index
                    )
                } else {
                    format!("Instance {} has no pods", instance.index)
                },
            ),
        );
        return;
    };
    check!(
        "Instance observed",
        pass("the Instance's row and pods agree")
    );
    check!(
        "Instance ready",
        if row.admitted != Some(true) {
            fail(
                OMENativeStateIneligible,
                format!("Instance {} is not admitted", instance.index),
            )
        } else if row.phase != Some(InstancePhase::Ready) {
            fail(
                OMENativeStateIneligible,
                format!(
                    "Instance {} is {} rather than Ready",
                    instance.index,
                    row.phase
                        .map_or("without a phase".to_string(), |p| format!("{p:?}"))
                ),
            )
        } else if let Some(op) = &row.operation {
            fail(
                OMENativeStateIneligible,
                format!(
                    "Instance {} has a {:?} operation in progress",
                    instance.index, op.type_
                ),
            )
        } else {
            pass("admitted, Ready, no operation")
        }
    );
    let desired_pods = replica.spec.pods_per_instance() as i32;
    let live_pods = || {
        instance
            .pods
            .iter()
            .map(|&p| &cluster.pods[p])
            .filter(|p| !p.terminal)
    };
    // Ready pods are counted from the pods, as OME's counters do: the row does not store them.
    let ready_pods = live_pods().filter(|p| p.pod.containers_ready()).count() as i32;
    let pod_counts = [
        ("podCount", row.pod_count),
        ("pods found", Some(live_pods().count() as i32)),
        ("ready pods", Some(ready_pods)),
        ("servingPodCount", row.serving_pod_count),
        ("availablePodCount", row.available_pod_count),
    ];
    check!(
        "Instance pods",
        if let Some((name, n)) = pod_counts.iter().find(|(_, n)| *n != Some(desired_pods)) {
            fail(
                OMENativeStateIneligible,
                format!(
                    "Instance {}: {name} is {} of {desired_pods}",
                    instance.index,
                    n.unwrap_or(0)
                ),
            )
        } else {
            pass("every pod of the Instance is ready and serving")
        }
    );
    let running = row.running_revision.as_deref().unwrap_or_default();
    check!(
        "Instance revision",
        if running.is_empty() || running != current {
            fail(
                OMENativeStateIneligible,
                format!(
                    "Instance {} runs revision {} rather than {current}",
                    instance.index,
                    if running.is_empty() {
                        "(none)"
                    } else {
                        running
                    }
                ),
            )
        } else if row
            .target_revision
            .as_deref()
            .is_some_and(|t| !t.is_empty())
        {
            fail(
                OMENativeStateIneligible,
                format!("Instance {} is moving to another revision", instance.index),
            )
        } else {
            pass("on the current revision")
        }
    );
    let unready = instance.pods.iter().map(|&p| &cluster.pods[p]).find(|p| {
        !p.terminal
            && (p.terminating || p.pod.condition("Ready").is_none_or(|c| c.status != "True"))
    });
    check!(
        "pods ready",
        match unready {
            Some(p) if p.terminating => fail(
                OMENativeStateIneligible,
                format!("pod {} is terminating", p.name)
            ),
            Some(p) => fail(
                OMENativeStateIneligible,
                format!("pod {} is not Ready", p.name)
            ),
            None => pass("every pod Ready"),
        }
    );
}
