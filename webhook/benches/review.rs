//! One AdmissionReview answered in-process (no sockets): parse, rules or defaults, answer.
//! `cargo bench -p alfred-webhook --bench review`

use alfred::strategy::OperatorDefaults;
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
        let body = std::fs::read(format!("{dir}/{fixture}")).expect("fixture");
        c.bench_function(&format!("{} {fixture}", hook.as_str()), |b| {
            b.iter(|| review(&body, hook, &ctx, |_| Ok(None)).expect("a review"))
        });
    }
}

criterion_group!(benches, reviews);
criterion_main!(benches);
