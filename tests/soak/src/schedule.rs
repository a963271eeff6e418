//! The world the soak replays: `churn_bench --schedule-out` writes it (the start state where
//! the simulated scheduler put it, and every arrival), so the soak and the replay see the same
//! tasks for the same seed.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    pub seed: u64,
    pub load: f64,
    pub time_scale: f64,
    /// Where the measured window starts (the warm-up before it is not counted).
    pub measured_from_ms: u64,
    pub end_ms: u64,
    pub nodes: Vec<Node>,
    pub start: Vec<Task>,
    pub arrivals: Vec<Task>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub name: String,
    pub cpu_milli: i64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: i64,
    pub gpus: i64,
    pub model: String,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub task: usize,
    pub gpus: i64,
    /// An OMENative InferenceService (whole GPUs); else a plain pod sharing one GPU.
    pub whole: bool,
    pub cpu_milli: i64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: i64,
    /// Allowed GPU models; empty is any.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// How long it runs once bound (for the start state: what is left of its run).
    pub runs_ms: u64,
    /// The start state: its node, and how long it had run before.
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub ran_ms: u64,
    /// An arrival: when, from the start.
    #[serde(default)]
    pub at_ms: u64,
}

impl Task {
    pub fn name(&self) -> String {
        name(self.task)
    }
}

/// A task's InferenceService (or plain pod) name, as `churn_bench` names it.
pub fn name(k: usize) -> String {
    format!("task-{k:05}")
}

/// The task number in an object's name (`task-00012`, `task-00012-engine-1-default-0`).
pub fn task_of(name: &str) -> Option<usize> {
    name.strip_prefix("task-")?.get(..5)?.parse().ok()
}

impl Schedule {
    pub fn read(path: &str) -> Result<Schedule, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{path}: not a schedule churn_bench --schedule-out writes: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_give_their_task() {
        assert_eq!(task_of("task-00012"), Some(12));
        assert_eq!(task_of("task-00012-engine-1-default-0"), Some(12));
        assert_eq!(task_of("other-00012"), None);
        assert_eq!(task_of("task-12"), None);
        assert_eq!(name(12), "task-00012");
    }
}
