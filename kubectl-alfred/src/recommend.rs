//! `kubectl alfred recommend`: one decision pass in recommend-only mode, as advice.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use alfred::decision::consolidate::{self, ConsolidationPlan};
use alfred::decision::{self, Decision, NodeRecord, PoolScore, Row, round6};
use anyhow::Result;
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::{GlobalArgs, Output, render, source};

#[derive(Args)]
pub struct RecommendArgs {
    /// Show only recommendations for InferenceServices in this namespace (the pass still
    /// weighs the whole cluster: any Instance can make room for any other).
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Show recommendations in every namespace (the default).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Instead of this pass's moves (Alfred makes one a pass), the fewest-move consolidation
    /// plan: the moves that make the most waiting GPU demand placeable per move, in an order
    /// safe to stop after any step, with the trade of moves against pending GPUs placeable and
    /// whole free nodes.
    #[arg(long)]
    pub plan: bool,
    /// The best plan of at most N moves.
    #[arg(long, value_name = "N", requires = "plan")]
    pub max_moves: Option<usize>,
    /// Also write the pass into the recommendations ConfigMap (`alfred-recommendations`), as
    /// Alfred would: `last-cycle.json` and the node records; other keys are kept. Live only.
    #[arg(long, conflicts_with = "plan")]
    pub record: bool,
}

/// The `last-cycle.json` document with the pools and node records beside it, so scripts
/// written for the recommendations ConfigMap read it unchanged.
#[derive(Serialize)]
struct Document<'a> {
    timestamp: String,
    mode: &'static str,
    recommendations: Vec<&'a Row>,
    pools: Vec<PoolSummary<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<ConsolidationPlan>,
    nodes: &'a BTreeMap<String, NodeRecord>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolSummary<'a> {
    pool: &'a str,
    score: f64,
    observed: f64,
    best: f64,
    reclaimable: f64,
    pending_pressure: f64,
    free_gpus: i64,
    largest_free_block: i64,
    state: &'static str,
    sizes: &'a [decision::score::SizeTerm],
    repackable_pending: &'a [decision::score::PendingTerm],
}

fn state(p: &PoolScore) -> &'static str {
    if p.execution_open {
        "moves"
    } else if p.advisory_open {
        "advice"
    } else {
        "quiet"
    }
}

pub async fn run(args: &RecommendArgs, global: &GlobalArgs) -> Result<()> {
    if args.record && global.file.is_some() {
        anyhow::bail!("--record writes the live cluster's recommendations ConfigMap; drop -f");
    }
    let input = source::load(global).await?;
    let ctx = input.context();
    let mut decision = decision::decide(&ctx);
    // Requests left from execute mode keep their status.
    let journal = input
        .snapshot
        .config_map(alfred::execute::journal::CONFIG_MAP_NAME)
        .and_then(|m| m.data.as_ref());
    let key = |k: &str| journal.and_then(|d| d.get(k)).map(String::as_str);
    match alfred::execute::dispatch::journal_recommendations(
        &ctx,
        key(alfred::execute::journal::STATE_KEY),
        key(alfred::execute::breaker::KEY),
    ) {
        Ok(rows) => decision.recommendations.extend(rows),
        Err(e) => eprintln!("note: {e}"),
    }
    let plan = args.plan.then(|| {
        let movable = decision::movable(&ctx);
        consolidate::plan(&ctx, &movable, args.max_moves)
    });
    let text = render_decision(
        &decision,
        plan,
        input.now,
        args.namespace.as_deref(),
        global.output,
    )?;
    drop(ctx);
    render::emit(&text)?;
    if args.record {
        let rows: Vec<_> = decision
            .recommendations
            .iter()
            .map(|r| r.row.clone())
            .collect();
        let pass = crate::record::Pass {
            rows: &rows,
            nodes: &decision.nodes,
            mode: "recommend-only",
        };
        let at = crate::record::record(global, &input.config, &pass, input.now).await?;
        eprintln!("recorded into ConfigMap {at}");
    }
    std::mem::forget(input);
    Ok(())
}

fn render_decision(
    d: &Decision,
    plan: Option<ConsolidationPlan>,
    now: Timestamp,
    namespace: Option<&str>,
    output: Output,
) -> Result<String> {
    let shown: Vec<(usize, &decision::Recommendation)> = d
        .recommendations
        .iter()
        .filter(|r| namespace.is_none_or(|ns| r.row.workload.split('/').next() == Some(ns)))
        .enumerate()
        .collect();
    let doc = Document {
        timestamp: now.to_string(),
        mode: "recommend-only",
        recommendations: shown.iter().map(|(_, r)| &r.row).collect(),
        pools: d
            .pools
            .iter()
            .map(|p| PoolSummary {
                pool: &p.pool,
                score: round6(p.score),
                observed: round6(p.observed),
                best: round6(p.best),
                reclaimable: round6(p.reclaimable),
                pending_pressure: round6(p.pending_pressure),
                free_gpus: p.free_gpus,
                largest_free_block: p.largest_free_block,
                state: state(p),
                sizes: &p.sizes,
                repackable_pending: &p.repackable_pending,
            })
            .collect(),
        nodes: &d.nodes,
        plan,
    };
    if let Some(text) = render::structured(&doc, output)? {
        return Ok(text);
    }
    let wide = output == Output::Wide;
    let mut out = String::new();
    pools_table(d, wide, &mut out)?;
    writeln!(out)?;
    if let Some(plan) = &doc.plan {
        plan_text(plan, &mut out)?;
        return Ok(out);
    }
    if shown.is_empty() {
        writeln!(
            out,
            "No recommendations: no pool is fragmented past the threshold and no node needs evacuating."
        )?;
    } else {
        rows_table(&shown, wide, &mut out)?;
    }
    if d.dropped_outside_window > 0 {
        writeln!(
            out,
            "\n{} defragmentation move(s) left out: no maintenance window is open now (emergencies excepted).",
            d.dropped_outside_window
        )?;
    }
    if !d.nodes.is_empty() {
        writeln!(out)?;
        nodes_table(d, &mut out)?;
    }
    Ok(out)
}

fn pools_table(d: &Decision, wide: bool, out: &mut String) -> Result<()> {
    let lines: Vec<Vec<String>> = d
        .pools
        .iter()
        .map(|p| {
            vec![
                p.pool.clone(),
                format!("{:.3}", p.score),
                format!("{:.3}", p.observed),
                format!("{:.3}", p.reclaimable),
                format!("{:.3}", p.pending_pressure),
                p.free_gpus.to_string(),
                p.largest_free_block.to_string(),
                state(p).to_string(),
            ]
        })
        .collect();
    render::columns(
        out,
        &[
            "POOL",
            "SCORE",
            "OBSERVED",
            "RECLAIMABLE",
            "PENDING",
            "FREE",
            "LARGEST-BLOCK",
            "STATE",
        ],
        &lines,
    );
    if wide {
        for p in &d.pools {
            let part = |f: &dyn Fn(&decision::score::SizeTerm) -> String| {
                p.sizes.iter().map(f).collect::<Vec<_>>().join("  ")
            };
            writeln!(out, "  {}:", p.pool)?;
            writeln!(
                out,
                "    weight  {}",
                part(&|s| format!("{}:{:.3}", s.size, s.weight))
            )?;
            writeln!(
                out,
                "    frag    {}",
                part(&|s| format!("{}:{:.3}", s.size, s.observed_frag))
            )?;
            writeln!(
                out,
                "    best    {}",
                part(&|s| format!("{}:{:.3}", s.size, s.best_frag))
            )?;
            for pending in &p.repackable_pending {
                writeln!(
                    out,
                    "    pending {} ({} GPUs, {:.0} min, urgency {:.3}) fits only after a repack",
                    pending.pod, pending.gpus, pending.age_minutes, pending.urgency
                )?;
            }
        }
    }
    writeln!(
        out,
        "STATE: moves = score above the threshold, Alfred plans moves; advice = only fragmentation no move can fix; quiet = nothing to do."
    )?;
    Ok(())
}

fn rows_table(
    shown: &[(usize, &decision::Recommendation)],
    wide: bool,
    out: &mut String,
) -> Result<()> {
    let lines: Vec<Vec<String>> = shown
        .iter()
        .map(|(k, r)| {
            let mut line = vec![(k + 1).to_string()];
            line.extend(render::row_cells(&r.row));
            line.extend([
                r.row.outcome.as_str().into(),
                r.row.why().unwrap_or("-").into(),
                render::or_dash(&r.row.from_node),
                render::or_dash(&r.row.hint_targets.join(",")),
                format!("{:.3}", r.row.score),
                if r.row.emergency { "yes" } else { "" }.into(),
            ]);
            line
        })
        .collect();
    let headers: Vec<&str> = ["#"]
        .into_iter()
        .chain(render::ROW_HEADERS)
        .chain([
            "OUTCOME",
            "REASON-CODE",
            "FROM",
            "HINTS",
            "SCORE",
            "EMERGENCY",
        ])
        .collect();
    render::columns(out, &headers, &lines);
    writeln!(out)?;
    writeln!(out, "Why:")?;
    // Rows that share an explanation are listed together, in order of first appearance.
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut group_of: std::collections::HashMap<&str, usize> = Default::default();
    for (k, r) in shown {
        let g = *group_of.entry(&r.detail).or_insert_with(|| {
            groups.push((&r.detail, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(k + 1);
    }
    for (detail, rows) in &groups {
        writeln!(out, "  {}: {detail}", row_ranges(rows))?;
    }
    if wide {
        for (k, r) in shown {
            if !r.planned.is_empty() {
                let planned: Vec<String> = r
                    .planned
                    .iter()
                    .map(|(p, n)| format!("{p} -> {n}"))
                    .collect();
                writeln!(
                    out,
                    "  {}: planned {}; may target {}",
                    k + 1,
                    planned.join(", "),
                    r.placement_targets.join(", ")
                )?;
            }
            if let Some(sim) = &r.simulation {
                let mut line = format!(
                    "  {}: scheduler predicts {:?}/{}",
                    k + 1,
                    sim.status,
                    sim.reason
                );
                let placed: Vec<String> = sim
                    .placements
                    .iter()
                    .map(|p| format!("{} -> {}", p.pod, p.node))
                    .collect();
                if !placed.is_empty() {
                    write!(line, ": {}", placed.join(", "))?;
                } else if !sim.message.is_empty() {
                    write!(line, ": {}", sim.message)?;
                }
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

/// `1-3, 5, 7-8`.
fn row_ranges(rows: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let mut j = i;
        while j + 1 < rows.len() && rows[j + 1] == rows[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", rows[i], rows[j])
        } else {
            rows[i].to_string()
        });
        i = j + 1;
    }
    let label = if rows.len() == 1 { "row" } else { "rows" };
    format!("{label} {}", parts.join(", "))
}

fn nodes_table(d: &Decision, out: &mut String) -> Result<()> {
    let lines: Vec<Vec<String>> = d
        .nodes
        .iter()
        .map(|(key, r)| {
            vec![
                key.strip_prefix("node.").unwrap_or(key).to_string(),
                match r.suspect_until {
                    Some(t) => format!("{} until {t}", r.state),
                    None => r.state.clone(),
                },
                render::or_dash(&r.maintenance.triggers.join(",")),
                if r.ome_gpu_occupants_present {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                render::or_dash(&r.workloads.join(",")),
            ]
        })
        .collect();
    writeln!(
        out,
        "Node records (nodes that are not Clear or are due for maintenance):"
    )?;
    render::columns(
        out,
        &["NODE", "STATE", "MAINTENANCE", "OME-GPU-PODS", "WORKLOADS"],
        &lines,
    );
    Ok(())
}

/// Width of the trade chart's bars.
const CHART_WIDTH: usize = 30;

fn plan_text(plan: &ConsolidationPlan, out: &mut String) -> Result<()> {
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
