//! The operator of the runbook: a request that can never resolve (its workload gone, never
//! acknowledged) stops Alfred's migrations until someone removes it with `kubectl alfred
//! journal resolve`, which checks that it cannot resolve. The operator looks every so often
//! and resolves those stalled for longer than its patience.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

pub struct Operator {
    pub plugin: PathBuf,
    pub kubeconfig: PathBuf,
    pub path: String,
    /// How long a request stalls before the operator steps in.
    pub patience: Duration,
}

impl Operator {
    fn plugin(&self, args: &[&str]) -> Option<Value> {
        let out = Command::new(&self.plugin)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout)
            .ok()
            .or(Some(Value::Null))
    }

    /// One look: the UUIDs it resolved.
    pub fn look(&self) -> Vec<String> {
        let Some(list) = self.plugin(&["journal", "list", "-o", "json"]) else {
            return Vec::new();
        };
        let cutoff = Timestamp::now() - self.patience;
        let mut resolved = Vec::new();
        for entry in entries(&list) {
            let stalled = entry["phase"]
                .as_str()
                .is_some_and(|p| p.eq_ignore_ascii_case("stalled"));
            let old = entry["createdAt"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|t| t <= cutoff);
            let Some(uuid) = entry["uuid"].as_str().filter(|_| stalled && old) else {
                continue;
            };
            let args = [
                "journal",
                "resolve",
                uuid,
                "--yes",
                "--reason",
                "soak operator: can never resolve",
            ];
            if self.plugin(&args).is_some() {
                resolved.push(uuid.to_string());
            }
        }
        resolved
    }
}

/// The journal entries in `journal list -o json`'s answer, wherever they sit.
fn entries(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().flat_map(entries).collect(),
        Value::Object(map) if map.contains_key("uuid") && map.contains_key("phase") => vec![v],
        Value::Object(map) => map.values().flat_map(entries).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_are_found_wherever_the_list_puts_them() {
        let list = json!({"entries": [{"uuid": "a", "phase": "stalled"}, {"uuid": "b", "phase": "completed"}],
            "other": {"x": 1}});
        let found: Vec<&str> = entries(&list)
            .iter()
            .filter_map(|e| e["uuid"].as_str())
            .collect();
        assert_eq!(found, ["a", "b"]);
    }
}
