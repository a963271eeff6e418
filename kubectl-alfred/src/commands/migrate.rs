//! `kubectl alfred migrate`: one execute pass (one safe move at most, journaled before it is
//! sent), or one every `decisionLoopInterval` with `--watch`, which outlives failed passes. The decisions are in
//! `alfred::execute`; this reads and writes the cluster for them.

use std::fmt::Write as _;

use alfred::config::{Config, EarlyTick, OperatingMode};
use alfred::execute::dispatch::PASS_DEADLINE;
use alfred::execute::run::{self, Options};
use alfred::migration;
use alfred::model::health::NodeSignals;
use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::render::{self, Reasoned};
use crate::store::PassStore;
use crate::{GlobalArgs, Output, failure};

#[derive(Args, Clone, Default)]
pub struct MigrateArgs {
    /// Run every check and print the request that would be sent; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run a pass every `decisionLoopInterval` until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// In execute mode, cordon each node that a maintenance trigger with `cordon: true` puts
    /// under maintenance (re-read first; annotated and recorded; never uncordoned).
    #[arg(long)]
    pub enable_maintenance_cordon: bool,
}

pub async fn run(args: &MigrateArgs, global: &GlobalArgs) -> Result<()> {
    if global.file.is_some() && !args.dry_run {
        bail!("migrate writes to the cluster; with -f it only runs with --dry-run");
    }
    if global.now.is_some() && !args.dry_run {
        bail!("--now replays a time; a real pass runs at the present: drop --now or add --dry-run");
    }
    // Registered before the first pass, so an interrupt during a pass is kept and ends the
    // watch after it (a pass is never cut between its writes).
    #[cfg(unix)]
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("listening for interrupts")?;
    let mut interval = Config::default().decision_loop_interval.unsigned_abs();
    let mut failures = 0u32;
    let mut recorder = crate::events::Recorder::default();
    loop {
        // The whole pass, its reads and writes included, within the deadline; what a cut-off
        // pass wrote is reconciled by the next.
        let pass = tokio::time::timeout(PASS_DEADLINE.unsigned_abs(), one_pass(args, global, &mut recorder))
            .await
            .unwrap_or_else(|_| {
                Err(anyhow!(
                    "DispatchDeadline: the pass took longer than {} s; anything written is reconciled by the next pass",
                    PASS_DEADLINE.as_secs()
                ))
            });
        // The wait, and the configuration of the pass that ran, for the early ticks.
        let (wait, ran) = match pass {
            Ok(_) if !args.watch => return Ok(()),
            Ok(config) => {
                failures = 0;
                interval = config.decision_loop_interval.unsigned_abs();
                (interval, Some(config))
            }
            Err(e) if !args.watch => return Err(e),
            Err(e) if failure::lasting(&e) => {
                return Err(e.context("another pass cannot fix this, so the watch stops"));
            }
            Err(e) => {
                failures += 1;
                let wait = failure_backoff(failures, interval);
                eprintln!(
                    "pass failed: {}; the next pass starts in {} s",
                    failure::describe(&e),
                    wait.as_secs()
                );
                (wait, None)
            }
        };
        #[cfg(unix)]
        let interrupted = interrupt.recv();
        #[cfg(not(unix))]
        let interrupted = tokio::signal::ctrl_c();
        tokio::select! {
            tick = wait_for_next_pass(wait, ran.as_ref(), global) => {
                if let Some((tick, node)) = tick {
                    eprintln!("early pass: {tick:?} on node {node}");
                }
            }
            _ = interrupted => return Ok(()),
        }
    }
}

/// Waits `wait`, or less when an `earlyTickOn` event happens first: every
/// `observationLoopInterval` the nodes are read again and compared with their state when the
/// wait began. Only after a pass that ran, and only on a live cluster.
async fn wait_for_next_pass(
    wait: std::time::Duration,
    config: Option<&Config>,
    global: &GlobalArgs,
) -> Option<(EarlyTick, String)> {
    let deadline = tokio::time::Instant::now() + wait;
    let config = config.filter(|c| !c.early_tick_on.is_empty() && global.file.is_none());
    let Some(config) = config else {
        tokio::time::sleep_until(deadline).await;
        return None;
    };
    let every = config.observation_loop_interval.unsigned_abs();
    let observe = async || {
        let client = crate::live::client(global).await.ok()?;
        let nodes = crate::live::read_nodes(&client, global).await.ok()?;
        Some(NodeSignals::observe(&nodes, config, Timestamp::now()))
    };
    let mut before = observe().await;
    loop {
        let next = (tokio::time::Instant::now() + every).min(deadline);
        tokio::time::sleep_until(next).await;
        if next >= deadline {
            return None;
        }
        // A read that fails leaves the comparison to the next one.
        let Some(now) = observe().await else { continue };
        match &before {
            Some(b) => {
                if let Some(change) = b.changed(&now, &config.early_tick_on) {
                    return Some(change);
                }
            }
            None => before = Some(now),
        }
    }
}

/// The wait after the `failures`-th failed pass in a row: 1 s, doubling while the API keeps
/// failing, never longer than the loop's interval.
pub fn failure_backoff(failures: u32, interval: std::time::Duration) -> std::time::Duration {
    let doubled = std::time::Duration::from_secs(1u64 << failures.saturating_sub(1).min(16));
    doubled.min(interval)
}

/// One pass: read, decide, send at most one request, record; the configuration it ran with.
async fn one_pass(
    args: &MigrateArgs,
    global: &GlobalArgs,
    recorder: &mut crate::events::Recorder,
) -> Result<Config> {
    let (mut store, config) = PassStore::open(global).await?;
    pass_on(
        &mut store,
        &config,
        args,
        Shown::Full(global.output),
        recorder,
    )
    .await?;
    Ok(config)
}

/// What a pass did, for whoever counts it (the caretaker's metrics).
pub struct PassDone {
    pub report: run::Report,
    pub rows: Vec<alfred::decision::Row>,
    /// Node events recorded with the pass's node records.
    pub node_events: Vec<alfred::decision::record::NodeEvent>,
}

/// The pass on an open store, and what follows it: the report printed, then (unless a dry
/// run, and only while this process may write) cordons, holds, events and the record.
/// How a pass is printed: in full, or one line (a caretaker's log, pass after pass).
#[derive(Clone, Copy)]
pub enum Shown {
    Full(Output),
    Line,
}

pub async fn pass_on(
    store: &mut PassStore,
    config: &Config,
    args: &MigrateArgs,
    shown: Shown,
    recorder: &mut crate::events::Recorder,
) -> Result<PassDone> {
    let options = Options {
        dry_run: args.dry_run,
    };
    let report = run::run_pass(store, config, options).await?;
    let rows = report.rows();
    match shown {
        Shown::Full(output) => render::emit(&render_report(&report, output)?)?,
        Shown::Line => render::emit(&pass_line(&report, &rows))?,
    }
    let mut done = PassDone {
        report,
        rows,
        node_events: Vec::new(),
    };
    // What may be written after the pass, and else why not.
    let (writing, unwritten) = match store.client() {
        Some(client) if !args.dry_run => match store.may_write().await {
            Ok(()) => (Some(client), ""),
            Err(e) => {
                eprintln!("note: nothing written after the pass: {e}");
                (None, "not the leader")
            }
        },
        _ => (None, "dry run"),
    };
    let report = &done.report;
    let execute = config.mode == OperatingMode::Execute;
    let cordons = &report.plan.decision.cordons;
    if args.enable_maintenance_cordon && !cordons.is_empty() {
        match writing {
            Some(client) if execute => {
                crate::cordon::cordon_for_maintenance(client, config, cordons).await;
            }
            Some(_) => eprintln!(
                "note: {} node(s) not cordoned: maintenance cordons are written only in execute mode",
                cordons.len()
            ),
            None => {
                for c in cordons {
                    eprintln!(
                        "{unwritten}: would cordon node {} for maintenance trigger {:?}",
                        c.node, c.rule
                    );
                }
            }
        }
    }
    let holds = &report.plan.decision.holds;
    match writing {
        Some(client) if execute => crate::hold::apply(client, holds).await,
        _ => {
            let why = match writing {
                None => unwritten,
                Some(_) => "holds are written only in execute mode",
            };
            for h in holds {
                eprintln!("note: not written ({why}): {}", h.message);
            }
        }
    }
    if let Some(client) = writing {
        let events = alfred::execute::events::workload_events(
            &done.rows,
            &report.plan.decision.recommendations,
        );
        recorder.record_workloads(client, events).await;
        let namespace = store.alfred_namespace();
        done.node_events = record_pass(client, namespace, config, report, &done.rows).await;
    }
    Ok(done)
}

/// Writes the pass into the recommendations ConfigMap (rows and node records, whose episode
/// stamps make node events fire once): the node events recorded. A missing ConfigMap only
/// disables the record.
async fn record_pass(
    client: &kube::Client,
    namespace: Option<&str>,
    config: &Config,
    report: &run::Report,
    rows: &[alfred::decision::Row],
) -> Vec<alfred::decision::record::NodeEvent> {
    if !config.recommendations_config_map_enabled {
        return Vec::new();
    }
    let pass = crate::record::Pass {
        rows,
        nodes: &report.plan.decision.nodes,
        mode: "execute",
    };
    let now = Timestamp::now();
    match crate::record::record(client, namespace, config, &pass, now).await {
        Ok(recorded) => recorded.node_events,
        Err(e) => {
            eprintln!(
                "note: recommendations not recorded: {}",
                crate::failure::describe(&e)
            );
            Vec::new()
        }
    }
}

/// One line for a pass: its rows by outcome, and the request sent or why none was.
fn pass_line(report: &run::Report, rows: &[alfred::decision::Row]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in rows {
        *counts.entry(r.outcome.as_str()).or_default() += 1;
    }
    let counted: Vec<String> = counts.iter().map(|(o, n)| format!("{n} {o}")).collect();
    let what = match (&report.sent, &report.withheld) {
        (Some((_, e)), _) => format!(
            "Submitted request {} on InferenceService {}",
            e.uuid, e.workload
        ),
        (None, Some(w)) => format!("nothing sent: {} ({})", w.reason.as_str(), w.detail),
        (None, None) => "nothing sent".to_string(),
    };
    format!(
        "pass: {} rows ({}); {what}\n",
        rows.len(),
        counted.join(", ")
    )
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PassOutput<'a> {
    mode: &'static str,
    dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    withheld: Option<Reasoned>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request: Option<RequestOutput<'a>>,
    recommendations: Vec<alfred::decision::Row>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    details: Vec<Reasoned>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestOutput<'a> {
    uuid: &'a str,
    workload: String,
    annotation: String,
    payload: &'a str,
    sent: bool,
}

fn render_report(report: &run::Report, output: Output) -> Result<String> {
    let rows = report.rows();
    let request = report.sent.as_ref().map(|(_, e)| RequestOutput {
        uuid: &e.uuid,
        workload: e.workload.to_string(),
        annotation: migration::annotation_key(&e.uuid),
        payload: &e.payload,
        sent: !report.dry_run,
    });
    let details: Vec<Reasoned> = report
        .per_move
        .iter()
        .map(|(i, w)| {
            let r = &report.plan.decision.recommendations[*i].row;
            Reasoned {
                reason: w.reason.as_str().into(),
                detail: format!(
                    "{}/{} instance {}: {}",
                    r.workload, r.component, r.instance, w.detail
                ),
            }
        })
        .chain(report.plan.verdicts.iter().filter_map(|v| {
            let rejection = v.result.as_ref().err()?;
            let r = &report.plan.decision.recommendations[v.recommendation].row;
            Some(Reasoned {
                reason: rejection.reason.as_str().into(),
                detail: format!(
                    "{}/{} instance {}: {}",
                    r.workload, r.component, r.instance, rejection.detail
                ),
            })
        }))
        .collect();
    let withheld = report.withheld.as_ref().map(Reasoned::from);
    let out = PassOutput {
        mode: "execute",
        dry_run: report.dry_run,
        withheld,
        request,
        recommendations: rows,
        details,
    };
    if let Some(text) = render::structured(&out, output)? {
        return Ok(text);
    }
    let mut text = String::new();
    let lines: Vec<Vec<String>> = out
        .recommendations
        .iter()
        .map(|r| {
            let mut line = render::row_cells(r);
            line.extend([
                if report.dry_run && r.outcome == alfred::decision::RowOutcome::Submitted {
                    "would-submit".into()
                } else {
                    r.outcome.as_str().into()
                },
                r.why().unwrap_or("-").into(),
                render::or_dash(&r.from_node),
                render::or_dash(&r.target),
            ]);
            if output == Output::Wide {
                line.push(format!("{:.3}", r.score));
                line.push(render::or_dash(
                    r.request_uuid.as_deref().unwrap_or_default(),
                ));
            }
            line
        })
        .collect();
    let mut headers = render::ROW_HEADERS.to_vec();
    headers.extend(["OUTCOME", "WHY", "FROM", "TARGET"]);
    if output == Output::Wide {
        headers.extend(["SCORE", "REQUEST"]);
    }
    if lines.is_empty() {
        writeln!(text, "No recommendations this pass.")?;
    } else {
        render::columns(&mut text, &headers, &lines);
    }
    if let Some(w) = &out.withheld {
        writeln!(
            text,
            "\nNothing is sent this pass: {} ({})",
            w.reason, w.detail
        )?;
    }
    for d in &out.details {
        writeln!(text, "  {}: {}", d.reason, d.detail)?;
    }
    match &out.request {
        Some(r) if r.sent => writeln!(
            text,
            "\nSubmitted request {} on InferenceService {}:\n  {}: {}",
            r.uuid, r.workload, r.annotation, r.payload
        )?,
        Some(r) => writeln!(
            text,
            "\nDry run: would add to InferenceService {}:\n  {}: {}",
            r.workload, r.annotation, r.payload
        )?,
        None => {}
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::failure_backoff;
    use std::time::Duration;

    #[test]
    fn the_failure_backoff_doubles_up_to_the_interval() {
        let interval = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=6)
            .map(|n| failure_backoff(n, interval).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert_eq!(failure_backoff(200, interval), interval, "no overflow");
    }
}
