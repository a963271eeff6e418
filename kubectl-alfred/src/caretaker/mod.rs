//! `kubectl alfred caretaker`: the execute pass of `migrate --watch`, run from inside the
//! cluster for months. Every replica keeps watch caches of the cluster warm, reloads
//! `alfred-config` when it changes, publishes the cluster gauges and answers probes; the one
//! that holds the Lease runs the passes, and every write of a pass goes through the lease's
//! fence and the journal's optimistic concurrency.

pub mod cache;
pub mod leader;
pub mod metrics;
mod reload;
mod serve;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alfred::config::{CONFIG_MAP_NAME, Config, EarlyTick};
use alfred::decision::gauges::ClusterGauges;
use alfred::execute::dispatch::PASS_DEADLINE;
use alfred::execute::journal::Phase;
use alfred::model::Context;
use alfred::model::health::NodeSignals;
use alfred::reasons::EventReason;
use anyhow::{Context as _, Result};
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::commands::migrate::{self, MigrateArgs, PassDone};
use crate::store::{ClusterStore, PassStore};
use crate::{GlobalArgs, failure, live};

use cache::Caches;
use leader::{Election, Timing};
use metrics::Metrics;
use reload::Settings;

#[derive(Args)]
pub struct CaretakerArgs {
    /// Alfred's namespace: its ConfigMaps (alfred-config, the journal, the recommendations)
    /// and the Lease live here.
    #[arg(long, env = "POD_NAMESPACE", default_value = "ome")]
    pub namespace: String,
    /// This replica's name in the election (the pod's name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Where `/metrics` is served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: SocketAddr,
    /// Run passes only while holding the Lease `alfred.ome.io` (turn off only for a single
    /// replica that nothing else runs beside).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a lease lasts after its last renewal.
    #[arg(long, default_value = "15s", value_parser = seconds)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps writing after its last renewal (less than the lease).
    #[arg(long, default_value = "10s", value_parser = seconds)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader renews.
    #[arg(long, default_value = "2s", value_parser = seconds)]
    pub leader_elect_retry_period: Duration,
    /// Cordon each node a maintenance trigger with `cordon: true` puts under maintenance.
    #[arg(long)]
    pub enable_maintenance_cordon: bool,
}

fn seconds(text: &str) -> Result<Duration, String> {
    let d = alfred::kubernetes::duration::parse_go_duration(text).map_err(|e| e.to_string())?;
    d.try_into()
        .map_err(|_| format!("{text:?} is negative; give a length such as 15s"))
}

/// What every part of the process shares.
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub caches: Arc<Caches>,
    settings: Mutex<Settings>,
    /// When each loop last made progress (monotonic), for liveness.
    decision_beat: Mutex<tokio::time::Instant>,
    observation_beat: Mutex<tokio::time::Instant>,
    /// An `earlyTickOn` change the observation loop saw.
    early_tick: tokio::sync::Notify,
    /// Held while a pass or an observation models the cluster, so that a replica holds one
    /// model at a time (each is 60 MB at 10,000 nodes).
    modelling: tokio::sync::Mutex<()>,
}

impl Shared {
    fn config(&self) -> Config {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .config
            .clone()
    }

    /// Why this replica is not ready, or None: the configuration read and the caches synced.
    pub fn unready(&self) -> Option<String> {
        if !self
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .loaded()
        {
            return Some(format!("ConfigMap {CONFIG_MAP_NAME} not read yet"));
        }
        self.caches
            .unsynced()
            .map(|w| format!("waiting for the caches: {w}"))
    }

    /// Why the process looks wedged, or None: a loop has not made progress within its bound,
    /// its interval plus twice the pass deadline (a slow API server ends passes at the
    /// deadline, which is progress; a loop stuck for longer is restarted).
    pub fn wedged(&self) -> Option<String> {
        let config = self.config();
        let deadline = PASS_DEADLINE.unsigned_abs();
        let beats = [
            (
                "decision",
                &self.decision_beat,
                config.decision_loop_interval,
            ),
            (
                "observation",
                &self.observation_beat,
                config.observation_loop_interval,
            ),
        ];
        beats.into_iter().find_map(|(name, beat, interval)| {
            let bound = interval.unsigned_abs() + 2 * deadline;
            let since = beat.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
            (since > bound).then(|| {
                format!(
                    "the {name} loop made no progress for {} s (bound {} s)",
                    since.as_secs(),
                    bound.as_secs()
                )
            })
        })
    }

    fn beat(beat: &Mutex<tokio::time::Instant>) {
        *beat.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
    }
}

pub async fn run(args: &CaretakerArgs, global: &GlobalArgs) -> Result<()> {
    let timing = Timing {
        lease: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry: args.leader_elect_retry_period,
    };
    timing
        .check()
        .map_err(|e| anyhow::anyhow!("invalid startup configuration: {e}"))?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let metrics = Arc::new(Metrics::new());
    let config = live::config(global).await?;
    let client = kube::client::ClientBuilder::try_from(config)
        .context("creating the Kubernetes client")?
        .with_layer(&serve::CountRequests(Arc::clone(&metrics)))
        .build();
    let caches = Caches::start(&client, &args.namespace);
    let now = tokio::time::Instant::now();
    let shared = Arc::new(Shared {
        metrics,
        caches,
        settings: Mutex::new(Settings::default()),
        decision_beat: Mutex::new(now),
        observation_beat: Mutex::new(now),
        early_tick: tokio::sync::Notify::new(),
        modelling: tokio::sync::Mutex::new(()),
    });
    serve::start(args, &shared).await?;
    tokio::spawn(reload_on_change(
        Arc::clone(&shared),
        client.clone(),
        args.namespace.clone(),
    ));
    tokio::spawn(observe(Arc::clone(&shared)));
    eprintln!(
        "caretaker {identity} in namespace {}: metrics on {}, probes on {}",
        args.namespace, args.metrics_bind_address, args.health_probe_bind_address
    );
    let election = match args.leader_elect {
        true => Some(Election::join(&client, &args.namespace, &identity, timing).await?),
        false => None,
    };
    let outcome = decide(args, global, &shared, &client, &identity, election.as_ref()).await;
    if let Some(election) = election {
        election.resign().await;
    }
    outcome
}

/// The pod's name when the chart sets none: the host name (a pod's is its name).
fn default_identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("alfred-{}", &uuid::Uuid::new_v4().to_string()[..8]))
}

/// The decision loop: a pass every `decisionLoopInterval` (sooner on an early tick) while this
/// replica leads, until SIGTERM or SIGINT, which end it between passes.
async fn decide(
    args: &CaretakerArgs,
    global: &GlobalArgs,
    shared: &Arc<Shared>,
    client: &Client,
    identity: &str,
    election: Option<&Election>,
) -> Result<()> {
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let mut leading = election.map(|e| e.leading.clone());
    let fence = election.map(|e| Arc::clone(&e.fence));
    let mut led = false;
    let mut failures = 0u32;
    let metrics = &shared.metrics;
    let pod = metrics::PodLabel {
        pod: identity.to_string(),
    };
    metrics.leader_status.get_or_create(&pod).set(0);
    let mut wait = Duration::ZERO;
    let mut recorder = crate::events::Recorder::default();
    loop {
        Shared::beat(&shared.decision_beat);
        let leads = leading.as_ref().is_none_or(|l| *l.borrow());
        if leads != led {
            led = leads;
            metrics
                .leader_status
                .get_or_create(&pod)
                .set(i64::from(leads));
            if leads {
                metrics.leader_transitions.inc();
                eprintln!("{identity} leads");
            } else {
                eprintln!("{identity} no longer leads");
            }
        }
        let config = shared.config();
        let interval = config.decision_loop_interval.unsigned_abs();
        if leads && shared.unready().is_none() && wait.is_zero() {
            let (outcome, took) = timed_pass(
                args,
                global,
                shared,
                client,
                fence.clone(),
                &config,
                &mut recorder,
            )
            .await;
            metrics.decision_loop_duration.observe(took.as_secs_f64());
            wait = match outcome {
                Ok(()) => {
                    failures = 0;
                    interval
                }
                Err(e) => {
                    failures += 1;
                    let wait = migrate::failure_backoff(failures, interval);
                    eprintln!(
                        "pass failed: {}; the next pass starts in {} s",
                        failure::describe(&e),
                        wait.as_secs()
                    );
                    wait
                }
            };
            Shared::beat(&shared.decision_beat);
        }
        // Wake at least every few seconds to beat and to notice readiness.
        let nap = if wait.is_zero() { interval } else { wait }.min(Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        let changed = async {
            match leading.as_mut() {
                Some(l) => {
                    if l.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        let stop = terminate.recv();
        #[cfg(not(unix))]
        let stop = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = tokio::time::sleep(nap) => wait = wait.saturating_sub(started.elapsed()),
            _ = shared.early_tick.notified() => {
                eprintln!("early pass: a node's condition or maintenance changed");
                wait = Duration::ZERO;
            }
            _ = changed => wait = Duration::ZERO,
            _ = tokio::signal::ctrl_c() => break,
            _ = stop => break,
        }
    }
    metrics.leader_status.get_or_create(&pod).set(0);
    eprintln!("{identity} stopping");
    Ok(())
}

/// One pass within the deadline, counted: the outcome and how long it took.
async fn timed_pass(
    args: &CaretakerArgs,
    global: &GlobalArgs,
    shared: &Shared,
    client: &Client,
    fence: Option<Arc<leader::Fence>>,
    config: &Config,
    recorder: &mut crate::events::Recorder,
) -> (Result<()>, Duration) {
    let _modelling = shared.modelling.lock().await;
    let started = std::time::Instant::now();
    let metrics = &shared.metrics;
    let store = ClusterStore::cached(client, Arc::clone(&shared.caches), &args.namespace, fence);
    let mut store = PassStore::Cluster(store);
    let migrate_args = MigrateArgs {
        enable_maintenance_cordon: args.enable_maintenance_cordon,
        ..MigrateArgs::default()
    };
    // A table of every row each pass would flood the log: one line, unless asked (`-o json`).
    let shown = match global.output {
        crate::Output::Table | crate::Output::Wide => migrate::Shown::Line,
        structured => migrate::Shown::Full(structured),
    };
    let pass = migrate::pass_on(&mut store, config, &migrate_args, shown, recorder);
    // The pass's own requests, not those the watches make meanwhile.
    let counted = Arc::new(serve::PassRequests::default());
    let pass = serve::PASS_REQUESTS.scope(Arc::clone(&counted), pass);
    let outcome = tokio::time::timeout(PASS_DEADLINE.unsigned_abs(), pass)
        .await
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "DispatchDeadline: the pass took longer than {} s; anything written is reconciled by the next pass",
                PASS_DEADLINE.as_secs()
            ))
        });
    for (verb, count) in metrics::VERBS.iter().zip(&counted.0) {
        let labels = metrics::Verb {
            verb: (*verb).into(),
        };
        let count = count.load(std::sync::atomic::Ordering::Relaxed);
        metrics
            .pass_api_requests
            .get_or_create(&labels)
            .set(count as i64);
    }
    let label = |outcome: &str| metrics::OutcomeLabel {
        outcome: outcome.into(),
    };
    let outcome = match outcome {
        Ok(done) => {
            count_pass(metrics, &done, config);
            metrics.passes.get_or_create(&label("success")).inc();
            metrics
                .last_successful_pass
                .set(Timestamp::now().as_millisecond() as f64 / 1000.0);
            Ok(())
        }
        Err(e) => {
            metrics.passes.get_or_create(&label("failure")).inc();
            Err(e)
        }
    };
    (outcome, started.elapsed())
}

/// The decision series of one pass.
fn count_pass(metrics: &Metrics, done: &PassDone, config: &Config) {
    let report = &done.report;
    metrics.count_rows(&done.rows);
    if let Some((index, _)) = &report.sent {
        metrics.count_sent(&report.plan.decision.recommendations[*index].row);
    }
    if let Some(journal) = &report.journal {
        for t in &report.transitions {
            let ended = matches!(t.to, Phase::Completed | Phase::Failed | Phase::Stalled);
            if let (true, Some(entry)) = (ended, journal.find(&t.uuid)) {
                let policy = entry_policy(&entry.payload);
                metrics.count_outcome(policy, &entry.workload.to_string(), t.to.as_str());
            }
        }
        metrics.journal_bytes.set(journal.to_json().len() as i64);
        metrics.journal_entries.set(journal.entries.len() as i64);
    }
    metrics.count_node_events(&done.node_events);
    let breaker_open = report
        .plan
        .journal
        .as_ref()
        .is_ok_and(|s| s.breaker.open(Timestamp::now()).is_some());
    metrics.circuit_breaker_state.set(i64::from(breaker_open));
    metrics
        .omenative_unavailable
        .set(i64::from(!config.migration_api_available()));
    let holds = report
        .plan
        .decision
        .holds
        .iter()
        .filter(|h| h.place)
        .count();
    metrics.holds.set(holds as i64);
}

/// The policy a journaled request came from, by the reason its payload carries.
fn entry_policy(payload: &str) -> &'static str {
    let reason = serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string));
    match reason.as_deref() {
        Some("NodeUnhealthy" | "NodeMaintenance") => "nodehealth",
        _ => "defragmentation",
    }
}

/// Reads `alfred-config` whenever the caches change, on every replica: a document that loads
/// applies from the next pass; one that does not keeps the last good, and says so in the log,
/// a metric and a Warning event on the ConfigMap.
async fn reload_on_change(shared: Arc<Shared>, client: Client, namespace: String) {
    let mut changes = shared.caches.changes();
    loop {
        if shared.caches.unsynced().is_none() {
            let map = shared.caches.config_map(CONFIG_MAP_NAME);
            let reload = shared
                .settings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .observe(map.as_deref());
            if let Some(outcome) = reload.outcome() {
                let labels = metrics::OutcomeLabel {
                    outcome: outcome.into(),
                };
                shared.metrics.policy_reload.get_or_create(&labels).inc();
            }
            match (&reload, reload.event_message()) {
                (reload::Reload::Loaded, _) => eprintln!("config reloaded"),
                (reload::Reload::Failed(why), Some(message)) => {
                    eprintln!("config reload failed; keeping last-known-good: {why}");
                    let subject = crate::events::Subject {
                        api_version: "v1",
                        kind: "ConfigMap",
                        namespace: &namespace,
                        name: CONFIG_MAP_NAME,
                    };
                    let warning = crate::events::record(
                        &client,
                        &subject,
                        true,
                        EventReason::PolicyReloadFailed,
                        &message,
                    );
                    if let Err(e) = warning.await {
                        eprintln!("warning: {}", failure::describe(&e));
                    }
                }
                _ => {}
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The observation loop, on every replica: every `observationLoopInterval`, the cluster gauges
/// from the caches, and an early pass when a node's condition or maintenance changed.
async fn observe(shared: Arc<Shared>) {
    let mut before: Option<NodeSignals> = None;
    loop {
        Shared::beat(&shared.observation_beat);
        let config = shared.config();
        shared
            .metrics
            .caches_synced
            .set(i64::from(shared.caches.unsynced().is_none()));
        // After a pass running now, not beside it.
        let modelling = shared.modelling.lock().await;
        let Ok(snapshot) = shared.caches.snapshot() else {
            drop(modelling);
            // Not synced yet (or an object the loader refuses): look again soon.
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        // Dropped before the sleep, so that objects changed meanwhile are not kept alive.
        {
            let started = std::time::Instant::now();
            let now = Timestamp::now();
            let ctx = Context::build(&snapshot, &config, now);
            let gauges = ClusterGauges::observe(&ctx);
            let workloads = ctx
                .cluster
                .workloads
                .iter()
                .map(|w| w.key.as_str())
                .collect();
            let nodes = ctx.cluster.nodes.iter().map(|n| n.name).collect();
            shared.metrics.forget_gone(&workloads, &nodes);
            drop(ctx);
            shared.metrics.publish_cluster(&gauges, started.elapsed());
            let signals = NodeSignals::observe(&snapshot.nodes, &config, now);
            let early: &[EarlyTick] = &config.early_tick_on;
            if let Some(b) = &before
                && b.changed(&signals, early).is_some()
            {
                shared.early_tick.notify_one();
            }
            before = Some(signals);
            drop(snapshot);
            drop(modelling);
        }
        tokio::time::sleep(config.observation_loop_interval.unsigned_abs()).await;
    }
}
