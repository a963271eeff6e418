//! `recommend --plan`'s text: the consolidation plan's steps and the trade of moves against
//! what they free, as a small chart.

use std::fmt::Write as _;

use alfred::decision::consolidate::ConsolidationPlan;
use alfred::simulate::packing::{GPU_WEIGHT, SchedulerCost};
use anyhow::Result;

use crate::render;

/// Width of the trade chart's bars.
const CHART_WIDTH: usize = 30;

pub(super) fn plan_text(
    plan: &ConsolidationPlan,
    scheduler_cost: Option<&SchedulerCost>,
    out: &mut String,
) -> Result<()> {
    let (before, after) = (plan.before(), plan.after());
    writeln!(
        out,
        "Consolidation plan: {} move(s) make {} more of the {} pending GPUs placeable ({} -> {}); whole free nodes {} -> {}",
        plan.steps.len(),
        after.pending_gpus - before.pending_gpus,
        plan.pending_gpus_total,
        before.pending_gpus,
        after.pending_gpus,
        before.whole_free_nodes,
        after.whole_free_nodes
    )?;
    if let Some(cost) = scheduler_cost {
        write!(out, "  ")?;
        scheduler_cost_text(cost, out)?;
    }
    if plan.steps.is_empty() {
        writeln!(
            out,
            "  {}",
            if plan.pending_gpus_total == before.pending_gpus {
                "no pending pod waits for room: no move is worth making"
            } else {
                "no move of a movable Instance makes a waiting pod placeable"
            }
        )?;
        return Ok(());
    }
    let lines: Vec<Vec<String>> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(k, s)| {
            vec![
                (k + 1).to_string(),
                s.workload.clone(),
                s.component.to_string(),
                s.instance.to_string(),
                s.gpus.to_string(),
                s.from.join(","),
                s.to.join(","),
                s.frees.clone(),
            ]
        })
        .collect();
    render::columns(
        out,
        &[
            "STEP",
            "WORKLOAD",
            "COMPONENT",
            "INSTANCE",
            "GPUS",
            "FROM",
            "TO",
            "MAKES-ROOM-ON",
        ],
        &lines,
    );
    writeln!(out)?;
    writeln!(
        out,
        "Moves against pending GPUs placeable (of {}) and whole free nodes; stopping after any step is safe:",
        plan.pending_gpus_total
    )?;
    let scale = plan.pending_gpus_total.max(1) as f64;
    let lines: Vec<Vec<String>> = plan
        .curve
        .iter()
        .map(|p| {
            let filled = ((p.pending_gpus as f64 / scale) * CHART_WIDTH as f64).round() as usize;
            let filled = filled.min(CHART_WIDTH);
            vec![
                p.moves.to_string(),
                p.pending_gpus.to_string(),
                format!("{}{}", "█".repeat(filled), "░".repeat(CHART_WIDTH - filled)),
                p.whole_free_nodes.to_string(),
            ]
        })
        .collect();
    render::columns(out, &["MOVES", "PLACEABLE", "", "WHOLE-FREE"], &lines);
    writeln!(out)?;
    writeln!(
        out,
        "Only Instances that can move count (see `kubectl alfred explain`); Alfred itself makes one move a pass."
    )?;
    Ok(())
}

/// What the spreading profile costs: the waiting GPUs a GPU-packing one would have placed.
pub(super) fn scheduler_cost_text(cost: &SchedulerCost, out: &mut String) -> Result<()> {
    let packed = cost.packed_waiting_gpus;
    let verdict = match cost.avoided_gpus {
        0 => format!("{packed} would wait, as many: the scheduler is not what keeps them waiting"),
        avoided if avoided < 0 => {
            format!("{packed} would wait, more than now: spreading serves this cluster better")
        }
        avoided => format!(
            "{packed} would wait: {avoided} fewer ({}%), with no move",
            avoided * 100 / cost.waiting_gpus.max(1)
        ),
    };
    writeln!(
        out,
        "Scheduler: {} GPUs of {} pod(s) wait, placed by {}, whose profile spreads them; had a GPU-packing profile (MostAllocated, GPUs weighed {GPU_WEIGHT}x) placed today's GPU pods in the order they were created, {verdict}.",
        cost.waiting_gpus,
        cost.waiting_pods,
        cost.schedulers.join(", "),
    )?;
    Ok(())
}
