//! Scheduler simulation (alfred-policies.md "Simulation"; alfred-reference.md §4 "Scheduling
//! results"): where would a move's new pods land? The new pods are added to a copy of the
//! cluster while the old ones still run (a prediction reserves nothing), filtered node by node
//! with the semantics of kube-scheduler's plugins, and the best-scoring feasible node taken.
//! An Instance of several pods is placed all or nothing.

pub(crate) mod filters;
pub mod packing;
mod placer;
mod resources;
mod room;
pub mod score;
mod surges;
mod topology;

use std::collections::BTreeMap;

use serde::Serialize;

pub use filters::{Rejection, shape_key, tolerates};
pub use placer::Placer;
pub use resources::{Ledger, Request};
pub use surges::Surges;

use crate::api::core::{FlatMap, PodSpec};
use crate::config::{Config, SchedulingProfile, ScoringStrategy, default_scoring_resources};
use crate::model::Context;
use crate::model::cluster::Cluster;

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// More replacement pods than this is not simulated (`RecommendationTooLarge`).
pub const MAX_PODS: usize = 128;

pub use crate::reasons::{SchedulingReason, SchedulingStatus as Status};

/// The profile a simulation ran with.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub scheduler_name: String,
    pub backend: String,
    pub scheduler_version: String,
    #[serde(rename = "configurationID")]
    pub configuration_id: String,
    #[serde(skip)]
    pub gang_scheduling: bool,
    #[serde(skip)]
    pub scoring: ScoringStrategy,
    #[serde(skip)]
    pub scoring_resources: Vec<(String, i64)>,
    /// The Kubernetes minor version whose kube-scheduler this profile simulates.
    #[serde(skip)]
    pub kubernetes_minor: u32,
}

/// The Kubernetes minor versions whose kube-scheduler the simulator follows: the newest is what
/// the built-in profile simulates, and what a `schedulerVersion` naming no version (or a newer
/// one) gets; an older one gets the oldest.
const NEWEST_MINOR: u32 = 37;
const OLDEST_MINOR: u32 = 34;

/// The minor version a `schedulerVersion` names (`v1.35`, `v1.35.4`, `1.35`), within the ones
/// the simulator follows.
pub fn kubernetes_minor(scheduler_version: &str) -> u32 {
    let mut parts = scheduler_version.trim_start_matches('v').split('.');
    match (
        parts.next(),
        parts.next().and_then(|m| m.parse::<u32>().ok()),
    ) {
        (Some("1"), Some(minor)) => minor.clamp(OLDEST_MINOR, NEWEST_MINOR),
        _ => NEWEST_MINOR,
    }
}

impl Profile {
    /// kube-scheduler's defaults, served for `default-scheduler` when no profile is configured.
    pub fn built_in() -> Profile {
        Profile {
            scheduler_name: DEFAULT_SCHEDULER.into(),
            backend: "alfred-builtin".into(),
            scheduler_version: format!("v1.{NEWEST_MINOR}"),
            configuration_id: "kube-scheduler-defaults".into(),
            gang_scheduling: false,
            scoring: ScoringStrategy::LeastAllocated,
            scoring_resources: default_scoring_resources(),
            kubernetes_minor: NEWEST_MINOR,
        }
    }

    fn configured(name: &str, p: &SchedulingProfile) -> Profile {
        Profile {
            scheduler_name: name.into(),
            backend: p.backend.clone(),
            scheduler_version: p.scheduler_version.clone(),
            configuration_id: p.configuration_id.clone(),
            gang_scheduling: p.gang_scheduling,
            scoring: p.scoring_strategy,
            scoring_resources: p.scoring_resources.clone(),
            kubernetes_minor: kubernetes_minor(&p.scheduler_version),
        }
    }
}

#[derive(Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub pod: String,
    pub node: String,
}

/// One simulation's answer.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SimulationOutcome {
    pub status: Status,
    pub reason: SchedulingReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// The predicted node of every pod (Feasible only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placement>,
    /// Why: kube-scheduler's summary for an infeasible pod, or what is missing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// For an infeasible pod, nodes grouped by the first filter that rejected them (up to ten
    /// a reason; the message counts them all).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rejections: BTreeMap<String, Vec<String>>,
}

impl SimulationOutcome {
    fn refused(status: Status, reason: SchedulingReason, message: String) -> SimulationOutcome {
        SimulationOutcome {
            status,
            reason,
            profile: None,
            placements: Vec::new(),
            message,
            rejections: BTreeMap::new(),
        }
    }
}

/// A pod to place: a name for the output and the spec it would be created with.
#[derive(Clone, Debug)]
pub struct NewPod {
    pub name: String,
    pub namespace: String,
    /// What spread constraints and affinity terms select it by.
    pub labels: FlatMap<String>,
    /// Owned: the template of a live pod, with its node cleared.
    pub spec: PodSpec,
}

/// Chooses the profile for the pods: their common scheduler name, then its configured profile,
/// or the built-in one for `default-scheduler` when none is configured.
pub fn select_profile(config: &Config, pods: &[NewPod]) -> Result<Profile, Box<SimulationOutcome>> {
    let name = |p: &NewPod| scheduler_of(&p.spec).to_string();
    let Some(first) = pods.first() else {
        return Err(Box::new(SimulationOutcome::refused(
            Status::Unavailable,
            SchedulingReason::NoTemplates,
            "the Instance has no pods to take as templates".into(),
        )));
    };
    let scheduler = name(first);
    if let Some(other) = pods.iter().map(name).find(|n| *n != scheduler) {
        return Err(Box::new(SimulationOutcome::refused(
            Status::Unavailable,
            SchedulingReason::MixedSchedulers,
            format!("its pods name two schedulers, {scheduler} and {other}; all must use one"),
        )));
    }
    if let Some(bound) = pods.iter().find(|p| !p.spec.node_name.is_empty()) {
        return Err(Box::new(SimulationOutcome::refused(
            Status::Unavailable,
            SchedulingReason::TemplateBound,
            format!(
                "pod {} names its node ({}) in its template",
                bound.name, bound.spec.node_name
            ),
        )));
    }
    let profile = profile_named(config, &scheduler)?;
    if pods.len() > MAX_PODS {
        return Err(Box::new(SimulationOutcome::refused(
            Status::Unsupported,
            SchedulingReason::RecommendationTooLarge,
            format!(
                "{} replacement pods; at most {MAX_PODS} are simulated",
                pods.len()
            ),
        )));
    }
    if pods.len() > 1 && !profile.gang_scheduling {
        return Err(Box::new(SimulationOutcome {
            profile: Some(profile.clone()),
            ..SimulationOutcome::refused(
                Status::Unsupported,
                SchedulingReason::GangUnsupported,
                format!(
                    "the Instance has {} pods, which must be placed together, and profile {} does not simulate gangs (gangScheduling: true)",
                    pods.len(),
                    profile.scheduler_name
                ),
            )
        }));
    }
    Ok(profile)
}

/// The scheduler a pod names, `default-scheduler` when it names none.
pub fn scheduler_of(spec: &PodSpec) -> &str {
    match spec.scheduler_name.as_str() {
        "" => DEFAULT_SCHEDULER,
        n => n,
    }
}

/// The configured profile of a scheduler, or the built-in one for `default-scheduler` when
/// none is configured.
pub fn profile_named(config: &Config, scheduler: &str) -> Result<Profile, Box<SimulationOutcome>> {
    match config.scheduling_profiles.get(scheduler) {
        Some(p) => Ok(Profile::configured(scheduler, p)),
        None if scheduler == DEFAULT_SCHEDULER && config.scheduling_profiles.is_empty() => {
            Ok(Profile::built_in())
        }
        None => Err(Box::new(SimulationOutcome::refused(
            Status::Unavailable,
            SchedulingReason::ProfileNotConfigured,
            format!(
                "no scheduling profile for scheduler {scheduler}: add scheduling.profiles.{scheduler} to Alfred's configuration"
            ),
        ))),
    }
}

/// A claim whose placement depends on binding, which the simulator does not do: one not yet
/// bound to a volume (`WaitForFirstConsumer`), or missing.
fn unsupported_volume(ctx: &Context<'_>, pod: &NewPod) -> Option<String> {
    pod.spec.volumes.iter().find_map(|v| {
        let claim = &v.persistent_volume_claim.as_ref()?.claim_name;
        let bound = ctx
            .snapshot
            .claim(&pod.namespace, claim)
            .and_then(|c| c.spec.as_ref()?.volume_name.as_deref())
            .is_some_and(|name| !name.is_empty());
        (!bound).then(|| {
            format!(
                "pod {} uses claim {claim}, which is not bound to a volume; binding claims (WaitForFirstConsumer) is not simulated",
                pod.name
            )
        })
    })
}

/// Places the pods, all or nothing, on nodes other than `exclude` (by index).
pub fn simulate(
    ctx: &Context<'_>,
    ledger: &Ledger,
    pods: &[NewPod],
    exclude: &[usize],
) -> SimulationOutcome {
    let profile = match select_profile(ctx.config, pods) {
        Ok(p) => p,
        Err(outcome) => return *outcome,
    };
    // A gang is scheduled with PodGroups: a live cluster without the CRD cannot run it.
    let pod_groups = ctx
        .snapshot
        .info
        .as_ref()
        .and_then(|i| i.pod_group_resources.as_ref());
    if pods.len() > 1 && pod_groups.is_some_and(Vec::is_empty) {
        return SimulationOutcome {
            profile: Some(profile),
            ..SimulationOutcome::refused(
                Status::Unavailable,
                SchedulingReason::SimulationUnavailable,
                "the PodGroup CRD is not installed in this cluster (no podgroups resource in any API group): gangs cannot be scheduled or simulated; install your gang scheduler's PodGroup CRD".into(),
            )
        };
    }
    if let Some(why) = pods.iter().find_map(|p| unsupported_volume(ctx, p)) {
        return SimulationOutcome {
            profile: Some(profile),
            ..SimulationOutcome::refused(
                Status::Unsupported,
                SchedulingReason::InputUnsupported,
                why,
            )
        };
    }
    let mut placer = placer::Placer::new(ctx, ledger.clone(), pods, &[]);
    let mut placements = Vec::new();
    // Largest first, as a gang scheduler seats its biggest members before the rest.
    let mut order: Vec<(usize, Request)> = pods
        .iter()
        .enumerate()
        .map(|(k, p)| (k, placer.ledger.requests_of(&p.spec)))
        .collect();
    order.sort_by_key(|(k, req)| (std::cmp::Reverse(placer.ledger.gpus_in(req)), *k));
    for (k, request) in order {
        let pod = &pods[k];
        let Some(n) = placer.place(pod, &request, &profile, exclude) else {
            return placer.infeasible(pod, &request, profile, exclude);
        };
        placements.push((
            k,
            Placement {
                pod: pod.name.clone(),
                node: ctx.cluster.nodes[n].name.to_string(),
            },
        ));
    }
    placements.sort_by_key(|(k, _)| *k);
    SimulationOutcome {
        status: Status::Feasible,
        reason: SchedulingReason::PlacementFound,
        profile: Some(profile),
        placements: placements.into_iter().map(|(_, p)| p).collect(),
        message: String::new(),
        rejections: BTreeMap::new(),
    }
}

/// The nodes that pass every filter for one pod on the cluster as it is: the scheduler's
/// feasible set.
pub fn feasible_nodes(ctx: &Context<'_>, ledger: &Ledger, pod: &NewPod) -> Vec<usize> {
    let mut ledger = ledger.clone();
    let request = ledger.requests_of(&pod.spec);
    let others = placer::running(ctx, &[]);
    let topology = topology::Topology::new(ctx, pod, &others);
    feasible_with(ctx, &ledger, pod, &request, &topology)
}

fn feasible_with(
    ctx: &Context<'_>,
    ledger: &Ledger,
    pod: &NewPod,
    request: &Request,
    topology: &topology::Topology,
) -> Vec<usize> {
    let fixed = filters::fixed(ctx, pod);
    (0..ctx.cluster.nodes.len())
        .filter(|&n| filters::check(ctx, &fixed[n], Some(topology), ledger, request, n).is_ok())
        .collect()
}

/// Every feasible node's score for one pod on the cluster as it is, by plugin, as
/// kube-scheduler's default profile would score it (see `score`).
pub fn node_scores(
    ctx: &Context<'_>,
    ledger: &Ledger,
    pod: &NewPod,
    profile: &Profile,
) -> Vec<score::NodeScore> {
    let mut ledger = ledger.clone();
    let request = ledger.requests_of(&pod.spec);
    let others = placer::running(ctx, &[]);
    let topology = topology::Topology::new(ctx, pod, &others);
    let feasible = feasible_with(ctx, &ledger, pod, &request, &topology);
    let scoring = score::Scoring {
        spec: &pod.spec,
        request: &request,
        topology: Some(&topology),
        profile,
    };
    score::score(ctx, &ledger, &scoring, &feasible)
}

/// Does the pod have spread constraints or pod (anti-)affinity of its own?
fn has_topology(spec: &PodSpec) -> bool {
    !spec.topology_spread_constraints.is_empty()
        || spec
            .affinity
            .as_ref()
            .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// How many nodes of each reason an infeasible answer names (all are counted).
const EXAMPLES: usize = 10;

/// kube-scheduler's answer for a pod no node takes: every node's first failing filter, counted.
fn infeasible(
    ctx: &Context<'_>,
    pod: &NewPod,
    exclude: &[usize],
    profile: Profile,
    check: impl Fn(usize) -> Result<(), Rejection>,
) -> SimulationOutcome {
    let cluster = &ctx.cluster;
    // Each reason of each node counted on its own, as kube-scheduler's histogram counts them.
    let mut by_reason: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        let reasons = if exclude.contains(&n) {
            vec!["node(s) were excluded from the simulation".to_string()]
        } else {
            match check(n) {
                Err(r) => r.reasons(),
                Ok(()) => continue,
            }
        };
        for why in reasons {
            let entry = by_reason.entry(why).or_default();
            entry.0 += 1;
            if entry.1.len() < EXAMPLES {
                entry.1.push(node.name.to_string());
            }
        }
    }
    // "COUNT REASON" sorted as text, as kube-scheduler's FitError sorts them.
    let mut summary: Vec<String> = by_reason
        .iter()
        .map(|(why, (count, _))| format!("{count} {why}"))
        .collect();
    summary.sort();
    let message = format!(
        "pod {}: 0/{} nodes are available: {}.",
        pod.name,
        cluster.nodes.len(),
        summary.join(", ")
    );
    SimulationOutcome {
        status: Status::Infeasible,
        reason: SchedulingReason::NoFeasiblePlacement,
        profile: Some(profile),
        placements: Vec::new(),
        message,
        rejections: by_reason
            .into_iter()
            .map(|(why, (_, nodes))| (why, nodes))
            .collect(),
    }
}

impl NewPod {
    /// A new pod like a running one: its spec and labels, no node.
    pub fn like(pod: &crate::model::cluster::PodView<'_>) -> NewPod {
        let mut spec = pod.pod.spec.clone();
        spec.node_name.clear();
        NewPod {
            name: pod.name.to_string(),
            namespace: pod.namespace.to_string(),
            labels: pod.pod.metadata.labels.clone(),
            spec,
        }
    }
}

/// The pods OME creates as a migration's surge: the Instance's pods, unbound, preferring the
/// request's hint nodes. OME renders `hint_target_nodes` as preferred (soft) node affinity, so
/// the scheduler still weighs every node but favours those.
pub fn surge_pods(cluster: &Cluster<'_>, instance: usize, hints: &[String]) -> Vec<NewPod> {
    let mut pods = instance_pods(cluster, instance);
    if !hints.is_empty() {
        for pod in &mut pods {
            prefer_nodes(&mut pod.spec, hints);
        }
    }
    pods
}

/// Adds a preferred node affinity term for the nodes named (by `metadata.name`, which unlike
/// the hostname label always is the node's name).
pub fn prefer_nodes(spec: &mut crate::api::core::PodSpec, nodes: &[String]) {
    use k8s_openapi::api::core::v1::{
        NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    };
    let term = PreferredSchedulingTerm {
        weight: 100,
        preference: NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(nodes.to_vec()),
            }]),
        },
    };
    let affinity = spec.affinity.get_or_insert_with(Default::default);
    let node = affinity.node_affinity.get_or_insert_with(Default::default);
    node.preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term);
}

/// The pods an Instance's replacement would be created as: its live pods, unbound.
pub fn instance_pods(cluster: &Cluster<'_>, instance: usize) -> Vec<NewPod> {
    cluster.instances[instance]
        .pods
        .iter()
        .map(|&p| &cluster.pods[p])
        .filter(|p| !p.terminal && !p.terminating)
        .map(NewPod::like)
        .collect()
}
