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
    /// Then run two caretaker replicas (`kubectl-alfred caretaker`) on the same cluster for
    /// this many passes of the leader: time to sync, each pass from the warm caches, API
    /// requests per pass, and each replica's resident memory. 0 skips it.
    #[arg(long, default_value_t = 0)]
    caretaker_passes: usize,
}

fn main() {
    let Args {
        nodes,
        pods,
        runs,
        caretaker_passes,
    } = clap::Parser::parse();

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
    if caretaker_passes > 0 {
        caretaker(&cluster, &builds[0], caretaker_passes);
    }
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

/// Two caretaker replicas of `build` on the seeded cluster (execute mode, a pass every 5 s):
/// how long until both are ready, then per pass of the leader its duration and API requests,
/// and each replica's resident memory after the passes.
fn caretaker(cluster: &Cluster, build: &str, passes: usize) {
    use std::time::Duration;
    let _ = cluster.kubectl(&["create", "namespace", "ome"]);
    let config =
        "schemaVersion: 1\nmode: execute\nmigration: {apiVersion: v1}\ndecisionLoopInterval: 5s\n";
    for (name, data) in [
        ("alfred-config", Some(config)),
        ("alfred-dispatch-state", None),
        ("alfred-recommendations", None),
    ] {
        let mut args = vec!["create", "configmap", name, "-n", "ome"];
        let literal;
        if let Some(text) = data {
            literal = format!("--from-literal=config.yaml={text}");
            args.push(&literal);
        }
        let _ = cluster.kubectl(&args);
    }
    let guard = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/rbac/migration-guard.yaml"
    );
    cluster.ok(&["apply", "-f", guard]);
    let started = Instant::now();
    /// Killed when dropped, so a failed run leaves no process behind.
    struct Replica(std::process::Child, u16, u16);
    impl Drop for Replica {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let replicas: Vec<Replica> = ["c0", "c1"]
        .iter()
        .map(|id| {
            let (metrics, probes) = (alfred_e2e::free_port(), alfred_e2e::free_port());
            let child = Command::new(format!("{build}/kubectl-alfred"))
                .args(["caretaker", "--namespace", "ome", "--identity", id])
                .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
                .args([
                    "--health-probe-bind-address",
                    &format!("127.0.0.1:{probes}"),
                ])
                .env("KUBECONFIG", &cluster.kubeconfig)
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(cluster.dir.join(format!("logs/caretaker-{id}.err")))
                        .unwrap(),
                )
                .spawn()
                .expect("the caretaker starts");
            Replica(child, metrics, probes)
        })
        .collect();
    for Replica(_, _, probes) in &replicas {
        alfred_e2e::wait_for(Duration::from_secs(600), "the caretaker's /readyz", || {
            cluster.probe(*probes, "/readyz").0 == 200
        });
    }
    println!(
        "caretaker: both replicas ready (caches synced) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let scrape = |port: u16| cluster.probe(port, "/metrics").1;
    let value = |text: &str, series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    };
    let count = "alfred_decision_loop_duration_seconds_count";
    let sum = "alfred_decision_loop_duration_seconds_sum";
    let leader = || {
        replicas
            .iter()
            .map(|Replica(_, m, _)| *m)
            .max_by_key(|m| value(&scrape(*m), count) as u64)
            .unwrap()
    };
    let mut seen = 0.0;
    let mut last_sum = 0.0;
    println!(
        "{:>4} {:>9} {:>5} {:>5} {:>5} {:>5}",
        "PASS", "SECONDS", "GET", "LIST", "WATCH", "WRITE"
    );
    while (seen as usize) < passes {
        std::thread::sleep(Duration::from_millis(200));
        let text = scrape(leader());
        let n = value(&text, count);
        if n <= seen {
            continue;
        }
        let total = value(&text, sum);
        let verb = |v: &str| value(&text, &format!("alfred_pass_api_requests{{verb=\"{v}\"}}"));
        let writes = verb("patch") + verb("update") + verb("create");
        println!(
            "{:>4} {:>9.3} {:>5} {:>5} {:>5} {:>5}",
            n,
            (total - last_sum) / (n - seen),
            verb("get"),
            verb("list"),
            verb("watch"),
            writes
        );
        let failures = value(&text, "alfred_passes_total{outcome=\"failure\"}");
        assert_eq!(failures, 0.0, "a pass failed; see logs/caretaker-*.err");
        seen = n;
        last_sum = total;
    }
    for Replica(child, _, _) in &replicas {
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        println!(
            "caretaker pid {}: resident {} (peak {})",
            child.id(),
            field("VmRSS:"),
            field("VmHWM:")
        );
    }
}
