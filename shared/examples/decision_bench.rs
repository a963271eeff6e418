//! Benchmark of the decision pass: a synthetic cluster (default 10,000 8-GPU nodes, 30,000
//! Instances, 1,000 pending pods), every Instance eligible (`migration.apiVersion: v1`), so
//! the pass scores both pools, plans a move for each Instance and weighs it. Prints the pass's
//! time over several runs (median and range) and peak memory; `--write FILE` keeps the snapshot
//! for timing `kubectl alfred recommend -f FILE` end to end.
//!
//!     cargo run --release -p alfred-shared --example decision_bench -- [NODES] [INSTANCES] [PENDING] [--write FILE]

use std::time::Instant;

#[path = "common/synthetic.rs"]
mod synthetic;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alfred::config::Config;
use alfred::decision::decide;
use alfred::model::Context;
use alfred::model::cluster::Cluster;
use alfred::simulate::{Ledger, NewPod, simulate};
use alfred::snapshot::Snapshot;

const RUNS: usize = 7;

fn runs() -> usize {
    std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(RUNS)
}

/// The decision pass on a synthetic cluster, every Instance eligible.
#[derive(clap::Parser)]
struct Args {
    #[arg(default_value_t = 10_000)]
    nodes: usize,
    #[arg(default_value_t = 30_000)]
    instances: usize,
    #[arg(default_value_t = 1_000)]
    pending: usize,
    /// Keep the snapshot, for timing `kubectl alfred recommend -f FILE`
    #[arg(long, value_name = "FILE")]
    write: Option<String>,
}

fn main() {
    let Args {
        nodes,
        instances,
        pending,
        write,
    } = clap::Parser::parse();
    let text = synthetic::generate(nodes, instances + pending, pending);
    if let Some(path) = write {
        std::fs::write(&path, &text).expect("write snapshot");
        println!("snapshot written to {path}");
    }
    let snapshot = Snapshot::parse(&text).expect("parse");
    drop(text);
    let config = Config::parse("schemaVersion: 1\nmigration: {apiVersion: v1}\n").expect("config");
    let now = "2026-09-28T10:15:00Z".parse().unwrap();
    let cluster = Cluster::build(&snapshot, &config, now);
    println!(
        "cluster: {} nodes, {} instances, {} pending pods",
        cluster.nodes.len(),
        cluster.instances.len(),
        cluster.pending.len()
    );
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..runs() {
        let model = Cluster::build(&snapshot, &config, now);
        let start = Instant::now();
        let decision = decide(&Context::of(model, &snapshot, &config));
        times.push(start.elapsed().as_secs_f64() * 1e3);
        rows = decision.recommendations.len();
    }
    times.sort_by(f64::total_cmp);
    println!(
        "decision pass: median {:.0} ms (min {:.0}, max {:.0}) over {} runs; {rows} rows",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        times.len()
    );
    // What simulation adds to a pass: its ledger and up to 8 simulated rows, best first.
    let mut contexts = Vec::new();
    for _ in 0..runs() {
        let model = Cluster::build(&snapshot, &config, now);
        let start = Instant::now();
        let ctx = Context::of(model, &snapshot, &config);
        contexts.push(start.elapsed().as_secs_f64() * 1e3);
        drop(ctx);
    }
    let ctx = Context::build(&snapshot, &config, now);
    let mut policies = Vec::new();
    let mut planned = Vec::new();
    for _ in 0..runs() {
        let start = Instant::now();
        planned = alfred::decision::plan(&ctx).recommendations;
        policies.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let mut attach = Vec::new();
    for _ in 0..runs() {
        let mut rows = planned.clone();
        let start = Instant::now();
        alfred::decision::simulate_rows(&ctx, &mut rows);
        attach.push(start.elapsed().as_secs_f64() * 1e3);
        let simulated = rows.iter().filter(|r| r.simulation.is_some()).count();
        assert!(simulated > 0, "the pass simulates its best rows");
    }
    drop(ctx);
    // Simulation: one Ledger (what a pass builds once) and an 8-pod gang on the whole cluster.
    let gang_config = Config::parse(
        "schemaVersion: 1\nscheduling: {profiles: {default-scheduler: {backend: b, schedulerVersion: v, configurationID: c, gangScheduling: true}}}\n",
    )
    .expect("config");
    let ctx = Context::build(&snapshot, &gang_config, now);
    let cluster = &ctx.cluster;
    let mut ledgers = Vec::new();
    let mut gangs = Vec::new();
    for _ in 0..runs() {
        let start = Instant::now();
        let ledger = Ledger::new(cluster);
        ledgers.push(start.elapsed().as_secs_f64() * 1e3);
        let pods: Vec<NewPod> = (0..8)
            .map(|k| NewPod {
                name: format!("gang-{k}"),
                ..NewPod::like(&cluster.pods[k])
            })
            .collect();
        let start = Instant::now();
        let outcome = simulate(&ctx, &ledger, &pods, &[]);
        gangs.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(outcome.placements.len(), 8, "{}", outcome.message);
    }
    for (what, times) in [
        (
            "context (workload settings, model access, pool order)",
            &mut contexts,
        ),
        ("policies alone (context built once)", &mut policies),
        ("simulation in a pass (ledger + 8 rows)", &mut attach),
        ("ledger (once a pass)", &mut ledgers),
        ("8-pod gang simulation", &mut gangs),
    ] {
        times.sort_by(f64::total_cmp);
        println!(
            "{what}: median {:.1} ms (min {:.1}, max {:.1})",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
    if let Some(kib) = peak_rss_kib() {
        println!(
            "peak RSS: {:.0} MiB (snapshot text, parsed snapshot and model included)",
            kib as f64 / 1024.0
        );
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
