//! One execute pass from read to write, over a [`Store`] the caller provides (the plugin's is
//! the API server; the tests' is in memory and can fail at any step). The order of writes is
//! what makes a crash at any point recoverable: the journal entry is saved before the request
//! is sent, and every journal write is conditional on the version that was read.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::breaker::Breaker;
use super::dispatch::{self, DispatchReason, Plan, Withhold};
use super::journal::{Entry, EntryReason, Journal, JournalError, Phase};
use super::recheck::{Move, Prepared, same_move};
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

/// Why a store could not read or write; the message says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store reads a snapshot file and writes nothing.
    #[error("a snapshot file is read-only: run with --dry-run, or drop -f")]
    ReadOnly,
    /// No journal ConfigMap, so nothing may be sent.
    #[error(
        "ConfigMap {name} is missing: Alfred journals every request there before sending it (the ome-alfred chart creates it when migration.apiVersion is v1); create it in Alfred's namespace, e.g. kubectl create configmap {name} -n ome",
        name = super::journal::CONFIG_MAP_NAME
    )]
    JournalMissing,
    /// More than one ConfigMap carries the journal's name.
    #[error(
        "{count} ConfigMaps are named {name}; keep the one in Alfred's namespace",
        name = super::journal::CONFIG_MAP_NAME
    )]
    JournalAmbiguous { count: usize },
    /// The cluster (or the snapshot) could not be read; the message says why.
    #[error("{0}")]
    Observe(String),
    /// A caretaker replica that does not lead (or may no longer be sure it does) writes
    /// nothing: why.
    #[error("{0}")]
    Fenced(String),
    /// A call failed: what it was doing, and why; `lasting` when another pass cannot fix it
    /// (no permission, refused credentials).
    #[error("{action}: {cause}")]
    Call {
        action: String,
        cause: String,
        lasting: bool,
    },
}

/// Why a pass ended without a report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The fresh read's journal could not be used.
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(
        "the dispatch journal kept changing under {attempts} attempts (another `migrate` is running?); run again"
    )]
    Contended { attempts: usize },
}

/// Where the pass reads and writes.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// A fresh read of the cluster, and the time it was taken. A store returns its last read
    /// again (the same `Arc`) only when nothing can have changed since: a pass then keeps
    /// what it worked out on it.
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError>;
    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError>;
    /// Saves both keys if the ConfigMap is still at `version`: the new version, or `None` when
    /// someone else wrote in between.
    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, StoreError>;
    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, StoreError>;
    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), StoreError>;
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
) -> Result<Report, PassError> {
    for _ in 0..ATTEMPTS {
        let (snapshot, now) = store.observe().await?;
        let doc = store.read_journal().await?;
        let ctx = Context::build(&snapshot, config, now);
        let mut pass = Pass {
            store: &mut *store,
            config,
            options,
            first: &ctx,
            version: doc.version,
            report: Report {
                plan: dispatch::plan(&ctx, doc.state.as_deref(), doc.breaker.as_deref()),
                journal: None,
                transitions: Vec::new(),
                withheld: None,
                per_move: Vec::new(),
                sent: None,
                dry_run: options.dry_run,
            },
        };
        match pass.steps().await {
            Ok(()) | Err(Stop::Finished) => return Ok(pass.report),
            Err(Stop::Restart) => continue,
            Err(Stop::Failed(e)) => return Err(e),
        }
    }
    Err(PassError::Contended { attempts: ATTEMPTS })
}

/// Why the steps of a pass stopped early.
enum Stop {
    /// The report says why nothing (more) is sent.
    Finished,
    /// Another writer changed the journal first: the pass starts over.
    Restart,
    Failed(PassError),
}

impl<E: Into<PassError>> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::Failed(e.into())
    }
}

/// One try of a pass on its first read, and what it found so far.
struct Pass<'p, 's, S> {
    store: &'p mut S,
    config: &'p Config,
    options: Options,
    first: &'p Context<'s>,
    /// The journal ConfigMap's version this pass last read or wrote.
    version: String,
    report: Report,
}

/// The move that passed the re-check on the fresh read, with the journal as of that read.
struct Rechecked {
    index: usize,
    prepared: Prepared,
    journal: Journal,
    breaker: Breaker,
    now: Timestamp,
    retention: k8s_openapi::jiff::SignedDuration,
}

impl<S: Store> Pass<'_, '_, S> {
    /// The steps in order; each may stop the pass.
    async fn steps(&mut self) -> Result<(), Stop> {
        self.save_reconciled().await?;
        let candidates = self.candidates()?;
        let checked = self.recheck(&candidates).await?;
        let (mut journal, breaker, entry, sending) = self.journal_request(checked).await?;
        let service = self.owner_unchanged(&journal, &entry, &sending).await?;
        self.mark_attempt(&mut journal, &breaker, &entry, sending.now)
            .await?;
        let sent = self.send(&service, &entry).await;
        self.record(journal, &breaker, &entry, sending.recommendation, sent)
            .await;
        Ok(())
    }

    /// Keeps what reconciling the journal with the first read changed (unless a dry run).
    async fn save_reconciled(&mut self) -> Result<(), Stop> {
        let plan = &self.report.plan;
        self.report.withheld = plan.withheld.clone();
        let Ok(state) = &plan.journal else {
            return Err(Stop::Finished);
        };
        self.report.journal = Some(state.journal.clone());
        self.report.transitions = state.transitions.clone();
        if !state.transitions.is_empty() && !self.options.dry_run {
            let (journal, breaker) = (state.journal.clone(), state.breaker.clone());
            self.save(&journal, &breaker).await?;
        }
        if self.report.withheld.is_some() {
            return Err(Stop::Finished);
        }
        Ok(())
    }

    /// The moves to try, in arbiter order; a prepared request is retried as its own move.
    fn candidates(&mut self) -> Result<Vec<usize>, Stop> {
        let plan = &self.report.plan;
        let candidates: Vec<usize> = match (&plan.retry, &plan.journal) {
            (Some(uuid), Ok(state)) => {
                let entry = state.journal.find(uuid).expect("retry names an entry");
                plan.decision
                    .recommendations
                    .iter()
                    .position(|r| same_move(&r.row, Move::Entry(entry)))
                    .into_iter()
                    .collect()
            }
            _ => plan.admitted().map(|(i, _)| i).collect(),
        };
        if candidates.is_empty() {
            if let Some(uuid) = &plan.retry {
                self.report.withheld = Some(Withhold::new(
                    DispatchReason::PolicyNoLongerEligible,
                    format!("prepared request {uuid}: the policies no longer produce its move"),
                ));
            }
            return Err(Stop::Finished);
        }
        Ok(candidates)
    }

    /// A fresh read on which the first candidate that still holds is prepared.
    async fn recheck(&mut self, candidates: &[usize]) -> Result<Rechecked, Stop> {
        let (snapshot, now) = self.store.observe().await?;
        let doc = self.store.read_journal().await?;
        if doc.version != self.version {
            return Err(Stop::Restart);
        }
        let settings = |s: &Snapshot| {
            s.config_map(crate::config::CONFIG_MAP_NAME)
                .and_then(|m| m.data.clone())
        };
        if settings(&snapshot) != settings(self.first.snapshot) {
            self.report.withheld = Some(Withhold::new(
                DispatchReason::ConfigurationChanged,
                format!(
                    "ConfigMap {} changed during the pass; the next pass uses the new configuration",
                    crate::config::CONFIG_MAP_NAME
                ),
            ));
            return Err(Stop::Finished);
        }
        // The first read again at the same time: the same decision (the journal may differ).
        let built;
        let (ctx, decision) =
            if std::ptr::eq(&*snapshot, self.first.snapshot) && now == self.first.now() {
                (self.first, self.report.plan.decision.clone())
            } else {
                built = Context::build(&snapshot, self.config, now);
                (&built, crate::decision::plan(&built))
            };
        let fresh =
            dispatch::plan_with(ctx, decision, doc.state.as_deref(), doc.breaker.as_deref());
        if let Some(w) = &fresh.withheld {
            self.report.withheld = Some(w.clone());
            return Err(Stop::Finished);
        }
        let uuid = match &self.report.plan.retry {
            Some(uuid) => uuid.clone(),
            None => self.store.new_uuid(),
        };
        let first = self.first;
        for &i in candidates {
            let rec = &self.report.plan.decision.recommendations[i];
            let Some(instance) =
                first
                    .cluster
                    .instance_of(&rec.row.workload, rec.row.component, rec.row.instance)
            else {
                continue;
            };
            let fingerprint = dispatch::fingerprint(first, instance);
            match dispatch::preflight(rec, &fingerprint, ctx, &fresh, &uuid) {
                Ok(prepared) => {
                    let state = fresh.journal.map_err(PassError::from)?;
                    return Ok(Rechecked {
                        index: i,
                        prepared,
                        journal: state.journal,
                        breaker: state.breaker,
                        now,
                        retention: dispatch::retention(ctx),
                    });
                }
                Err(w) => self.report.per_move.push((i, w)),
            }
        }
        Err(Stop::Finished)
    }

    /// Journals the request before it is sent (a retry is already journaled, with its payload
    /// as first written). A dry run stops here, reporting what would be sent.
    async fn journal_request(
        &mut self,
        checked: Rechecked,
    ) -> Result<(Journal, Breaker, Entry, Sending), Stop> {
        let Rechecked {
            index,
            prepared,
            mut journal,
            breaker,
            now,
            retention,
        } = checked;
        let retry = self.report.plan.retry.clone();
        let mut entry = match &retry {
            // The same request again: its payload as first written.
            Some(uuid) => self
                .report
                .journal
                .as_ref()
                .and_then(|j| j.find(uuid))
                .expect("retry names an entry")
                .clone(),
            None => prepared.entry.clone(),
        };
        let sending = Sending {
            recommendation: index,
            resource_version: prepared.resource_version,
            retry: retry.is_some(),
            now,
        };
        if self.options.dry_run {
            self.report.sent = Some((index, entry));
            return Err(Stop::Finished);
        }
        if retry.is_none() {
            entry.reason = None;
            journal.prune(now, retention);
            journal.entries.push(entry.clone());
            if let Err(e) = journal.validate() {
                self.report.per_move.push((
                    index,
                    Withhold::new(DispatchReason::JournalPayloadInvalid, e.to_string()),
                ));
                return Err(Stop::Finished);
            }
            self.save(&journal, &breaker).await?;
        }
        Ok((journal, breaker, entry, sending))
    }

    /// The object the decision read must be the one the patch lands on: its current state.
    async fn owner_unchanged(
        &mut self,
        journal: &Journal,
        entry: &Entry,
        sending: &Sending,
    ) -> Result<ServiceState, Stop> {
        let service = self
            .store
            .read_service(&entry.workload.namespace, &entry.workload.name, &entry.uuid)
            .await?;
        let current = service.filter(|s| {
            s.uid == entry.workload_uid
                && (sending.retry || s.resource_version == sending.resource_version)
        });
        current.ok_or_else(|| {
            self.report.journal = Some(journal.clone());
            self.report.per_move.push((
                sending.recommendation,
                Withhold::new(
                    DispatchReason::OwnerChanged,
                    format!(
                        "{} changed after the move was checked; the prepared request {} is retried next pass",
                        entry.workload, entry.uuid
                    ),
                ),
            ));
            Stop::Finished
        })
    }

    /// Stamps the attempt, so no other run retries the request while this one sends it.
    async fn mark_attempt(
        &mut self,
        journal: &mut Journal,
        breaker: &Breaker,
        entry: &Entry,
        now: Timestamp,
    ) -> Result<(), Stop> {
        set_entry(journal, &entry.uuid, |e| {
            e.last_attempt = Some(now);
            e.reason = Some(EntryReason::SubmissionPrepared);
        });
        self.save(journal, breaker).await
    }

    /// Sends the request unless the annotation is already there; true when it is on the object
    /// (a failed patch may still have landed, so the object is read back).
    async fn send(&mut self, service: &ServiceState, entry: &Entry) -> bool {
        let (namespace, name) = (&entry.workload.namespace, &entry.workload.name);
        if let Some(value) = &service.request {
            return *value == entry.payload;
        }
        let patch = migration::request_patch(
            &service.uid,
            &service.resource_version,
            service.has_annotations,
            &entry.uuid,
            &entry.payload,
        );
        match self.store.patch_service(namespace, name, &patch).await {
            Ok(()) => true,
            Err(_) => self
                .store
                .read_service(namespace, name, &entry.uuid)
                .await
                .ok()
                .flatten()
                .and_then(|s| s.request)
                .is_some_and(|v| v == entry.payload),
        }
    }

    /// Journals what the send did, and reports it.
    async fn record(
        &mut self,
        mut journal: Journal,
        breaker: &Breaker,
        entry: &Entry,
        index: usize,
        sent: bool,
    ) {
        let (phase, reason) = if sent {
            (Phase::Submitted, EntryReason::RequestSubmitted)
        } else {
            (Phase::Prepared, EntryReason::SubmissionUncertain)
        };
        set_entry(&mut journal, &entry.uuid, |e| {
            e.phase = phase;
            e.reason = Some(reason);
        });
        let saved = self.save(&journal, breaker).await.is_ok();
        let entry = journal.find(&entry.uuid).expect("just written").clone();
        self.report.journal = Some(journal);
        if !saved {
            self.report.per_move.push((
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
            self.report.sent = Some((index, entry));
        } else {
            self.report.per_move.push((
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
    }

    /// Saves the journal at the version last seen; when someone else wrote first, the pass
    /// starts over.
    async fn save(&mut self, journal: &Journal, breaker: &Breaker) -> Result<(), Stop> {
        let written = self
            .store
            .write_journal(&self.version, &journal.to_json(), &breaker.to_json())
            .await?;
        match written {
            Some(v) => {
                self.version = v;
                Ok(())
            }
            None => Err(Stop::Restart),
        }
    }
}

/// What sending a journaled request needs to know.
struct Sending {
    recommendation: usize,
    /// The InferenceService's resourceVersion the re-check read (a new request's patch must
    /// land on exactly that object).
    resource_version: String,
    retry: bool,
    now: Timestamp,
}

fn set_entry(journal: &mut Journal, uuid: &str, f: impl FnOnce(&mut Entry)) {
    if let Some(e) = journal.entries.iter_mut().find(|e| e.uuid == uuid) {
        f(e);
    }
}
