//! Any text as a `solve` problem file: an error or a solution within a bounded search, with
//! finite figures (a number the file may hold never overflows a sum).
#![no_main]

use alfred::solver::file::ProblemDocument;
use alfred::solver::{Options, solve};
use libfuzzer_sys::fuzz_target;

/// A search bounded by steps instead of a clock, so runs repeat.
struct Steps(std::cell::Cell<u32>);

impl alfred::solver::Budget for Steps {
    fn exhausted(&self) -> bool {
        let left = self.0.get();
        self.0.set(left.saturating_sub(1));
        left == 0
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(doc) = ProblemDocument::parse(text) else {
        return;
    };
    let options = Options {
        max_moves: doc.options.max_moves.min(1000),
        ..doc.options
    };
    if let Ok(solution) = solve(&doc.problem, &options, &Steps(std::cell::Cell::new(10_000))) {
        assert!(solution.initial_violation.is_finite());
        assert!(solution.final_violation.is_finite());
        assert!(solution.initial_objective.iter().all(|v| v.is_finite()));
    }
});
