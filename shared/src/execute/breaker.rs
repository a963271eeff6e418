//! The circuit breaker (alfred-reference.md §5): the last 10 outcomes of Alfred's own
//! migrations; when at least 4 are known and more than half failed, nothing is admitted for 60
//! minutes. Each `migrate` run is a new process, so the breaker is stored next to the journal
//! (key `breaker.json` of the same ConfigMap) and saved in the same write as the journal.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::journal::JournalError;

pub const KEY: &str = "breaker.json";
pub const WINDOW: usize = 10;
pub const MIN_SAMPLES: usize = 4;
pub const PAUSE: SignedDuration = SignedDuration::from_mins(60);

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MigrationOutcome {
    Success,
    Failure,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Breaker {
    /// Oldest first, at most `WINDOW`.
    pub outcomes: Vec<MigrationOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_until: Option<Timestamp>,
}

impl Breaker {
    /// Reads `breaker.json` strictly (absent means a closed breaker with no history).
    pub fn load(text: Option<&str>) -> Result<Breaker, JournalError> {
        let Some(text) = text else {
            return Ok(Breaker::default());
        };
        let b: Breaker =
            serde_json::from_str(text).map_err(|e| JournalError(format!("{KEY}: {e}")))?;
        if b.outcomes.len() > WINDOW {
            return Err(JournalError(format!(
                "{KEY}: {} outcomes, more than the {WINDOW} kept",
                b.outcomes.len()
            )));
        }
        Ok(b)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a breaker always serializes")
    }

    /// Records one migration's end; opens the breaker (and starts a fresh count) when more than
    /// half of at least `MIN_SAMPLES` recent outcomes failed.
    pub fn record(&mut self, outcome: MigrationOutcome, now: Timestamp) {
        self.outcomes.push(outcome);
        if self.outcomes.len() > WINDOW {
            self.outcomes.remove(0);
        }
        let failures = self
            .outcomes
            .iter()
            .filter(|&&o| o == MigrationOutcome::Failure)
            .count();
        if self.outcomes.len() >= MIN_SAMPLES && failures * 2 > self.outcomes.len() {
            self.open_until = Some(now.checked_add(PAUSE).unwrap_or(Timestamp::MAX));
            self.outcomes.clear();
        }
    }

    /// Open until the returned time (exclusive), if open at `now`.
    pub fn open(&self, now: Timestamp) -> Option<Timestamp> {
        self.open_until.filter(|&until| now < until)
    }
}
