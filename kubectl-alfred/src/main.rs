//! `kubectl alfred`: defragmentation, node health, drains and rollouts for OME GPU clusters.

mod caretaker;
mod commands;
mod complete;
mod cordon;
mod events;
mod failure;
mod hold;
mod live;
mod progress;
mod record;
mod render;
mod source;
mod store;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};

use commands::{
    completion, drain, explain, journal, migrate, pools, recommend, rollout, simulate, snapshot,
    solve, status, version,
};

// Snapshots of large clusters allocate millions of small objects from several threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kubectl-alfred",
    bin_name = "kubectl alfred",
    version,
    about = "Keep OME GPU clusters packed, healthy and safely rolled out",
    long_about = "Reads a live cluster (kubeconfig, --context) or a snapshot file (-f) and shows \
                  GPU pools, defragmentation and node-health advice, drains and rollouts."
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Default)]
pub struct GlobalArgs {
    /// Read a snapshot file (`kubectl get -o yaml|json` output, or `kubectl alfred snapshot`);
    /// `-` reads standard input. Without it, the live cluster is read.
    #[arg(short = 'f', long = "filename", global = true, value_name = "FILE")]
    pub file: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Alfred's configuration (`alfredConfig` as YAML). Default: the `alfred-config` ConfigMap
    /// in the snapshot, else the built-in defaults.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<String>,
    /// Evaluate as of this time (RFC 3339). Default: the snapshot's capture time, else now.
    #[arg(long, global = true, value_name = "TIME")]
    pub now: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// How long to wait for each request to the API server (connect, send, every read of the
    /// answer, each page of a list) before giving up with an error: `30s`, `2m`, or seconds
    /// (`45`). `0` waits without limit, as kubectl does by default; Alfred's default keeps a
    /// stalled server from hanging a command.
    #[arg(long, global = true, value_name = "DURATION", default_value = "30s",
          value_parser = live::RequestTimeout::parse)]
    pub request_timeout: live::RequestTimeout,
}

impl GlobalArgs {
    /// Sets the flag with this id (its field's name) as the command line would.
    fn set(&mut self, id: &str, value: &str) {
        let value = Some(value.to_string());
        match id {
            "file" => self.file = value,
            "kubeconfig" => self.kubeconfig = value,
            "context" => self.context = value,
            "config" => self.config = value,
            "now" => self.now = value,
            "request_timeout" => {
                if let Some(t) = value
                    .as_deref()
                    .and_then(|v| live::RequestTimeout::parse(v).ok())
                {
                    self.request_timeout = t;
                }
            }
            _ => {}
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// Draw each GPU pool: every node's GPUs as used and free cells, with its state.
    Pools,
    /// One decision pass as advice: each GPU pool's fragmentation score, the moves Alfred
    /// would plan and why each is or is not made, and the nodes that need attention.
    Recommend(recommend::RecommendArgs),
    /// Why an Instance is (not) moved: every eligibility check with its verdict, the nodes it
    /// runs on, the best targets, and what the pass recommends about it.
    Explain(explain::ExplainArgs),
    /// The joint plan that empties nodes of OME Instances: each Instance's targets, or why it
    /// cannot move, and whether each node empties. Exits 1 when one cannot.
    Drain(drain::DrainArgs),
    /// Where would this Instance's replacement land right now? Its pods run through the
    /// scheduler's filters and scores on a copy of the cluster (the old pods still running).
    Simulate(simulate::SimulateArgs),
    /// Write the live cluster as a snapshot file that any command can replay with -f.
    Snapshot,
    /// Solve an assignment problem file (-f) with the drain solver: containers, objects,
    /// dimensions, constraints and goals; prints the moves in order. See README "solve".
    Solve,
    /// One execute pass: the arbiter admits moves, and the first that passes every re-check on
    /// a fresh read is journaled and requested from OME; every other row says why not.
    Migrate(migrate::MigrateArgs),
    /// Run in the cluster: the execute pass of `migrate --watch` on every replica that holds
    /// the Lease `alfred.ome.io`, from warm watch caches, with metrics, probes and the
    /// configuration reloaded when `alfred-config` changes.
    Caretaker(caretaker::CaretakerArgs),
    /// Alfred's dispatch journal: list its requests, show one, or resolve a stalled one.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// The safety bounds as they stand: breaker, backoff, requests in flight, what the next
    /// pass may do.
    Status,
    /// OMENative rollouts: plan a change before applying it, or see why one stopped.
    #[command(subcommand)]
    Rollout(rollout::RolloutCommand),
    /// Print a shell completion script (bash, zsh or fish) for `kubectl-alfred`; `kubectl
    /// alfred` completes through `kubectl_complete-alfred` instead (see README).
    Completion(completion::CompletionArgs),
    /// The plugin's version and, when a cluster is reachable, what Alfred finds there: OME's
    /// API group, InferenceReplica, the webhook, and whether you may patch InferenceServices.
    Version,
}

fn main() -> ExitCode {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let completing = words.first().is_some_and(|w| w == "__complete");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if completing {
        runtime.block_on(complete::run(&words[1..]));
        // A read past the deadline may still run on a blocking thread: not waited for.
        std::process::exit(0);
    }
    let cli = Cli::parse();
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", failure::describe(&e));
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Pools => pools::run(&cli.global).await?,
        Command::Snapshot => snapshot::run(&cli.global).await?,
        Command::Solve => solve::run(&cli.global)?,
        Command::Recommend(args) => recommend::run(&args, &cli.global).await?,
        Command::Explain(args) => explain::run(&args, &cli.global).await?,
        Command::Drain(args) => drain::run(&args, &cli.global).await?,
        Command::Simulate(args) => simulate::run(&args, &cli.global).await?,
        Command::Rollout(command) => rollout::run(&command, &cli.global).await?,
        Command::Migrate(args) => migrate::run(&args, &cli.global).await?,
        Command::Caretaker(args) => caretaker::run(&args, &cli.global).await?,
        Command::Journal(command) => journal::run(&command, &cli.global).await?,
        Command::Status => status::run(&cli.global).await?,
        Command::Completion(args) => completion::run(&args)?,
        Command::Version => version::run(&cli.global).await?,
    }
    Ok(ExitCode::SUCCESS)
}
