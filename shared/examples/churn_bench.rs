//! Fragmentation over time: a closed-loop replay of a production GPU trace (openb, see
//! `common/trace.rs`) in which models arrive and leave while a scheduler places them, measured
//! on a virtual clock. One JSON line a run.
//!
//!     cargo run --release -p alfred-shared --example churn_bench -- --nodes NODES.csv --pods PODS.csv
//!     cargo run --release -p alfred-shared --example churn_bench -- --help   (every flag, its default)
//!
//! Tasks arrive as a Poisson process at an offered load of LOAD x the cluster's GPUs, each a row
//! of the task list drawn at random with its GPUs, CPU, memory, GPU models and lifetime (a list
//! without times borrows them from `--lifetimes`, by row name where it has one, else from a row
//! holding as many GPUs; by default the `openb_pod_list_default.csv` beside `--pods`). The
//! replay starts in the steady state of running tasks (drawn in proportion to their lifetimes,
//! each with what is left of it, where the scheduler puts them; a drawn task no node takes is
//! dropped, since a waiting task has run nothing and is drawn as an arrival), so the queue
//! builds from the arrivals of the warm-up. A task runs for its lifetime from when it is bound;
//! one that fits nowhere waits, and waiting tasks are tried again in arrival order whenever one
//! leaves, as kube-scheduler retries them.
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
//! With `--alfred on`, Alfred's real execute pass (`execute::run::run_pass`: arbiter, caps,
//! cooldowns, journal, `followPlan`, fresh-read checks) runs every `decisionLoopInterval` on
//! the world as a store (`churn/store.rs`), configured by `--config` (default
//! `churn/alfred-chart.yaml`: the ome-alfred chart's bounds, execute mode, `followPlan`), with
//! the replay's scheduler profile. A simulated OME answers each request (`churn/world.rs`):
//! acknowledged after `--ack-seconds` (never, for a share `--no-ack-rate`), a surge at the
//! lowest unused index placed by the scheduler with the hints as preferred nodes, ready
//! `--load-seconds` after binding (or failed, for a share `--fail-rate`), then the source
//! drains; unready by `--ready-timeout-minutes` it expires. A request that can never resolve
//! is resolved by an operator after `--operator-minutes`, as the runbook says. Every send is
//! checked from the outside (`churn/checks.rs`): `capViolations` (in flight, per hour,
//! cooldowns), `staleSends` (the Instance not on its source or busy, or its target without
//! room), `bounceBacks` (a send within 1 h of the end of the Instance's last move, or back to
//! a node it left within 24 h; a request retried after a failed one is not a move again),
//! `sentTwice` (a UUID again, or a second request while one is in flight).
//!
//! A read after an event is made from the last one, moving the objects of the tasks that did not
//! change; `--check-reads` compares each with a whole read and fails the pass if they differ.
//!
//! `--snapshot-at M --snapshot-out FILE` writes the cluster as the API server would list it at
//! the first sample M minutes or more into the run (warm-up included), for a look with
//! `kubectl alfred recommend -f FILE`.
//!
//! `--eight-gpu-nodes N` and `--repeat-nodes N` reshape the node list as `trace_bench` does.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Instant;

#[path = "churn/checks.rs"]
mod checks;
#[path = "common/repack.rs"]
mod repack;
#[path = "churn/scheduler.rs"]
mod scheduler;
#[path = "churn/store.rs"]
mod store;
// Shared by the replays: each uses part of it.
#[allow(dead_code)]
#[path = "common/trace.rs"]
mod trace;
#[path = "churn/world.rs"]
mod world;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alfred::config::Config;
use alfred::decision::{consolidate, movable};
use alfred::execute::run::{self, JournalDoc};
use alfred::model::Context;
use alfred::simulate::{self, NewPod, Profile};
use alfred::snapshot::Snapshot;
use clap::Parser;
use serde_json::{Value, json};
use trace::{Rng, Task, TraceNode};
use world::{Counters, Event, HOUR, MINUTE, OmeSettings, World, timestamp, uniform};

/// How often fragmentation is sampled while something waits.
const SAMPLE: u64 = 5 * MINUTE;
/// The shortest run a task is given (the trace holds tasks deleted as they were created).
const SHORTEST: u64 = MINUTE;
/// The start state is full when this many draws in a row find no node.
const FULL_AFTER_REFUSALS: u32 = 1000;
/// The pod sizes whose waits are reported.
const SIZES: [i64; 4] = [1, 2, 4, 8];
/// Alfred's configuration when `--config` names none: the ome-alfred chart's bounds, in
/// execute mode, following the consolidation plan.
const CHART_CONFIG: &str = include_str!("churn/alfred-chart.yaml");

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

struct Options {
    load: f64,
    seed: u64,
    /// The seed of the scheduler's ties and OME's outcomes (the trace's draws use `seed`).
    replay_seed: u64,
    hours: f64,
    warmup: f64,
    profile: String,
    /// Alfred's configuration, when it runs.
    alfred: Option<Config>,
    ome: OmeSettings,
    /// A line a pass on stderr: what was sent, or why not.
    log: bool,
    /// Every read made from the last one is compared with a whole read (slow).
    check_reads: bool,
    /// The cluster written to FILE at the first sample this many minutes in.
    snapshot: Option<(f64, String)>,
    /// The bounds the outside checks hold requests to, where not Alfred's own (a test's
    /// stricter ones, to see a violation counted).
    checked: Option<checks::Bounds>,
    /// Every task's lifetime is divided by this (a world run faster, as the soak runs it).
    time_scale: f64,
    /// The start state and the arrivals written to FILE (the soak replays them).
    schedule: Option<String>,
}

/// The closed-loop replay: arrivals, departures and Alfred's passes on a virtual clock.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trace: trace::TraceArgs,
    /// An openb task list whose times lend lifetimes to a list without them [default: the
    /// openb_pod_list_default.csv beside --pods]
    #[arg(long, value_name = "FILE")]
    lifetimes: Option<String>,
    /// The offered load, as a share of the cluster's GPUs
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    /// The seed of the trace's draws (the start state, which task arrives when)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The seed of the scheduler's ties and OME's outcomes [default: --seed]
    #[arg(long)]
    replay_seed: Option<u64>,
    /// Hours measured, after the warm-up
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Hours of warm-up, not measured
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// The scheduler's profile: default (kube-scheduler's, spreading) or gpu-packing
    #[arg(long, default_value = "default")]
    profile: String,
    /// Whether Alfred runs its execute pass
    #[arg(long, default_value = "off", value_parser = ["off", "on"])]
    alfred: String,
    /// Alfred's configuration [default: the chart's bounds, churn/alfred-chart.yaml]
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Seconds until OME acknowledges a request
    #[arg(long, default_value_t = 5.0)]
    ack_seconds: f64,
    /// Seconds a surge takes to load its model once bound
    #[arg(long, default_value_t = 60.0)]
    load_seconds: f64,
    /// The share of requests that fail
    #[arg(long, default_value_t = 0.05)]
    fail_rate: f64,
    /// The share of requests never acknowledged
    #[arg(long, default_value_t = 0.01)]
    no_ack_rate: f64,
    /// Minutes until an unready surge expires
    #[arg(long, default_value_t = 30.0)]
    ready_timeout_minutes: f64,
    /// Minutes until an operator resolves a request that can never resolve
    #[arg(long, default_value_t = 30.0)]
    operator_minutes: f64,
    /// A line a pass on stderr: what was sent, or why not
    #[arg(long)]
    log: bool,
    /// Compare every read made from the last one with a whole read (slow)
    #[arg(long)]
    check_reads: bool,
    /// Write the cluster at the first sample this many minutes in (with --snapshot-out)
    #[arg(long, value_name = "MINUTES", requires = "snapshot_out")]
    snapshot_at: Option<f64>,
    #[arg(long, value_name = "FILE", requires = "snapshot_at")]
    snapshot_out: Option<String>,
    /// Divide every task's lifetime by this: the same draws in a faster world (give Alfred's
    /// intervals and cooldowns, and OME's times, in that world's units)
    #[arg(long, default_value_t = 1.0, value_parser = positive)]
    time_scale: f64,
    /// Write the start state and every arrival to FILE, as JSON (the soak, tests/soak, replays it
    /// through a real API server)
    #[arg(long, value_name = "FILE")]
    schedule_out: Option<String>,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("{text}: a number above 0")),
    }
}

fn run() -> Result<(), String> {
    let args = Args::parse();
    let pods_path = args.trace.pods()?;
    let profile_name = args.profile.clone();
    let profile_config = profile_config(&profile_name)?;
    let alfred = match args.alfred.as_str() {
        "on" => {
            let (text, source) = match &args.config {
                Some(path) => (trace::read_file(path)?, path.clone()),
                None => (
                    CHART_CONFIG.to_string(),
                    "the built-in chart defaults".into(),
                ),
            };
            let mut config = Config::parse(&text).map_err(|e| format!("{source}: {e}"))?;
            // Alfred simulates the scheduler the cluster runs.
            config.scheduling_profiles = profile_config.scheduling_profiles.clone();
            Some(config)
        }
        _ => None,
    };
    let ms = |seconds: f64| (seconds * 1000.0) as u64;
    let options = Options {
        load: args.load,
        seed: args.seed,
        replay_seed: args.replay_seed.unwrap_or(args.seed),
        hours: args.hours,
        warmup: args.warmup,
        profile: profile_name,
        alfred,
        ome: OmeSettings {
            acknowledge_ms: ms(args.ack_seconds),
            model_load_ms: ms(args.load_seconds),
            ready_timeout_ms: ms(args.ready_timeout_minutes) * 60,
            fail_rate: args.fail_rate,
            no_ack_rate: args.no_ack_rate,
            operator_ms: ms(args.operator_minutes) * 60,
        },
        log: args.log,
        check_reads: args.check_reads,
        snapshot: args.snapshot_at.zip(args.snapshot_out.clone()),
        checked: None,
        time_scale: args.time_scale,
        schedule: args.schedule_out.clone(),
    };
    let nodes_path = args.trace.nodes_source();
    let mut nodes = args.trace.read_nodes()?;
    // The replay indexes nodes as the cluster model does: by name.
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(twice) = nodes.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(format!(
            "{nodes_path}: node {} is listed twice; every node needs its own name",
            twice[0].name
        ));
    }
    let mut tasks = args.trace.read_tasks()?;
    if tasks.iter().any(|t| t.lifetime.is_none()) {
        let donor_path = args.lifetimes.clone().unwrap_or_else(|| {
            let dir = std::path::Path::new(pods_path).parent();
            let beside = dir.map(|d| d.join("openb_pod_list_default.csv"));
            beside.map_or_else(String::new, |p| p.display().to_string())
        });
        let donors = trace::read_tasks(&trace::read_file(&donor_path).map_err(|e| {
            format!("{e}: the task list has no creation_time and deletion_time; name a list that has them with --lifetimes FILE")
        })?)?;
        borrow_lifetimes(&mut tasks, &donors, options.seed)?;
    }
    let profile = select(&profile_config)?;
    let start = Instant::now();
    let report = replay(&nodes, &tasks, &profile, &options)?;
    let mut line = report.json();
    line["list"] = json!(file_name(pods_path));
    line["nodes"] = json!(nodes.len());
    line["gpus"] = json!(nodes.iter().map(|n| n.gpus).sum::<i64>());
    line["load"] = json!(options.load);
    line["seed"] = json!(options.seed);
    line["hours"] = json!(options.hours);
    line["warmup"] = json!(options.warmup);
    line["profile"] = json!(options.profile);
    line["alfred"] = json!(match (&options.alfred, &args.config) {
        (None, _) => "off".to_string(),
        (Some(_), None) => "on (chart)".to_string(),
        (Some(_), Some(path)) => format!("on ({})", file_name(path)),
    });
    line["wallSeconds"] = json!((start.elapsed().as_secs_f64() * 10.0).round() / 10.0);
    println!("{line}");
    Ok(())
}
fn file_name(path: &str) -> String {
    let name = std::path::Path::new(path).file_name();
    name.map_or_else(|| path.to_string(), |f| f.to_string_lossy().into_owned())
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

/// The configuration naming the scheduler profile by name; `gpu-packing` weighs the GPUs as
/// `recommend`'s scheduler cost does.
fn profile_config(name: &str) -> Result<Config, String> {
    let yaml = match name {
        "default" => "schemaVersion: 1\n".to_string(),
        "gpu-packing" => format!(
            "schemaVersion: 1\nscheduling: {{profiles: {{default-scheduler: {{backend: kube-scheduler, schedulerVersion: v1.37, configurationID: gpu-packing, scoringStrategy: MostAllocated, scoringResources: [{{name: cpu}}, {{name: memory}}, {{name: nvidia.com/gpu, weight: {}}}]}}}}}}\n",
            alfred::simulate::packing::GPU_WEIGHT
        ),
        other => return Err(format!("--profile {other}: one of default, gpu-packing")),
    };
    Config::parse(&yaml).map_err(|e| e.to_string())
}

/// The profile the scheduler places with.
fn select(config: &Config) -> Result<Profile, String> {
    let probe = NewPod {
        name: "probe".into(),
        namespace: "trace".into(),
        labels: Default::default(),
        spec: Default::default(),
    };
    simulate::select_profile(config, &[probe]).map_err(|o| o.message)
}

#[derive(Default)]
struct Report {
    pending_gpu_ms: u128,
    frag_gpu_ms: u128,
    samples: usize,
    /// Time spent reading the samples' snapshots and repacking them (on a second thread,
    /// beside the replay), and in Alfred's passes.
    sample_seconds: f64,
    pass_seconds: f64,
    arrivals: usize,
    /// Per size, of the tasks that arrived in the measured window: each one's wait in minutes
    /// (until the window ends for those still waiting), and how many were placed.
    waits: BTreeMap<i64, Vec<f64>>,
    placed: BTreeMap<i64, usize>,
    alfred: Counters,
    checks: checks::Counts,
}

impl Report {
    fn json(&self) -> Value {
        let hours = |ms: u128| (ms as f64 / HOUR as f64 * 10.0).round() / 10.0;
        let tenth = |x: f64| (x * 10.0).round() / 10.0;
        let p95 = |w: &Vec<f64>| {
            let mut w = w.clone();
            w.sort_by(f64::total_cmp);
            w.get(((w.len() as f64 * 0.95).ceil() as usize).saturating_sub(1))
                .map(|&x| tenth(x))
        };
        let (a, c) = (&self.alfred, &self.checks);
        json!({
            "fragPendingGpuHours": hours(self.frag_gpu_ms),
            "pendingGpuHours": hours(self.pending_gpu_ms),
            "waitP95MinutesBySize": SIZES.iter().map(|s| (s.to_string(), json!(self.waits.get(s).and_then(p95)))).collect::<serde_json::Map<_, _>>(),
            "placedBySize": SIZES.iter().map(|s| (s.to_string(), json!({
                "placed": self.placed.get(s).copied().unwrap_or(0),
                "arrived": self.waits.get(s).map_or(0, Vec::len)}))).collect::<serde_json::Map<_, _>>(),
            "moves": a.moves, "bounceBacks": c.bounce_backs, "capViolations": c.cap_violations,
            "capViolationsBy": c.violated, "sentTwice": c.sent_twice,
            "staleSends": c.stale_sends, "journalMaxBytes": a.journal_max_bytes, "passes": a.passes,
            "migrations": {"completed": a.completed, "failed": a.failed, "expired": a.expired,
                "neverAcknowledged": a.never_acknowledged, "ownerGone": a.owner_gone,
                "operatorResolves": a.operator_resolves, "surgesBound": a.surges_bound,
                "surgesOffHints": a.surges_off_hints},
            "holds": {"placed": a.holds_placed, "released": a.holds_released,
                "heldPodsBoundThere": a.held_pods_bound_there},
            "passErrors": a.pass_errors, "firstPassError": a.first_error,
            "arrivals": self.arrivals, "samples": self.samples,
            "sampleSeconds": tenth(self.sample_seconds), "passSeconds": tenth(self.pass_seconds),
        })
    }
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
    let shortest = (SHORTEST as f64 / options.time_scale) as u64;
    let runs = |t: &Task| {
        let ms = t.lifetime.unwrap_or(0).max(0) as f64 * 1000.0 / options.time_scale;
        (ms as u64).max(shortest)
    };
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
    let ctx = Context::build(&base.0, &base.1, timestamp(0));
    let mut world = World {
        nodes,
        tasks,
        live: Vec::new(),
        waiting: Vec::new(),
        scheduler: scheduler::Scheduler::new(&ctx, nodes, tasks, profile.clone()),
        rng: Rng::new(options.replay_seed),
        events: BinaryHeap::new(),
        now: 0,
        retry: true,
        ome: OmeSettings { ..options.ome },
        journal: JournalDoc {
            state: None,
            breaker: None,
            version: "1".into(),
        },
        uuids: 0,
        counters: Counters::default(),
        checks: checks::SendChecks::new(options.checked.clone().unwrap_or_else(|| {
            options.alfred.as_ref().map_or_else(
                || checks::Bounds::of(&Config::default()),
                checks::Bounds::of,
            )
        })),
        node_index: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect::<HashMap<_, _>>(),
        writer: store::Writer::new(nodes, options.alfred.is_some()),
        holds: Vec::new(),
        last_read: None,
        check_reads: options.check_reads,
    };
    let mut report = Report::default();
    let mut snapshot = options.snapshot.clone();
    let mut schedule = Schedule::default();
    // The trace's draws (the start state, which task arrives when) have their own stream, so
    // runs of one seed see the same tasks whatever Alfred and the scheduler do.
    let mut trace_rng = Rng::new(options.seed ^ 0x7ace);

    // The steady state of running tasks: drawn in proportion to their running times, each with
    // a uniformly drawn part of it left, until those the scheduler seats hold LOAD x the GPUs.
    // One that no node takes is dropped: drawing waiting tasks by their running times would
    // fill the queue with the longest ones, where arrivals wait whatever their lifetime.
    let mut cumulative = Vec::with_capacity(tasks.len());
    let mut total = 0.0;
    for t in tasks {
        total += runs(t) as f64;
        cumulative.push(total);
    }
    let (mut held, mut refused) = (0, 0);
    while (held as f64) < options.load * gpus as f64 && refused < FULL_AFTER_REFUSALS {
        let x = uniform(&mut trace_rng) * total;
        let row = cumulative.partition_point(|&c| c < x).min(tasks.len() - 1);
        let lifetime = runs(&tasks[row]);
        let left = ((uniform(&mut trace_rng) * lifetime as f64) as u64).max(shortest);
        if world.seat_at_start(row, left, lifetime.saturating_sub(left)) {
            let k = world.live.len() - 1;
            let node = world.live[k].node.map(|n| nodes[n].name.as_str());
            schedule.seated(k, &tasks[row], node, left, lifetime.saturating_sub(left));
            held += tasks[row].holds();
            refused = 0;
        } else {
            refused += 1;
        }
    }
    world.push(0, Event::Arrival);
    world.push(start, Event::Sample);
    let pass_every = options
        .alfred
        .as_ref()
        .map(|c| c.decision_loop_interval.as_millis().max(1000) as u64);
    if let Some(every) = pass_every {
        world.push(every, Event::Pass);
    }

    // Samples are repacked on a second thread while the replay goes on (a bounded queue keeps
    // at most two reads waiting); their sum does not depend on when each is done.
    let (to_repack, reads) = std::sync::mpsc::sync_channel::<(store::Parts, u64)>(2);
    let sample_config = base.1.clone();
    let repacker = std::thread::spawn(move || {
        let (mut fixable_ms, mut seconds) = (0u128, 0.0);
        for (read, now) in reads {
            let clock = Instant::now();
            let read = read.assemble();
            fixable_ms += SAMPLE as u128 * fixable_gpus(&read, &sample_config, now) as u128;
            seconds += clock.elapsed().as_secs_f64();
        }
        (fixable_ms, seconds)
    });
    let mut waiting_gpus: i64 = 0;
    while let Some(std::cmp::Reverse((at, event))) = world.events.pop() {
        if at >= end {
            break;
        }
        // Waiting GPU time in the window, up to this event.
        let from = world.now.max(start);
        if at > from {
            report.pending_gpu_ms += (at - from) as u128 * waiting_gpus as u128;
        }
        world.now = world.now.max(at);
        world.last_read = None;
        let now = world.now;
        match event {
            Event::Departure(k) => world.depart(k),
            Event::Arrival => {
                let row = trace_rng.below(tasks.len());
                let k = world.arrive(row, runs(&tasks[row]));
                schedule.arrived(k, &tasks[row], now, runs(&tasks[row]));
                if now >= start {
                    report.arrivals += 1;
                }
                let gap = -mean_gap_ms * (1.0 - uniform(&mut trace_rng)).ln();
                world.push(now + gap.max(1.0) as u64, Event::Arrival);
            }
            Event::Sample => {
                if let Some((at, path)) = &snapshot
                    && now as f64 >= at * MINUTE as f64
                {
                    let text =
                        world
                            .writer
                            .write(world.nodes, world.tasks, &world.live, &world.holds)?;
                    std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
                    snapshot = None;
                }
                if world.waiting.iter().any(|w| !w.surge) {
                    report.samples += 1;
                    let clock = Instant::now();
                    let read = (world.writer).parts(world.nodes, tasks, &world.live, &[], true)?;
                    report.sample_seconds += clock.elapsed().as_secs_f64();
                    to_repack
                        .send((read, now))
                        .map_err(|_| "the repacking thread stopped")?;
                }
                world.push(now + SAMPLE, Event::Sample);
            }
            Event::Pass => {
                let config = options.alfred.as_ref().expect("passes run with Alfred on");
                let clock = Instant::now();
                let pass = run::run_pass(&mut world, config, run::Options::default());
                match store::futures_lite(pass) {
                    Ok(report) => {
                        world.apply_holds(&report);
                        if options.log {
                            let mut waiting: BTreeMap<i64, usize> = BTreeMap::new();
                            for gpus in world.waiting_gpus() {
                                *waiting.entry(gpus).or_default() += 1;
                            }
                            log_pass(now, &report, &waiting);
                        }
                    }
                    Err(e) => {
                        world.counters.pass_errors += 1;
                        world.counters.first_error.get_or_insert(e.to_string());
                    }
                }
                world.counters.passes += 1;
                world.operator();
                report.pass_seconds += clock.elapsed().as_secs_f64();
                world.push(now + pass_every.expect("on"), Event::Pass);
            }
            Event::Ome(k, serial, step) => world.ome_step(k, serial, step),
        }
        world.retry_queue();
        waiting_gpus = world.waiting_gpus().sum();
    }
    report.pending_gpu_ms += (end - world.now.max(start)) as u128 * waiting_gpus as u128;
    drop(to_repack);
    let (fixable_ms, seconds) = repacker
        .join()
        .map_err(|_| "the repacking thread panicked")?;
    report.frag_gpu_ms = fixable_ms;
    report.sample_seconds += seconds;
    for pod in world
        .live
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
    report.alfred = world.counters;
    report.checks = world.checks.counts;
    if let Some(path) = &options.schedule {
        let text = schedule.json(nodes, options, start, end).to_string();
        std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(report)
}

/// The replay's draws as the soak replays them: the tasks running at the start (where the
/// scheduler put them) and every arrival, each with its task's resources and how long it runs.
#[derive(Default)]
struct Schedule {
    start: Vec<Value>,
    arrivals: Vec<Value>,
}

impl Schedule {
    fn seated(&mut self, k: usize, task: &Task, node: Option<&str>, left: u64, ran: u64) {
        let mut entry = Schedule::task(k, task, left);
        entry["node"] = json!(node);
        entry["ranMs"] = json!(ran);
        self.start.push(entry);
    }

    fn arrived(&mut self, k: usize, task: &Task, at: u64, runs: u64) {
        let mut entry = Schedule::task(k, task, runs);
        entry["atMs"] = json!(at);
        self.arrivals.push(entry);
    }

    fn task(k: usize, task: &Task, runs: u64) -> Value {
        json!({"task": k, "gpus": task.holds(), "whole": task.whole(), "cpuMilli": task.cpu_milli,
            "memoryMiB": task.memory_mib, "gpuModels": task.gpu_spec, "runsMs": runs})
    }

    fn json(self, nodes: &[TraceNode], options: &Options, start: u64, end: u64) -> Value {
        let nodes: Vec<Value> = nodes
            .iter()
            .map(|n| {
                json!({"name": n.name, "cpuMilli": n.cpu_milli, "memoryMiB": n.memory_mib,
                "gpus": n.gpus, "model": n.model})
            })
            .collect();
        json!({"seed": options.seed, "replaySeed": options.replay_seed, "load": options.load,
            "timeScale": options.time_scale, "measuredFromMs": start, "endMs": end,
            "nodes": nodes, "start": self.start, "arrivals": self.arrivals})
    }
}

/// One pass on stderr: the minute, what was sent or why nothing was, how the rows ended, the
/// hold writes, and how many tasks wait by GPUs.
fn log_pass(now: u64, report: &run::Report, waiting: &BTreeMap<i64, usize>) {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for row in report.rows() {
        let key = format!("{:?}/{}", row.outcome, row.why().unwrap_or("-"));
        *outcomes.entry(key).or_default() += 1;
    }
    let what = match (&report.sent, &report.withheld) {
        (Some((_, e)), _) => format!("sent {} {} -> {:?}", e.workload, e.from_node, e.targets),
        (None, Some(w)) => format!("withheld {}: {}", w.reason.as_str(), w.detail),
        (None, None) => "nothing sent".into(),
    };
    let holds: Vec<&str> = report
        .plan
        .decision
        .holds
        .iter()
        .map(|h| h.message.as_str())
        .collect();
    eprintln!(
        "{:>6.1} min {what} | {outcomes:?} | {holds:?} | waiting {waiting:?}",
        now as f64 / MINUTE as f64
    );
}

/// The cluster before any task, and the configuration every sample reads it with.
fn cluster_context(nodes: &[TraceNode]) -> Result<(Snapshot, Config), String> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": trace::cluster_objects(nodes)});
    let snapshot = Snapshot::parse(&list.to_string()).map_err(|e| e.to_string())?;
    let config = Config::parse("schemaVersion: 1\nmigration: {apiVersion: v1}\n")
        .map_err(|e| e.to_string())?;
    Ok((snapshot, config))
}

/// GPUs of the waiting tasks that an ideal repack of the movable Instances would seat: the
/// cluster as it stands written as a snapshot (what a fresh read would return) and repacked.
fn fixable_gpus(snapshot: &Snapshot, config: &Config, now: u64) -> i64 {
    let ctx = Context::build(snapshot, config, timestamp(now));
    let movable = movable(&ctx);
    let repackable = repack::repackable(&ctx.cluster, &movable);
    let free_ideal = repack::all_resources(&ctx, &repackable);
    consolidate::placeable(&ctx, &movable, &free_ideal).pending_gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 8-GPU nodes; long 1-GPU tasks that a spreading scheduler puts on every node, and
    /// short 8-GPU tasks that then wait: Alfred plans, holds and moves.
    fn trace() -> (Vec<TraceNode>, Vec<Task>) {
        let mut nodes = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
        for n in 0..16 {
            nodes += &format!("node-{n:02},96000,786432,8,G2\n");
        }
        let mut tasks = String::from(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
        );
        for t in 0..40 {
            let (gpus, hours) = if t % 4 == 0 { (8, 1) } else { (1, 10) };
            tasks += &format!(
                "task-{t:02},4000,16384,{gpus},1000,,LS,Running,0,{},0\n",
                hours * 3600
            );
        }
        (
            trace::read_nodes(&nodes).expect("nodes"),
            trace::read_tasks(&tasks).expect("tasks"),
        )
    }

    fn options(hours: f64, warmup: f64, alfred: Option<Config>) -> Options {
        Options {
            load: 0.9,
            seed: 1,
            replay_seed: 1,
            hours,
            warmup,
            profile: "default".into(),
            alfred,
            ome: OmeSettings {
                acknowledge_ms: 5_000,
                model_load_ms: 60_000,
                ready_timeout_ms: 30 * MINUTE,
                fail_rate: 0.05,
                no_ack_rate: 0.01,
                operator_ms: 30 * MINUTE,
            },
            log: false,
            check_reads: true,
            snapshot: None,
            checked: None,
            time_scale: 1.0,
            schedule: None,
        }
    }

    #[test]
    fn the_replay_starts_with_running_tasks_only() {
        let (nodes, tasks) = trace();
        let profile =
            select(&profile_config("default").expect("the default profile")).expect("the profile");
        // Without Alfred the 8-GPU tasks find no node once the 1-GPU ones are spread; none is
        // waiting at the start, where drawing tasks by lifetime and queueing those that do not
        // fit had 8-GPU tasks waiting from the first moment.
        let report =
            replay(&nodes, &tasks, &profile, &options(0.005, 0.0, None)).expect("the replay runs");
        assert_eq!(report.pending_gpu_ms, 0);
        // ... while the arrivals of the next hours do wait.
        let later = replay(&nodes, &tasks, &profile, &options(3.0, 0.0, None)).expect("runs");
        assert!(later.pending_gpu_ms > 0, "8-GPU arrivals wait");
    }

    #[test]
    fn reads_made_from_the_last_one_equal_whole_reads() {
        let (nodes, tasks) = trace();
        let (config, profile) = hold_config();
        let options = options(3.0, 0.5, Some(config));
        let report = replay(&nodes, &tasks, &profile, &options).expect("the replay runs");
        let alfred = &report.alfred;
        assert_eq!(alfred.pass_errors, 0, "{:?}", alfred.first_error);
        // The reads compared saw tasks come and go, moves and holds.
        assert!(report.arrivals > 10, "{} arrivals", report.arrivals);
        assert!(
            alfred.moves > 0 && alfred.holds_placed > 0,
            "{} moves, {} holds",
            alfred.moves,
            alfred.holds_placed
        );
        let checks = &report.checks;
        assert_eq!(
            (checks.cap_violations, checks.stale_sends, checks.sent_twice),
            (0, 0, 0)
        );
    }

    /// The example configuration of 60 an hour with a hold, under the default profile.
    fn hold_config() -> (Config, Profile) {
        let profile_config = profile_config("default").expect("the default profile");
        let mut config = Config::parse(include_str!("churn/alfred-60-an-hour-hold.yaml"))
            .expect("the example configuration");
        config.scheduling_profiles = profile_config.scheduling_profiles.clone();
        (config, select(&profile_config).expect("the profile"))
    }

    #[test]
    fn the_outside_checks_count_a_bound_the_requests_break() {
        // Alfred keeps 60 an hour; checked against 2 an hour and an hour between moves on a
        // node, the same replay's requests break the hourly cap, and the checks say so.
        let (nodes, tasks) = trace();
        let (config, profile) = hold_config();
        let run = |checked: Option<checks::Bounds>| {
            let options = Options {
                checked,
                ..options(3.0, 0.5, Some(config.clone()))
            };
            let report = replay(&nodes, &tasks, &profile, &options).expect("the replay runs");
            (report.alfred.moves, report.checks)
        };
        let (moves, kept) = run(None);
        assert!(moves > 2, "{moves} moves");
        assert_eq!(kept.cap_violations, 0, "{kept:?}");
        let mut strict = checks::Bounds::of(&config);
        strict.per_hour = 2;
        strict.node_cooldown = HOUR;
        let (strict_moves, broken) = run(Some(strict));
        assert_eq!(
            strict_moves, moves,
            "the checks change nothing of the replay"
        );
        assert!(broken.violated.contains_key("perHour"), "{broken:?}");
        assert_eq!(
            broken.violated.values().sum::<usize>(),
            broken.cap_violations
        );
    }
}
