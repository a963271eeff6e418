//! `kubectl alfred solve -f problem.yaml`: the assignment solver on a user's own problem.

use std::time::{Duration, Instant};

use alfred::solver::file::{ProblemDocument, SolutionReport};
use alfred::solver::{Budget, solve};
use anyhow::{Result, anyhow};
use tabled::settings::Style;
use tabled::{Table, Tabled};

use crate::{GlobalArgs, Output, source};

/// The wall clock the pure solver cannot read.
struct Deadline(Option<Instant>);

impl Budget for Deadline {
    fn exhausted(&self) -> bool {
        self.0.is_some_and(|d| Instant::now() >= d)
    }
}

pub fn run(args: &GlobalArgs) -> Result<()> {
    let path = args.file.as_deref().ok_or_else(|| {
        anyhow!("solve needs a problem file: kubectl alfred solve -f problem.yaml (README \"solve\" has the format)")
    })?;
    let text = source::read_text(path, "problem")?;
    let name = if path == "-" { "standard input" } else { path };
    let doc = ProblemDocument::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?;
    let start = Instant::now();
    let deadline = Deadline(
        doc.time_limit_seconds
            .map(|s| start + Duration::from_secs_f64(s)),
    );
    let solution =
        solve(&doc.problem, &doc.options, &deadline).map_err(|e| anyhow!("{name}: {e}"))?;
    let elapsed = start.elapsed();
    let report = SolutionReport::new(&doc.problem, &solution);
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Yaml => print!("{}", serde_yaml_ng::to_string(&report)?),
        Output::Table | Output::Wide => table(&report, elapsed),
    }
    Ok(())
}

#[derive(Tabled)]
struct MoveRow {
    #[tabled(rename = "#")]
    step: usize,
    #[tabled(rename = "OBJECT")]
    object: String,
    #[tabled(rename = "FROM")]
    from: String,
    #[tabled(rename = "TO")]
    to: String,
}

fn table(r: &SolutionReport, elapsed: Duration) {
    println!(
        "{} after {} moves in {:.3} s; broken constraint components {} -> {}",
        r.end_reason,
        r.moves.len(),
        elapsed.as_secs_f64(),
        r.broken.initial,
        r.broken.final_
    );
    println!(
        "violation of broken constraints: {} -> {}",
        r.initial_violation, r.final_violation
    );
    for (i, p) in r.priorities.iter().enumerate() {
        println!(
            "goals at priority {p}: {} -> {}",
            r.initial_objective[i], r.final_objective[i]
        );
    }
    if !r.moves.is_empty() {
        let rows = r.moves.iter().enumerate().map(|(i, m)| MoveRow {
            step: i + 1,
            object: m.object.clone(),
            from: m.from.clone(),
            to: if m.swap {
                format!("{} (swap)", m.to)
            } else {
                m.to.clone()
            },
        });
        println!();
        println!("{}", Table::new(rows).with(Style::blank()));
    }
    if !r.unmovable.is_empty() {
        println!();
        println!("Could not move:");
        for u in &r.unmovable {
            println!("  {} on {}: {}", u.object, u.container, u.reason);
        }
    }
}
