//! The arbiter (alfred-policies.md "The arbiter"; alfred-reference.md §4 and §5 `Admit`): takes
//! the executable moves of both policies one at a time, in class, score and size order, and
//! admits those that pass every check; the first failed check is the rejection reason.

use std::collections::{HashMap, HashSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::journal::{Journal, Phase};
use crate::api::replica::{MigrationPhase, MigrationTrigger};
use crate::decision::{CandidateReason, Recommendation};
use crate::migration;
use crate::model::Context;
use crate::model::cluster::NodeView;

pub use crate::reasons::ArbiterReason;

/// A refusal: the reason code and what exactly stood in the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    pub reason: ArbiterReason,
    pub detail: String,
}

/// An admitted move: where each GPU pod lands (largest first).
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    pub landings: Vec<(String, String)>,
    /// A move off an Unhealthy node admitted under the health floor while the workload's own
    /// cooldown still ran.
    pub cooldown_overridden: bool,
}

/// The arbiter's answer for one executable recommendation.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Index into the recommendations given to `admit`.
    pub recommendation: usize,
    pub result: Result<Admission, Rejection>,
}

/// One of Alfred's own requests, as the journal remembers it.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    pub uuid: String,
    pub workload: String,
    pub from_node: String,
    pub targets: Vec<String>,
    pub at: Timestamp,
    pub completed_at: Option<Timestamp>,
    /// A move off an Unhealthy node (its source does not cool).
    pub health: bool,
    /// Not yet taken up by OME: its new pods are not in the cluster yet, so its GPUs are
    /// claimed on its targets.
    pub unabsorbed: bool,
    pub unresolved: bool,
    /// The moved Instance's GPU pods, largest first (empty when it is gone).
    pub pod_gpus: Vec<i64>,
}

/// What the arbiter and the dispatcher know of past dispatches: the journal's entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DispatchHistory {
    pub dispatches: Vec<Dispatch>,
}

impl DispatchHistory {
    pub fn from_journal(journal: &Journal, ctx: &Context<'_>) -> DispatchHistory {
        let cluster = &ctx.cluster;
        let dispatches = journal
            .entries
            .iter()
            .map(|e| {
                let request = migration::parse_request(&e.payload).ok();
                let workload = e.workload.to_string();
                let pod_gpus = cluster
                    .instance_of(&workload, e.component, e.instance)
                    .map(|i| pod_gpus(ctx, i))
                    .unwrap_or_default();
                Dispatch {
                    uuid: e.uuid.clone(),
                    workload,
                    from_node: e.from_node.clone(),
                    targets: e.targets.clone(),
                    at: e.created_at,
                    completed_at: e.completed_at,
                    health: request.and_then(|r| r.reason).as_deref()
                        == Some(CandidateReason::NodeUnhealthy.as_str()),
                    unabsorbed: matches!(e.phase, Phase::Prepared | Phase::Submitted),
                    unresolved: !e.phase.is_terminal(),
                    pod_gpus,
                }
            })
            .collect();
        DispatchHistory { dispatches }
    }

    /// The newest dispatch that cools `node` at `now`: one that targeted it, or left it
    /// without being a health move, within the node cooldown.
    pub fn cooling(&self, node: &str, now: Timestamp, window: SignedDuration) -> Option<&Dispatch> {
        if node.is_empty() {
            return None;
        }
        self.dispatches
            .iter()
            .filter(|d| now.duration_since(d.at) < window)
            .filter(|d| d.targets.iter().any(|t| t == node) || (d.from_node == node && !d.health))
            .max_by_key(|d| d.at)
    }
}

fn pod_gpus(ctx: &Context<'_>, instance: usize) -> Vec<i64> {
    let cluster = &ctx.cluster;
    let mut gpus: Vec<i64> = cluster.instances[instance]
        .pods
        .iter()
        .map(|&p| cluster.pods[p].gpus)
        .filter(|&g| g > 0)
        .collect();
    gpus.sort_unstable_by(|a, b| b.cmp(a));
    gpus
}

fn class(reason: CandidateReason) -> u8 {
    match reason {
        CandidateReason::NodeUnhealthy => 2,
        CandidateReason::NodeMaintenance => 1,
        CandidateReason::Fragmentation => 0,
    }
}

/// The order the arbiter considers moves in: class, score (highest first), size (smallest
/// first), then as given.
pub fn order(recommendations: &[Recommendation]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..recommendations.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (&recommendations[a], &recommendations[b]);
        class(rb.row.reason)
            .cmp(&class(ra.row.reason))
            .then(rb.row.score.total_cmp(&ra.row.score))
            .then(ra.footprint.cmp(&rb.footprint))
    });
    order
}

/// Everyone's migrations, as both caps count them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Requested or in progress (anyone's), with Alfred's unresolved requests.
    pub in_flight: usize,
    /// Started in the last hour: Alfred's, or everyone's started and ended (the larger).
    pub last_hour: usize,
}

pub fn caps(ctx: &Context<'_>, history: &DispatchHistory) -> Caps {
    let cluster = &ctx.cluster;
    let now = ctx.now();
    let hour_ago = now
        .checked_sub(SignedDuration::from_hours(1))
        .unwrap_or(Timestamp::MIN);
    let mut in_flight: HashSet<String> = cluster
        .migrations
        .iter()
        .map(|m| m.uuid.to_ascii_lowercase())
        .collect();
    in_flight.extend(
        history
            .dispatches
            .iter()
            .filter(|d| d.unresolved)
            .map(|d| d.uuid.to_ascii_lowercase()),
    );
    let ours = history
        .dispatches
        .iter()
        .filter(|d| d.at >= hour_ago)
        .count();
    let started_recently = cluster
        .components
        .iter()
        .filter_map(|c| c.replica)
        .flat_map(|r| r.status.iter().flat_map(|s| &s.migrations))
        .filter(|m| !m.phase.is_terminal())
        .filter(|m| m.started_at.as_ref().is_some_and(|t| t.0 >= hour_ago))
        .count();
    let ended_recently = ctx
        .workloads
        .iter()
        .filter(|w| w.last_migration.is_some_and(|t| t >= hour_ago))
        .count();
    Caps {
        in_flight: in_flight.len(),
        last_hour: ours.max(started_recently + ended_recently),
    }
}

/// A migration row that breaks OME's contract for the Instance's component: an automatic
/// migration in a phase only manual ones have, or a manual one without its request's UUID.
fn invalid_migration_state(ctx: &Context<'_>, instance: usize) -> Option<String> {
    let component = &ctx.cluster.components[ctx.cluster.instances[instance].component];
    let replica = component.replica?;
    replica
        .status
        .iter()
        .flat_map(|s| &s.migrations)
        .find_map(|m| match m.trigger {
            MigrationTrigger::Auto if m.phase != MigrationPhase::Relocated => Some(format!(
                "InferenceReplica {} reports an automatic migration in phase {:?}",
                replica.metadata.name.as_deref().unwrap_or_default(),
                m.phase
            )),
            MigrationTrigger::Manual if m.request_uuid.is_empty() => Some(format!(
                "InferenceReplica {} reports a manual migration without a request UUID",
                replica.metadata.name.as_deref().unwrap_or_default()
            )),
            _ => None,
        })
}

/// The arbiter's inputs beyond the pass's context.
pub struct Inputs<'a> {
    pub history: &'a DispatchHistory,
    /// The breaker is open until this time.
    pub breaker_open_until: Option<Timestamp>,
}

/// Arbitrates the executable, Instance-level moves among `recommendations` (others are
/// skipped) and returns a verdict for each, in the order they were considered.
pub fn admit(
    ctx: &Context<'_>,
    recommendations: &[Recommendation],
    inputs: &Inputs<'_>,
) -> Vec<Verdict> {
    let mut pass = Pass::new(ctx, recommendations, inputs);
    order(recommendations)
        .into_iter()
        .filter(|&r| recommendations[r].executable() && recommendations[r].row.instance >= 0)
        .map(|r| {
            let result = pass.check(&recommendations[r]);
            if let Ok(admission) = &result {
                pass.admitted(&recommendations[r], admission);
            }
            Verdict {
                recommendation: r,
                result,
            }
        })
        .collect()
}

/// What one arbitration pass has used up so far.
struct Pass<'p, 's> {
    ctx: &'p Context<'s>,
    inputs: &'p Inputs<'p>,
    caps: Caps,
    /// Nodes that this pass's node-health moves leave.
    evacuating: HashSet<&'p str>,
    /// GPUs claimed per node by unabsorbed dispatches and by this pass's admissions.
    claimed: HashMap<String, i64>,
    landed_on: HashSet<String>,
    workloads: HashSet<&'p str>,
    admitted: usize,
}

fn minutes(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

impl<'p, 's> Pass<'p, 's> {
    fn new(
        ctx: &'p Context<'s>,
        recommendations: &'p [Recommendation],
        inputs: &'p Inputs<'p>,
    ) -> Self {
        let evacuating = recommendations
            .iter()
            .filter(|r| r.row.reason != CandidateReason::Fragmentation)
            .map(|r| r.row.from_node.as_str())
            .collect();
        let mut claimed: HashMap<String, i64> = HashMap::new();
        for d in inputs.history.dispatches.iter().filter(|d| d.unabsorbed) {
            let fits = first_fit(
                ctx,
                &d.pod_gpus,
                &d.targets,
                &claimed,
                |_, node, left, gpus| {
                    (node.is_none() || left < gpus).then(|| Rejection {
                        reason: ArbiterReason::NoCapacity,
                        detail: String::new(),
                    })
                },
            );
            for (fit, &gpus) in fits.into_iter().zip(&d.pod_gpus) {
                if let Ok(node) = fit {
                    *claimed.entry(node.to_string()).or_default() += gpus;
                }
            }
        }
        Pass {
            ctx,
            inputs,
            caps: caps(ctx, inputs.history),
            evacuating,
            claimed,
            landed_on: HashSet::new(),
            workloads: HashSet::new(),
            admitted: 0,
        }
    }

    fn admitted(&mut self, r: &'p Recommendation, admission: &Admission) {
        self.admitted += 1;
        self.workloads.insert(r.row.workload.as_str());
        for (_, node) in &admission.landings {
            self.landed_on.insert(node.clone());
        }
    }

    fn check(&mut self, r: &Recommendation) -> Result<Admission, Rejection> {
        let ctx = self.ctx;
        let cluster = &ctx.cluster;
        let config = ctx.config;
        let now = ctx.now();
        let row = &r.row;
        let reject = |reason, detail: String| Err(Rejection { reason, detail });

        if let Some(until) = self.inputs.breaker_open_until.filter(|&u| now < u) {
            return reject(
                ArbiterReason::CircuitBreakerOpen,
                format!(
                    "more than half of Alfred's recent migrations failed; nothing is admitted until {until}"
                ),
            );
        }
        let Some(i) = cluster.instance_of(&row.workload, row.component, row.instance) else {
            return reject(
                ArbiterReason::InstanceGone,
                format!(
                    "{}/{} instance {} no longer exists",
                    row.workload, row.component, row.instance
                ),
            );
        };
        let settings = ctx.settings_of(i);
        if !settings.movable {
            return reject(
                ArbiterReason::NotMovable,
                "alfred.ome.io/movable is false (or unset with defaultMovable false)".into(),
            );
        }
        if let Some(why) = &settings.malformed_request {
            return reject(ArbiterReason::MalformedRequestPending, why.clone());
        }
        if let Some(why) = invalid_migration_state(ctx, i) {
            return reject(ArbiterReason::MigrationStateInvalid, why);
        }
        let pods = &cluster.instances[i].pods;
        if let Some(&p) = pods.iter().find(|&&p| cluster.pods[p].terminating) {
            return reject(
                ArbiterReason::InstanceTerminating,
                format!("pod {} is terminating", cluster.pods[p].name),
            );
        }
        if let Some(what) = &settings.active_migration {
            return reject(ArbiterReason::WorkloadBusy, what.clone());
        }
        if self.workloads.contains(row.workload.as_str()) {
            return reject(
                ArbiterReason::WorkloadBusy,
                format!(
                    "a move of {} was already admitted in this pass",
                    row.workload
                ),
            );
        }

        // Cooldowns: a move off an Unhealthy node waits only the health floor.
        let health = row.reason == CandidateReason::NodeUnhealthy;
        let floor = minutes(config.node_health.health_cooldown_floor_minutes);
        let workload_window = minutes(settings.cooldown_minutes);
        let mut cooldown_overridden = false;
        // The newest end OME reports, or that Alfred's journal recorded (OME trims its list).
        let journaled = self
            .inputs
            .history
            .dispatches
            .iter()
            .filter(|d| d.workload == row.workload)
            .filter_map(|d| d.completed_at)
            .max();
        if let Some(last) = settings.last_migration.max(journaled) {
            let age = now.duration_since(last);
            let window = if health { floor } else { workload_window };
            if age < window {
                return reject(
                    ArbiterReason::Cooldown,
                    format!(
                        "its last migration ended at {last}, less than {} minutes ago",
                        window.as_mins()
                    ),
                );
            }
            cooldown_overridden = health && age < workload_window;
        }
        let placement_window = if health {
            floor
        } else {
            minutes(config.recent_placement_cooldown_minutes)
        };
        for &p in pods {
            let started = cluster.pods[p].pod.status.start_time;
            if let Some(t) = started.filter(|&t| now.duration_since(t) < placement_window) {
                return reject(
                    ArbiterReason::PlacementCooldown,
                    format!(
                        "pod {} started at {}, less than {} minutes ago",
                        cluster.pods[p].name,
                        t,
                        placement_window.as_mins()
                    ),
                );
            }
        }
        let node_window = minutes(config.per_node_cooldown_minutes);
        let source_cooling = (!health)
            .then(|| {
                self.inputs
                    .history
                    .cooling(&row.from_node, now, node_window)
            })
            .flatten();
        if let Some(d) = source_cooling {
            return reject(
                ArbiterReason::NodeCooldown,
                format!(
                    "source node {} was used by request {} at {}",
                    row.from_node, d.uuid, d.at
                ),
            );
        }

        let landings = self.land(r, i)?;

        if self.caps.in_flight + self.admitted >= config.max_in_flight_migrations as usize {
            return reject(
                ArbiterReason::InFlightCap,
                format!(
                    "{} migrations are in flight or admitted (maxInFlightMigrations {})",
                    self.caps.in_flight + self.admitted,
                    config.max_in_flight_migrations
                ),
            );
        }
        if self.caps.last_hour + self.admitted >= config.max_migrations_per_hour as usize {
            return reject(
                ArbiterReason::HourlyCap,
                format!(
                    "{} migrations started in the last hour or admitted (maxMigrationsPerHour {})",
                    self.caps.last_hour + self.admitted,
                    config.max_migrations_per_hour
                ),
            );
        }
        Ok(Admission {
            landings,
            cooldown_overridden,
        })
    }

    /// Places the Instance's GPU pods (largest first, first fit) on the move's targets, or
    /// names the check that stopped the first pod that fits nowhere.
    fn land(
        &mut self,
        r: &Recommendation,
        instance: usize,
    ) -> Result<Vec<(String, String)>, Rejection> {
        let ctx = self.ctx;
        let cluster = &ctx.cluster;
        let now = ctx.now();
        let node_window = minutes(ctx.config.per_node_cooldown_minutes);
        let targets = if r.placement_targets.is_empty() {
            &r.row.hint_targets
        } else {
            &r.placement_targets
        };
        let mut pods: Vec<usize> = cluster.instances[instance]
            .pods
            .iter()
            .copied()
            .filter(|&p| cluster.pods[p].gpus > 0)
            .collect();
        pods.sort_by(|&a, &b| {
            cluster.pods[b]
                .gpus
                .cmp(&cluster.pods[a].gpus)
                .then(cluster.pods[a].name.cmp(cluster.pods[b].name))
        });
        let sizes: Vec<i64> = pods.iter().map(|&p| cluster.pods[p].gpus).collect();
        let fits = first_fit(
            ctx,
            &sizes,
            targets,
            &self.claimed,
            |t, node, left, gpus| {
                let (reason, detail) = match node {
                    None => (
                        ArbiterReason::TargetUnavailable,
                        format!("node {t} is gone"),
                    ),
                    Some(n) if n.unavailable_as_target() => (
                        ArbiterReason::TargetUnavailable,
                        format!("node {t} is unhealthy, in maintenance, cordoned or scaling down"),
                    ),
                    Some(_) if self.evacuating.contains(t) => (
                        ArbiterReason::TargetUnderEvacuation,
                        format!("node {t} is being evacuated in this pass"),
                    ),
                    Some(_) if self.landed_on.contains(t) => (
                        ArbiterReason::TargetNodeBusy,
                        format!("another move admitted in this pass lands on node {t}"),
                    ),
                    Some(_) => match self.inputs.history.cooling(t, now, node_window) {
                        Some(d) => (
                            ArbiterReason::NodeCooldown,
                            format!("target node {t} was used by request {} at {}", d.uuid, d.at),
                        ),
                        None if left < gpus => (
                            ArbiterReason::NoCapacity,
                            format!("node {t} has {left} unclaimed GPUs, the pod needs {gpus}"),
                        ),
                        None => return None,
                    },
                };
                Some(Rejection { reason, detail })
            },
        );
        let mut landings = Vec::new();
        for (&p, fit) in pods.iter().zip(fits) {
            let target = fit.map_err(|best| {
                best.unwrap_or(Rejection {
                    reason: ArbiterReason::NoCapacity,
                    detail: "the move has no target nodes".into(),
                })
            })?;
            landings.push((cluster.pods[p].name.to_string(), target.to_string()));
        }
        for ((_, target), gpus) in landings.iter().zip(&sizes) {
            *self.claimed.entry(target.clone()).or_default() += gpus;
        }
        Ok(landings)
    }
}

/// A node's free GPUs less those claimed on it and those the move at hand already put there.
fn unclaimed(
    free: i64,
    claimed: &HashMap<String, i64>,
    used: &HashMap<&str, i64>,
    node: &str,
) -> i64 {
    free - claimed.get(node).copied().unwrap_or(0) - used.get(node).copied().unwrap_or(0)
}

/// First fit, largest pod first: each pod (its GPUs) goes to the first of `targets` that
/// `refuse` lets through, given the node (None when gone) and the GPUs left on it: free, less
/// those claimed and those this move's earlier pods took. Per pod, its target or the most
/// telling refusal (None with no targets).
fn first_fit<'t>(
    ctx: &Context<'_>,
    pods: &[i64],
    targets: &'t [String],
    claimed: &HashMap<String, i64>,
    mut refuse: impl FnMut(&str, Option<&NodeView<'_>>, i64, i64) -> Option<Rejection>,
) -> Vec<Result<&'t str, Option<Rejection>>> {
    let mut used: HashMap<&str, i64> = HashMap::new();
    let mut out = Vec::new();
    for &gpus in pods {
        let mut best: Option<Rejection> = None;
        let mut placed = None;
        for t in targets {
            let node = ctx.cluster.node(t);
            let left = node.map_or(0, |n| unclaimed(n.gpu_free, claimed, &used, t));
            match refuse(t, node, left, gpus) {
                None => {
                    placed = Some(t.as_str());
                    break;
                }
                Some(r) if best.as_ref().is_none_or(|b| r.reason < b.reason) => best = Some(r),
                Some(_) => {}
            }
        }
        if let Some(t) = placed {
            *used.entry(t).or_default() += gpus;
        }
        out.push(placed.ok_or(best));
    }
    out
}
