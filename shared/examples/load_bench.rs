//! Load benchmark for snapshots: generates a synthetic cluster (default 10,000 8-GPU nodes,
//! 80,000 pods, and the 20,000 OMENative InferenceServices and InferenceReplicas they belong to)
//! as `kubectl get -o json` would print it, then times parsing it and building the
//! cluster model, and reports peak memory (Linux VmHWM).
//!
//!     cargo run --release -p alfred-shared --example load_bench -- [NODES] [PODS] [--write FILE]
//!     cargo run --release -p alfred-shared --example load_bench -- --read FILE   (memory alone)

use std::time::Instant;

#[path = "common/synthetic.rs"]
mod synthetic;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alfred::config::Config;
use alfred::model::cluster::Cluster;
use alfred::snapshot::Snapshot;

/// Parsing a snapshot and building the cluster model: time and peak memory.
#[derive(clap::Parser)]
struct Args {
    #[arg(default_value_t = 10_000)]
    nodes: usize,
    #[arg(default_value_t = 80_000)]
    pods: usize,
    /// Keep the generated snapshot
    #[arg(long, value_name = "FILE")]
    write: Option<String>,
    /// Read this snapshot instead of generating one
    #[arg(long, value_name = "FILE")]
    read: Option<String>,
}

fn main() {
    let Args {
        nodes,
        pods,
        write,
        read,
    } = clap::Parser::parse();
    let text = match read {
        Some(path) => std::fs::read_to_string(path).expect("read snapshot"),
        None => synthetic::generate(nodes, pods, pods / 80),
    };
    if let Some(path) = write {
        std::fs::write(path, &text).expect("write snapshot");
    }
    println!("snapshot: {:.1} MiB of JSON", text.len() as f64 / 1048576.0);
    let rss_before = peak_rss_kib();

    let start = Instant::now();
    let snapshot = Snapshot::parse(&text).expect("parse");
    let parsed = start.elapsed();
    let config = Config::default();
    let now = "2026-09-28T10:15:00Z".parse().unwrap();
    let start = Instant::now();
    let cluster = Cluster::build(&snapshot, &config, now);
    let built = start.elapsed();
    println!(
        "parse: {:.0} ms, cluster model: {:.0} ms, total {:.0} ms",
        parsed.as_secs_f64() * 1e3,
        built.as_secs_f64() * 1e3,
        (parsed + built).as_secs_f64() * 1e3
    );
    println!(
        "objects: {}, pools: {}, instances: {}, pending: {}",
        snapshot.object_count(),
        cluster.pools.len(),
        cluster.instances.len(),
        cluster.pending.len()
    );
    if let (Some(before), Some(after)) = (rss_before, peak_rss_kib()) {
        println!(
            "peak RSS: {:.0} MiB (of which the input text and generator: {:.0} MiB)",
            after as f64 / 1024.0,
            before as f64 / 1024.0
        );
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
