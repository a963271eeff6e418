//! `kubectl alfred rollout plan|status`: what an OMENative rollout will do, and why it stopped.

use std::fmt::Write as _;

use alfred::api::component::ComponentKind;
use alfred::rollout::report::{RolloutReport, report};
use alfred::rollout::strategy::Sourced;
use alfred::rollout::{Change, classify_change};
use alfred::snapshot::Snapshot;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{GlobalArgs, render, source};

#[derive(Subcommand)]
pub enum RolloutCommand {
    /// Before a change: which Instances would move in which wave, by which mechanism, and where
    /// the rollout would stop. Without --image or --change, plans the rest of the current rollout.
    Plan(PlanArgs),
    /// During a rollout: each Instance's state, the rollout hold and what to do about it.
    Status(TargetArgs),
}

#[derive(Args)]
pub struct TargetArgs {
    /// The InferenceService, as NAMESPACE/NAME.
    pub workload: String,
    /// engine, decoder or router.
    #[arg(long, default_value = "engine")]
    pub component: String,
}

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Plan a new image for a container (an image-only change): CONTAINER=IMAGE.
    #[arg(long, value_name = "CONTAINER=IMAGE", conflicts_with = "change")]
    pub image: Option<String>,
    /// Plan the InferenceService as edited in FILE (compared with the one in the cluster).
    #[arg(long, value_name = "FILE")]
    pub change: Option<String>,
}

fn component(text: &str) -> Result<ComponentKind> {
    ComponentKind::parse(text)
        .ok_or_else(|| anyhow!("--component {text:?}: use engine, decoder or router"))
}

pub async fn run(command: &RolloutCommand, global: &GlobalArgs) -> Result<()> {
    let input = source::load(global).await?;
    let (target, planned) = match command {
        RolloutCommand::Status(t) => (t, Planned::CurrentRollout),
        RolloutCommand::Plan(p) => (&p.target, planned_change(p, &input.snapshot)?),
    };
    let kind = component(&target.component)?;
    let change = match planned {
        Planned::CurrentRollout => None,
        Planned::Change(c) => Some(c),
        Planned::NoTemplateChange => {
            return render::emit(&format!(
                "The change leaves the {kind} pod template as it is: it starts no rollout (a strategy edit applies to Instances that start after it).\n"
            ));
        }
    };
    let ctx = input.context();
    let r = report(&ctx, &target.workload, Some(kind), change).map_err(|e| anyhow!(e))?;
    if let Some(text) = render::structured(&r, global.output)? {
        return render::emit(&text);
    }
    render::emit(&match command {
        RolloutCommand::Plan(_) => plan_text(&r)?,
        RolloutCommand::Status(_) => status_text(&r)?,
    })
}

/// What a plan is for.
enum Planned {
    /// No --image or --change: the rest of the rollout under way.
    CurrentRollout,
    /// The edit leaves the pod template alone.
    NoTemplateChange,
    Change(Change),
}

fn planned_change(p: &PlanArgs, snapshot: &Snapshot) -> Result<Planned> {
    if let Some(image) = &p.image {
        let Some((container, _)) = image.split_once('=') else {
            bail!("--image {image:?}: give CONTAINER=IMAGE");
        };
        return image_change(p, snapshot, container).map(Planned::Change);
    }
    let Some(path) = &p.change else {
        return Ok(Planned::CurrentRollout);
    };
    let kind = component(&p.target.component)?;
    let text = source::read_text(path, "changed InferenceService")?;
    let edited = Snapshot::parse(&text).map_err(|e| anyhow!("{path}: {e}"))?;
    let (namespace, name) = p
        .target
        .workload
        .split_once('/')
        .context("give the InferenceService as NAMESPACE/NAME")?;
    let find = |s: &Snapshot| {
        s.inference_services
            .iter()
            .find(|i| {
                i.metadata.name.as_deref() == Some(name)
                    && i.metadata.namespace.as_deref().unwrap_or(namespace) == namespace
            })
            .cloned()
    };
    let new = find(&edited)
        .ok_or_else(|| anyhow!("{path} holds no InferenceService {namespace}/{name}"))?;
    let old = find(snapshot)
        .ok_or_else(|| anyhow!("InferenceService {namespace}/{name} is not in the cluster"))?;
    let (Some(old), Some(new)) = (old.spec.component(kind), new.spec.component(kind)) else {
        bail!("{namespace}/{name} has no {kind} component in both the cluster and {path}");
    };
    Ok(classify_change(old, new).map_or(Planned::NoTemplateChange, Planned::Change))
}

/// What a new image for `container` changes, judged from the component's running pods: an
/// app container's image is an images-only change, an init container's is not (OME recreates
/// then), and a name no pod has is an error listing the real ones.
fn image_change(p: &PlanArgs, snapshot: &Snapshot, container: &str) -> Result<Change> {
    let kind = component(&p.target.component)?;
    let (namespace, name) = p
        .target
        .workload
        .split_once('/')
        .context("give the InferenceService as NAMESPACE/NAME")?;
    let pods: Vec<_> = snapshot
        .pods
        .iter()
        .filter(|pod| {
            pod.metadata.namespace == namespace
                && pod.metadata.label(alfred::api::keys::LABEL_ISVC) == Some(name)
                && pod.metadata.label(alfred::api::keys::LABEL_COMPONENT) == Some(kind.as_str())
        })
        .collect();
    // Without pods to look at, trust the name given.
    if pods.is_empty() {
        return Ok(Change::ImagesOnly);
    }
    let named = |list: &[alfred::api::core::Container]| list.iter().any(|c| c.name == container);
    if pods.iter().any(|pod| named(&pod.spec.containers)) {
        return Ok(Change::ImagesOnly);
    }
    if pods.iter().any(|pod| named(&pod.spec.init_containers)) {
        return Ok(Change::Other);
    }
    let mut names: Vec<&str> = pods
        .iter()
        .flat_map(|pod| pod.spec.containers.iter().chain(&pod.spec.init_containers))
        .map(|c| c.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    bail!(
        "--image {container}=...: the {kind} pods of {namespace}/{name} have no container {container:?}; their containers are: {}",
        names.join(", ")
    )
}

fn budget_text(b: &Option<Sourced<IntOrString>>) -> String {
    match b {
        None => "unset".into(),
        Some(s) => {
            let v = match &s.value {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(t) => t.clone(),
            };
            format!("{v} ({})", s.source.as_str())
        }
    }
}

fn header(r: &RolloutReport, out: &mut String) -> Result<()> {
    let s = &r.strategy;
    writeln!(
        out,
        "{} of {}: {} Instance(s) of {} pod(s), {} ({})",
        r.component,
        r.workload,
        r.desired_instances,
        r.pods_per_instance,
        s.type_.value.as_str(),
        s.type_.source.as_str()
    )?;
    writeln!(
        out,
        "  maxSurge {}, maxUnavailable {}; {} reads {}: {}",
        budget_text(&s.max_surge),
        budget_text(&s.max_unavailable),
        s.type_.value.as_str(),
        s.arm().field(),
        match r.budget {
            Some(b) => format!("{b} Instance(s) at a time"),
            None => "no cap: every Instance may move at once".into(),
        }
    )?;
    if let Some(p) = &s.partition {
        writeln!(out, "  partition {} ({})", p.value, p.source.as_str())?;
    }
    if let Some(runtime) = &r.runtime {
        writeln!(out, "  runtime: {runtime}")?;
    }
    writeln!(out, "  operator defaults: {}", r.operator_defaults)?;
    writeln!(
        out,
        "  revisions: {} -> {}",
        r.current_revision.as_deref().unwrap_or("-"),
        r.target_revision
    )?;
    Ok(())
}

fn plan_text(r: &RolloutReport) -> Result<String> {
    let mut out = String::new();
    header(r, &mut out)?;
    writeln!(out)?;
    if !r.in_flight.is_empty() {
        writeln!(
            out,
            "In flight: Instance(s) {}",
            alfred::rollout::indices(&r.in_flight)
        )?;
    }
    for (i, wave) in r.waves.iter().enumerate() {
        let starts: Vec<String> = wave
            .iter()
            .map(|w| format!("{} ({})", w.index, w.mechanism))
            .collect();
        writeln!(out, "Wave {}: Instance(s) {}", i + 1, starts.join(", "))?;
    }
    if r.waves.is_empty() && r.in_flight.is_empty() {
        writeln!(out, "No Instance would move.")?;
    }
    for refusal in &r.refused {
        writeln!(out, "Refused: {refusal}")?;
    }
    match &r.stops {
        Some(reason) => writeln!(out, "Stops: {reason}")?,
        None if !r.waves.is_empty() => writeln!(out, "Every Instance reaches the target.")?,
        None => {}
    }
    if let Some(surge) = &r.surge {
        for (index, why) in &surge.pending {
            writeln!(
                out,
                "Surge: the extra pods of Instance {index} would stay Pending ({why}): free capacity, or use RecreatePod"
            )?;
        }
        if !surge.placed.is_empty() {
            let landings: Vec<String> = surge
                .placed
                .iter()
                .map(|(index, _, node)| format!("{index} -> {node}"))
                .collect();
            writeln!(
                out,
                "Surge: the first wave's extra pods would land on (Instance -> node): {}",
                landings.join(", ")
            )?;
        }
    }
    Ok(out)
}

fn status_text(r: &RolloutReport) -> Result<String> {
    let mut out = String::new();
    header(r, &mut out)?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = r
        .instances
        .iter()
        .map(|i| {
            vec![
                i.index.to_string(),
                i.phase.clone(),
                i.running_revision.clone(),
                i.step.clone(),
                i.serving.clone(),
                i.nodes.join(","),
            ]
        })
        .collect();
    render::columns(
        &mut out,
        &["INDEX", "PHASE", "RUNNING", "OPERATION", "SERVING", "NODES"],
        &rows,
    );
    writeln!(out)?;
    match &r.hold {
        Some(h) => {
            writeln!(out, "Rollout hold: gate {:?}: {}", h.gate, h.reason)?;
            if let Some(since) = &h.since {
                writeln!(out, "  since {}", since.0)?;
            }
            if let Some(advice) = &r.advice {
                writeln!(out, "  what to do: {advice}")?;
            }
        }
        None => writeln!(out, "No rollout hold.")?,
    }
    for b in &r.retry_blocks {
        writeln!(
            out,
            "Retry block on {}: {:?} after {} attempt(s){}",
            b.target_revision,
            b.state,
            b.attempts_started,
            b.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )?;
    }
    for lost in &r.in_place_lost {
        writeln!(out, "InPlaceUpdateNotPossible: {lost}")?;
    }
    for held in &r.retry_held {
        writeln!(out, "RetryHeld: {held}")?;
    }
    if !r.repairs.is_empty() {
        writeln!(
            out,
            "Crash-loop repairs the next pass starts: Instance(s) {}",
            alfred::rollout::indices(&r.repairs)
        )?;
    }
    for held in &r.repairs_held {
        writeln!(out, "RepairHeld: {held}")?;
    }
    if let Some(staged) = &r.staged {
        writeln!(out, "{staged}")?;
    }
    writeln!(
        out,
        "Revisions kept: the live ones and {}",
        match r.revision_history_limit {
            Some(n) => format!("the {n} newest others"),
            None => "every other (no limit set)".into(),
        }
    )?;
    if !r.revisions_kept.is_empty() {
        writeln!(out, "  kept: {}", r.revisions_kept.join(", "))?;
        if !r.revisions_pruned.is_empty() {
            writeln!(out, "  pruned: {}", r.revisions_pruned.join(", "))?;
        }
    }
    Ok(out)
}
