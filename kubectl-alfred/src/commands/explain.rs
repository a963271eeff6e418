//! `kubectl alfred explain`: one Instance's checks, each with its verdict, and what the pass
//! recommends about it.

use std::fmt::Write as _;

use alfred::decision::decide;
use alfred::decision::explain::{Explanation, Selector, explain};
use anyhow::{Result, anyhow};
use clap::Args;

use crate::{GlobalArgs, render, source};

#[derive(Args)]
pub struct ExplainArgs {
    /// NAMESPACE/NAME[/COMPONENT[/INSTANCE]]
    pub target: String,
}

pub async fn run(args: &ExplainArgs, global: &GlobalArgs) -> Result<()> {
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
        // A component without Instances is explained whole.
        let which = match e.instance {
            i if i < 0 => " (the whole component)".to_string(),
            i => format!("/{i}"),
        };
        writeln!(
            out,
            "{}/{}{which}: {}, {} GPUs on {}{}",
            e.workload,
            e.component,
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
        for c in &e.cordons {
            writeln!(
                out,
                "  its node {} would be cordoned: maintenance trigger {:?} asks for it (`kubectl alfred migrate --enable-maintenance-cordon` does it; Alfred never uncordons)",
                c.node, c.rule
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
