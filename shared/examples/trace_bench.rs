//! Decision quality on a production trace: a cluster replayed from Alibaba's openb trace (see
//! `common/trace.rs`), then the fewest-move consolidation plan of `recommend --plan` measured
//! against doing nothing and against an ideal repack.
//!
//!     cargo run --release -p alfred-shared --example trace_bench -- --nodes NODES.csv --pods PODS.csv
//!     cargo run --release -p alfred-shared --example trace_bench -- --help   (every flag, its default)
//!
//! `--eight-gpu-nodes N` replaces the node list with N 8-GPU nodes of the trace's commonest
//! 8-GPU type; `--repeat-nodes N` repeats the node list to N nodes (the trace's mix of 1, 2, 4
//! and 8 GPUs over its GPU models, on a larger cluster); `--node-mix` builds the nodes from
//! counts, `--fill` says how tasks pick their nodes, and `--snapshot FILE` measures a
//! snapshot instead of a replay. Reports pending GPUs placeable
//! (largest first, best fit) and whole free nodes now, after the plan and after the ideal
//! repack (first-fit decreasing of every movable Instance but those that fill their node,
//! other pods pinned), the plan's moves and GPUs moved, the Instances on the nodes the ideal
//! empties for the waiting pods (a reference, not a bound: `tests/bench/fewest_moves.py` gives
//! one), and the time to plan. Pods request the trace's CPU and memory unless `--gpus-only`;
//! the plan's steps are replayed as surges with plain arithmetic (each move's new pods beside
//! the old ones, then the old ones gone) and the steps whose new pods find too little CPU,
//! memory or GPUs on their target are counted. `--steps` prints every step, so that two builds
//! of the planner can be compared move by move, not only by their counts.

use std::time::Instant;

#[path = "common/repack.rs"]
mod repack;
// Shared by the replays: each uses part of it.
#[allow(dead_code)]
#[path = "common/trace.rs"]
mod trace;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alfred::config::Config;
use alfred::decision::{consolidate, movable, score};
use alfred::model::Context;
use alfred::model::cluster::Cluster;
use alfred::snapshot::Snapshot;
use clap::Parser;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The consolidation plan on an openb replay, against doing nothing and an ideal repack.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    trace: trace::TraceArgs,
    /// Measure the plan on this snapshot (`kubectl get -o json` of a cluster, or one a replay
    /// wrote) instead of replaying the trace
    #[arg(long, value_name = "SNAPSHOT", conflicts_with_all = ["nodes", "node_mix", "pods"])]
    snapshot: Option<String>,
    /// The share of the cluster's GPUs the replay's tasks ask for
    #[arg(long, default_value_t = 0.95)]
    load: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How the replay picks a task's node among those with room
    #[arg(long, value_enum, default_value_t = trace::Fill::MostFree)]
    fill: trace::Fill,
    /// The best plan of at most N moves
    #[arg(long, value_name = "N")]
    max_moves: Option<usize>,
    /// Pods request GPUs only, not the trace's CPU and memory
    #[arg(long)]
    gpus_only: bool,
    /// Write the replayed cluster as a snapshot file
    #[arg(long, value_name = "SNAPSHOT")]
    write: Option<String>,
    /// Print every step of the plan
    #[arg(long)]
    steps: bool,
    /// Print where the ideal repack and the plan differ
    #[arg(long)]
    detail: bool,
}

fn run() -> Result<(), String> {
    let args = Args::parse();
    let (load, seed, max_moves) = (args.load, args.seed, args.max_moves);
    let cpu_memory = !args.gpus_only;
    let json = match &args.snapshot {
        Some(path) => {
            println!("snapshot: {path}");
            trace::read_file(path)?
        }
        None => {
            let trace = &args.trace;
            let nodes = trace.read_nodes()?;
            let tasks = trace.read_tasks()?;
            let replay = trace::replay(&nodes, &tasks, load, seed, cpu_memory, args.fill);
            println!(
                "replay: {} nodes, {} GPUs, load {load} (asked {:.0} GPUs), seed {seed}: {} tasks placed, {} pending",
                nodes.len(),
                replay.gpus,
                replay.asked,
                replay.placed_tasks,
                replay.pending_tasks
            );
            replay.json
        }
    };
    if let Some(path) = &args.write {
        std::fs::write(path, &json).map_err(|e| format!("{path}: {e}"))?;
        println!("snapshot written to {path}");
    }
    let snapshot = Snapshot::parse(&json).map_err(|e| e.to_string())?;
    let config = Config::parse("schemaVersion: 1\nmigration: {apiVersion: v1}\n")
        .map_err(|e| e.to_string())?;
    // A replay's objects are stamped 2026-09-28T10:00; a snapshot is read at the time it was
    // captured, or now, as `recommend -f` reads it.
    let now = match (&args.snapshot, &snapshot.info) {
        (None, _) => "2026-09-28T10:15:00Z".parse().unwrap(),
        (Some(_), Some(info)) => info.captured_at,
        (Some(_), None) => k8s_openapi::jiff::Timestamp::now(),
    };
    let ctx = Context::build(&snapshot, &config, now);
    let cluster = &ctx.cluster;

    let start = Instant::now();
    let movable = movable(&ctx);
    let eligible = start.elapsed();
    let start = Instant::now();
    let plan = consolidate::plan(&ctx, &movable, max_moves);
    let planning = start.elapsed();

    let free_now: Vec<i64> = cluster.nodes.iter().map(|n| n.gpu_free).collect();
    let now_ = consolidate::placeable(&ctx, &movable, &free_now);
    let mut free_ideal = free_now.clone();
    let repackable = repack::repackable(cluster, &movable);
    for pool in score::score_pools(&ctx, &repackable) {
        for m in &pool.repack_moves {
            let gpus = cluster.pods[m.pod].gpus;
            free_ideal[pool.bins[m.from].index] += gpus;
            free_ideal[pool.bins[m.to].index] -= gpus;
        }
    }
    let gpu_ideal = consolidate::placeable(&ctx, &movable, &free_ideal);
    if cpu_memory {
        free_ideal = repack::all_resources(&ctx, &repackable);
    }
    let ideal = consolidate::placeable(&ctx, &movable, &free_ideal);
    let after = plan.after();
    let on_emptied = instances_on_ideal_emptied(
        cluster,
        &movable,
        &free_now,
        &free_ideal,
        &now_.unplaced,
        &ideal.unplaced,
    );
    let gpus_moved: i64 = plan.steps.iter().map(|s| s.gpus).sum();
    let short = steps_short(cluster, &plan.steps);
    println!(
        "instances: {} ({} movable); pending GPUs: {}",
        cluster.instances.len(),
        movable.iter().filter(|&&m| m).count(),
        plan.pending_gpus_total
    );
    println!("                     now     plan    ideal");
    println!(
        "pending GPUs placeable  {:>5}  {:>7}  {:>7}",
        now_.pending_gpus, after.pending_gpus, ideal.pending_gpus
    );
    println!(
        "whole free nodes        {:>5}  {:>7}  {:>7}",
        now_.whole_free_nodes, after.whole_free_nodes, ideal.whole_free_nodes
    );
    if cpu_memory {
        println!(
            "(the ideal repack packs CPU and memory too; by GPUs alone it would make {} placeable)",
            gpu_ideal.pending_gpus
        );
    }
    let gained = after.pending_gpus - now_.pending_gpus;
    let possible = ideal.pending_gpus - now_.pending_gpus;
    println!(
        "plan: {} moves, {gpus_moved} GPUs moved; the ideal's emptied nodes hold {on_emptied} Instances; gains {gained} of the {possible} pending GPUs the ideal repack makes placeable ({:.1}%)",
        plan.steps.len(),
        if possible > 0 {
            100.0 * gained as f64 / possible as f64
        } else {
            100.0
        }
    );
    println!(
        "steps short of CPU, memory or GPUs on their target: {short} of {} (pods request {})",
        plan.steps.len(),
        if cpu_memory {
            "the trace's CPU and memory"
        } else {
            "GPUs only"
        }
    );
    if args.steps {
        for s in &plan.steps {
            println!(
                "step {}/{} {:?} -> {:?} (frees {})",
                s.workload, s.instance, s.from, s.to, s.frees
            );
        }
    }
    if args.detail {
        detail(cluster, &movable, &now_, &ideal);
    }
    println!(
        "time: eligibility {:.0} ms, plan {:.0} ms",
        eligible.as_secs_f64() * 1e3,
        planning.as_secs_f64() * 1e3
    );
    Ok(())
}

/// The plan's steps replayed as surges on each node's allocatable CPU, memory and GPUs: how
/// many put a new pod where those run short.
fn steps_short(cluster: &Cluster<'_>, steps: &[consolidate::PlanStep]) -> usize {
    let requests = |p: usize| repack::requests_of(cluster, p);
    let mut free = repack::allocatable_of(cluster);
    for (p, pod) in cluster.pods.iter().enumerate() {
        if let (Some(n), false) = (pod.host, pod.terminal) {
            let r = requests(p);
            for k in 0..3 {
                free[n][k] -= r[k];
            }
        }
    }
    let mut short = 0;
    for step in steps {
        let mut fits = true;
        for &(p, to) in &step.placements {
            let r = requests(p);
            for k in 0..3 {
                free[to][k] -= r[k];
                fits &= free[to][k] >= 0;
            }
        }
        for &(p, _) in &step.placements {
            let r = requests(p);
            let from = cluster.pods[p].host.expect("a moved pod runs");
            for k in 0..3 {
                free[from][k] += r[k];
            }
        }
        short += usize::from(!fits);
    }
    short
}

/// For the pending pods that need whole nodes: for each node size C that pending pods ask for
/// whole, the Instances on the least-occupied of the size-C nodes the ideal repack empties, as
/// many nodes as such pods it seats that wait now. Not a bound on moves: a plan may empty other
/// nodes, or make room without emptying one.
fn instances_on_ideal_emptied(
    cluster: &Cluster<'_>,
    movable: &[bool],
    free_now: &[i64],
    free_ideal: &[i64],
    unplaced_now: &[i64],
    unplaced_ideal: &[i64],
) -> usize {
    let mut instances_on = vec![0usize; cluster.nodes.len()];
    for (i, inst) in cluster.instances.iter().enumerate() {
        if movable[i] {
            let mut hosts: Vec<usize> = inst
                .pods
                .iter()
                .filter_map(|&p| cluster.pods[p].host)
                .collect();
            hosts.dedup();
            for n in hosts {
                instances_on[n] += 1;
            }
        }
    }
    let mut sizes: Vec<i64> = cluster.nodes.iter().map(|n| n.gpu_total).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut total = 0;
    for c in sizes.into_iter().filter(|&c| c > 0) {
        let waiting = |unplaced: &[i64]| unplaced.iter().filter(|&&g| g == c).count();
        let seated = waiting(unplaced_now).saturating_sub(waiting(unplaced_ideal));
        let mut emptied: Vec<usize> = (0..cluster.nodes.len())
            .filter(|&n| cluster.nodes[n].gpu_total == c)
            .filter(|&n| free_now[n] < c && free_ideal[n] >= c)
            .map(|n| instances_on[n])
            .collect();
        emptied.sort_unstable();
        total += emptied.iter().take(seated).sum::<usize>();
    }
    total
}

/// Where the demand and the room are: pending pods by size (unplaced now and after the ideal
/// repack), and per node size the nodes by free GPUs and movable Instances.
fn detail(
    cluster: &Cluster<'_>,
    movable: &[bool],
    now: &consolidate::Placeable,
    ideal: &consolidate::Placeable,
) {
    use std::collections::BTreeMap;
    let mut by_size: BTreeMap<i64, (usize, usize, usize)> = BTreeMap::new();
    for p in &cluster.pending {
        by_size.entry(p.gpus).or_default().0 += 1;
    }
    for &g in &now.unplaced {
        by_size.entry(g).or_default().1 += 1;
    }
    for &g in &ideal.unplaced {
        by_size.entry(g).or_default().2 += 1;
    }
    for (g, (all, now, ideal)) in by_size {
        println!("  pending {g}-GPU pods: {all}, unplaced now {now}, after the ideal {ideal}");
    }
    let mut instances_on = vec![0usize; cluster.nodes.len()];
    for (i, inst) in cluster.instances.iter().enumerate() {
        if movable[i] {
            for &p in &inst.pods {
                if let Some(n) = cluster.pods[p].host {
                    instances_on[n] += 1;
                }
            }
        }
    }
    let mut shape: BTreeMap<(i64, i64, usize), usize> = BTreeMap::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        if node.gpu_total == 8 {
            *shape
                .entry((node.gpu_total, node.gpu_free, instances_on[n]))
                .or_default() += 1;
        }
    }
    for ((cap, free, inst), count) in shape {
        println!("  {count} nodes of {cap} GPUs with {free} free and {inst} movable Instances");
    }
}
