//! The dispatcher's decisions (alfred-reference.md §5 "Dispatcher"): what one execute pass may
//! send, and why everything else is withheld. The plugin does the reads and writes in the
//! order these functions lay out; a crash between any two of them leaves a journal the next
//! run reconciles.

use sha2::{Digest, Sha256};

use super::arbiter::{self, Admission, DispatchHistory, Verdict};
use super::breaker::Breaker;
use super::journal::{Entry, Journal, JournalError, Phase};
use super::reconcile::{self, Timing, Transition};
use crate::annotations;
use crate::api::keys;
use crate::config::{Config, OperatingMode};
use crate::decision::{self, Decision, PolicyName, Recommendation, Row, RowOutcome};
use crate::migration;
use crate::model::Context;
use crate::snapshot::Snapshot;

/// The longest a dispatch pass may run. A `prepared` request attempted less than this long ago
/// may still be in the hands of the run that attempted it, so no other run retries it yet.
pub const PASS_DEADLINE: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(30);

pub use super::recheck::{Prepared, preflight};
pub use crate::reasons::DispatchReason;

/// A reason and what exactly it is about.
#[derive(Clone, Debug, PartialEq)]
pub struct Withhold {
    pub reason: DispatchReason,
    pub detail: String,
}

impl Withhold {
    pub fn new(reason: impl Into<DispatchReason>, detail: impl Into<String>) -> Withhold {
        Withhold {
            reason: reason.into(),
            detail: detail.into(),
        }
    }
}

/// The journal as this pass found it, and what reconciling it changed.
#[derive(Clone, Debug)]
pub struct JournalState {
    pub journal: Journal,
    pub breaker: Breaker,
    pub transitions: Vec<Transition>,
}

/// One execute pass on one read of the cluster.
#[derive(Clone, Debug)]
pub struct Plan {
    pub decision: Decision,
    /// `Err` when the journal cannot be used: nothing is sent.
    pub journal: Result<JournalState, JournalError>,
    /// The arbiter's verdicts, in the order it considered the moves.
    pub verdicts: Vec<Verdict>,
    /// Why nothing at all may be sent this pass.
    pub withheld: Option<Withhold>,
    /// A `prepared` entry of ours to send again (same UUID) instead of a new move.
    pub retry: Option<String>,
}

impl Plan {
    /// The admitted moves, in arbiter order: (recommendation index, admission).
    pub fn admitted(&self) -> impl Iterator<Item = (usize, &Admission)> {
        self.verdicts
            .iter()
            .filter_map(|v| v.result.as_ref().ok().map(|a| (v.recommendation, a)))
    }
}

/// Why execute mode is off, if it is.
pub fn execution_disabled(config: &Config) -> Option<String> {
    if config.mode != OperatingMode::Execute {
        Some(format!(
            "Alfred's mode is {}; set mode: execute to let it migrate",
            config.mode.as_str()
        ))
    } else if !config.migration_api_available() {
        Some("migration.apiVersion is not v1; OME's migration API is not configured".into())
    } else if !config.omenative_migration_enabled {
        Some("omenativeMigrationEnabled is false".into())
    } else {
        None
    }
}

/// The first InferenceService whose cooldown annotation execute mode cannot trust.
pub fn invalid_cooldown(snapshot: &Snapshot) -> Option<String> {
    snapshot.inference_services.iter().find_map(|s| {
        let value = s
            .metadata
            .annotations
            .as_ref()?
            .get(keys::COOLDOWN_MINUTES)?;
        let error = annotations::cooldown_minutes(value).err()?;
        Some(format!(
            "{}/{}: {error}",
            s.metadata.namespace.as_deref().unwrap_or_default(),
            s.metadata.name.as_deref().unwrap_or_default()
        ))
    })
}

/// How long finished entries stay: an hour, or the longest cooldown that reads them.
pub fn retention(ctx: &Context<'_>) -> k8s_openapi::jiff::SignedDuration {
    let longest = ctx
        .workloads
        .iter()
        .map(|w| w.cooldown_minutes)
        .chain([
            ctx.config.per_workload_cooldown_minutes,
            ctx.config.per_node_cooldown_minutes,
        ])
        .max()
        .unwrap_or(0);
    let cooldown = k8s_openapi::jiff::SignedDuration::from_mins(longest.min(i64::MAX / 60));
    cooldown.max(super::journal::RETENTION)
}

/// Loads and reconciles the journal (`state`: the ConfigMap's `state.json`, `None` when the
/// ConfigMap or key is missing, which reads as an empty journal), then arbitrates.
pub fn plan(ctx: &Context<'_>, state: Option<&str>, breaker: Option<&str>) -> Plan {
    plan_with(ctx, decision::plan(ctx), state, breaker)
}

/// `plan` with the decision already made on this very read.
pub fn plan_with(
    ctx: &Context<'_>,
    decision: Decision,
    state: Option<&str>,
    breaker: Option<&str>,
) -> Plan {
    let journal = load_and_reconcile(ctx, state, breaker);
    let (withheld, retry) = match &journal {
        Err(e) => (
            Some(Withhold::new(
                DispatchReason::JournalUnavailable,
                e.to_string(),
            )),
            None,
        ),
        Ok(s) => pass_wide(ctx, &s.journal),
    };
    let (history, breaker_open_until) = match &journal {
        Ok(s) => (
            history(ctx, &s.journal, retry.as_deref()),
            s.breaker.open(ctx.now()),
        ),
        Err(_) => (DispatchHistory::default(), None),
    };
    let verdicts = arbiter::admit(
        ctx,
        &decision.recommendations,
        &arbiter::Inputs {
            history: &history,
            breaker_open_until,
        },
    );
    Plan {
        decision,
        journal,
        verdicts,
        withheld,
        retry,
    }
}

/// The journal's dispatches as the arbiter counts them; a prepared request being retried is
/// the move itself, not something in its way.
pub(super) fn history(
    ctx: &Context<'_>,
    journal: &Journal,
    retry: Option<&str>,
) -> DispatchHistory {
    let mut history = DispatchHistory::from_journal(journal, ctx);
    history
        .dispatches
        .retain(|d| Some(d.uuid.as_str()) != retry);
    history
}

/// The stored journal and breaker (none stored: empty ones), reconciled with the cluster.
fn load_and_reconcile(
    ctx: &Context<'_>,
    state: Option<&str>,
    breaker: Option<&str>,
) -> Result<JournalState, JournalError> {
    let mut journal = match state {
        None => Journal::new(),
        Some(text) => Journal::load(text)?,
    };
    let mut breaker = Breaker::load(breaker)?;
    let timing = Timing {
        now: ctx.now(),
        acknowledgement_timeout: ctx.config.migration.acknowledgement_timeout,
        failure_backoff: ctx.config.migration.failure_backoff,
    };
    let transitions = reconcile::reconcile(&mut journal, &mut breaker, ctx.snapshot, timing);
    Ok(JournalState {
        journal,
        breaker,
        transitions,
    })
}

/// The pass-wide checks, in the reference's order; a lone `prepared` entry is retried.
fn pass_wide(ctx: &Context<'_>, journal: &Journal) -> (Option<Withhold>, Option<String>) {
    let unresolved: Vec<&Entry> = journal.unresolved().collect();
    let mut retry = None;
    match unresolved.as_slice() {
        [] => {}
        [one] if one.phase == Phase::Prepared => {
            let attempted = one
                .last_attempt
                .filter(|&t| ctx.now().duration_since(t) < PASS_DEADLINE);
            if let Some(t) = attempted {
                return (
                    Some(Withhold::new(
                        DispatchReason::UnresolvedRequest,
                        format!(
                            "request {} for {} is being sent by another run (attempted at {t})",
                            one.uuid, one.workload
                        ),
                    )),
                    None,
                );
            }
            retry = Some(one.uuid.clone());
        }
        [one] => {
            return (
                Some(Withhold::new(
                    DispatchReason::UnresolvedRequest,
                    format!(
                        "request {} for {} is {} ({})",
                        one.uuid,
                        one.workload,
                        one.phase.as_str(),
                        one.reason_str()
                    ),
                )),
                None,
            );
        }
        many => {
            return (
                Some(Withhold::new(
                    DispatchReason::MultipleUnresolvedRequests,
                    format!("{} requests of Alfred's are unresolved", many.len()),
                )),
                None,
            );
        }
    }
    let now = ctx.now();
    let withheld = if let Some(why) = execution_disabled(ctx.config) {
        Some(Withhold::new(DispatchReason::ExecutionDisabled, why))
    } else if let Some(why) = invalid_cooldown(ctx.snapshot) {
        Some(Withhold::new(DispatchReason::InvalidCooldown, why))
    } else if let Err(problem) = super::guard::check(&ctx.snapshot.migration_guard) {
        Some(Withhold::new(
            DispatchReason::GuardUnavailable,
            problem.to_string(),
        ))
    } else {
        journal.backoff_until.filter(|&b| now < b).map(|b| {
            Withhold::new(
                DispatchReason::FailureBackoff,
                format!("a request of Alfred's failed or stalled; the next may go at {b}"),
            )
        })
    };
    (withheld, retry)
}

/// What the decision relied on about the source: the InferenceService and InferenceReplica
/// identities and generations, and the Instance's pods and their nodes.
pub fn fingerprint(ctx: &Context<'_>, instance: usize) -> String {
    let cluster = &ctx.cluster;
    let inst = &cluster.instances[instance];
    let component = &cluster.components[inst.component];
    let isvc = &cluster.workloads[component.workload].isvc.metadata;
    let mut text = format!(
        "isvc {} {}\n",
        isvc.uid.as_deref().unwrap_or_default(),
        isvc.generation.unwrap_or(0)
    );
    if let Some(r) = component.replica {
        text += &format!(
            "ir {} {}\n",
            r.metadata.uid.as_deref().unwrap_or_default(),
            r.metadata.generation.unwrap_or(0)
        );
    }
    let mut pods: Vec<String> = inst
        .pods
        .iter()
        .map(|&p| {
            let pod = &cluster.pods[p];
            format!(
                "pod {} {} {}\n",
                pod.name,
                pod.pod.metadata.uid,
                pod.node.unwrap_or_default()
            )
        })
        .collect();
    pods.sort();
    text.extend(pods);
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What the output rows are made of.
pub struct RowInputs<'a> {
    pub plan: &'a Plan,
    /// The journal after the pass, when it could be read.
    pub journal: Option<&'a Journal>,
    pub transitions: &'a [Transition],
    pub pass_withheld: Option<&'a Withhold>,
    pub per_move: &'a [(usize, Withhold)],
    /// The request sent in this pass and its recommendation.
    pub sent: Option<(usize, &'a Entry)>,
}

/// Rows for the pass's output: every recommendation with its arbiter or dispatch outcome, then
/// one row for each of Alfred's other requests that is unresolved or ended in this pass.
pub fn rows(inputs: &RowInputs<'_>) -> Vec<Row> {
    let plan = inputs.plan;
    let mut rows: Vec<Row> = plan
        .decision
        .recommendations
        .iter()
        .map(|r| r.row.clone())
        .collect();
    for v in &plan.verdicts {
        let row = &mut rows[v.recommendation];
        let admission = match &v.result {
            Err(rejection) => {
                row.reject(rejection.reason);
                continue;
            }
            Ok(admission) => admission,
        };
        row.cooldown_overridden = admission.cooldown_overridden;
        row.target = admission
            .landings
            .first()
            .map(|(_, n)| n.clone())
            .unwrap_or_default();
        match inputs.sent {
            Some((i, entry)) if i == v.recommendation => row.dispatch(
                RowOutcome::Submitted,
                entry.reason.map(DispatchReason::Entry),
                Some(entry.uuid.clone()),
            ),
            _ => {
                let reason = inputs
                    .per_move
                    .iter()
                    .rev()
                    .find(|(i, _)| *i == v.recommendation)
                    .map(|(_, w)| w.reason)
                    .or(inputs.pass_withheld.map(|w| w.reason))
                    .unwrap_or(if inputs.sent.is_some() {
                        DispatchReason::SerialDispatchLimit
                    } else {
                        DispatchReason::ExecutionDisabled
                    });
                row.dispatch(RowOutcome::Withheld, Some(reason), None);
            }
        }
    }
    let sent_uuid = inputs.sent.map(|(_, e)| e.uuid.as_str());
    for entry in inputs.journal.iter().flat_map(|j| &j.entries) {
        let ended_now = inputs.transitions.iter().any(|t| t.uuid == entry.uuid);
        if (entry.phase.is_terminal() && !ended_now) || sent_uuid == Some(entry.uuid.as_str()) {
            continue;
        }
        rows.push(journal_row(entry));
    }
    rows
}

/// A row for one of Alfred's requests, as the journal has it.
pub fn journal_row(entry: &Entry) -> Row {
    let request = migration::parse_request(&entry.payload).ok();
    let reason = request
        .as_ref()
        .and_then(|r| r.reason.as_deref())
        .and_then(decision::CandidateReason::parse)
        .unwrap_or(decision::CandidateReason::Fragmentation);
    let mut row = Row::new(
        &entry.workload.to_string(),
        entry.component,
        entry.instance,
        PolicyName::MigrationDispatch,
        reason,
        &entry.from_node,
        0.0,
    );
    row.dispatch(
        entry.status(),
        entry.reason.map(DispatchReason::Entry),
        Some(entry.uuid.clone()),
    );
    row.hint_targets = request.map(|r| r.hint_target_nodes).unwrap_or_default();
    row
}

/// Alfred's requests as a recommend-only pass shows them: reconciled in memory with the
/// cluster, those unresolved or ended in this pass, a `prepared` one withheld with
/// `ExecutionDisabled` (alfred-policies.md "The arbiter"). A journal that cannot be read
/// gives its error instead.
pub fn journal_recommendations(
    ctx: &Context<'_>,
    state: Option<&str>,
    breaker: Option<&str>,
) -> Result<Vec<Recommendation>, JournalError> {
    if state.is_none() {
        return Ok(Vec::new());
    }
    let JournalState {
        journal,
        transitions,
        ..
    } = load_and_reconcile(ctx, state, breaker)?;
    Ok(journal
        .entries
        .iter()
        .filter(|e| !e.phase.is_terminal() || transitions.iter().any(|t| t.uuid == e.uuid))
        .map(|e| {
            let mut row = journal_row(e);
            if e.phase == Phase::Prepared {
                row.dispatch_reason = Some(DispatchReason::ExecutionDisabled);
            }
            let detail = format!(
                "Alfred's request {} from execute mode is {} ({}); Alfred runs recommend-only, so nothing more is sent.",
                e.uuid,
                e.status(),
                row.dispatch_reason.map_or("", DispatchReason::as_str)
            );
            Recommendation::new(row, 0, detail)
        })
        .collect())
}
