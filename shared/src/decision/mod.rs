//! Alfred's decision pass (alfred-policies.md; alfred-reference.md §3–§5): which Instances can
//! move, the defragmentation score of each GPU pool and its moves, the node-health policy and
//! its node records. Pure: the cluster model, the configuration and `now` in, rows out.

pub mod consolidate;
mod defrag;
pub mod drain;
pub mod eligibility;
pub mod explain;
pub mod gauges;
mod joint;
mod nodehealth;
pub mod record;
pub mod score;
mod simulation;
pub mod surge;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use defrag::window_open;
pub use nodehealth::{NodeRecord, node_record_key};
pub use score::PoolScore;
pub use simulation::attach as simulate_rows;

use crate::api::component::ComponentKind;
use crate::model::Context;
use crate::model::cluster::Cluster;

pub use crate::reasons::{AdvisoryReason, CandidateReason};

crate::named! {
    #[derive(PartialOrd, Ord)]
    pub enum PolicyName {
        Defragmentation = "defragmentation",
        Nodehealth = "nodehealth",
        MigrationDispatch = "migration-dispatch",
    }
}

crate::named! {
    /// Where a recommendation row stands: advice, refused, withheld, or a request's life in
    /// execute mode.
    pub enum RowOutcome {
        Advisory = "advisory",
        Rejected = "rejected",
        Withheld = "withheld",
        Submitted = "submitted",
        Acknowledged = "acknowledged",
        Completed = "completed",
        Failed = "failed",
        Stalled = "stalled",
    }
}

crate::serde_by_name!(PolicyName, RowOutcome);

/// What a command named and the cluster does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    #[error("no InferenceService {0} in the cluster (kubectl get inferenceservices -A lists them)")]
    Workload(String),
    #[error(
        "InferenceService {workload} cannot be read ({problem}): nothing is decided for it until the object is fixed (kubectl edit inferenceservice -n NAMESPACE NAME)"
    )]
    Unreadable { workload: String, problem: String },
    #[error("{workload} has no {component} component")]
    Component {
        workload: String,
        component: &'static str,
    },
    #[error("{workload} has no Instance {index}")]
    Instance { workload: String, index: i32 },
    #[error("{0} has no Instances running")]
    NoInstances(String),
    #[error("node {0} is not in the cluster (kubectl get nodes lists them)")]
    Node(String),
}

fn is_false(b: &bool) -> bool {
    !b
}

/// One recommendation in the `last-cycle.json` row schema (alfred-reference.md §3.1): empty
/// fields are left out, except `score`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub workload: String,
    pub component: ComponentKind,
    /// -1 for a row about the whole component.
    pub instance: i32,
    pub policy: PolicyName,
    pub reason: CandidateReason,
    pub outcome: RowOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advisory_reason: Option<AdvisoryReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_reason: Option<crate::reasons::ArbiterReason>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from_node: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hint_targets: Vec<String>,
    pub score: f64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub emergency: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub cooldown_overridden: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_status: Option<RowOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "requestUUID")]
    pub request_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_reason: Option<crate::reasons::DispatchReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,
}

/// A row's simulation (alfred-reference.md §3.1 `scheduling`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backend: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_version: String,
    #[serde(
        default,
        rename = "configurationID",
        skip_serializing_if = "String::is_empty"
    )]
    pub configuration_id: String,
    pub status: crate::reasons::SchedulingStatus,
    pub reason: crate::reasons::SchedulingReason,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "String::is_empty"
    )]
    pub snapshot_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_time: Option<k8s_openapi::jiff::Timestamp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<crate::simulate::Placement>,
}

impl Row {
    /// The code that explains the row's outcome: why it was withheld or what its request is
    /// doing, why the arbiter refused it, or why it is advice only (a row has one at most).
    pub fn why(&self) -> Option<&'static str> {
        self.dispatch_reason
            .map(|r| r.as_str())
            .or(self.reject_reason.map(|r| r.as_str()))
            .or(self.advisory_reason.map(|r| r.as_str()))
    }

    /// The row as the arbiter refused it.
    pub fn reject(&mut self, reason: crate::reasons::ArbiterReason) {
        self.outcome = RowOutcome::Rejected;
        self.reject_reason = Some(reason);
    }

    /// The row as the dispatcher left it: withheld, sent, or its request's state, with why.
    pub fn dispatch(
        &mut self,
        outcome: RowOutcome,
        reason: Option<crate::reasons::DispatchReason>,
        request_uuid: Option<String>,
    ) {
        self.outcome = outcome;
        self.dispatch_status = Some(outcome);
        self.dispatch_reason = reason;
        self.request_uuid = request_uuid;
    }

    /// A row in its first state: advisory, nothing dispatched.
    pub fn new(
        workload: &str,
        component: ComponentKind,
        instance: i32,
        policy: PolicyName,
        reason: CandidateReason,
        from_node: &str,
        score: f64,
    ) -> Row {
        Row {
            workload: workload.to_string(),
            component,
            instance,
            policy,
            reason,
            outcome: RowOutcome::Advisory,
            advisory_reason: None,
            reject_reason: None,
            from_node: from_node.to_string(),
            target: String::new(),
            hint_targets: Vec::new(),
            score,
            emergency: false,
            cooldown_overridden: false,
            dispatch_status: None,
            request_uuid: None,
            dispatch_reason: None,
            scheduling: None,
        }
    }
}

impl Recommendation {
    pub fn new(row: Row, footprint: i64, detail: String) -> Recommendation {
        Recommendation {
            row,
            footprint,
            placement_targets: Vec::new(),
            planned: Vec::new(),
            detail,
            benefit: None,
            cost: None,
            simulation: None,
        }
    }

    /// Records a move's plan: where it may go and where each GPU pod is planned.
    pub fn set_plan(&mut self, cluster: &Cluster<'_>, plan: &surge::SurgePlan) {
        let node = |n: usize| cluster.nodes[n].name.to_string();
        self.placement_targets = plan.targets.iter().map(|&n| node(n)).collect();
        self.planned = plan
            .placements
            .iter()
            .map(|&(p, n)| (cluster.pods[p].name.to_string(), node(n)))
            .collect();
    }

    /// Advice with a reason.
    pub fn advice(
        mut row: Row,
        reason: AdvisoryReason,
        footprint: i64,
        detail: String,
    ) -> Recommendation {
        row.advisory_reason = Some(reason);
        Recommendation::new(row, footprint, detail)
    }
}

/// A row with what the pass knows beyond the wire schema: for people and for the arbiter.
#[derive(Clone, Debug, PartialEq)]
pub struct Recommendation {
    pub row: Row,
    /// The Instance's GPUs (0 for advice that names no footprint).
    pub footprint: i64,
    /// Every node the move may target, fullest first (the hints are the first of them).
    pub placement_targets: Vec<String>,
    /// The planned node of each GPU pod, largest pod first.
    pub planned: Vec<(String, String)>,
    /// What the advice means, in a sentence a newcomer can follow.
    pub detail: String,
    /// Defragmentation moves: the fragmentation the move removes and its cost.
    pub benefit: Option<f64>,
    pub cost: Option<f64>,
    /// The simulation's full answer, for people (`scheduling` in the row is its summary).
    pub simulation: Option<crate::simulate::SimulationOutcome>,
}

impl Recommendation {
    pub fn executable(&self) -> bool {
        self.row.advisory_reason.is_none()
    }

    /// The nodes the surge of this move prefers (a request's hints): the move's allowed
    /// targets, else its hints, never its source, at most as many as a request may name.
    pub fn surge_hints(&self) -> Vec<String> {
        let targets = if self.placement_targets.is_empty() {
            &self.row.hint_targets
        } else {
            &self.placement_targets
        };
        targets
            .iter()
            .filter(|t| **t != self.row.from_node)
            .take(crate::migration::MAX_HINTS)
            .cloned()
            .collect()
    }
}

/// Sorts rows as the policies rank them: by `class` (lowest first), then score (highest
/// first), footprint (smallest first) and identity; stable. The keys are sorted, not the rows:
/// a row is large, and comparing and moving rows in a sort spent most of a 30,000-row sort
/// on cache misses and copies; the rows are then permuted in place.
fn sort_rows(rows: &mut [Recommendation], class: impl Fn(&Recommendation) -> u8) {
    let mut keys: Vec<_> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                class(r),
                r.row.score,
                r.footprint,
                (
                    r.row.workload.as_str(),
                    r.row.component.as_str(),
                    r.row.instance,
                    r.row.from_node.as_str(),
                ),
                i,
            )
        })
        .collect();
    keys.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
            .then_with(|| a.3.cmp(&b.3))
    });
    let order: Vec<usize> = keys.into_iter().map(|k| k.4).collect();
    // One cycle of the permutation at a time: a second list of 40,000 rows took 28 MB.
    let mut placed = vec![false; rows.len()];
    for start in 0..rows.len() {
        let mut at = start;
        while !placed[at] {
            placed[at] = true;
            let from = order[at];
            if from == start {
                break;
            }
            rows.swap(at, from);
            at = from;
        }
    }
}

/// The result of one pass.
#[derive(Clone, Debug)]
pub struct Decision {
    pub pools: Vec<PoolScore>,
    /// Node-health rows first, then defragmentation rows, each in its policy's ranking.
    pub recommendations: Vec<Recommendation>,
    /// `node.<name>` records, by key.
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Defragmentation moves dropped because no maintenance window was open.
    pub dropped_outside_window: usize,
    /// Nodes a maintenance trigger with `cordon: true` asks to cordon, by name.
    pub cordons: Vec<MaintenanceCordon>,
    /// Holds to release, and at most one to place (`holdMinutes`; execute mode only).
    pub holds: Vec<consolidate::holds::HoldChange>,
}

/// A node that OME's Alfred would cordon for maintenance, and the trigger that asks for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceCordon {
    pub node: String,
    /// The UID the pass saw: the cordon is written only to this node, re-read first.
    #[serde(skip)]
    pub uid: String,
    pub rule: String,
}

/// The nodes to cordon for maintenance, sorted by name.
fn maintenance_cordons(ctx: &Context<'_>) -> Vec<MaintenanceCordon> {
    let triggers = &ctx.config.node_health.maintenance_triggers;
    if !triggers.iter().any(|t| t.cordon) {
        return Vec::new();
    }
    let mut out: Vec<MaintenanceCordon> = ctx
        .cluster
        .nodes
        .iter()
        .filter_map(|n| {
            crate::model::health::cordon_rule(n.node, triggers, ctx.now()).map(|t| {
                MaintenanceCordon {
                    node: n.name.to_string(),
                    uid: n.uid.unwrap_or_default().to_string(),
                    rule: t.name.clone(),
                }
            })
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// Runs both policies in recommend-only semantics: every row is `advisory`, and a move the
/// policies would make becomes advice with `SimulationRecommendOnly`.
pub fn decide(ctx: &Context<'_>) -> Decision {
    let mut decision = plan(ctx);
    simulation::attach(ctx, &mut decision.recommendations);
    for r in &mut decision.recommendations {
        if r.row.advisory_reason.is_some() {
            continue;
        }
        // A move whose pods no scheduler profile can simulate names why.
        let selection = r
            .simulation
            .as_ref()
            .and_then(|s| AdvisoryReason::of_selection(s.reason).map(|a| (a, s.message.clone())));
        match selection {
            Some((reason, message)) => {
                r.row.advisory_reason = Some(reason);
                r.detail += &format!(" Its pods cannot be simulated: {message}");
            }
            None => {
                r.row.advisory_reason = Some(AdvisoryReason::SimulationRecommendOnly);
                r.detail += " Alfred runs recommend-only, so the move is advice.";
            }
        }
    }
    decision
}

/// Both policies' rows with their moves still executable and nothing simulated: what the
/// arbiter takes in execute mode (the dispatcher simulates only the move it is about to send).
pub fn plan(ctx: &Context<'_>) -> Decision {
    let config = ctx.config;
    let eligibility = defrag_eligibility(ctx);
    let movable = movable_of(&eligibility);
    let pools = score::score_pools(ctx, &movable);
    let mut recommendations = Vec::new();
    let mut nodes = BTreeMap::new();
    if config.node_health.enabled {
        let (rows, records) = nodehealth::run(ctx);
        recommendations.extend(rows);
        nodes = records;
    }
    let mut dropped_outside_window = 0;
    let defragmentation = &config.defragmentation;
    let limit = config.emptied_at_once();
    let found = consolidate::holds::kept_holds(ctx, limit > 0);
    let mut holds = found.changes.clone();
    if defragmentation.enabled {
        let anchors: Vec<usize> = found.carried.iter().map(|k| k.0).collect();
        let consolidation = defragmentation
            .follow_plan
            .then(|| consolidate::plan_from(ctx, &movable, None, &anchors));
        let (mut rows, dropped) = defrag::run(ctx, &pools, &eligibility, consolidation.as_ref());
        if let Some(plan) = consolidation.as_ref().filter(|_| limit > 0) {
            holds.extend(consolidate::holds::change_for(ctx, &found, plan));
            plan_steps_first(&mut rows, &consolidate::holds::action_heads(plan, limit));
        }
        recommendations.extend(rows);
        dropped_outside_window = dropped;
    }
    Decision {
        pools,
        recommendations,
        nodes,
        dropped_outside_window,
        cordons: maintenance_cordons(ctx),
        holds,
    }
}

/// With holds on, the budget goes to the consolidation plan's next moves (`heads`: the next
/// move of each node it is emptying), which seat waiting pods, before any move that only
/// lowers a pool's fragmentation.
fn plan_steps_first(rows: &mut [Recommendation], heads: &[&consolidate::PlanStep]) {
    let emptying: Vec<&str> = heads.iter().map(|h| h.frees.as_str()).collect();
    for r in rows.iter_mut().filter(|r| r.executable()) {
        let row = &r.row;
        let head = |h: &&consolidate::PlanStep| {
            row.workload == h.workload && row.component == h.component && row.instance == h.instance
        };
        if heads.iter().any(head) {
            continue;
        }
        r.row.advisory_reason = Some(AdvisoryReason::PlanStepFirst);
        r.detail += &format!(
            " Holds are on (holdMinutes), so the consolidation plan's next moves go first: the next move off each node it is emptying ({}).",
            emptying.join(", ")
        );
    }
}

/// Each Instance's defragmentation eligibility: None for those it does not apply to
/// (not OMENative, or no GPUs), else the first failing check.
fn defrag_eligibility(ctx: &Context<'_>) -> Vec<defrag::Eligibility> {
    let cluster = &ctx.cluster;
    (0..cluster.instances.len())
        .map(|i| {
            let inst = &cluster.instances[i];
            let mode = cluster.components[inst.component].mode;
            (mode == crate::mode::DeploymentMode::OmeNative && inst.gpus > 0)
                .then(|| eligibility::first_failure(ctx, i, eligibility::Purpose::Defragmentation))
        })
        .collect()
}

fn movable_of(eligibility: &[defrag::Eligibility]) -> Vec<bool> {
    eligibility
        .iter()
        .map(|e| matches!(e, Some(None)))
        .collect()
}

/// Which Instances defragmentation may move (every eligibility check passes).
pub fn movable(ctx: &Context<'_>) -> Vec<bool> {
    movable_of(&defrag_eligibility(ctx))
}

/// Rounds a score for output: six decimals, as people and golden files read them.
pub fn round6(x: f64) -> f64 {
    let r = (x * 1e6).round() / 1e6;
    if r == 0.0 { 0.0 } else { r }
}
