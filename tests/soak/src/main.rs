//! The soak: a world of GPU tasks arriving and leaving (a schedule `churn_bench
//! --schedule-out` wrote, so the replay and the soak see the same tasks), run through a real
//! kube-apiserver and etcd, kube-scheduler placing every pod, KWOK playing the kubelets, a
//! simulated OME controller (`ome.rs`), and several caretaker replicas (`kubectl alfred
//! caretaker`) as processes, leader-elected, as the chart runs them.
//!
//!     soak --schedule FILE --config ALFRED.yaml [--minutes M] [--replicas 3]
//!
//! Prints one JSON line: what the load and OME did and what the caretakers' passes did. The
//! run's directory (`tests/.run/<name>`) keeps every log and `ome.jsonl`, OME's record.

mod checker;
mod objects;
mod ome;
mod operator;
mod schedule;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use alfred_e2e::{Cluster, free_port, wait_for};
use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// The world: a file `churn_bench --schedule-out` wrote
    #[arg(long, value_name = "FILE")]
    schedule: String,
    /// Alfred's configuration (the ConfigMap alfred-config's config.yaml), in the schedule's
    /// time
    #[arg(long, value_name = "FILE")]
    config: String,
    /// Minutes of wall time to run [default: the schedule's whole length]
    #[arg(long)]
    minutes: Option<f64>,
    /// Caretaker replicas
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// The plugin binary the caretakers run [default: kubectl-alfred on the cluster's PATH]
    #[arg(long, value_name = "FILE")]
    plugin: Option<PathBuf>,
    /// The run's directory under tests/.run
    #[arg(long, default_value = "soak")]
    name: String,
    /// Seconds until OME acknowledges a request
    #[arg(long, default_value_t = 2.0)]
    ack_seconds: f64,
    /// A model's load time: seconds, plus --load-seconds-per-gpu for each of its GPUs
    #[arg(long, default_value_t = 5.0)]
    load_seconds: f64,
    #[arg(long, default_value_t = 1.0)]
    load_seconds_per_gpu: f64,
    /// Seconds a deleted pod drains (its grace period) before its GPUs are free
    #[arg(long, default_value_t = 3)]
    drain_seconds: i64,
    /// Seconds until an unready surge expires (instanceReadyTimeout)
    #[arg(long, default_value_t = 150.0)]
    ready_timeout_seconds: f64,
    /// The share of requests whose surge fails, and of requests never acknowledged
    #[arg(long, default_value_t = 0.05)]
    fail_rate: f64,
    #[arg(long, default_value_t = 0.01)]
    no_ack_rate: f64,
    /// Seconds a request that can never resolve stalls Alfred before the operator resolves it
    #[arg(long, default_value_t = 60.0)]
    operator_seconds: f64,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// A process the soak started, killed when dropped.
struct Process {
    name: String,
    child: Child,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program`; its stdout goes to logs/NAME.out, its stderr to logs/NAME.log.
fn spawn(
    cluster: &Cluster,
    name: &str,
    program: &Path,
    args: &[String],
) -> anyhow::Result<Process> {
    let file = |ext: &str| {
        let path = cluster.dir.join("logs").join(format!("{name}.{ext}"));
        std::fs::File::create(&path).with_context(|| format!("{}", path.display()))
    };
    let child = Command::new(program)
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", cluster.path())
        .stdin(Stdio::null())
        .stdout(file("out")?)
        .stderr(file("log")?)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    Ok(Process {
        name: name.into(),
        child,
    })
}

/// One caretaker replica and where it serves its metrics and probes.
struct Replica {
    process: Process,
    metrics: u16,
    probes: u16,
}

fn start_replica(cluster: &Cluster, plugin: &Path, identity: &str) -> anyhow::Result<Replica> {
    let (metrics, probes) = (free_port(), free_port());
    let args: Vec<String> = [
        "caretaker",
        "--namespace",
        "ome",
        "--identity",
        identity,
        "--metrics-bind-address",
        &format!("127.0.0.1:{metrics}"),
        "--health-probe-bind-address",
        &format!("127.0.0.1:{probes}"),
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let process = spawn(cluster, &format!("caretaker-{identity}"), plugin, &args)?;
    Ok(Replica {
        process,
        metrics,
        probes,
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    let schedule = schedule::Schedule::read(&args.schedule).map_err(anyhow::Error::msg)?;
    let config = std::fs::read_to_string(&args.config).with_context(|| args.config.clone())?;
    let parsed = alfred::config::Config::parse(&config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config))?;
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kwok = build_kwok(here)?;

    let cluster = Cluster::up(&args.name);
    let client = client(&cluster.kubeconfig).await?;
    seed_alfred(&cluster, &config)?;
    seed_nodes(&cluster, &schedule)?;

    let settings = ome::Settings {
        acknowledge: Duration::from_secs_f64(args.ack_seconds),
        load_base_ms: (args.load_seconds * 1000.0) as u64,
        load_per_gpu_ms: (args.load_seconds_per_gpu * 1000.0) as u64,
        drain_seconds: args.drain_seconds,
        ready_timeout: Duration::from_secs_f64(args.ready_timeout_seconds),
        fail_rate: args.fail_rate,
        no_ack_rate: args.no_ack_rate,
    };
    let record = std::fs::File::create(cluster.dir.join("ome.jsonl"))?;
    let mut world = ome::World::new(client.clone(), settings.clone(), schedule.seed, record);
    let seeding = std::time::Instant::now();
    world
        .seed(&schedule.start, &schedule.arrivals, settings.drain_seconds)
        .await?;
    eprintln!(
        "soak: {} nodes, {} tasks running from the start (seeded in {:.0} s), {} arrivals",
        schedule.nodes.len(),
        schedule.start.len(),
        seeding.elapsed().as_secs_f64(),
        schedule.arrivals.len()
    );

    let bin = alfred_e2e::control_plane();
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let _scheduler = spawn(
        &cluster,
        "kube-scheduler",
        &bin.join("kube-scheduler"),
        &[
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ],
    )?;
    let _kwok = spawn(
        &cluster,
        "kwok",
        &kwok,
        &[
            format!("--kubeconfig={kubeconfig}"),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            format!("--config={}", here.join("kwok-stages.yaml").display()),
            "--node-lease-duration-seconds=0".into(),
        ],
    )?;
    let plugin = args
        .plugin
        .clone()
        .unwrap_or_else(|| PathBuf::from("kubectl-alfred"));
    let replicas: Vec<Replica> = (0..args.replicas)
        .map(|r| start_replica(&cluster, &plugin, &format!("soak-{r}")))
        .collect::<anyhow::Result<_>>()?;
    wait_for(Duration::from_secs(60), "a caretaker ready", || {
        replicas
            .iter()
            .any(|r| cluster.probe(r.probes, "/readyz").0 == 200)
    });

    let operator = operator::Operator {
        plugin: plugin.clone(),
        kubeconfig: cluster.kubeconfig.clone(),
        path: cluster.path().to_string(),
        patience: Duration::from_secs_f64(args.operator_seconds),
    };
    let resolved = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let operating = {
        let (resolved, stop) = (resolved.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let done = operator.look();
                resolved.lock().expect("not poisoned").extend(done);
                std::thread::sleep(Duration::from_secs(10));
            }
        })
    };

    let minutes = args.minutes.unwrap_or(schedule.end_ms as f64 / 60_000.0);
    let until = world.zero() + Duration::from_secs_f64(minutes * 60.0);
    let mut checker = checker::Checker::new(bounds(&parsed));
    tokio::join!(world.run(until), checker.run(client, until));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = operating.join();
    let resolved = resolved.lock().expect("not poisoned").len();

    let passes: usize = replicas.iter().map(|r| passes(&cluster, r).len()).sum();
    let line = json!({
        "nodes": schedule.nodes.len(), "load": schedule.load, "seed": schedule.seed,
        "timeScale": schedule.time_scale, "minutes": minutes,
        "measuredFromMinutes": schedule.measured_from_ms as f64 / 60_000.0, "replicas": args.replicas,
        "ome": world.counts, "checks": checker.report, "operatorResolves": resolved, "passes": passes,
        "replicaMetrics": replicas.iter().map(|r| json!({"name": r.process.name, "metrics": r.metrics})).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}

/// The bounds every request must keep, from Alfred's configuration.
fn bounds(config: &alfred::config::Config) -> checker::Bounds {
    let minutes = |m: i64| m.max(0) as u64 * 60_000;
    checker::Bounds {
        in_flight: config.max_in_flight_migrations as usize,
        per_hour: config.max_migrations_per_hour as usize,
        workload_cooldown: minutes(config.per_workload_cooldown_minutes),
        node_cooldown: minutes(config.per_node_cooldown_minutes),
        placement_cooldown: minutes(config.recent_placement_cooldown_minutes),
    }
}

/// The pass documents a replica printed (`-o json`), in order.
fn passes(cluster: &Cluster, replica: &Replica) -> Vec<Value> {
    let out = cluster
        .dir
        .join("logs")
        .join(format!("{}.out", replica.process.name));
    let text = std::fs::read_to_string(out).unwrap_or_default();
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .collect()
}

fn build_kwok(here: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new(here.join("../cluster/build-kwok.sh"))
        .stderr(Stdio::inherit())
        .output()
        .context("tests/cluster/build-kwok.sh runs")?;
    if !out.status.success() {
        bail!("tests/cluster/build-kwok.sh failed");
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("kwok"))
}

async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// Alfred's namespace as the chart leaves it: its configuration, the empty journal and
/// recommendations ConfigMaps, and the migration guard; the tasks' namespace and model.
fn seed_alfred(cluster: &Cluster, config: &str) -> anyhow::Result<()> {
    for ns in ["ome", objects::NAMESPACE] {
        cluster.ok(&["create", "namespace", ns]);
    }
    let objects = [
        objects::model(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-config", "namespace": "ome"}, "data": {"config.yaml": config}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-dispatch-state", "namespace": "ome"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-recommendations", "namespace": "ome"}}),
    ];
    let stream: Vec<String> = objects.iter().map(Value::to_string).collect();
    let out = cluster.kubectl_with(&["create", "-f", "-"], &stream.join("\n"));
    if !out.status.success() {
        bail!("seeding Alfred's objects: {}", alfred_e2e::stderr(&out));
    }
    cluster.ok(&[
        "apply",
        "-f",
        &alfred_e2e::world::rbac("migration-guard.yaml"),
    ]);
    Ok(())
}

/// The schedule's nodes, managed by KWOK, without the not-ready taint the API server gives a
/// new Node (no node controller runs to lift it).
fn seed_nodes(cluster: &Cluster, schedule: &schedule::Schedule) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let up = now - Duration::from_secs(30 * 86_400);
    for chunk in schedule.nodes.chunks(200) {
        let stream: Vec<String> = chunk
            .iter()
            .map(|n| objects::node(n, &objects::stamp(up), &objects::stamp(now)).to_string())
            .collect();
        let out = cluster.kubectl_with(&["create", "-f", "-"], &stream.join("\n"));
        if !out.status.success() {
            bail!("creating nodes: {}", alfred_e2e::stderr(&out));
        }
        let out = cluster.kubectl_with(&["replace", "-f", "-"], &stream.join("\n"));
        if !out.status.success() {
            bail!(
                "lifting the nodes' not-ready taint: {}",
                alfred_e2e::stderr(&out)
            );
        }
    }
    Ok(())
}
