//! `kubectl alfred status`: the safety bounds as they stand (breaker, backoff, requests in
//! flight) and what the next pass may do.

use std::fmt::Write as _;

use alfred::execute::breaker;
use alfred::execute::dispatch;
use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::GlobalArgs;
use crate::render::{self, Reasoned};
use crate::store::standing;

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

pub async fn run(global: &GlobalArgs) -> Result<()> {
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
        withheld: s.plan.withheld.as_ref().map(Reasoned::from),
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
