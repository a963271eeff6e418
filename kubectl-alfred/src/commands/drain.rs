//! `kubectl alfred drain`: the joint plan that empties nodes of OME Instances.

use std::fmt::Write as _;

use alfred::decision::drain::{DrainOptions, DrainReport, drain};
use alfred::solver::ToFreeFormula;
use anyhow::{Result, anyhow, bail};
use clap::{Args, ValueEnum};

use crate::{GlobalArgs, render, source};

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

pub async fn run(args: &DrainArgs, global: &GlobalArgs) -> Result<()> {
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
