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
mod faults;
mod frag;
mod harness;
mod objects;
mod ome;
mod operator;
mod proxy;
mod schedule;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alfred_e2e::{Cluster, wait_for};
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
    /// Run without the faults
    #[arg(long)]
    no_faults: bool,
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

async fn run(args: Args) -> anyhow::Result<()> {
    let schedule = schedule::Schedule::read(&args.schedule).map_err(anyhow::Error::msg)?;
    let config = std::fs::read_to_string(&args.config).with_context(|| args.config.clone())?;
    let parsed = alfred::config::Config::parse(&config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config))?;
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kwok = build_kwok(here)?;
    let minutes = args.minutes.unwrap_or(schedule.end_ms as f64 / 60_000.0);
    let run_for = Duration::from_secs_f64(minutes * 60.0);

    let cluster = Cluster::up(&args.name);
    let launcher = harness::Launcher::of(&cluster);
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
    let _scheduler = launcher.spawn(
        "kube-scheduler",
        &bin.join("kube-scheduler"),
        &[
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ],
        &cluster.kubeconfig,
    )?;
    let _kwok = launcher.spawn(
        "kwok",
        &kwok,
        &[
            format!("--kubeconfig={kubeconfig}"),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            format!("--config={}", here.join("kwok-stages.yaml").display()),
            "--node-lease-duration-seconds=0".into(),
        ],
        &cluster.kubeconfig,
    )?;

    // The caretakers reach the API server through a proxy the faults can stall.
    let proxy = proxy::Proxy::start(api_port(&cluster.kubeconfig)?).await?;
    let through_proxy =
        caretaker_kubeconfig(&cluster, &format!("https://127.0.0.1:{}", proxy.port))?;
    let plugin = args
        .plugin
        .clone()
        .unwrap_or_else(|| PathBuf::from("kubectl-alfred"));
    let replicas = Arc::new(Mutex::new(Vec::new()));
    let mut stage = faults::Stage {
        launcher: launcher.clone(),
        replicas: replicas.clone(),
        plugin: plugin.clone(),
        through_proxy,
        proxy,
        client: client.clone(),
        config: config.clone(),
        guard: alfred_e2e::world::rbac("migration-guard.yaml"),
        started: 0,
        record: std::fs::File::create(cluster.dir.join("faults.jsonl"))?,
        signalled: Vec::new(),
        kills: Vec::new(),
        seed: schedule.seed,
    };
    for _ in 0..args.replicas {
        stage.start_replica()?;
    }
    wait_for(Duration::from_secs(60), "a caretaker ready", || {
        let replicas = replicas.lock().expect("not poisoned");
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
    let resolved = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let operating = {
        let (resolved, stop) = (resolved.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let done = operator.look();
                resolved.lock().expect("not poisoned").extend(done);
                std::thread::sleep(Duration::from_secs(10));
            }
        })
    };

    // The run's clock starts with the schedule's (the start state seeded, arrivals due).
    let begun = world.zero();
    let until = begun + run_for;
    let plan = if args.no_faults {
        Vec::new()
    } else {
        faults::plan(run_for, schedule.seed)
    };
    let injecting = async {
        let mut errors = Vec::new();
        for (at, step) in faults::steps(&plan) {
            tokio::time::sleep_until(begun + Duration::from_secs(at)).await;
            if let Err(e) = stage.apply(&step).await {
                errors.push(format!("{step:?}: {e:#}"));
            }
        }
        errors
    };
    let memory = Arc::new(Mutex::new(Vec::new()));
    let sampling = {
        let (replicas, memory, stop) = (replicas.clone(), memory.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let at = begun.elapsed().as_secs();
                for r in replicas.lock().expect("not poisoned").iter() {
                    if let Some(kib) = r.rss_kib() {
                        memory
                            .lock()
                            .expect("not poisoned")
                            .push((at, r.identity.clone(), kib));
                    }
                }
                std::thread::sleep(Duration::from_secs(15));
            }
        })
    };
    let measuring = {
        let measured_from = begun.into_std() + Duration::from_millis(schedule.measured_from_ms);
        let mut sampler = frag::Sampler::new(
            plugin.clone(),
            cluster.kubeconfig.clone(),
            cluster.path().to_string(),
            measured_from,
        );
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let next = std::time::Instant::now() + frag::READ_EVERY;
                sampler.read();
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            sampler.report
        })
    };
    let mut checker = checker::Checker::new(checker::Bounds::of(&parsed));
    let ((), (), fault_errors) = tokio::join!(
        world.run(until),
        checker.run(client.clone(), until),
        injecting
    );
    stop.store(true, Ordering::Relaxed);
    let _ = operating.join();
    let _ = sampling.join();
    let fragmentation = measuring
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    let resolved = resolved.lock().expect("not poisoned").len();

    let passes = passes(&cluster);
    let leaders = &checker.report.leaders;
    let failovers: Vec<Value> = stage
        .kills
        .iter()
        .map(|&killed| {
            let next = leaders.iter().map(|(_, at)| *at).find(|&t| t > killed);
            json!(next.map(|t| (t - killed) as f64 / 1000.0))
        })
        .collect();
    let emptied = signalled_emptied(&client, &stage.signalled).await;
    let line = json!({
        "nodes": schedule.nodes.len(), "load": schedule.load, "seed": schedule.seed,
        "timeScale": schedule.time_scale, "minutes": minutes,
        "measuredFromMinutes": schedule.measured_from_ms as f64 / 60_000.0,
        "replicas": args.replicas,
        "ome": world.counts, "checks": checker.report, "fragmentation": fragmentation, "operatorResolves": resolved,
        "passes": passes,
        "faults": plan, "faultErrors": fault_errors, "failoverSeconds": failovers,
        "signalledNodes": emptied,
        "memoryKiB": memory_summary(&memory.lock().expect("not poisoned"), run_for.as_secs()),
        "apiCallsPerPass": api_calls_per_pass(&cluster, run_for.as_secs()),
    });
    println!("{line}");
    Ok(())
}

/// Each signalled node (GpuUnhealthy, maintenance): how many of the OME pods it held then are
/// still there, how many OME pods it holds now, and which of those that stayed could have gone
/// somewhere (a schedulable node outside the signalled ones with room for its requests now). A
/// pod with nowhere to go stays: Alfred says NoSurgeHeadroom.
async fn signalled_emptied(
    client: &kube::Client,
    signalled: &[(String, Vec<String>)],
) -> Vec<Value> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), objects::NAMESPACE);
    let all = pods
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let nodes = nodes
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let requests = |p: &Pod| -> [f64; 3] {
        let mut r = [0.0; 3];
        for c in p
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
        {
            let asked = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            for (i, key) in ["nvidia.com/gpu", "cpu", "memory"].iter().enumerate() {
                r[i] += asked
                    .and_then(|a| a.get(*key))
                    .and_then(|q| alfred::kubernetes::quantity::parse(&q.0))
                    .unwrap_or(0.0);
            }
        }
        r
    };
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let signalled_names: Vec<&String> = signalled.iter().map(|(n, _)| n).collect();
    let free: Vec<[f64; 3]> = nodes
        .iter()
        .filter(|n| !signalled_names.contains(&n.metadata.name.as_ref().unwrap_or(&String::new())))
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
        .map(|n| {
            let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let mut f = [0.0; 3];
            for (i, key) in ["nvidia.com/gpu", "cpu", "memory"].iter().enumerate() {
                f[i] = alloc
                    .and_then(|a| a.get(*key))
                    .and_then(|q| alfred::kubernetes::quantity::parse(&q.0))
                    .unwrap_or(0.0);
            }
            for p in all.iter().filter(|p| node_of(p) == n.metadata.name) {
                let r = requests(p);
                for i in 0..3 {
                    f[i] -= r[i];
                }
            }
            f
        })
        .collect();
    signalled
        .iter()
        .map(|(node, then)| {
            let on: Vec<&Pod> = all
                .iter()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key("ome.io/inferenceservice"))
                })
                .filter(|p| node_of(p).as_ref() == Some(node))
                .collect();
            let stayed: Vec<&&Pod> = on
                .iter()
                .filter(|p| then.contains(p.metadata.name.as_ref().unwrap_or(&String::new())))
                .collect();
            let could_go = stayed
                .iter()
                .filter(|p| {
                    let r = requests(p);
                    free.iter().any(|f| (0..3).all(|i| f[i] >= r[i]))
                })
                .count();
            json!({"node": node, "omePodsThen": then.len(), "stayed": stayed.len(),
                "stayedWithRoomElsewhere": could_go, "omePodsNow": on.len()})
        })
        .collect()
}

/// Resident memory: per replica, the first and last sample, and the leader-like maximum in
/// the first and the last tenth of the run.
fn memory_summary(samples: &[(u64, String, u64)], run: u64) -> Value {
    let mut by: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for (at, who, kib) in samples {
        by.entry(who).or_default().push((*at, *kib));
    }
    let window = |from: u64, to: u64| {
        samples
            .iter()
            .filter(|(at, _, _)| *at >= from && *at < to)
            .map(|(_, _, kib)| *kib)
            .max()
    };
    json!({
        "maxFirstTenth": window(0, run / 10), "maxLastTenth": window(run - run / 10, u64::MAX),
        "replicas": by.iter().map(|(who, s)| (who.to_string(), json!({
            "first": s.first().map(|x| x.1), "last": s.last().map(|x| x.1),
            "max": s.iter().map(|x| x.1).max()}))).collect::<serde_json::Map<_, _>>(),
    })
}

/// The caretakers' API calls per pass by verb (from the audit log), in the first and the last
/// third of the run: a pass that reads from watches makes as many calls late as early.
fn api_calls_per_pass(cluster: &Cluster, run: u64) -> Value {
    let text = cluster.log("audit.log");
    let mut events: Vec<(u64, String, bool)> = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let caretaker = format!("system:serviceaccount:ome:{CARETAKER}");
        if e["user"]["username"] != caretaker.as_str() || e["stage"] != "ResponseComplete" {
            continue;
        }
        let Some(at) = (e["requestReceivedTimestamp"].as_str())
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        else {
            continue;
        };
        let verb = e["verb"].as_str().unwrap_or_default().to_string();
        // Each pass updates the recommendations ConfigMap once.
        let pass = verb == "update" && e["objectRef"]["name"] == "alfred-recommendations";
        events.push((at.as_second().max(0) as u64, verb, pass));
    }
    let Some(first) = events.iter().map(|e| e.0).min() else {
        return Value::Null;
    };
    let third = run / 3;
    let window = |from: u64, to: u64| {
        let inside: Vec<&(u64, String, bool)> = (events.iter())
            .filter(|e| e.0 >= first + from && e.0 < first.saturating_add(to))
            .collect();
        let passes = inside.iter().filter(|e| e.2).count().max(1) as f64;
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &inside {
            *by.entry(e.1.as_str()).or_default() += 1;
        }
        let per: serde_json::Map<String, Value> = by
            .into_iter()
            .map(|(v, n)| {
                (
                    v.to_string(),
                    json!((n as f64 / passes * 10.0).round() / 10.0),
                )
            })
            .collect();
        json!({"passes": passes, "perPass": per})
    };
    json!({"firstThird": window(0, third), "lastThird": window(run - third, u64::MAX)})
}

/// The API server's port, from a kubeconfig `up.sh` wrote.
fn api_port(kubeconfig: &Path) -> anyhow::Result<u16> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("no server in the kubeconfig")?;
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .context("no port in the kubeconfig's server")
}

/// How many pass documents (`-o json`) every caretaker that ran printed.
fn passes(cluster: &Cluster) -> usize {
    let logs = std::fs::read_dir(cluster.dir.join("logs"))
        .into_iter()
        .flatten()
        .flatten();
    logs.filter(|f| {
        let name = f.file_name().to_string_lossy().into_owned();
        name.starts_with("caretaker-") && name.ends_with(".out")
    })
    .map(|f| {
        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .count()
    })
    .sum()
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
    // The caretakers' ServiceAccount with the chart's rights (holds and the maintenance cordon
    // on, as the soak runs them).
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests");
    let rbac = manifests.join("caretaker/rbac.yaml");
    cluster.ok(&["apply", "-f", &rbac.display().to_string()]);
    for role in ["alfred-hold", "alfred-maintenance-cordon"] {
        let file = format!("{}.yaml", role.trim_start_matches("alfred-"));
        cluster.ok(&["apply", "-f", &alfred_e2e::world::rbac(&file)]);
        let account = format!("ome:{CARETAKER}");
        let args = ["create", "clusterrolebinding", role, "--clusterrole", role];
        cluster.ok(&[&args[..], &["--serviceaccount", &account]].concat());
    }
    Ok(())
}

/// The caretakers' ServiceAccount in namespace ome.
const CARETAKER: &str = "alfred-caretaker";

/// A kubeconfig acting as the caretakers' ServiceAccount, reaching the API server at `server`.
fn caretaker_kubeconfig(cluster: &Cluster, server: &str) -> anyhow::Result<PathBuf> {
    let token = cluster.ok(&[
        "create",
        "token",
        CARETAKER,
        "-n",
        "ome",
        "--duration",
        "48h",
    ]);
    let ca = cluster.dir.join("pki/ca.crt");
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "soak", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": CARETAKER, "user": {"token": token.trim()}}],
        "contexts": [{"name": CARETAKER, "context": {"cluster": "soak", "user": CARETAKER}}],
        "current-context": CARETAKER,
    });
    let path = cluster.dir.join("kubeconfig-caretaker");
    std::fs::write(&path, config.to_string())?;
    Ok(path)
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
