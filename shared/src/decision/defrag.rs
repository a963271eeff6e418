//! The defragmentation policy's rows (alfred-policies.md "How Alfred picks a move";
//! alfred-reference.md §5 "Candidate enumeration", "Move planning"): for each pool the score
//! opens, one row per Instance, a planned move when it lowers fragmentation by more than its
//! cost, advice with the reason otherwise.

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

use super::consolidate::{ConsolidationPlan, PlanStep};
use super::score::PoolScore;
use super::surge;
use super::{AdvisoryReason, CandidateReason, PolicyName, Recommendation, Row};
use crate::annotations::SpotPolicy;
use crate::config::{Config, MaintenanceWindow};
use crate::mode::DeploymentMode;
use crate::model::context::Context;

/// The cost every move pays, scaled by the aggressiveness's weight.
pub const BASE_COST: f64 = 0.15;
pub const EMERGENCY_BOOST: f64 = 2.0;
pub const SPOT_BOOST: f64 = 1.25;
pub const MAX_HINTS: usize = 3;

/// An Instance's defragmentation eligibility: None when the policy does not weigh it (not
/// OMENative, or no GPUs), else the first failing check.
pub type Eligibility = Option<Option<(AdvisoryReason, String)>>;

/// True when a maintenance window is open now (always, with none configured). Windows are UTC,
/// start inclusive, end exclusive, to the minute.
pub fn window_open(windows: &[MaintenanceWindow], now: Timestamp) -> bool {
    if windows.is_empty() {
        return true;
    }
    let t = now.to_zoned(TimeZone::UTC);
    let day = t.weekday().to_monday_zero_offset() as u8;
    let minute = t.hour() as u32 * 60 + t.minute() as u32;
    windows
        .iter()
        .any(|w| w.days.contains(&day) && w.start_minute <= minute && minute < w.end_minute)
}

/// `consolidation`: the fewest-move plan to follow, when `followPlan` is on.
pub fn run(
    ctx: &Context<'_>,
    pools: &[PoolScore],
    eligibility: &[Eligibility],
    consolidation: Option<&ConsolidationPlan>,
) -> (Vec<Recommendation>, usize) {
    let mut rows = Vec::new();
    let mut dropped = 0;
    let open = window_open(&ctx.config.maintenance_windows, ctx.now());
    // With holds on, the next move off each node the plan's first actions empty is followed
    // (`holds::action_heads`); else the pool's next step.
    let holds = ctx.config.emptied_at_once();
    let heads = consolidation
        .filter(|_| holds > 0)
        .map(|plan| super::consolidate::holds::action_heads(plan, holds));
    for pool in pools.iter().filter(|p| p.execution_open || p.advisory_open) {
        // The pool's part of the plan, in its order.
        let followed: Option<Vec<&PlanStep>> = consolidation.map(|plan| {
            let cluster = &ctx.cluster;
            plan.steps
                .iter()
                .filter(|s| cluster.instances[s.moved].pool.as_deref() == Some(&pool.pool))
                .collect()
        });
        let leads: Vec<usize> = match (&followed, &heads) {
            (Some(steps), Some(heads)) => steps
                .iter()
                .filter(|s| heads.iter().any(|h| std::ptr::eq(*h, **s)))
                .map(|s| s.moved)
                .collect(),
            (Some(steps), _) => steps.first().map(|s| s.moved).into_iter().collect(),
            (None, _) => Vec::new(),
        };
        let mut pool_rows = Vec::new();
        candidates(
            ctx,
            pool,
            eligibility,
            followed.as_deref(),
            &leads,
            &mut pool_rows,
        );
        let before = pool_rows.len();
        pool_rows.retain(|r| open || !r.executable() || r.row.emergency);
        dropped += before - pool_rows.len();
        rows.extend(pool_rows);
    }
    super::sort_rows(&mut rows, |_| 0);
    (rows, dropped)
}

fn candidates(
    ctx: &Context<'_>,
    pool: &PoolScore,
    eligibility: &[Eligibility],
    followed: Option<&[&PlanStep]>,
    leads: &[usize],
    out: &mut Vec<Recommendation>,
) {
    let cluster = &ctx.cluster;
    for (w, workload) in cluster.workloads.iter().enumerate() {
        let settings = &ctx.workloads[w];
        let mut components = workload.components.clone();
        components.sort_by_key(|&c| cluster.components[c].kind.as_str());
        for c in components {
            let component = &cluster.components[c];
            let row = |instance: i32, from: &str| {
                Row::new(
                    &workload.key,
                    component.kind,
                    instance,
                    PolicyName::Defragmentation,
                    CandidateReason::Fragmentation,
                    from,
                    0.0,
                )
            };
            // Raw and LWS workloads are advice only, and not even that when they could not
            // move anyway.
            let quiet = !settings.movable
                || settings.active_migration.is_some()
                || settings.in_cooldown(ctx.now()).is_some();
            match component.mode {
                DeploymentMode::MultiNode => {
                    if quiet || !ctx.config.lws_recommendations_enabled {
                        continue;
                    }
                    let Some((primary_pool, from)) = component_primary(ctx, c) else {
                        continue;
                    };
                    if primary_pool == pool.pool {
                        out.push(Recommendation::advice(
                            row(-1, &from),
                            AdvisoryReason::LWSMigrationUnsupported,
                            0,
                            format!(
                                "runs on LeaderWorkerSet (MultiNode), which Alfred cannot migrate; move it to OMENative to let it help repack pool {}.",
                                pool.pool
                            ),
                        ));
                    }
                    continue;
                }
                DeploymentMode::RawDeployment | DeploymentMode::VirtualDeployment if quiet => {
                    continue;
                }
                _ => {}
            }
            for &i in &component.instances {
                let inst = &cluster.instances[i];
                if inst.gpus <= 0 || inst.pool.as_deref() != Some(pool.pool.as_str()) {
                    continue;
                }
                let from = inst.primary_node.clone().unwrap_or_default();
                if component.mode != DeploymentMode::OmeNative {
                    if inst.pods.iter().all(|&p| cluster.pods[p].terminating) {
                        continue;
                    }
                    out.push(Recommendation::advice(
                        row(inst.index, &from),
                        AdvisoryReason::RawDeploymentMigrationUnsupported,
                        0,
                        format!(
                            "a RawDeployment: Alfred moves only OMENative Instances (declare OMENative in the InferenceService to let it help repack pool {}).",
                            pool.pool
                        ),
                    ));
                    continue;
                }
                // Following the plan, a lead step (the pool's next, or with holds each held
                // action's next) is valued at the whole plan: it first, then the others.
                let followed: Option<Vec<&PlanStep>> =
                    followed.filter(|_| leads.contains(&i)).and_then(|steps| {
                        let lead = steps.iter().position(|s| s.moved == i)?;
                        let mut order = vec![steps[lead]];
                        order.extend(
                            steps
                                .iter()
                                .enumerate()
                                .filter(|&(k, _)| k != lead)
                                .map(|(_, s)| *s),
                        );
                        Some(order)
                    });
                out.push(omenative(
                    ctx,
                    pool,
                    i,
                    row(inst.index, &from),
                    &eligibility[i],
                    followed.as_deref(),
                ));
            }
        }
    }
}

/// The pool and node holding most of a component's GPUs (names break ties).
fn component_primary(ctx: &Context<'_>, c: usize) -> Option<(String, String)> {
    let cluster = &ctx.cluster;
    let mut per_node: std::collections::BTreeMap<&str, i64> = Default::default();
    let mut per_pool: std::collections::BTreeMap<&str, i64> = Default::default();
    for &i in &cluster.components[c].instances {
        for &p in &cluster.instances[i].pods {
            let pod = &cluster.pods[p];
            let Some(node) = pod.host.map(|n| &cluster.nodes[n]) else {
                continue;
            };
            if pod.terminal || pod.gpus <= 0 {
                continue;
            }
            *per_node.entry(node.name).or_default() += pod.gpus;
            if let Some(pool) = node.pool.as_deref() {
                *per_pool.entry(pool).or_default() += pod.gpus;
            }
        }
    }
    let most = |m: &std::collections::BTreeMap<&str, i64>| {
        m.iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(k, _)| k.to_string())
    };
    Some((most(&per_pool)?, most(&per_node)?))
}

/// A defragmentation move planned on its own; no move is undone: not back to a node the
/// Instance left within the day.
pub(super) fn single_move(ctx: &Context<'_>, i: usize) -> Result<surge::SurgePlan, surge::NoRoom> {
    surge::plan(ctx, i, &ctx.cluster.left_lately(i))
}

/// The row of OMENative Instance `i`: its move valued by the drop in the pool's
/// fragmentation, or with `followed` (the pool's plan steps, the first moving `i`), that
/// step valued by the drop the whole plan makes.
fn omenative(
    ctx: &Context<'_>,
    pool: &PoolScore,
    i: usize,
    mut row: Row,
    eligibility: &Eligibility,
    followed: Option<&[&PlanStep]>,
) -> Recommendation {
    let cluster = &ctx.cluster;
    let config = ctx.config;
    let inst = &cluster.instances[i];
    if let Some(Some((code, why))) = eligibility {
        return Recommendation::advice(row, *code, 0, format!("cannot move: {why}."));
    }
    // The plan leaves these out too (`consolidate::setup`); a single move must as well.
    if let Some(ended) = cluster.moved_lately(i) {
        return Recommendation::advice(
            row,
            AdvisoryReason::OMENativeStateIneligible,
            0,
            format!(
                "cannot move: its last move ended at {ended}, within the hour, and no move is undone."
            ),
        );
    }
    if !pool.execution_open {
        return Recommendation::advice(
            row,
            AdvisoryReason::NonExecutableObservedFragmentation,
            0,
            format!(
                "pool {} is fragmented ({:.3}), but no move of its movable Instances would fix it.",
                pool.pool, pool.observed
            ),
        );
    }
    let plan = match followed {
        Some(steps) => surge_of_step(ctx, i, steps[0]),
        None => match single_move(ctx, i) {
            Ok(plan) => plan,
            Err(why) => {
                return Recommendation::advice(
                    row,
                    AdvisoryReason::NoSurgeHeadroom,
                    inst.gpus,
                    format!("cannot move: {why}."),
                );
            }
        },
    };
    let moves: Vec<&[(usize, usize)]> = match followed {
        Some(steps) => steps.iter().map(|s| s.placements.as_slice()).collect(),
        None => vec![plan.placements.as_slice()],
    };
    let changes = bin_changes(ctx, pool, &moves);
    let deltas: Vec<(i64, i64, i64)> = changes
        .iter()
        .map(|&(b, after)| (pool.bins[b].capacity, pool.bins[b].free, after))
        .collect();
    let benefit = pool.observed - pool.measure.fragmentation_after(&pool.shares, &deltas);
    let cost = config.defragmentation.aggressiveness.cost_weight() * BASE_COST;
    let mut score = benefit - cost;
    row.score = score;
    let mut r = Recommendation::new(row, inst.gpus, String::new());
    r.set_plan(cluster, &plan);
    r.benefit = Some(benefit);
    r.cost = Some(cost);
    let whose = match followed {
        Some(steps) => format!(
            "making the next of the consolidation plan's {} moves in pool {} (followPlan) would",
            steps.len(),
            pool.pool
        ),
        None => format!("moving it off {} would", r.row.from_node),
    };
    if score <= 0.0 {
        r.row.advisory_reason = Some(AdvisoryReason::NonExecutableObservedFragmentation);
        let effect = if benefit > 0.0 {
            format!(
                "lower pool {}'s fragmentation by {benefit:.3}, not more than its cost",
                pool.pool
            )
        } else if benefit < 0.0 {
            format!(
                "raise pool {}'s fragmentation by {:.3} and cost",
                pool.pool, -benefit
            )
        } else {
            format!("leave pool {}'s fragmentation as it is and cost", pool.pool)
        };
        r.detail = format!(
            "{whose} {effect} {cost:.3} ({} aggressiveness).",
            config.defragmentation.aggressiveness.as_str()
        );
        return r;
    }
    let mut boosts = Vec::new();
    let largest_after = changes.iter().map(|c| c.1).max().unwrap_or(0);
    if let Some(pod) = emergency(ctx, pool, i, largest_after) {
        score *= EMERGENCY_BOOST;
        r.row.emergency = true;
        boosts.push(format!("emergency: it makes room for pending pod {pod}"));
    }
    let settings = ctx.settings_of(i);
    let from_preemptible = cluster
        .node(&r.row.from_node)
        .is_some_and(|n| n.preemptible);
    let spot = settings.spot_policy;
    if from_preemptible
        && (spot == Some(SpotPolicy::Migrate)
            || (spot != Some(SpotPolicy::Ignore) && config.spot_policy.prefer_as_source))
    {
        score *= SPOT_BOOST;
        boosts.push(format!("x{SPOT_BOOST} off a preemptible node"));
    }
    r.row.score = score;
    r.row.hint_targets = r
        .placement_targets
        .iter()
        .take(MAX_HINTS)
        .cloned()
        .collect();
    let drop = match followed {
        Some(steps) => format!(
            "the next of the consolidation plan's {} moves in pool {} (followPlan), which lower its fragmentation by {benefit:.3}",
            steps.len(),
            pool.pool
        ),
        None => format!("pool {}'s fragmentation drops by {benefit:.3}", pool.pool),
    };
    r.detail = format!(
        "move it off {} to {}: {drop} against a cost of {cost:.3}{}.",
        r.row.from_node,
        r.row.hint_targets.join(", "),
        if boosts.is_empty() {
            String::new()
        } else {
            format!(" ({})", boosts.join("; "))
        }
    );
    r
}

/// The pool's bins the moves change, with their free GPUs after them: each move's new pods
/// take their targets' GPUs, then its old pods give theirs back (up to the bin's capacity;
/// nodes that are no bin do not count). Moves are (pod, target node) lists, made in order.
fn bin_changes(
    ctx: &Context<'_>,
    pool: &PoolScore,
    moves: &[&[(usize, usize)]],
) -> Vec<(usize, i64)> {
    let cluster = &ctx.cluster;
    let mut changes: Vec<(usize, i64)> = Vec::new(); // (bin, free after)
    let mut change = |b: usize, f: &dyn Fn(i64, i64) -> i64| {
        let bin = &pool.bins[b];
        match changes.iter_mut().find(|c| c.0 == b) {
            Some(c) => c.1 = f(c.1, bin.capacity),
            None => changes.push((b, f(bin.free, bin.capacity))),
        }
    };
    for placements in moves {
        for &(p, n) in placements.iter() {
            if let Some(b) = pool.bin_of(n) {
                let gpus = cluster.pods[p].gpus;
                change(b, &|free, _| free - gpus);
            }
        }
        for &(p, _) in placements.iter() {
            if let Some(b) = cluster.pods[p].host.and_then(|h| pool.bin_of(h)) {
                let gpus = cluster.pods[p].gpus;
                change(b, &|free, cap| (free + gpus).min(cap));
            }
        }
    }
    changes
}

/// A plan step as a surge move: its placements, and as targets the nodes it lands on, then
/// the Instance's other candidate targets (fullest first; not the nodes it left within the
/// day, as the planner's), for the arbiter and the checks: the re-check's simulation places
/// the surge among them.
fn surge_of_step(ctx: &Context<'_>, i: usize, step: &PlanStep) -> surge::SurgePlan {
    let mut targets: Vec<usize> = Vec::new();
    for &(_, n) in &step.placements {
        if !targets.contains(&n) {
            targets.push(n);
        }
    }
    let left = ctx.cluster.left_lately(i);
    let others: Vec<usize> = surge::candidates(ctx, i, &left)
        .filter(|n| !targets.contains(n))
        .take(surge::LISTED_TARGETS.saturating_sub(targets.len()))
        .collect();
    targets.extend(others);
    surge::SurgePlan {
        targets,
        placements: step.placements.clone(),
    }
}

/// A pending pod the move would seat that fits nowhere now: older than the emergency age, in
/// the moved workload's namespace or tenant group, too large for any bin now, not after.
/// `largest_changed` is the most free GPUs on a bin the move changes.
fn emergency(
    ctx: &Context<'_>,
    pool: &PoolScore,
    i: usize,
    largest_changed: i64,
) -> Option<String> {
    let cluster = &ctx.cluster;
    let config: &Config = ctx.config;
    let settings = ctx.settings_of(i);
    let namespace =
        &cluster.workloads[cluster.components[cluster.instances[i].component].workload].namespace;
    let largest_now = pool.bins.iter().map(|b| b.free).max().unwrap_or(0);
    cluster
        .pending
        .iter()
        .filter(|p| p.counts_in(&pool.pool))
        .filter(|p| p.age_minutes(ctx.now()) > config.emergency_pending_age_minutes as f64)
        // Bins the move leaves alone seat no more than now, so only a changed bin can seat it.
        .filter(|p| p.gpus > largest_now && p.gpus <= largest_changed)
        .find(|p| {
            let pod = &cluster.pods[p.pod];
            if pod.namespace == *namespace {
                return true;
            }
            config.allow_cross_tenant_optimization
                && !settings.tenant_group.is_empty()
                && pod.owner.as_ref().is_some_and(|o| {
                    cluster
                        .workload_index(&format!("{}/{}", pod.namespace, o.isvc))
                        .is_some_and(|w| ctx.workloads[w].tenant_group == settings.tenant_group)
                })
        })
        .map(|p| {
            let pod = &cluster.pods[p.pod];
            format!("{}/{}", pod.namespace, pod.name)
        })
}
