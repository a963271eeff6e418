//! Where a command's world comes from: a snapshot file, stdin, or the live cluster; and the
//! configuration and `now` it is evaluated with.

use std::io::Read;

use alfred::config::{CONFIG_MAP_KEY, CONFIG_MAP_NAME, Config};
use alfred::input::MAX_INPUT_BYTES;
use alfred::model::Context;
use alfred::model::cluster::Cluster;
use alfred::snapshot::Snapshot;
use anyhow::{Context as _, Result, anyhow, bail};
use k8s_openapi::jiff::Timestamp;

use crate::{GlobalArgs, failure};

/// A snapshot with the configuration and time to evaluate it at.
pub struct Input {
    pub snapshot: Snapshot,
    pub config: Config,
    pub now: Timestamp,
}

impl Input {
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster::build(&self.snapshot, &self.config, self.now)
    }

    /// The cluster model and what the policies read besides: what every pass starts from.
    pub fn context(&self) -> Context<'_> {
        Context::build(&self.snapshot, &self.config, self.now)
    }
}

pub async fn load(args: &GlobalArgs) -> Result<Input> {
    let snapshot = read_snapshot(args).await?;
    for note in snapshot.notes() {
        eprintln!("note: {note}");
    }
    let config = load_config(args.config.as_deref(), &snapshot)?;
    let now = evaluation_time(args, &snapshot)?;
    Ok(Input {
        snapshot,
        config,
        now,
    })
}

/// The snapshot file given with `-f`, else a read of the live cluster.
pub async fn read_snapshot(args: &GlobalArgs) -> Result<Snapshot> {
    match args.file.as_deref() {
        Some(path) => read_file(path),
        None => crate::live::read_snapshot(args).await,
    }
}

/// The time a snapshot is evaluated at: `--now`, else when it was captured (a live read is
/// captured as it is made), else the clock.
pub fn evaluation_time(args: &GlobalArgs, snapshot: &Snapshot) -> Result<Timestamp> {
    match args.now.as_deref() {
        Some(text) => text.parse::<Timestamp>().map_err(|e| {
            // A well-formed time past what a timestamp holds is out of range, not malformed.
            if k8s_openapi::jiff::fmt::temporal::Pieces::parse(text).is_ok() {
                anyhow!(
                    "--now {text:?} is out of range: times run from {} to {}",
                    Timestamp::MIN,
                    Timestamp::MAX
                )
            } else {
                anyhow!("--now {text:?} is not an RFC 3339 time such as 2026-09-28T10:15:00Z: {e}")
            }
        }),
        None => Ok(snapshot
            .info
            .as_ref()
            .map_or_else(Timestamp::now, |i| i.captured_at)),
    }
}

/// A file's text; `-` is standard input. `what` names the file in errors. Text past
/// [`MAX_INPUT_BYTES`] is refused before it fills memory.
pub fn read_text(path: &str, what: &str) -> Result<String> {
    let too_large = |name: &str| {
        anyhow!(
            "{name} is larger than {} GiB, the most Alfred reads; `kubectl alfred snapshot` captures only the kinds Alfred reads",
            MAX_INPUT_BYTES >> 30
        )
    };
    let (reader, name): (Box<dyn Read>, String) = if path == "-" {
        (
            Box::new(std::io::stdin()),
            format!("the {what} from standard input"),
        )
    } else {
        let name = format!("{what} file {path}");
        let file = std::fs::File::open(path).with_context(|| format!("reading {name}"))?;
        // A file says its size: refused before a byte is read. A pipe is counted as it comes.
        if file
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() > MAX_INPUT_BYTES)
        {
            return Err(too_large(&name));
        }
        (Box::new(file), name)
    };
    let mut text = String::new();
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {name}"))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large(&name));
    }
    Ok(text)
}

pub fn read_file(path: &str) -> Result<Snapshot> {
    let text = read_text(path, "snapshot")?;
    let name = if path == "-" { "standard input" } else { path };
    let snapshot = Snapshot::parse(&text).map_err(|e| {
        anyhow!("{name}: {e}\nfix or remove that object; the file must be `kubectl get -o yaml|json` output")
    })?;
    // An empty file (or stdin closed early) is not an empty cluster: saying "nothing to do"
    // about it would be a silently wrong answer.
    if snapshot.object_count() == 0 && snapshot.skipped.is_empty() {
        bail!(
            "no objects in {name}: a snapshot is `kubectl get -o yaml|json` output or what `kubectl alfred snapshot` writes"
        );
    }
    if !snapshot.skipped.is_empty() {
        let kinds: Vec<String> = snapshot
            .skipped
            .iter()
            .map(|(k, n)| format!("{k} ({n})"))
            .collect();
        eprintln!(
            "note: skipped objects of kinds Alfred does not read: {}",
            kinds.join(", ")
        );
    }
    Ok(snapshot)
}

/// `--config FILE`, else the `alfred-config` ConfigMap in the snapshot, else the defaults. Keys
/// that load but are not used are noted on stderr, once a process (a watch reads it each pass).
pub fn load_config(path: Option<&str>, snapshot: &Snapshot) -> Result<Config> {
    let config = read_config(path, snapshot)?;
    static NOTED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut noted = NOTED.lock().unwrap_or_else(|e| e.into_inner());
    for unused in &config.unused {
        if !noted.contains(&unused.reason) {
            noted.push(unused.reason);
            eprintln!(
                "note: read and not used: {} ({})",
                unused.keys.join(", "),
                unused.reason
            );
        }
    }
    Ok(config)
}

fn read_config(path: Option<&str>, snapshot: &Snapshot) -> Result<Config> {
    if let Some(path) = path {
        let text = read_text(path, "config")?;
        return Config::parse(&text)
            .map_err(|e| failure::BadConfiguration(format!("config file {path}: {e}")).into());
    }
    let Some(cm) = snapshot.config_map(CONFIG_MAP_NAME) else {
        return Ok(Config::default());
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_MAP_KEY))
        .ok_or_else(|| {
            failure::BadConfiguration(format!(
                "ConfigMap {CONFIG_MAP_NAME} has no key {CONFIG_MAP_KEY}; add it or pass --config"
            ))
        })?;
    Config::parse(text).map_err(|e| {
        failure::BadConfiguration(format!(
            "ConfigMap {CONFIG_MAP_NAME} key {CONFIG_MAP_KEY}: {e}"
        ))
        .into()
    })
}
