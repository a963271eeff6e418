//! `kubectl alfred solve -f problem.yaml`: the assignment solver on a user's own problem.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use alfred::solver::file::{ProblemDocument, SolutionReport};
use alfred::solver::{Budget, solve};
use anyhow::{Result, anyhow};

use crate::{GlobalArgs, render, source};

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
    match render::structured(&report, args.output)? {
        Some(text) => render::emit(&text),
        None => render::emit(&table(&report, elapsed)?),
    }
}

fn table(r: &SolutionReport, elapsed: Duration) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "{} after {} moves in {:.3} s; broken constraint components {} -> {}",
        r.end_reason,
        r.moves.len(),
        elapsed.as_secs_f64(),
        r.broken.initial,
        r.broken.final_
    )?;
    writeln!(
        out,
        "violation of broken constraints: {} -> {}",
        r.initial_violation, r.final_violation
    )?;
    for (i, p) in r.priorities.iter().enumerate() {
        writeln!(
            out,
            "goals at priority {p}: {} -> {}",
            r.initial_objective[i], r.final_objective[i]
        )?;
    }
    if !r.moves.is_empty() {
        let rows: Vec<Vec<String>> = r
            .moves
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let to = if m.swap {
                    format!("{} (swap)", m.to)
                } else {
                    m.to.clone()
                };
                vec![(i + 1).to_string(), m.object.clone(), m.from.clone(), to]
            })
            .collect();
        writeln!(out)?;
        render::columns(&mut out, &["#", "OBJECT", "FROM", "TO"], &rows);
    }
    if !r.unmovable.is_empty() {
        writeln!(out)?;
        writeln!(out, "Could not move:")?;
        for u in &r.unmovable {
            writeln!(out, "  {} on {}: {}", u.object, u.container, u.reason)?;
        }
    }
    Ok(out)
}
