//! Execute mode: `migrate` (one safe move a pass, journaled), `journal` (list, show, resolve
//! Alfred's requests) and `status` (the safety bounds as they stand). The decisions are in
//! `alfred::execute`; this module reads and writes the cluster for them.

use std::fmt::Write as _;
use std::io::{BufRead, Read};

use alfred::config::Config;
use alfred::execute::breaker::{self, Breaker};
use alfred::execute::dispatch::{self, PASS_DEADLINE};
use alfred::execute::journal::{self, Entry, Journal, Phase};
use alfred::execute::run::{self, JournalDoc, Options, ServiceState, Store};
use alfred::migration;
use alfred::model::Context;
use alfred::snapshot::Snapshot;
use anyhow::{Context as _, Result, anyhow, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde::Serialize;

use crate::{GlobalArgs, Output, live, render, source};

#[derive(Args)]
pub struct MigrateArgs {
    /// Run every check and print the request that would be sent; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run a pass every `decisionLoopInterval` until interrupted.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Subcommand)]
pub enum JournalCommand {
    /// Every request in the dispatch journal with its phase and reason.
    List,
    /// One request: its entry and the annotation it carries.
    Show { uuid: String },
    /// Remove a stalled request that can no longer resolve, after checking that it cannot and
    /// asking for confirmation; an event records who removed it and why.
    Resolve {
        uuid: String,
        /// Why it is removed (recorded in the event).
        #[arg(long)]
        reason: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// Reads and writes the cluster for a pass; with `-f`, reads the snapshot file and writes
/// nothing (dry runs only).
struct KubeStore {
    global: GlobalArgs,
    client: Option<Client>,
    /// A snapshot already read (the first `observe` returns it instead of reading again).
    first: Option<(Snapshot, Timestamp)>,
    /// With `-f`: the file, read once, and the journal it carries.
    file: Option<(Snapshot, Timestamp, JournalDoc)>,
    /// Where the journal ConfigMap lives, once found.
    journal_namespace: Option<String>,
}

impl KubeStore {
    async fn new(global: &GlobalArgs) -> Result<KubeStore> {
        let client = match global.file {
            Some(_) => None,
            None => Some(live::client(global).await?),
        };
        Ok(KubeStore {
            global: global.clone(),
            client,
            first: None,
            file: None,
            journal_namespace: None,
        })
    }

    fn client(&self) -> Result<&Client, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "a snapshot file is read-only: run with --dry-run, or drop -f".into())
    }

    async fn read(&mut self) -> Result<(Snapshot, Timestamp)> {
        if let Some((snapshot, now, _)) = &self.file {
            return Ok((snapshot.clone(), *now));
        }
        let snapshot = source::read_snapshot(&self.global).await?;
        let now = source::evaluation_time(&self.global, &snapshot)?;
        if self.client.is_none() {
            // A snapshot carries the journal ConfigMap when the cluster had one.
            let doc = snapshot
                .config_map(journal::CONFIG_MAP_NAME)
                .map(doc_of)
                .unwrap_or_default();
            self.file = Some((snapshot.clone(), now, doc));
        }
        Ok((snapshot, now))
    }

    /// The journal ConfigMap, found by name in any namespace (Alfred's namespace varies).
    async fn journal_map(&mut self) -> Result<Option<ConfigMap>, String> {
        let client = self.client()?.clone();
        let found = Api::<ConfigMap>::all(client)
            .list(
                &ListParams::default()
                    .fields(&format!("metadata.name={}", journal::CONFIG_MAP_NAME)),
            )
            .await
            .map_err(|e| format!("reading ConfigMap {}: {e}", journal::CONFIG_MAP_NAME))?;
        match found.items.len() {
            0 => Ok(None),
            1 => {
                let map = found.items.into_iter().next().expect("one");
                self.journal_namespace = map.metadata.namespace.clone();
                Ok(Some(map))
            }
            n => Err(format!(
                "{n} ConfigMaps are named {}; keep the one in Alfred's namespace",
                journal::CONFIG_MAP_NAME
            )),
        }
    }
}

fn doc_of(map: &ConfigMap) -> JournalDoc {
    let data = map.data.as_ref();
    JournalDoc {
        state: data.and_then(|d| d.get(journal::STATE_KEY)).cloned(),
        breaker: data.and_then(|d| d.get(breaker::KEY)).cloned(),
        version: map.metadata.resource_version.clone().unwrap_or_default(),
    }
}

fn missing_journal() -> String {
    format!(
        "ConfigMap {name} is missing: Alfred journals every request there before sending it (the ome-alfred chart creates it when migration.apiVersion is v1); create it in Alfred's namespace, e.g. kubectl create configmap {name} -n ome",
        name = journal::CONFIG_MAP_NAME
    )
}

impl Store for KubeStore {
    async fn observe(&mut self) -> Result<(Snapshot, Timestamp), String> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        self.read().await.map_err(|e| format!("{e:#}"))
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, String> {
        if let Some((_, _, doc)) = &self.file {
            return Ok(doc.clone());
        }
        match self.journal_map().await? {
            Some(map) => Ok(doc_of(&map)),
            None => Err(missing_journal()),
        }
    }

    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, String> {
        let client = self.client()?.clone();
        let namespace = self.journal_namespace.clone().ok_or_else(missing_journal)?;
        // A merge patch keeps the ConfigMap's other keys; its resourceVersion makes the write
        // conditional on the version read.
        let body = serde_json::json!({
            "metadata": {"resourceVersion": version},
            "data": {journal::STATE_KEY: state, breaker::KEY: breaker},
        });
        let api = Api::<ConfigMap>::namespaced(client, &namespace);
        match api
            .patch(
                journal::CONFIG_MAP_NAME,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
            Ok(map) => Ok(Some(map.metadata.resource_version.unwrap_or_default())),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(e) => Err(format!(
                "writing ConfigMap {namespace}/{}: {e}",
                journal::CONFIG_MAP_NAME
            )),
        }
    }

    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, String> {
        let client = self.client()?.clone();
        let api = Api::<alfred::api::InferenceService>::namespaced(client, namespace);
        let meta = api
            .get_metadata_opt(name)
            .await
            .map_err(|e| format!("reading InferenceService {namespace}/{name}: {e}"))?;
        Ok(meta.map(|m| {
            let annotations = m.metadata.annotations.unwrap_or_default();
            ServiceState {
                uid: m.metadata.uid.unwrap_or_default(),
                resource_version: m.metadata.resource_version.unwrap_or_default(),
                has_annotations: !annotations.is_empty(),
                request: annotations.get(&migration::annotation_key(uuid)).cloned(),
            }
        }))
    }

    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), String> {
        let client = self.client()?.clone();
        let api = Api::<alfred::api::InferenceService>::namespaced(client, namespace);
        api.patch_metadata(
            name,
            &PatchParams::default(),
            &Patch::<()>::Json(patch.clone()),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("patching InferenceService {namespace}/{name}: {e}"))
    }

    fn new_uuid(&mut self) -> String {
        new_uuid()
    }
}

/// A random (version 4) UUID from the operating system's generator.
fn new_uuid() -> String {
    let mut b = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if filled.is_err() {
        // No /dev/urandom: time and process id still make a collision practically impossible.
        let t = Timestamp::now().as_nanosecond() as u128 ^ (u128::from(std::process::id()) << 96);
        b = t.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The store and the configuration of a pass (read from the first snapshot, or `--config`).
async fn open(global: &GlobalArgs) -> Result<(KubeStore, Config)> {
    let mut store = KubeStore::new(global).await?;
    let (snapshot, now) = store.read().await?;
    let config = source::load_config(global.config.as_deref(), &snapshot)?;
    store.first = Some((snapshot, now));
    Ok((store, config))
}

pub async fn run_migrate(args: &MigrateArgs, global: &GlobalArgs) -> Result<()> {
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
    loop {
        let (mut store, config) = open(global).await?;
        let options = Options {
            dry_run: args.dry_run,
        };
        let report = tokio::time::timeout(
            PASS_DEADLINE.unsigned_abs(),
            run::run_pass(&mut store, &config, options),
        )
        .await
        .map_err(|_| {
            anyhow!(
                "DispatchDeadline: the pass took longer than {} s; anything written is reconciled by the next pass",
                PASS_DEADLINE.as_secs()
            )
        })?
        .map_err(|e| anyhow!(e))?;
        render::emit(&render_report(&report, global.output)?)?;
        if let (false, Some(client)) = (args.dry_run, &store.client) {
            let rows = report.rows();
            let events = alfred::execute::events::workload_events(
                &rows,
                &report.plan.decision.recommendations,
            );
            crate::events::record_workloads(client, &events).await;
            record_pass(global, &config, &report, &rows).await;
        }
        if !args.watch {
            return Ok(());
        }
        let interval = config.decision_loop_interval.unsigned_abs();
        #[cfg(unix)]
        let interrupted = interrupt.recv();
        #[cfg(not(unix))]
        let interrupted = tokio::signal::ctrl_c();
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = interrupted => return Ok(()),
        }
    }
}

/// Writes the pass into the recommendations ConfigMap (rows and node records, whose episode
/// stamps make node events fire once). A missing ConfigMap only disables the record.
async fn record_pass(
    global: &GlobalArgs,
    config: &Config,
    report: &run::Report,
    rows: &[alfred::decision::Row],
) {
    if !config.recommendations_config_map_enabled {
        return;
    }
    let pass = crate::record::Pass {
        rows,
        nodes: &report.plan.decision.nodes,
        mode: "execute",
    };
    let now = Timestamp::now();
    if let Err(e) = crate::record::record(global, config, &pass, now).await {
        eprintln!("note: recommendations not recorded: {e:#}");
    }
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
struct Reasoned {
    reason: String,
    detail: String,
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
    let withheld = report.withheld.as_ref().map(|w| Reasoned {
        reason: w.reason.as_str().into(),
        detail: w.detail.clone(),
    });
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

// ---------------------------------------------------------------------------------------------
// journal and status

/// The journal and breaker as they stand after reconciling with the cluster (nothing written).
struct Standing {
    journal: Journal,
    breaker: Breaker,
    plan: dispatch::Plan,
    caps: alfred::execute::arbiter::Caps,
    config: Config,
    now: Timestamp,
}

async fn standing(global: &GlobalArgs) -> Result<(KubeStore, Standing)> {
    let (mut store, config) = open(global).await?;
    let (snapshot, now) = store.observe().await.map_err(|e| anyhow!(e))?;
    let doc = store.read_journal().await.map_err(|e| anyhow!(e))?;
    let ctx = Context::build(&snapshot, &config, now);
    let plan = dispatch::plan(&ctx, doc.state.as_deref(), doc.breaker.as_deref());
    let state = plan.journal.as_ref().map_err(|e| anyhow!("{e}"))?;
    let (journal, breaker) = (state.journal.clone(), state.breaker.clone());
    let history = alfred::execute::arbiter::DispatchHistory::from_journal(&journal, &ctx);
    let caps = alfred::execute::arbiter::caps(&ctx, &history);
    drop(ctx);
    store.first = Some((snapshot, now));
    Ok((
        store,
        Standing {
            journal,
            breaker,
            plan,
            caps,
            config,
            now,
        },
    ))
}

pub async fn run_journal(command: &JournalCommand, global: &GlobalArgs) -> Result<()> {
    let (mut store, s) = standing(global).await?;
    match command {
        JournalCommand::List => {
            if let Some(text) = render::structured(&s.journal, global.output)? {
                return render::emit(&text);
            }
            if s.journal.entries.is_empty() {
                return render::emit("The dispatch journal is empty.\n");
            }
            let lines: Vec<Vec<String>> = s
                .journal
                .entries
                .iter()
                .map(|e| {
                    vec![
                        e.uuid.clone(),
                        e.workload.to_string(),
                        e.component.to_string(),
                        e.instance.to_string(),
                        e.from_node.clone(),
                        render::or_dash(&e.targets.join(",")),
                        e.phase.as_str().into(),
                        render::or_dash(e.reason_str()),
                        e.created_at.to_string(),
                    ]
                })
                .collect();
            let mut text = String::new();
            render::columns(
                &mut text,
                &[
                    "UUID",
                    "WORKLOAD",
                    "COMPONENT",
                    "INSTANCE",
                    "FROM",
                    "TARGETS",
                    "PHASE",
                    "REASON",
                    "CREATED",
                ],
                &lines,
            );
            render::emit(&text)
        }
        JournalCommand::Show { uuid } => {
            let entry = find(&s.journal, uuid)?;
            let text = render::structured(entry, global.output)?
                .unwrap_or(serde_json::to_string_pretty(entry)? + "\n");
            render::emit(&text)
        }
        JournalCommand::Resolve { uuid, reason, yes } => {
            if global.file.is_some() {
                bail!("resolve writes the live journal; drop -f");
            }
            let entry = find(&s.journal, uuid)?.clone();
            let why = cannot_resolve(&mut store, &entry).await?;
            eprintln!(
                "Request {} for {} instance {} is {} ({}): {why}.",
                entry.uuid,
                entry.workload,
                entry.instance,
                entry.phase.as_str(),
                entry.reason_str()
            );
            if !yes && !confirm("Remove it from the dispatch journal?")? {
                bail!("nothing removed");
            }
            let mut journal = s.journal.clone();
            journal.entries.retain(|e| e.uuid != entry.uuid);
            let doc = store.read_journal().await.map_err(|e| anyhow!(e))?;
            let written = store
                .write_journal(&doc.version, &journal.to_json(), &s.breaker.to_json())
                .await
                .map_err(|e| anyhow!(e))?;
            if written.is_none() {
                bail!("the journal changed while resolving; run again");
            }
            let client = store.client().map_err(|e| anyhow!(e))?;
            let who = crate::events::whoami(client).await;
            crate::events::record_resolved(client, &entry, &who, reason).await?;
            eprintln!("removed request {} (by {who}: {reason})", entry.uuid);
            Ok(())
        }
    }
}

fn find<'j>(journal: &'j Journal, uuid: &str) -> Result<&'j Entry> {
    journal.find(uuid).ok_or_else(|| {
        anyhow!(
            "no request {uuid} in the dispatch journal; `kubectl alfred journal list` shows them"
        )
    })
}

/// Why the entry can no longer resolve, or an error saying why it still might (the cases of
/// alfred-policies.md "A stalled request can stop Alfred's migrations for good").
async fn cannot_resolve(store: &mut KubeStore, entry: &Entry) -> Result<String> {
    use journal::EntryReason::*;
    if entry.phase != Phase::Stalled {
        bail!(
            "request {} is {}: only a stalled request can be removed, and this one can still end on its own",
            entry.uuid,
            entry.phase.as_str()
        );
    }
    let reason = entry.reason.ok_or_else(|| {
        anyhow!(
            "request {} is stalled without a reason; the journal entry is malformed",
            entry.uuid
        )
    })?;
    // Which stalls never resolve is the core's rule; this says why, and checks the one that
    // depends on the cluster.
    if !reason.never_resolves() {
        bail!(
            "request {} is stalled with {}, which can still resolve when OME reports its end",
            entry.uuid,
            reason.as_str()
        );
    }
    Ok(match reason {
        OwnerUnavailable | ReplicaUnavailable | ReplicaIdentityChanged => {
            "the object its result would come from is gone or replaced".into()
        }
        MigrationStatusInvalid => "OME reported a status Alfred cannot read".into(),
        AcknowledgementTimeout => {
            let service = store
                .read_service(&entry.workload.namespace, &entry.workload.name, &entry.uuid)
                .await
                .map_err(|e| anyhow!(e))?;
            if service.as_ref().and_then(|s| s.request.as_ref()).is_some() {
                bail!(
                    "request {} is still on InferenceService {}: OME may yet take it; remove the annotation {} first if it must not run",
                    entry.uuid,
                    entry.workload,
                    migration::annotation_key(&entry.uuid)
                );
            }
            "OME never took it and the InferenceService no longer carries it".into()
        }
        _ => "its awaited result can never come".into(),
    })
}

fn confirm(question: &str) -> Result<bool> {
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusOutput {
    mode: String,
    execution: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    breaker_open_until: Option<Timestamp>,
    recent_outcomes: Vec<breaker::MigrationOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff_until: Option<Timestamp>,
    in_flight: usize,
    max_in_flight: i64,
    last_hour: usize,
    max_per_hour: i64,
    unresolved: Vec<alfred::decision::Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    withheld: Option<Reasoned>,
}

pub async fn run_status(global: &GlobalArgs) -> Result<()> {
    let (_, s) = standing(global).await?;
    let out = StatusOutput {
        mode: s.config.mode.as_str().into(),
        execution: dispatch::execution_disabled(&s.config)
            .map_or("enabled".into(), |why| format!("disabled: {why}")),
        breaker_open_until: s.breaker.open(s.now),
        recent_outcomes: s.breaker.outcomes.clone(),
        backoff_until: s.journal.backoff_until.filter(|&b| s.now < b),
        in_flight: s.caps.in_flight,
        max_in_flight: s.config.max_in_flight_migrations,
        last_hour: s.caps.last_hour,
        max_per_hour: s.config.max_migrations_per_hour,
        unresolved: s.journal.unresolved().map(dispatch::journal_row).collect(),
        withheld: s.plan.withheld.as_ref().map(|w| Reasoned {
            reason: w.reason.as_str().into(),
            detail: w.detail.clone(),
        }),
    };
    if let Some(text) = render::structured(&out, global.output)? {
        return render::emit(&text);
    }
    let mut text = String::new();
    writeln!(
        text,
        "Mode:             {} (execution {})",
        out.mode, out.execution
    )?;
    match out.breaker_open_until {
        Some(t) => writeln!(text, "Circuit breaker:  OPEN until {t}")?,
        None => writeln!(
            text,
            "Circuit breaker:  closed ({} of the last {} outcomes failed; opens past half of at least {})",
            out.recent_outcomes
                .iter()
                .filter(|o| **o == breaker::MigrationOutcome::Failure)
                .count(),
            out.recent_outcomes.len(),
            breaker::MIN_SAMPLES
        )?,
    }
    match out.backoff_until {
        Some(t) => writeln!(text, "Failure backoff:  until {t}")?,
        None => writeln!(text, "Failure backoff:  none")?,
    }
    writeln!(
        text,
        "Migrations:       {} in flight of maxInFlightMigrations {}; {} in the last hour of maxMigrationsPerHour {} (everyone's)",
        out.in_flight, out.max_in_flight, out.last_hour, out.max_per_hour
    )?;
    writeln!(
        text,
        "Alfred's unresolved requests: {}",
        out.unresolved.len()
    )?;
    for r in &out.unresolved {
        writeln!(
            text,
            "  {} {}/{} instance {} from {}: {} ({})",
            r.request_uuid.as_deref().unwrap_or_default(),
            r.workload,
            r.component,
            r.instance,
            r.from_node,
            r.dispatch_status.map_or("", |s| s.as_str()),
            r.dispatch_reason.map_or("", |r| r.as_str())
        )?;
    }
    match &out.withheld {
        Some(w) => writeln!(
            text,
            "Next pass:        nothing sent: {} ({})",
            w.reason, w.detail
        )?,
        None => writeln!(text, "Next pass:        may send one request")?,
    }
    render::emit(&text)
}
