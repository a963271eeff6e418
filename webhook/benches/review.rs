//! One AdmissionReview answered in-process (no sockets): parse, rules or defaults, answer;
//! each fixture as written and as the API server sends it (compact, with the server's fields).
//! `cargo bench -p alfred-webhook --bench review`

#[path = "../examples/loadgen/shape.rs"]
mod shape;

use alfred::rollout::strategy::OperatorDefaults;
use alfred_webhook::review::{Context, Hook, review};
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

criterion_group!(benches, reviews);
criterion_main!(benches);
