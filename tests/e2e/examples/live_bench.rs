//! Live reads against file replays at scale: seeds a local control plane with the synthetic
//! cluster of the load benchmark (default 10,000 8-GPU nodes, 41,000 pods and their
//! InferenceServices and InferenceReplicas), then times `kubectl alfred recommend` on the live
//! cluster, `kubectl alfred snapshot`, and `recommend -f` of that snapshot, with their peak
//! memory, in the same run.
//!
//!     make bench-live                      (cargo run --release -p alfred-e2e --example live_bench)
//!     ... --example live_bench -- NODES PODS RUNS

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

use alfred_e2e::Cluster;
use serde_json::Value;

#[path = "../../../shared/examples/common/synthetic.rs"]
mod synthetic;

const NOW: &str = "2026-09-28T10:15:00Z";

/// Live reads against file replays on a seeded local control plane.
#[derive(clap::Parser)]
struct Args {
    #[arg(default_value_t = 10_000)]
    nodes: usize,
    #[arg(default_value_t = 41_000)]
    pods: usize,
    /// Runs of each command
    #[arg(default_value_t = 3)]
    runs: usize,
}

fn main() {
    let Args { nodes, pods, runs } = clap::Parser::parse();

    let cluster = Cluster::up("live-bench");
    let started = Instant::now();
    seed(&cluster, nodes, pods);
    eprintln!(
        "seeded {nodes} nodes and {pods} pods in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // Builds to compare (ALFRED_BENCH_BUILDS=dir1,dir2), each holding a kubectl-alfred.
    let builds: Vec<String> = match std::env::var("ALFRED_BENCH_BUILDS") {
        Ok(dirs) => dirs.split(',').map(str::to_string).collect(),
        Err(_) => vec![release_dir()],
    };
    let mut rows = Vec::new();
    for run in 0..runs {
        for build in &builds {
            let snapshot = cluster
                .dir
                .join(format!("snapshot-{}.json", rows.len() % builds.len()));
            let file = snapshot.display().to_string();
            let out = (run == 0).then_some(snapshot.as_path());
            let live = measure(
                &cluster,
                build,
                &["recommend", "-o", "json", "--now", NOW],
                None,
            );
            let snap = measure(&cluster, build, &["snapshot", "-o", "json"], out);
            let replay = measure(
                &cluster,
                build,
                &["recommend", "-o", "json", "--now", NOW, "-f", &file],
                None,
            );
            rows.push((build.clone(), live, snap, replay));
        }
    }
    let size = std::fs::metadata(cluster.dir.join("snapshot-0.json"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!("snapshot file: {:.1} MB", size as f64 / 1e6);
    println!(
        "{:<40} {:>22} {:>22} {:>22}",
        "BUILD", "RECOMMEND LIVE s/MiB", "SNAPSHOT s/MiB", "RECOMMEND -f s/MiB"
    );
    let cell = |(s, kib): (f64, u64)| format!("{s:.2} / {:.0}", kib as f64 / 1024.0);
    for (build, live, snap, replay) in rows {
        println!(
            "{build:<40} {:>22} {:>22} {:>22}",
            cell(live),
            cell(snap),
            cell(replay)
        );
    }
}

/// Creates the objects, then their statuses, through `seed.py` (many requests side by side).
fn seed(cluster: &Cluster, nodes: usize, pods: usize) {
    let text = synthetic::generate(nodes, pods, pods / 80);
    let list: Value = serde_json::from_str(&text).unwrap();
    let objects = cluster.dir.join("objects.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&objects).unwrap());
    for mut o in list["items"].as_array().unwrap().iter().cloned() {
        let meta = o["metadata"].as_object_mut().unwrap();
        meta.remove("uid");
        meta.remove("resourceVersion");
        writeln!(file, "{o}").unwrap();
    }
    drop(file);
    let status = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seed.py"))
        .arg(&cluster.dir)
        .arg(&objects)
        .status()
        .unwrap();
    assert!(status.success(), "seeding failed");
}

/// Where the release build of the plugin is: measured rather than the debug build the tests use.
fn release_dir() -> String {
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_string());
    let dir = format!("{target}/release");
    assert!(
        std::path::Path::new(&format!("{dir}/kubectl-alfred")).exists(),
        "build the plugin first: cargo build --release -p kubectl-alfred"
    );
    dir
}

/// Seconds and peak RSS (KiB) of `kubectl-alfred ARGS` of `build` run directly; its stdout
/// goes to `out` when given.
fn measure(
    cluster: &Cluster,
    build: &str,
    args: &[&str],
    out: Option<&std::path::Path>,
) -> (f64, u64) {
    let stats = cluster.dir.join("time.txt");
    let mut command = Command::new("/usr/bin/time");
    command
        .args(["-f", "%e %M", "-o"])
        .arg(&stats)
        .arg("kubectl-alfred")
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", format!("{build}:{}", cluster.path()))
        .stderr(Stdio::piped());
    match out {
        Some(path) => command.stdout(std::fs::File::create(path).unwrap()),
        None => command.stdout(Stdio::null()),
    };
    let started = Instant::now();
    let result = command
        .output()
        .expect("/usr/bin/time runs (apt-get install time)");
    let took = started.elapsed().as_secs_f64();
    assert!(
        result.status.success(),
        "kubectl-alfred {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&result.stderr)
    );
    let text = std::fs::read_to_string(&stats).unwrap();
    let kib = text
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse().ok())
        .unwrap_or(0);
    (took, kib)
}
