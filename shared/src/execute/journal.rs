//! The dispatch journal (alfred-reference.md §3.2): ConfigMap `alfred-dispatch-state`, key
//! `state.json`. Every request Alfred prepares is written here before it is sent, so a later
//! run can tell what happened to it. Loading is strict: a journal that is not exactly what
//! Alfred writes stops dispatch (`JournalUnavailable`) instead of being guessed at.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::api::component::ComponentKind;
use crate::decision::RowOutcome;
use crate::kubernetes::names;
use crate::migration::MAX_PAYLOAD_BYTES;

pub const CONFIG_MAP_NAME: &str = "alfred-dispatch-state";
pub const STATE_KEY: &str = "state.json";
pub const VERSION: &str = "v1";
pub const MAX_BYTES: usize = 512 * 1024;
pub const MAX_ENTRIES: usize = 256;
/// Finished entries are kept at least this long (longer when a cooldown is longer).
pub const RETENTION: SignedDuration = SignedDuration::from_hours(1);

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Journal {
    pub version: String,
    pub entries: Vec<Entry>,
    /// No request before this time: one of ours failed or stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<Timestamp>,
}

/// The InferenceService a request is for (capitalised keys, as the reference writes them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRef {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Name")]
    pub name: String,
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

crate::named! {
    pub enum Phase {
        Prepared = "prepared",
        Submitted = "submitted",
        Acknowledged = "acknowledged",
        Completed = "completed",
        Failed = "failed",
        Stalled = "stalled",
    }
}

crate::serde_by_name!(Phase);

impl Phase {
    /// Only a completed or failed migration ends an entry; a stalled one still blocks.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }

    /// The reasons an entry in this phase may carry (`None` allowed only for `prepared`).
    fn allows(self, reason: Option<EntryReason>) -> bool {
        use EntryReason::*;
        match (self, reason) {
            (Self::Prepared, None | Some(SubmissionPrepared | SubmissionUncertain)) => true,
            (Self::Submitted, Some(RequestSubmitted | RequestAnnotationObserved)) => true,
            (Self::Acknowledged, Some(UUIDStatusObserved)) => true,
            (Self::Completed | Self::Failed, Some(TerminalStatusObserved)) => true,
            (Self::Stalled, Some(r)) => r.is_stall(),
            _ => false,
        }
    }
}

pub use crate::reasons::EntryReason;

impl EntryReason {
    fn is_stall(self) -> bool {
        matches!(
            self,
            Self::AcknowledgementTimeout
                | Self::ConsumerDeadlineExceeded
                | Self::AcknowledgedStatusMissing
                | Self::RequestPayloadChanged
                | Self::OwnerUnavailable
                | Self::ReplicaUnavailable
                | Self::ReplicaIdentityChanged
                | Self::MigrationStatusInvalid
        )
    }

    /// A stall whose awaited result can never come (alfred-policies.md, "A stalled request
    /// can stop Alfred's migrations for good"); `journal resolve` removes only these.
    pub fn never_resolves(self) -> bool {
        matches!(
            self,
            Self::OwnerUnavailable
                | Self::ReplicaUnavailable
                | Self::ReplicaIdentityChanged
                | Self::MigrationStatusInvalid
                | Self::AcknowledgementTimeout
        )
    }
}

/// One request, from preparation to its end.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Entry {
    pub uuid: String,
    pub workload: WorkloadRef,
    #[serde(rename = "workloadUID")]
    pub workload_uid: String,
    pub ir_name: String,
    #[serde(rename = "irUID")]
    pub ir_uid: String,
    pub component: ComponentKind,
    pub instance: i32,
    pub from_node: String,
    /// The simulated target nodes, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// The request annotation's value, exactly as sent.
    pub payload: String,
    pub source_fingerprint: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<EntryReason>,
}

impl Entry {
    /// The outcome a row shows for it: `prepared` is reported as `withheld`.
    /// The entry as a row's status: a prepared request is withheld until it is sent.
    pub fn status(&self) -> RowOutcome {
        match self.phase {
            Phase::Prepared => RowOutcome::Withheld,
            Phase::Submitted => RowOutcome::Submitted,
            Phase::Acknowledged => RowOutcome::Acknowledged,
            Phase::Completed => RowOutcome::Completed,
            Phase::Failed => RowOutcome::Failed,
            Phase::Stalled => RowOutcome::Stalled,
        }
    }

    pub fn reason_str(&self) -> &'static str {
        self.reason.map_or("", EntryReason::as_str)
    }
}

/// Why a journal cannot be used; the whole pass is withheld with `JournalUnavailable`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dispatch journal {CONFIG_MAP_NAME}/{STATE_KEY} is unusable: {0}; Alfred submits nothing until it is repaired (see `kubectl alfred journal list`)"
)]
pub struct JournalError(pub String);

/// What is wrong in a journal that loads but breaks the schema's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidJournal(pub String);

fn invalid(message: impl Into<String>) -> InvalidJournal {
    InvalidJournal(message.into())
}

/// Go's zero time, which Alfred never writes.
fn is_zero_time(t: Timestamp) -> bool {
    t.as_second() == -62_135_596_800
}

/// An RFC 4122 UUID in its canonical lowercase or uppercase text form.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
        && (b'1'..=b'8').contains(&b[14])
        && matches!(b[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}

impl Journal {
    pub fn new() -> Journal {
        Journal {
            version: VERSION.to_string(),
            entries: Vec::new(),
            backoff_until: None,
        }
    }

    /// Reads `state.json` strictly: every form the reference lists as invalid is refused.
    pub fn load(text: &str) -> Result<Journal, JournalError> {
        if text.len() > MAX_BYTES {
            return Err(JournalError(format!(
                "{} bytes, more than the {MAX_BYTES} allowed",
                text.len()
            )));
        }
        let journal: Option<Journal> =
            serde_json::from_str(text).map_err(|e| JournalError(e.to_string()))?;
        let journal = journal.ok_or_else(|| JournalError("the document is null".into()))?;
        journal.validate().map_err(|e| JournalError(e.0))?;
        Ok(journal)
    }

    /// The checks `load` makes after parsing, also run before every save.
    pub fn validate(&self) -> Result<(), InvalidJournal> {
        if self.version != VERSION {
            return Err(invalid(format!(
                "version {:?} is not supported (supported: {VERSION})",
                self.version
            )));
        }
        if self.entries.len() > MAX_ENTRIES {
            return Err(invalid(format!(
                "{} entries, more than the {MAX_ENTRIES} allowed",
                self.entries.len()
            )));
        }
        if self.backoff_until.is_some_and(is_zero_time) {
            return Err(invalid("backoffUntil is the zero time"));
        }
        let mut seen = HashSet::new();
        for (i, e) in self.entries.iter().enumerate() {
            if !seen.insert(e.uuid.to_ascii_lowercase()) {
                return Err(invalid(format!("entries[{i}]: duplicate uuid {}", e.uuid)));
            }
            e.validate()
                .map_err(|m| invalid(format!("entries[{i}] ({}): {m}", e.uuid)))?;
        }
        Ok(())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a journal always serializes")
    }

    pub fn unresolved(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| !e.phase.is_terminal())
    }

    pub fn find(&self, uuid: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.uuid.eq_ignore_ascii_case(uuid))
    }

    /// Drops finished entries that ended more than `retention` ago (exactly `retention` ago is
    /// kept). Unresolved entries and `backoffUntil` are never touched.
    pub fn prune(&mut self, now: Timestamp, retention: SignedDuration) {
        let Ok(horizon) = now.checked_sub(retention) else {
            return;
        };
        self.entries
            .retain(|e| !(e.phase.is_terminal() && e.completed_at.is_some_and(|c| c < horizon)));
    }
}

impl Entry {
    fn validate(&self) -> Result<(), InvalidJournal> {
        if !is_uuid(&self.uuid) {
            return Err(invalid(format!(
                "uuid {:?} is not an RFC 4122 UUID",
                self.uuid
            )));
        }
        if !names::is_dns1123_label(&self.workload.namespace) {
            return Err(invalid(format!(
                "workload namespace {:?} is not a DNS-1123 label",
                self.workload.namespace
            )));
        }
        if !names::is_dns1123_subdomain(&self.workload.name) {
            return Err(invalid(format!(
                "workload name {:?} is not a DNS-1123 subdomain",
                self.workload.name
            )));
        }
        if !names::is_dns1123_subdomain(&self.ir_name) {
            return Err(invalid(format!(
                "irName {:?} is not a DNS-1123 subdomain",
                self.ir_name
            )));
        }
        if self.instance < 0 {
            return Err(invalid(format!(
                "instance must be >= 0, got {}",
                self.instance
            )));
        }
        if self.from_node.is_empty() {
            return Err(invalid("fromNode is empty"));
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(invalid(format!(
                "payload is {} bytes, more than the {MAX_PAYLOAD_BYTES} allowed",
                self.payload.len()
            )));
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(&self.payload).is_err() {
            return Err(invalid("payload is not valid JSON"));
        }
        if self.source_fingerprint.is_empty() {
            return Err(invalid("sourceFingerprint is empty"));
        }
        if is_zero_time(self.created_at) {
            return Err(invalid("createdAt is the zero time"));
        }
        for (name, t) in [
            ("lastAttempt", self.last_attempt),
            ("acknowledgedAt", self.acknowledged_at),
            ("completedAt", self.completed_at),
        ] {
            if t.is_some_and(|t| t < self.created_at) {
                return Err(invalid(format!("{name} is before createdAt")));
            }
        }
        if !self.phase.allows(self.reason) {
            return Err(invalid(format!(
                "phase {} cannot carry reason {:?}",
                self.phase.as_str(),
                self.reason_str()
            )));
        }
        match (self.phase.is_terminal(), self.completed_at.is_some()) {
            (true, false) => Err(invalid(format!(
                "phase {} needs completedAt",
                self.phase.as_str()
            ))),
            (false, true) => Err(invalid(format!(
                "phase {} is unresolved but has completedAt",
                self.phase.as_str()
            ))),
            _ => Ok(()),
        }
    }
}
