//! `kubectl alfred recommend`: one decision pass in recommend-only mode, as advice.

mod plan;
mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use alfred::decision::consolidate::{self, ConsolidationPlan};
use alfred::decision::{self, Decision, NodeRecord, Row, round6};
use alfred::simulate::packing::{self, SchedulerCost};
use anyhow::Result;
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::{GlobalArgs, Output, render, source};
use plan::{plan_text, scheduler_cost_text};
use tables::{nodes_table, pools_table, rows_table, state};

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
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    timestamp: String,
    mode: &'static str,
    recommendations: Vec<&'a Row>,
    pools: Vec<PoolSummary<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<ConsolidationPlan>,
    /// When a spreading profile places GPU pods and some wait: how many would wait had a
    /// GPU-packing profile placed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler_cost: Option<SchedulerCost>,
    nodes: &'a BTreeMap<String, NodeRecord>,
    /// Nodes a maintenance trigger with `cordon: true` asks to cordon.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    cordons: &'a [decision::MaintenanceCordon],
    /// OMENative components whose Instances cannot be resolved: Alfred abstains from them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unobserved: Vec<Unobserved>,
}

#[derive(Serialize)]
struct Unobserved {
    /// `namespace/name/component`.
    component: String,
    problem: String,
}

/// The components this pass could not observe, in the namespace shown.
fn unobserved(ctx: &alfred::model::Context<'_>, namespace: Option<&str>) -> Vec<Unobserved> {
    let cluster = &ctx.cluster;
    cluster
        .components
        .iter()
        .filter_map(|c| {
            let why = c.unobservable.as_ref()?;
            let workload = &cluster.workloads[c.workload].key;
            namespace
                .is_none_or(|ns| workload.split('/').next() == Some(ns))
                .then(|| Unobserved {
                    component: format!("{workload}/{}", c.kind),
                    problem: why.to_string(),
                })
        })
        .collect()
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
        packing::scheduler_cost(&ctx),
        unobserved(&ctx, args.namespace.as_deref()),
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
        let client = crate::live::client(global).await?;
        let recorded =
            crate::record::record(&client, None, &input.config, &pass, input.now).await?;
        eprintln!("recorded into ConfigMap {}", recorded.at);
    }
    std::mem::forget(input);
    Ok(())
}

fn render_decision(
    d: &Decision,
    plan: Option<ConsolidationPlan>,
    scheduler_cost: Option<SchedulerCost>,
    unobserved: Vec<Unobserved>,
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
        scheduler_cost,
        cordons: &d.cordons,
        unobserved,
    };
    if let Some(text) = render::structured(&doc, output)? {
        return Ok(text);
    }
    let wide = output == Output::Wide;
    let mut out = String::new();
    pools_table(d, wide, &mut out)?;
    writeln!(out)?;
    if let Some(plan) = &doc.plan {
        plan_text(plan, doc.scheduler_cost.as_ref(), &mut out)?;
        return Ok(out);
    }
    if shown.is_empty() && doc.unobserved.is_empty() {
        writeln!(
            out,
            "No recommendations: no pool is fragmented past the threshold and no node needs evacuating."
        )?;
    } else if shown.is_empty() {
        writeln!(
            out,
            "No recommendations about the components Alfred could observe."
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
    if let Some(cost) = &doc.scheduler_cost {
        writeln!(out)?;
        scheduler_cost_text(cost, &mut out)?;
    }
    if !d.nodes.is_empty() {
        writeln!(out)?;
        nodes_table(d, &mut out)?;
    }
    cordons_text(&d.cordons, &mut out)?;
    unobserved_text(&doc.unobserved, &mut out)?;
    Ok(out)
}

fn cordons_text(cordons: &[decision::MaintenanceCordon], out: &mut String) -> Result<()> {
    if cordons.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nMaintenance cordons (`kubectl alfred migrate --enable-maintenance-cordon` cordons these; Alfred never uncordons):"
    )?;
    for c in cordons {
        writeln!(
            out,
            "  {} would be cordoned: maintenance trigger {:?} asks for it",
            c.node, c.rule
        )?;
    }
    Ok(())
}

/// One line a component Alfred could not observe, the first few; the rest as a count.
fn unobserved_text(unobserved: &[Unobserved], out: &mut String) -> Result<()> {
    const SHOWN: usize = 10;
    if unobserved.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nNot observed, so Alfred abstains from them (OMENativeObservationInvalid):"
    )?;
    for u in unobserved.iter().take(SHOWN) {
        writeln!(out, "  {}: {}", u.component, u.problem)?;
    }
    if unobserved.len() > SHOWN {
        writeln!(
            out,
            "  and {} more; `kubectl alfred explain NAMESPACE/NAME` tells each, `-o json` lists all",
            unobserved.len() - SHOWN
        )?;
    }
    Ok(())
}
