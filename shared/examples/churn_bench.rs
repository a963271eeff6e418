//! Fragmentation over time: a closed-loop replay of a production GPU trace (openb, see
//! `common/trace.rs`) in which models arrive and leave while a scheduler places them, measured
//! on a virtual clock. One JSON line a run.
//!
//!     cargo run --release -p alfred-shared --example churn_bench -- \
//!       --nodes NODES.csv --pods PODS.csv [--lifetimes PODS.csv] [--load 0.9] [--seed 1] \
//!       [--hours 24] [--warmup 2] [--profile default|gpu-packing] [--alfred off] \
//!       [--eight-gpu-nodes N] [--repeat-nodes N]
//!
//! Tasks arrive as a Poisson process at an offered load of LOAD x the cluster's GPUs, each a row
//! of the task list drawn at random with its GPUs, CPU, memory, GPU models and lifetime (a list
//! without times borrows them from `--lifetimes`, by row name where it has one, else from a row
//! holding as many GPUs; by default the `openb_pod_list_default.csv` beside `--pods`). The
//! replay starts in the steady state (tasks present in proportion to their lifetimes, each with
//! what is left of it), so the warm-up only settles the scheduler's own effect. A task runs for
//! its lifetime from when it is bound; one that fits nowhere waits, and waiting tasks are tried
//! again in arrival order whenever one leaves, as kube-scheduler retries them.
//!
//! Placement is the simulator's (`simulate::node_scores`): every filter, then the profile's
//! scores, ties drawn at random as kube-scheduler draws them. `default` is kube-scheduler's
//! default profile (it spreads by CPU and memory); `gpu-packing` scores `MostAllocated` with
//! `nvidia.com/gpu` among `scoringResources`.
//!
//! Every 5 simulated minutes in which something waits, the cluster is written as a snapshot and
//! the GPUs of waiting tasks that an ideal repack of the movable Instances (every resource, the
//! scheduler's node filters) would seat are counted: `fragPendingGpuHours` is what
//! defragmentation can fix, `pendingGpuHours` all waiting.
//!
//! `--eight-gpu-nodes N` and `--repeat-nodes N` reshape the node list as `trace_bench` does.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Instant;

#[path = "common/repack.rs"]
mod repack;
// Shared by the replays: each uses part of it.
#[allow(dead_code)]
#[path = "common/trace.rs"]
mod trace;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alfred::api::core::Pod as PodObject;
use alfred::config::Config;
use alfred::decision::{consolidate, movable};
use alfred::model::Context;
use alfred::simulate::{self, Ledger, NewPod, Profile, Request};
use alfred::snapshot::Snapshot;
use serde_json::{Value, json};
use trace::{Rng, Task, TraceNode};

/// Milliseconds: the virtual clock's unit.
const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;
/// How often fragmentation is sampled while something waits.
const SAMPLE: u64 = 5 * MINUTE;
/// The shortest run a task is given (the trace holds tasks deleted as they were created).
const SHORTEST: u64 = MINUTE;
/// The pod sizes whose waits are reported.
const SIZES: [i64; 4] = [1, 2, 4, 8];
/// The time every snapshot claims: the replay's objects carry fixed timestamps, so that every
/// Instance has been ready long enough to be movable.
const SNAPSHOT_TIME: &str = "2026-09-28T10:15:00Z";

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

struct Options {
    load: f64,
    seed: u64,
    hours: f64,
    warmup: f64,
    profile: String,
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| trace::flag(&args, name);
    let number = |name: &str, default: f64| -> Result<f64, String> {
        Ok(trace::parsed(&args, name)?.unwrap_or(default))
    };
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let nodes_path = flag("--nodes").ok_or("--nodes FILE is required (the openb node list)")?;
    let pods_path = flag("--pods").ok_or("--pods FILE is required (an openb task list)")?;
    let options = Options {
        load: number("--load", 0.9)?,
        seed: number("--seed", 1.0)? as u64,
        hours: number("--hours", 24.0)?,
        warmup: number("--warmup", 2.0)?,
        profile: flag("--profile").unwrap_or_else(|| "default".into()),
    };
    match flag("--alfred").as_deref() {
        None | Some("off") => {}
        Some(other) => {
            return Err(format!(
                "--alfred {other}: this replay runs without Alfred so far (--alfred off)"
            ));
        }
    }
    let nodes = trace::reshape_nodes(
        trace::read_nodes(&read(&nodes_path)?)?,
        trace::parsed(&args, "--eight-gpu-nodes")?,
        trace::parsed(&args, "--repeat-nodes")?,
    )?;
    let mut tasks = trace::read_tasks(&read(&pods_path)?)?;
    if tasks.iter().any(|t| t.lifetime.is_none()) {
        let donor_path = flag("--lifetimes").unwrap_or_else(|| {
            let dir = std::path::Path::new(&pods_path).parent();
            let beside = dir.map(|d| d.join("openb_pod_list_default.csv"));
            beside.map_or_else(String::new, |p| p.display().to_string())
        });
        let donors = trace::read_tasks(&read(&donor_path).map_err(|e| {
            format!("{e}: the task list has no creation_time and deletion_time; name a list that has them with --lifetimes FILE")
        })?)?;
        borrow_lifetimes(&mut tasks, &donors, options.seed)?;
    }
    let profile = profile(&options.profile)?;
    let start = Instant::now();
    let report = replay(&nodes, &tasks, &profile, &options)?;
    let mut line = report.json();
    line["list"] = json!(
        std::path::Path::new(&pods_path)
            .file_name()
            .map(|f| f.to_string_lossy())
    );
    line["nodes"] = json!(nodes.len());
    line["gpus"] = json!(nodes.iter().map(|n| n.gpus).sum::<i64>());
    line["load"] = json!(options.load);
    line["seed"] = json!(options.seed);
    line["hours"] = json!(options.hours);
    line["warmup"] = json!(options.warmup);
    line["profile"] = json!(options.profile);
    line["alfred"] = json!("off");
    line["wallSeconds"] = json!((start.elapsed().as_secs_f64() * 10.0).round() / 10.0);
    println!("{line}");
    Ok(())
}

/// Gives each task without a lifetime one from `donors`: the row of the same name, else a row
/// (drawn with the seed) holding as many GPUs.
fn borrow_lifetimes(tasks: &mut [Task], donors: &[Task], seed: u64) -> Result<(), String> {
    let by_name: HashMap<&str, i64> = donors
        .iter()
        .filter_map(|d| Some((d.name.as_str(), d.lifetime?)))
        .collect();
    let mut by_size: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for d in donors {
        if let Some(l) = d.lifetime {
            by_size.entry(d.holds()).or_default().push(l);
        }
    }
    let mut rng = Rng::new(seed ^ 0x11fe);
    for task in tasks.iter_mut().filter(|t| t.lifetime.is_none()) {
        let borrowed = by_name.get(task.name.as_str()).copied().or_else(|| {
            let same = by_size.get(&task.holds())?;
            Some(same[rng.below(same.len())])
        });
        task.lifetime = Some(borrowed.ok_or(format!(
            "task {}: no lifetime to borrow (the lifetimes list has no row of that name nor one holding {} GPUs)",
            task.name,
            task.holds()
        ))?);
    }
    Ok(())
}

/// The scheduler profile by name.
fn profile(name: &str) -> Result<Profile, String> {
    let yaml = match name {
        "default" => "schemaVersion: 1\n".to_string(),
        "gpu-packing" => "schemaVersion: 1\nscheduling: {profiles: {default-scheduler: {backend: kube-scheduler, schedulerVersion: v1.37, configurationID: gpu-packing, scoringStrategy: MostAllocated, scoringResources: [{name: cpu}, {name: memory}, {name: nvidia.com/gpu, weight: 3}]}}}\n".to_string(),
        other => return Err(format!("--profile {other}: one of default, gpu-packing")),
    };
    let config = Config::parse(&yaml).map_err(|e| e.to_string())?;
    let probe = NewPod {
        name: "probe".into(),
        namespace: "trace".into(),
        labels: Default::default(),
        spec: Default::default(),
    };
    simulate::select_profile(&config, &[probe]).map_err(|o| o.message)
}

/// A task in the replay.
struct Live {
    row: usize,
    arrived: u64,
    /// How long it runs once bound.
    runs: u64,
    node: Option<usize>,
    bound: Option<u64>,
}

#[derive(Default)]
struct Report {
    pending_gpu_ms: u128,
    frag_gpu_ms: u128,
    samples: usize,
    /// Wall time spent writing and repacking the samples' snapshots.
    sample_seconds: f64,
    arrivals: usize,
    /// Per size, of the tasks that arrived in the measured window: each one's wait in minutes
    /// (until the window ends for those still waiting), and how many were placed.
    waits: BTreeMap<i64, Vec<f64>>,
    placed: BTreeMap<i64, usize>,
}

impl Report {
    fn json(&self) -> Value {
        let hours = |ms: u128| (ms as f64 / HOUR as f64 * 10.0).round() / 10.0;
        let p95 = |w: &Vec<f64>| {
            let mut w = w.clone();
            w.sort_by(f64::total_cmp);
            w.get(((w.len() as f64 * 0.95).ceil() as usize).saturating_sub(1))
                .map(|x| (x * 10.0).round() / 10.0)
        };
        json!({
            "fragPendingGpuHours": hours(self.frag_gpu_ms),
            "pendingGpuHours": hours(self.pending_gpu_ms),
            "waitP95MinutesBySize": SIZES.iter().map(|s| (s.to_string(), json!(self.waits.get(s).and_then(p95)))).collect::<serde_json::Map<_, _>>(),
            "placedBySize": SIZES.iter().map(|s| (s.to_string(), json!({
                "placed": self.placed.get(s).copied().unwrap_or(0),
                "arrived": self.waits.get(s).map_or(0, Vec::len)}))).collect::<serde_json::Map<_, _>>(),
            "moves": 0, "bounceBacks": 0, "capViolations": 0, "staleSends": 0,
            "journalMaxBytes": 0, "passes": 0,
            "arrivals": self.arrivals, "samples": self.samples,
            "sampleSeconds": (self.sample_seconds * 10.0).round() / 10.0,
        })
    }
}

/// What happens next on the virtual clock, earliest first (departures before arrivals before
/// samples at the same moment).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Departure(usize),
    Arrival,
    Sample,
}

fn replay(
    nodes: &[TraceNode],
    tasks: &[Task],
    profile: &Profile,
    options: &Options,
) -> Result<Report, String> {
    if tasks.is_empty() {
        return Err("the task list holds no GPU task".into());
    }
    let gpus: i64 = nodes.iter().map(|n| n.gpus).sum();
    let runs = |t: &Task| (t.lifetime.unwrap_or(0).max(0) as u64 * 1000).max(SHORTEST);
    // Poisson arrivals at the offered load: GPUs x running time, per task drawn, on average.
    let gpu_ms_per_task = tasks
        .iter()
        .map(|t| t.holds() as f64 * runs(t) as f64)
        .sum::<f64>()
        / tasks.len() as f64;
    let mean_gap_ms = gpu_ms_per_task / (options.load * gpus as f64);
    let (start, end) = (
        (options.warmup * HOUR as f64) as u64,
        ((options.warmup + options.hours) * HOUR as f64) as u64,
    );

    let base = cluster_context(nodes)?;
    let ctx = Context::build(&base.0, &base.1, SNAPSHOT_TIME.parse().expect("time"));
    let mut scheduler = Scheduler::new(&ctx, nodes, tasks, profile.clone());
    let mut rng = Rng::new(options.seed);
    let mut live: Vec<Live> = Vec::new();
    let mut waiting: Vec<usize> = Vec::new();
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    let mut report = Report::default();
    let mut writer = Writer::new(nodes, tasks);

    // The steady state: tasks present in proportion to their running times, each with a
    // uniformly drawn part of it left, until they hold LOAD x the GPUs.
    let mut cumulative = Vec::with_capacity(tasks.len());
    let mut total = 0.0;
    for t in tasks {
        total += runs(t) as f64;
        cumulative.push(total);
    }
    let mut held = 0;
    while (held as f64) < options.load * gpus as f64 {
        let x = uniform(&mut rng) * total;
        let row = cumulative.partition_point(|&c| c < x).min(tasks.len() - 1);
        held += tasks[row].holds();
        let left = (uniform(&mut rng) * runs(&tasks[row]) as f64) as u64;
        live.push(Live {
            row,
            arrived: 0,
            runs: left.max(SHORTEST),
            node: None,
            bound: None,
        });
        waiting.push(live.len() - 1);
    }
    events.push(Reverse((0, Event::Arrival)));
    events.push(Reverse((start, Event::Sample)));

    let mut now = 0u64;
    let mut waiting_gpus: i64 = 0;
    let mut retry = true;
    while let Some(Reverse((at, event))) = events.pop() {
        if at >= end {
            break;
        }
        // Waiting GPU time in the window, up to this event.
        if at > now {
            let from = now.max(start);
            if at > from {
                report.pending_gpu_ms += (at - from) as u128 * waiting_gpus as u128;
            }
            now = at;
        }
        match event {
            Event::Departure(k) => {
                if let Some(n) = live[k].node.take() {
                    scheduler.release(n, live[k].row);
                }
                retry = true;
            }
            Event::Arrival => {
                let row = rng.below(tasks.len());
                live.push(Live {
                    row,
                    arrived: now,
                    runs: runs(&tasks[row]),
                    node: None,
                    bound: None,
                });
                let k = live.len() - 1;
                if now >= start {
                    report.arrivals += 1;
                }
                // A new pod joins the back of the queue; unless room was freed since the
                // last try (then the whole queue is tried below), only it can fit now.
                let placed = if retry {
                    None
                } else {
                    scheduler.place(row, &mut rng)
                };
                match placed {
                    Some(n) => bind(&mut live, k, n, now, &mut events),
                    None => waiting.push(k),
                }
                let gap = -mean_gap_ms * (1.0 - uniform(&mut rng)).ln();
                events.push(Reverse((now + gap.max(1.0) as u64, Event::Arrival)));
            }
            Event::Sample => {
                if !waiting.is_empty() {
                    report.samples += 1;
                    let clock = Instant::now();
                    let fixable = fixable_gpus(&mut writer, &live, &base.1)?;
                    report.sample_seconds += clock.elapsed().as_secs_f64();
                    report.frag_gpu_ms += SAMPLE as u128 * fixable as u128;
                }
                events.push(Reverse((now + SAMPLE, Event::Sample)));
            }
        }
        if retry {
            retry = false;
            waiting.retain(|&k| match scheduler.place(live[k].row, &mut rng) {
                Some(n) => {
                    bind(&mut live, k, n, now, &mut events);
                    false
                }
                None => true,
            });
        }
        waiting_gpus = waiting.iter().map(|&k| tasks[live[k].row].holds()).sum();
    }
    report.pending_gpu_ms += (end - now.max(start)) as u128 * waiting_gpus as u128;
    for pod in live
        .iter()
        .filter(|p| p.arrived >= start && p.arrived < end)
    {
        let size = tasks[pod.row].holds();
        let waited = pod.bound.unwrap_or(end) - pod.arrived;
        report
            .waits
            .entry(size)
            .or_default()
            .push(waited as f64 / MINUTE as f64);
        if pod.bound.is_some() {
            *report.placed.entry(size).or_default() += 1;
        }
    }
    Ok(report)
}

/// Task `k` bound to node `n` now: it leaves when its run is over.
fn bind(
    live: &mut [Live],
    k: usize,
    n: usize,
    now: u64,
    events: &mut BinaryHeap<Reverse<(u64, Event)>>,
) {
    live[k].node = Some(n);
    live[k].bound = Some(now);
    events.push(Reverse((now + live[k].runs, Event::Departure(k))));
}

/// A uniform draw in [0, 1).
fn uniform(rng: &mut Rng) -> f64 {
    (rng.next() >> 11) as f64 / (1u64 << 53) as f64
}

/// The cluster before any task, and the configuration every read of it uses.
fn cluster_context(nodes: &[TraceNode]) -> Result<(Snapshot, Config), String> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": trace::cluster_objects(nodes)});
    let snapshot = Snapshot::parse(&list.to_string()).map_err(|e| e.to_string())?;
    let config = Config::parse("schemaVersion: 1\nmigration: {apiVersion: v1}\n")
        .map_err(|e| e.to_string())?;
    Ok((snapshot, config))
}

/// GPUs of the waiting tasks that an ideal repack of the movable Instances would seat: the
/// cluster as it stands written as a snapshot (what a fresh read would return) and repacked.
fn fixable_gpus(writer: &mut Writer<'_>, live: &[Live], config: &Config) -> Result<i64, String> {
    let snapshot = Snapshot::parse(&writer.write(live)).map_err(|e| e.to_string())?;
    let ctx = Context::build(&snapshot, config, SNAPSHOT_TIME.parse().expect("time"));
    let movable = movable(&ctx);
    let repackable = repack::repackable(&ctx.cluster, &movable);
    let free_ideal = repack::all_resources(&ctx, &repackable);
    Ok(consolidate::placeable(&ctx, &movable, &free_ideal).pending_gpus)
}

/// Writes the replay's cluster as the API server would list it. Each task's objects are
/// written once per place (waiting, or bound to a node) and kept: a snapshot is then mostly
/// copying.
struct Writer<'a> {
    nodes: &'a [TraceNode],
    tasks: &'a [Task],
    /// The model and the nodes.
    cluster: String,
    /// Per task: where it was when its objects were written, and them (comma-separated).
    written: Vec<Option<(Option<usize>, String)>>,
}

impl<'a> Writer<'a> {
    fn new(nodes: &'a [TraceNode], tasks: &'a [Task]) -> Self {
        let cluster = trace::cluster_objects(nodes)
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Writer {
            nodes,
            tasks,
            cluster,
            written: Vec::new(),
        }
    }

    fn write(&mut self, live: &[Live]) -> String {
        self.written.resize_with(live.len(), || None);
        let mut out = String::with_capacity(self.cluster.len() * 8);
        out.push_str(r#"{"apiVersion":"v1","kind":"List","items":["#);
        out.push_str(&self.cluster);
        for (k, pod) in live.iter().enumerate() {
            if pod.node.is_none() && pod.bound.is_some() {
                continue; // gone
            }
            let stale = !matches!(&self.written[k], Some((at, _)) if *at == pod.node);
            if stale {
                let node = pod.node.map(|n| self.nodes[n].name.as_str());
                let objects = trace::objects(k, &self.tasks[pod.row], node, true);
                let text = objects
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                self.written[k] = Some((pod.node, text));
            }
            if let Some((_, text)) = &self.written[k] {
                out.push(',');
                out.push_str(text);
            }
        }
        out.push_str("]}");
        out
    }
}

/// The scheduler: the simulator's filters and the profile's scores, on a ledger kept as tasks
/// come and go.
struct Scheduler<'c, 's> {
    ctx: &'c Context<'s>,
    profile: Profile,
    ledger: Ledger,
    tasks: &'c [Task],
    /// Per task row, once needed: the pod it is created as, and what the ledger charges for it.
    templates: Vec<Option<(NewPod, Request)>>,
    /// Per node: free GPUs, CPU (milli) and memory (MiB), and its GPU model, for a quick check
    /// that some node has room before the simulator looks at every node.
    free: Vec<[i64; 3]>,
    models: Vec<String>,
    /// Per GPU model, how many nodes have each number of free GPUs: most retries of a waiting
    /// pod end here, without a walk over the nodes.
    by_free_gpus: HashMap<String, Vec<usize>>,
}

impl<'c, 's> Scheduler<'c, 's> {
    fn new(ctx: &'c Context<'s>, nodes: &[TraceNode], tasks: &'c [Task], profile: Profile) -> Self {
        Scheduler {
            ctx,
            profile,
            ledger: Ledger::new(&ctx.cluster),
            tasks,
            templates: (0..tasks.len()).map(|_| None).collect(),
            free: nodes
                .iter()
                .map(|n| [n.gpus, n.cpu_milli, n.memory_mib])
                .collect(),
            models: nodes.iter().map(|n| n.model.clone()).collect(),
            by_free_gpus: {
                let mut counts: HashMap<String, Vec<usize>> = HashMap::new();
                for n in nodes {
                    let slots = counts.entry(n.model.clone()).or_default();
                    let free = n.gpus.max(0) as usize;
                    if slots.len() <= free {
                        slots.resize(free + 1, 0);
                    }
                    slots[free] += 1;
                }
                counts
            },
        }
    }

    /// Whether a node of a model the task allows has its GPUs free.
    fn gpus_free_for(&self, row: usize) -> bool {
        let task = &self.tasks[row];
        let gpus = task.holds().max(0) as usize;
        self.by_free_gpus
            .iter()
            .filter(|(model, _)| task.gpu_spec.is_empty() || task.gpu_spec.contains(model))
            .any(|(_, slots)| slots.iter().skip(gpus).any(|&c| c > 0))
    }

    /// Changes node `n`'s free resources by `sign` times `need`.
    fn charge(&mut self, n: usize, need: [i64; 3], sign: i64) {
        let slots = self
            .by_free_gpus
            .get_mut(&self.models[n])
            .expect("every node's model is counted");
        slots[self.free[n][0] as usize] -= 1;
        for (r, amount) in need.iter().enumerate() {
            self.free[n][r] += sign * amount;
        }
        slots[self.free[n][0] as usize] += 1;
    }

    fn needs(&self, row: usize) -> [i64; 3] {
        let task = &self.tasks[row];
        [task.holds(), task.cpu_milli, task.memory_mib]
    }

    /// Binds a pod of task row `row` where the scheduler would, or None when no node takes it.
    fn place(&mut self, row: usize, rng: &mut Rng) -> Option<usize> {
        if !self.gpus_free_for(row) {
            return None;
        }
        let (task, need) = (&self.tasks[row], self.needs(row));
        let room = |n: usize| {
            (0..3).all(|r| self.free[n][r] >= need[r])
                && (task.gpu_spec.is_empty() || task.gpu_spec.contains(&self.models[n]))
        };
        if !(0..self.free.len()).any(room) {
            return None;
        }
        if self.templates[row].is_none() {
            self.templates[row] = Some(self.template(row));
        }
        let (pod, request) = self.templates[row].as_ref()?;
        let scores = simulate::node_scores(self.ctx, &self.ledger, pod, &self.profile);
        let best = scores.iter().map(|s| s.total()).max()?;
        // Among equal scores kube-scheduler draws at random.
        let tied: Vec<usize> = scores
            .iter()
            .filter(|s| s.total() == best)
            .map(|s| s.node)
            .collect();
        let n = tied[rng.below(tied.len())];
        self.ledger.add(n, request);
        self.charge(n, need, -1);
        Some(n)
    }

    fn release(&mut self, n: usize, row: usize) {
        let need = self.needs(row);
        if let Some((_, request)) = &self.templates[row] {
            self.ledger.remove(n, request);
        }
        self.charge(n, need, 1);
    }

    /// The pod a task is created as (as `trace::objects` writes it), unbound.
    fn template(&mut self, row: usize) -> (NewPod, Request) {
        let objects = trace::objects(0, &self.tasks[row], Some("unbound"), true);
        let value = objects.last().cloned().unwrap_or_default();
        let mut pod: PodObject = serde_json::from_value(value).expect("the trace's pod reads back");
        pod.spec.node_name.clear();
        let request = self.ledger.requests_of(&pod.spec);
        let new = NewPod {
            name: pod.metadata.name.clone(),
            namespace: "trace".into(),
            labels: pod.metadata.labels.clone(),
            spec: pod.spec,
        };
        (new, request)
    }
}
