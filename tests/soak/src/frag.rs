//! Fragmentation over time, measured as `churn_bench` measures it, from the cluster as the API
//! server holds it (`kubectl alfred snapshot`): the GPUs of waiting tasks over time
//! (`pendingGpuHours`), and, every 5 minutes while something waits, those that an ideal repack
//! of the movable Instances would seat (`fragPendingGpuHours`). The fault's burst pods are left
//! out: they are not the replay's tasks.

#[path = "../../../shared/examples/common/repack.rs"]
mod repack;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use alfred::config::Config;
use alfred::decision::{consolidate, movable};
use alfred::model::Context;
use alfred::snapshot::Snapshot;
use serde::Serialize;
use serde_json::Value;

use crate::schedule::task_of;

/// How often the waiting GPUs are read, and how often the repack runs (churn_bench's sample).
pub const READ_EVERY: Duration = Duration::from_secs(30);
const REPACK_EVERY: u32 = 10;

#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub frag_pending_gpu_hours: f64,
    pub pending_gpu_hours: f64,
    pub reads: usize,
    pub repacks: usize,
    pub failed_reads: usize,
}

pub struct Sampler {
    pub plugin: PathBuf,
    pub kubeconfig: PathBuf,
    pub path: String,
    /// Counting starts here (the schedule's warm-up before it is not measured).
    pub measured_from: Instant,
    pub report: Report,
    reads_since_repack: u32,
}

impl Sampler {
    pub fn new(
        plugin: PathBuf,
        kubeconfig: PathBuf,
        path: String,
        measured_from: Instant,
    ) -> Sampler {
        Sampler {
            plugin,
            kubeconfig,
            path,
            measured_from,
            report: Report::default(),
            reads_since_repack: REPACK_EVERY,
        }
    }

    /// One read: adds `READ_EVERY` of the waiting GPUs, and every `REPACK_EVERY` reads the
    /// repack's GPUs for as long.
    pub fn read(&mut self) {
        if Instant::now() < self.measured_from {
            return;
        }
        let out = Command::new(&self.plugin)
            .args(["snapshot", "-o", "json"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .output();
        let Some(list) = out
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        else {
            self.report.failed_reads += 1;
            return;
        };
        let (list, waiting) = tasks_only(list);
        self.report.reads += 1;
        let hours = |d: Duration| d.as_secs_f64() / 3600.0;
        self.report.pending_gpu_hours += waiting as f64 * hours(READ_EVERY);
        self.reads_since_repack += 1;
        if waiting == 0 || self.reads_since_repack < REPACK_EVERY {
            return;
        }
        self.reads_since_repack = 0;
        if let Some(gpus) = fixable_gpus(&list) {
            self.report.repacks += 1;
            self.report.frag_pending_gpu_hours += gpus as f64 * hours(READ_EVERY * REPACK_EVERY);
        }
    }
}

/// The snapshot without the burst pods, and the GPUs of the tasks that wait (a surge waiting
/// beside its running source is not a task waiting).
fn tasks_only(mut list: Value) -> (Value, i64) {
    if let Some(items) = list["items"].as_array_mut() {
        items.retain(|o| {
            !(o["kind"] == "Pod"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("burst-")))
        });
    }
    let pods: Vec<&Value> = (list["items"].as_array().into_iter().flatten())
        .filter(|o| o["kind"] == "Pod")
        .collect();
    let bound: std::collections::BTreeSet<usize> = pods
        .iter()
        .filter(|p| p["spec"]["nodeName"].is_string())
        .filter_map(|p| task_of(p["metadata"]["name"].as_str()?))
        .collect();
    let waiting = pods
        .iter()
        .filter(|p| !p["spec"]["nodeName"].is_string())
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .and_then(task_of)
                .is_some_and(|k| !bound.contains(&k))
        })
        .map(|p| {
            (p["spec"]["containers"].as_array().into_iter().flatten())
                .filter_map(|c| {
                    c["resources"]["requests"]["nvidia.com/gpu"]
                        .as_str()?
                        .parse::<i64>()
                        .ok()
                })
                .sum::<i64>()
        })
        .sum();
    (list, waiting)
}

/// GPUs of the waiting tasks an ideal repack of the movable Instances would seat, as
/// `churn_bench` counts them.
fn fixable_gpus(list: &Value) -> Option<i64> {
    let snapshot = Snapshot::parse(&list.to_string()).ok()?;
    let config = Config::parse("schemaVersion: 1\nmigration: {apiVersion: v1}\n").ok()?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let ctx = Context::build(&snapshot, &config, now);
    let movable = movable(&ctx);
    let repackable = repack::repackable(&ctx.cluster, &movable);
    let free_ideal = repack::all_resources(&ctx, &repackable);
    Some(consolidate::placeable(&ctx, &movable, &free_ideal).pending_gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, gpus: i64) -> Value {
        json!({"kind": "Pod", "metadata": {"name": name}, "spec": {"nodeName": node,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]}})
    }

    #[test]
    fn tasks_that_wait_exclude_surges_and_bursts() {
        let list = json!({"items": [
            pod("task-00001-engine-0-default-0", None, 8),
            pod("task-00002-engine-0-default-0", Some("n1"), 4),
            pod("task-00002-engine-1-default-0", None, 4),
            pod("task-00003-engine-0-default-0", None, 1),
            pod("burst-1-000", None, 8),
        ]});
        let (list, waiting) = tasks_only(list);
        assert_eq!(waiting, 9);
        assert_eq!(list["items"].as_array().unwrap().len(), 4);
    }
}
