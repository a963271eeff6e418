//! `kubectl alfred simulate`: where an Instance's replacement would land right now.

use std::fmt::Write as _;

use alfred::decision::explain::Selector;
use anyhow::{Result, anyhow, bail};
use clap::Args;

use crate::{GlobalArgs, render, source};

#[derive(Args)]
pub struct SimulateArgs {
    /// NAMESPACE/NAME/COMPONENT/INSTANCE
    pub target: String,
    /// A node the replacement may not use (repeatable), e.g. the node it is leaving.
    #[arg(long = "exclude-node", value_name = "NODE")]
    pub exclude: Vec<String>,
}

pub async fn run(args: &SimulateArgs, global: &GlobalArgs) -> Result<()> {
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
