//! One execute pass from read to write, over a [`Store`] the caller provides (the plugin's is
//! the API server; the tests' is in memory and can fail at any step). The order of writes is
//! what makes a crash at any point recoverable: the journal entry is saved before the request
//! is sent, and every journal write is conditional on the version that was read.

use k8s_openapi::jiff::Timestamp;

use super::dispatch::{self, DispatchReason, Plan, Prepared, Withhold};
use super::journal::{Entry, EntryReason, Journal, Phase};
use super::reconcile::Transition;
use crate::config::Config;
use crate::decision::Row;
use crate::migration;
use crate::model::Context;
use crate::snapshot::Snapshot;

/// The journal ConfigMap's two keys and its version, as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JournalDoc {
    pub state: Option<String>,
    pub breaker: Option<String>,
    /// The ConfigMap's resourceVersion; a write succeeds only if it is unchanged.
    pub version: String,
}

/// The parts of an InferenceService a request write needs.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceState {
    pub uid: String,
    pub resource_version: String,
    pub has_annotations: bool,
    /// The value of the request's annotation, if present.
    pub request: Option<String>,
}

/// Where the pass reads and writes. Errors are messages for the user.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// A fresh read of the cluster, and the time it was taken.
    async fn observe(&mut self) -> Result<(Snapshot, Timestamp), String>;
    async fn read_journal(&mut self) -> Result<JournalDoc, String>;
    /// Saves both keys if the ConfigMap is still at `version`: the new version, or `None` when
    /// someone else wrote in between.
    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, String>;
    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, String>;
    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), String>;
    /// A new RFC 4122 UUID.
    fn new_uuid(&mut self) -> String;
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Run every check and say what would be sent; write nothing.
    pub dry_run: bool,
}

/// What the pass did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The pass's first read: every recommendation and the arbiter's verdicts.
    pub plan: Plan,
    /// The journal after the pass (when it could be read).
    pub journal: Option<Journal>,
    pub transitions: Vec<Transition>,
    /// Why admitted moves were not sent: for the whole pass, or per recommendation.
    pub withheld: Option<Withhold>,
    pub per_move: Vec<(usize, Withhold)>,
    /// The request sent (or, with `dry_run`, that would be sent) and its recommendation.
    pub sent: Option<(usize, Entry)>,
    pub dry_run: bool,
}

impl Report {
    /// Rows in the `last-cycle.json` schema with every outcome.
    pub fn rows(&self) -> Vec<Row> {
        dispatch::rows(&dispatch::RowInputs {
            plan: &self.plan,
            journal: self.journal.as_ref(),
            transitions: &self.transitions,
            pass_withheld: self.withheld.as_ref(),
            per_move: &self.per_move,
            sent: self.sent.as_ref().map(|(i, e)| (*i, e)),
        })
    }
}

/// Passes restarted because another writer changed the journal first.
const ATTEMPTS: usize = 3;

/// Runs one execute pass under `config`.
pub async fn run_pass<S: Store>(
    store: &mut S,
    config: &Config,
    options: Options,
) -> Result<Report, String> {
    for _ in 0..ATTEMPTS {
        if let Some(report) = attempt(store, config, options).await? {
            return Ok(report);
        }
    }
    Err(format!(
        "the dispatch journal kept changing under {ATTEMPTS} attempts (another `migrate` is running?); run again"
    ))
}

/// One try; `None` when another writer got in first and the pass must start over.
async fn attempt<S: Store>(
    store: &mut S,
    config: &Config,
    options: Options,
) -> Result<Option<Report>, String> {
    let (snapshot, now) = store.observe().await?;
    let mut doc = store.read_journal().await?;
    let ctx = Context::build(&snapshot, config, now);
    let plan = dispatch::plan(&ctx, doc.state.as_deref(), doc.breaker.as_deref());
    let mut report = Report {
        journal: plan.journal.as_ref().ok().map(|s| s.journal.clone()),
        transitions: plan
            .journal
            .as_ref()
            .map(|s| s.transitions.clone())
            .unwrap_or_default(),
        withheld: plan.withheld.clone(),
        per_move: Vec::new(),
        sent: None,
        dry_run: options.dry_run,
        plan,
    };
    let Ok(state) = &report.plan.journal else {
        return Ok(Some(report));
    };
    let (mut journal, breaker) = (state.journal.clone(), state.breaker.clone());
    if !state.transitions.is_empty()
        && !options.dry_run
        && !save(store, &journal, &breaker, &mut doc.version).await?
    {
        return Ok(None);
    }
    if report.withheld.is_some() {
        return Ok(Some(report));
    }
    let candidates: Vec<usize> = match &report.plan.retry {
        Some(uuid) => {
            let entry = journal.find(uuid).expect("retry names an entry").clone();
            report
                .plan
                .decision
                .recommendations
                .iter()
                .position(|r| same_request(&r.row, &entry))
                .into_iter()
                .collect()
        }
        None => report.plan.admitted().map(|(i, _)| i).collect(),
    };
    if candidates.is_empty() {
        if let Some(uuid) = &report.plan.retry {
            report.withheld = Some(Withhold::new(
                DispatchReason::PolicyNoLongerEligible,
                format!("prepared request {uuid}: the policies no longer produce its move"),
            ));
        }
        return Ok(Some(report));
    }

    // A fresh read: the move must still hold on it.
    let (fresh_snapshot, fresh_now) = store.observe().await?;
    let fresh_doc = store.read_journal().await?;
    if fresh_doc.version != doc.version {
        return Ok(None);
    }
    let config_text = |s: &Snapshot| {
        s.config_map(crate::config::CONFIG_MAP_NAME)
            .and_then(|m| m.data.clone())
    };
    if config_text(&fresh_snapshot) != config_text(&snapshot) {
        report.withheld = Some(Withhold::new(
            DispatchReason::ConfigurationChanged,
            format!(
                "ConfigMap {} changed during the pass; the next pass uses the new configuration",
                crate::config::CONFIG_MAP_NAME
            ),
        ));
        return Ok(Some(report));
    }
    let fresh_ctx = Context::build(&fresh_snapshot, config, fresh_now);
    let fresh = dispatch::plan(
        &fresh_ctx,
        fresh_doc.state.as_deref(),
        fresh_doc.breaker.as_deref(),
    );
    if let Some(w) = &fresh.withheld {
        report.withheld = Some(w.clone());
        return Ok(Some(report));
    }
    let retry = report.plan.retry.clone();
    let uuid = match &retry {
        Some(uuid) => uuid.clone(),
        None => store.new_uuid(),
    };
    let mut prepared: Option<(usize, Prepared)> = None;
    for &i in &candidates {
        let rec = &report.plan.decision.recommendations[i];
        let Some(instance) =
            ctx.cluster
                .instance_of(&rec.row.workload, rec.row.component, rec.row.instance)
        else {
            continue;
        };
        let fingerprint = dispatch::fingerprint(&ctx, instance);
        match dispatch::preflight(rec, &fingerprint, &fresh_ctx, &fresh, &uuid) {
            Ok(p) => {
                prepared = Some((i, p));
                break;
            }
            Err(w) => report.per_move.push((i, w)),
        }
    }
    let Some((index, prepared)) = prepared else {
        return Ok(Some(report));
    };
    let mut entry = match &retry {
        // The same request again: its payload as first written.
        Some(uuid) => journal.find(uuid).expect("retry names an entry").clone(),
        None => prepared.entry.clone(),
    };
    if options.dry_run {
        report.sent = Some((index, entry));
        return Ok(Some(report));
    }
    let fresh_journal = fresh.journal.as_ref().map_err(|e| e.to_string())?;
    journal = fresh_journal.journal.clone();
    let breaker = fresh_journal.breaker.clone();
    if retry.is_none() {
        entry.reason = None;
        journal.prune(fresh_now, dispatch::retention(&fresh_ctx));
        journal.entries.push(entry.clone());
        if let Err(e) = journal.validate() {
            report.per_move.push((
                index,
                Withhold::new(DispatchReason::JournalPayloadInvalid, e),
            ));
            return Ok(Some(report));
        }
    }
    let mut version = fresh_doc.version.clone();
    if retry.is_none() && !save(store, &journal, &breaker, &mut version).await? {
        return Ok(None);
    }

    // The object the decision read must be the one the patch lands on.
    let service = store
        .read_service(&entry.workload.namespace, &entry.workload.name, &entry.uuid)
        .await?;
    let current = service.filter(|s| {
        s.uid == entry.workload_uid
            && (retry.is_some() || s.resource_version == prepared.resource_version)
    });
    let Some(current) = current else {
        report.journal = Some(journal);
        report.per_move.push((
            index,
            Withhold::new(
                DispatchReason::OwnerChanged,
                format!(
                    "{} changed after the move was checked; the prepared request {} is retried next pass",
                    entry.workload, entry.uuid
                ),
            ),
        ));
        return Ok(Some(report));
    };
    set_entry(&mut journal, &entry.uuid, |e| {
        e.last_attempt = Some(fresh_now);
        e.reason = Some(EntryReason::SubmissionPrepared);
    });
    if !save(store, &journal, &breaker, &mut version).await? {
        return Ok(None);
    }
    let sent = match current.request {
        Some(value) => value == entry.payload,
        None => {
            let patch = migration::request_patch(
                &current.uid,
                &current.resource_version,
                current.has_annotations,
                &entry.uuid,
                &entry.payload,
            );
            match store
                .patch_service(&entry.workload.namespace, &entry.workload.name, &patch)
                .await
            {
                Ok(()) => true,
                // The write may have landed before the error: look.
                Err(_) => store
                    .read_service(&entry.workload.namespace, &entry.workload.name, &entry.uuid)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.request)
                    .is_some_and(|v| v == entry.payload),
            }
        }
    };
    let (phase, reason) = if sent {
        (Phase::Submitted, EntryReason::RequestSubmitted)
    } else {
        (Phase::Prepared, EntryReason::SubmissionUncertain)
    };
    set_entry(&mut journal, &entry.uuid, |e| {
        e.phase = phase;
        e.reason = Some(reason);
    });
    let saved = save(store, &journal, &breaker, &mut version)
        .await
        .unwrap_or(false);
    let entry = journal.find(&entry.uuid).expect("just written").clone();
    report.journal = Some(journal);
    if !saved {
        report.per_move.push((
            index,
            Withhold::new(
                DispatchReason::SubmissionJournalUncertain,
                format!(
                    "request {} was {}, but the journal could not record it; the next pass reconciles it",
                    entry.uuid,
                    if sent { "sent" } else { "maybe sent" }
                ),
            ),
        ));
    }
    if sent {
        report.sent = Some((index, entry));
    } else {
        report.per_move.push((
            index,
            Withhold::new(
                EntryReason::SubmissionUncertain,
                format!(
                    "the request {} could not be confirmed on {}; the next pass retries it",
                    entry.uuid, entry.workload
                ),
            ),
        ));
    }
    Ok(Some(report))
}

/// Saves the journal at `version`; false when someone else wrote first.
async fn save<S: Store>(
    store: &mut S,
    journal: &Journal,
    breaker: &super::breaker::Breaker,
    version: &mut String,
) -> Result<bool, String> {
    let written = store
        .write_journal(version, &journal.to_json(), &breaker.to_json())
        .await?;
    Ok(match written {
        Some(v) => {
            *version = v;
            true
        }
        None => false,
    })
}

fn set_entry(journal: &mut Journal, uuid: &str, f: impl FnOnce(&mut Entry)) {
    if let Some(e) = journal.entries.iter_mut().find(|e| e.uuid == uuid) {
        f(e);
    }
}

/// The recommendation a prepared entry was made from.
fn same_request(row: &Row, entry: &Entry) -> bool {
    row.workload == entry.workload.to_string()
        && row.component == entry.component
        && row.instance == entry.instance
        && row.from_node == entry.from_node
}
