//! `kubectl alfred explain` and `kubectl alfred drain`: one Instance's checks, and the joint plan
//! that empties nodes.

use std::fmt::Write as _;

use alfred::decision::decide;
use alfred::decision::drain::{DrainOptions, DrainReport, drain};
use alfred::decision::explain::{Explanation, Selector, explain};
use alfred::solver::ToFreeFormula;
use anyhow::{Result, anyhow, bail};
use clap::{Args, ValueEnum};

use crate::{GlobalArgs, render, source};

#[derive(Args)]
pub struct ExplainArgs {
    /// NAMESPACE/NAME[/COMPONENT[/INSTANCE]]
    pub target: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dimension {
    /// Empty the nodes' GPUs.
    Gpu,
    /// Empty the nodes' pod count.
    Pods,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Formula {
    /// Leave as few GPUs (or pods) on the nodes as room allows.
    Total,
    /// Empty as many whole nodes as room allows.
    Occupied,
}

#[derive(Args)]
pub struct DrainArgs {
    /// The nodes to empty of OME Instances.
    #[arg(required = true, value_name = "NODE")]
    pub nodes: Vec<String>,
    /// What "empty" measures.
    #[arg(long, value_enum, default_value_t = Dimension::Gpu)]
    pub dimension: Dimension,
    /// Plan emptying as a goal rather than a requirement: when there is not room for every
    /// Instance, the plan still says how far it gets.
    #[arg(long)]
    pub goal: bool,
    /// With --goal: `total` leaves the least on the nodes, `occupied` empties the most nodes.
    #[arg(long, value_enum, requires = "goal", default_value_t = Formula::Total)]
    pub formula: Formula,
}

pub async fn run_explain(args: &ExplainArgs, global: &GlobalArgs) -> Result<()> {
    let selector = Selector::parse(&args.target).map_err(|e| anyhow!(e))?;
    let input = source::load(global).await?;
    let ctx = input.context();
    let decision = decide(&ctx);
    let explanations = explain(&ctx, &decision, &selector).map_err(|e| anyhow!(e))?;
    match render::structured(&explanations, global.output)? {
        Some(text) => render::emit(&text),
        None => render::emit(&explain_text(&explanations)?),
    }
}

fn explain_text(explanations: &[Explanation]) -> Result<String> {
    let mut out = String::new();
    for (k, e) in explanations.iter().enumerate() {
        if k > 0 {
            writeln!(out)?;
        }
        let on: Vec<String> = e
            .nodes
            .iter()
            .map(|n| format!("{} ({} GPUs)", n.node, n.gpus))
            .collect();
        writeln!(
            out,
            "{}/{}/{}: {}, {} GPUs on {}{}",
            e.workload,
            e.component,
            e.instance,
            e.mode,
            e.gpus,
            if on.is_empty() {
                "no node".to_string()
            } else {
                on.join(", ")
            },
            e.pool
                .as_ref()
                .map_or(String::new(), |p| format!(", pool {p}"))
        )?;
        let lines: Vec<Vec<String>> = e
            .checks
            .iter()
            .map(|c| {
                vec![
                    c.check.to_string(),
                    if c.passed {
                        "pass".into()
                    } else {
                        "FAIL".into()
                    },
                    match c.reason {
                        Some(r) => format!("{}: {}", r.as_str(), c.detail),
                        None => c.detail.clone(),
                    },
                ]
            })
            .collect();
        let mut table = String::new();
        render::columns(&mut table, &["CHECK", "VERDICT", "DETAIL"], &lines);
        for line in table.lines() {
            writeln!(out, "  {line}")?;
        }
        if !e.targets.is_empty() {
            let t: Vec<String> = e
                .targets
                .iter()
                .map(|t| format!("{} ({} free)", t.node, t.free_gpus))
                .collect();
            writeln!(out, "  best targets, fullest first: {}", t.join(", "))?;
        }
        if let Some(sim) = &e.scheduling {
            let placed: Vec<String> = sim.placements.iter().map(|p| p.node.clone()).collect();
            writeln!(
                out,
                "  scheduler (off its current node): {:?}/{}{}",
                sim.status,
                sim.reason,
                if placed.is_empty() {
                    format!(": {}", sim.message)
                } else {
                    format!(", on {}", placed.join(", "))
                }
            )?;
        }
        if e.recommendations.is_empty() {
            writeln!(
                out,
                "  this pass recommends nothing about it (its pool is not fragmented past the threshold and its nodes are healthy)"
            )?;
        }
        for r in &e.recommendations {
            writeln!(
                out,
                "  recommendation: {} {:?}, {}{}",
                r.policy.as_str(),
                r.reason,
                r.advisory_reason.map_or("executable", |a| a.as_str()),
                if r.hint_targets.is_empty() {
                    String::new()
                } else {
                    format!(", to {}", r.hint_targets.join(", "))
                }
            )?;
        }
    }
    Ok(out)
}

pub async fn run_drain(args: &DrainArgs, global: &GlobalArgs) -> Result<()> {
    let input = source::load(global).await?;
    let ctx = input.context();
    let options = DrainOptions {
        nodes: args.nodes.clone(),
        count_pods: args.dimension == Dimension::Pods,
        goal: args.goal.then_some(match args.formula {
            Formula::Total => ToFreeFormula::MinimizeTotalUtilization,
            Formula::Occupied => ToFreeFormula::MinimizeOccupiedContainers,
        }),
    };
    let report = drain(&ctx, &options).map_err(|e| anyhow!(e))?;
    match render::structured(&report, global.output)? {
        Some(text) => render::emit(&text)?,
        None => render::emit(&drain_text(
            &report,
            input.config.migration_api_available(),
        )?)?,
    }
    // One rule for every format: scripts read the exit code, the report stays on stdout.
    if !report.complete {
        bail!("not every node can be emptied of OME Instances (see the report)");
    }
    Ok(())
}

fn drain_text(r: &DrainReport, api_available: bool) -> Result<String> {
    let mut out = String::new();
    if r.moves.is_empty() {
        writeln!(out, "No OME Instances with GPUs on these nodes.")?;
    } else {
        let lines: Vec<Vec<String>> = r
            .moves
            .iter()
            .map(|m| {
                vec![
                    m.workload.clone(),
                    m.component.to_string(),
                    m.instance.to_string(),
                    m.gpus.to_string(),
                    m.from.join(","),
                    if m.placements.is_empty() {
                        "-".into()
                    } else {
                        m.placements
                            .iter()
                            .map(|p| p.node.as_str())
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    match m.reason {
                        Some(reason) => format!("{}: {}", reason.as_str(), m.detail),
                        None => m.detail.clone(),
                    },
                ]
            })
            .collect();
        render::columns(
            &mut out,
            &[
                "WORKLOAD",
                "COMPONENT",
                "INSTANCE",
                "GPUS",
                "FROM",
                "TO",
                "PLAN",
            ],
            &lines,
        );
    }
    writeln!(out)?;
    for n in &r.nodes {
        let mut line = if n.emptied {
            format!(
                "{}: empties of OME Instances ({} to move)",
                n.node, n.instances
            )
        } else {
            format!(
                "{}: cannot be emptied: {} of its {} OME Instances stay",
                n.node, n.staying, n.instances
            )
        };
        if !n.other_gpu_pods.is_empty() {
            write!(
                line,
                "; GPU pods that are not OME's stay too: {}",
                n.other_gpu_pods.join(", ")
            )?;
        }
        writeln!(out, "{line}")?;
    }
    if !api_available && r.moves.iter().any(|m| !m.placements.is_empty()) {
        writeln!(
            out,
            "\nThe moves run through OME's migration API, which this configuration does not enable yet (migration.apiVersion v1)."
        )?;
    }
    Ok(out)
}

#[derive(Args)]
pub struct SimulateArgs {
    /// NAMESPACE/NAME/COMPONENT/INSTANCE
    pub target: String,
    /// A node the replacement may not use (repeatable), e.g. the node it is leaving.
    #[arg(long = "exclude-node", value_name = "NODE")]
    pub exclude: Vec<String>,
}

pub async fn run_simulate(args: &SimulateArgs, global: &GlobalArgs) -> Result<()> {
    use alfred::simulate::{Ledger, Status, instance_pods, simulate};
    let selector = Selector::parse(&args.target).map_err(|e| anyhow!(e))?;
    let (Some(kind), Some(index)) = (selector.component, selector.instance) else {
        bail!(
            "simulate needs one Instance: NAMESPACE/NAME/COMPONENT/INSTANCE, such as chat/llama/engine/0"
        );
    };
    let input = source::load(global).await?;
    let ctx = input.context();
    let cluster = &ctx.cluster;
    if cluster.workload(&selector.workload).is_none() {
        bail!("no InferenceService {} in the cluster", selector.workload);
    }
    let instance = cluster
        .instance_of(&selector.workload, kind, index)
        .ok_or_else(|| anyhow!("{} has no {kind} Instance {index}", selector.workload))?;
    let mut exclude = Vec::new();
    for name in &args.exclude {
        exclude.push(
            cluster
                .node_index(name)
                .ok_or_else(|| anyhow!("--exclude-node {name}: no such node"))?,
        );
    }
    let outcome = simulate(
        &ctx,
        &Ledger::new(cluster),
        &instance_pods(cluster, instance),
        &exclude,
    );
    if let Some(text) = render::structured(&outcome, global.output)? {
        return render::emit(&text);
    }
    let mut out = String::new();
    writeln!(
        out,
        "{}: {:?}/{}",
        args.target, outcome.status, outcome.reason
    )?;
    if let Some(p) = &outcome.profile {
        writeln!(
            out,
            "profile: scheduler {} ({} {}, {})",
            p.scheduler_name, p.backend, p.scheduler_version, p.configuration_id
        )?;
    }
    for p in &outcome.placements {
        writeln!(out, "  {} -> {}", p.pod, p.node)?;
    }
    if !outcome.message.is_empty() {
        writeln!(out, "{}", outcome.message)?;
    }
    if outcome.status == Status::Infeasible && global.output == crate::Output::Wide {
        for (why, nodes) in &outcome.rejections {
            writeln!(out, "  {why}: {}", nodes.join(", "))?;
        }
    }
    render::emit(&out)
}
