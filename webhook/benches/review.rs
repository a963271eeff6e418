//! One AdmissionReview answered in-process (no sockets): parse, rules or defaults, answer;
//! each fixture as written and as the API server sends it (compact, with the server's fields).
//! Then what metrics add: a review counted, a scrape.
//! `cargo bench -p alfred-webhook --bench review`

#[path = "../examples/loadgen/shape.rs"]
mod shape;

use alfred::rollout::strategy::OperatorDefaults;
use std::time::Duration;

use alfred_webhook::metrics::Metrics;
use alfred_webhook::review::{Context, Hook, ReviewOutcome, review};
use criterion::{Criterion, criterion_group, criterion_main};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn reviews(c: &mut Criterion) {
    let chart = OperatorDefaults::chart();
    let ctx = Context {
        defaults: Some(&chart),
        default_inference_services: false,
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    for (hook, fixture) in [
        (Hook::Validate, "isvc-create-deployment-strategy.json"),
        (Hook::Validate, "isvc-update-bad-cooldown.json"),
        (Hook::Validate, "runtime-zero-budgets.json"),
        (Hook::Mutate, "irep-create-type-only.json"),
    ] {
        let written = std::fs::read(format!("{dir}/{fixture}")).expect("fixture");
        let sent = shape::as_apiserver_sends(&written).expect("a review");
        for (how, body) in [("as written", written), ("as sent", sent)] {
            c.bench_function(&format!("{} {fixture} {how}", hook.as_str()), |b| {
                b.iter(|| review(&body, hook, &ctx, |_| Ok(None)).expect("a review"))
            });
        }
    }
}

/// What a review adds in metrics on the server's path: one counter, one histogram observation.
fn metrics(c: &mut Criterion) {
    let metrics = Metrics::default();
    let took = Duration::from_micros(300);
    c.bench_function("metrics: a review counted", |b| {
        b.iter(|| {
            metrics.review(
                Hook::Mutate,
                "InferenceReplica",
                ReviewOutcome::Patched,
                took,
            )
        })
    });
    c.bench_function("metrics: a scrape", |b| b.iter(|| metrics.render()));
}

criterion_group!(benches, reviews, metrics);
criterion_main!(benches);
