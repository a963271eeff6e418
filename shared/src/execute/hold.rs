//! Writing a hold (`holdMinutes`; `decision::consolidate::holds`): the patches, judged on the
//! node and pod as read again. Placing writes the pod's toleration first and the node's taint
//! second, each a merge patch under the resourceVersion read, so a crash between them leaves a
//! toleration of a taint nobody sets, which changes nothing. Handing a node over replaces the
//! taint for the pod it was held for in the same write. Releasing removes the taint and the
//! annotation; the toleration stays (Kubernetes lets a pod gain tolerations, never lose one).

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::api::core::{Node, Pod};
use crate::api::keys::{HELD_FOR, HELD_SINCE};
use crate::decision::consolidate::holds::HoldChange;

/// The taint Alfred sets for a pod with this UID, and the toleration the pod gets.
pub fn taint(pod_uid: &str) -> Value {
    json!({"key": HELD_FOR, "value": pod_uid, "effect": "NoSchedule"})
}

pub fn toleration(pod_uid: &str) -> Value {
    json!({"key": HELD_FOR, "operator": "Equal", "value": pod_uid, "effect": "NoSchedule"})
}

/// A JSON value of a list the API returned (tolerations, taints).
fn listed<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect()
}

/// The pod's patch for placing `hold`, or why not: the pod must be the one the pass saw and
/// still unscheduled. None when it already tolerates the taint.
pub fn toleration_patch(
    hold: &HoldChange,
    pod: Option<&Pod>,
    resource_version: &str,
) -> Result<Option<Value>, &'static str> {
    let pod = pod.ok_or("the pod is gone")?;
    if pod.metadata.uid != hold.pod_uid {
        return Err("the pod was replaced since the pass read it");
    }
    if !pod.spec.node_name.is_empty() {
        return Err("the pod was scheduled");
    }
    let mut tolerations = listed(&pod.spec.tolerations);
    let ours = toleration(&hold.pod_uid);
    if tolerations.contains(&ours) {
        return Ok(None);
    }
    tolerations.push(ours);
    Ok(Some(json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"tolerations": tolerations},
    })))
}

/// The node's patch for placing or releasing `hold`, or why not. None when there is nothing
/// to write (placed already, or no taint to remove).
pub fn node_patch(
    hold: &HoldChange,
    node: Option<&Node>,
    resource_version: &str,
    now: Timestamp,
) -> Result<Option<Value>, &'static str> {
    let node = node.ok_or("the node is gone")?;
    let taints = listed(&node.spec.taints);
    let others: Vec<Value> = taints
        .iter()
        .filter(|t| t["key"] != HELD_FOR)
        .cloned()
        .collect();
    let ours = taint(&hold.pod_uid);
    let (taints, since) = if hold.place {
        if taints.contains(&ours) {
            return Ok(None);
        }
        let handed_over = |t: &Value| {
            hold.replaces
                .as_deref()
                .is_some_and(|uid| t["value"] == uid)
        };
        if taints
            .iter()
            .any(|t| t["key"] == HELD_FOR && !handed_over(t))
        {
            return Err("the node is held for another pod");
        }
        if node.spec.unschedulable {
            return Err("the node is cordoned");
        }
        let mut placed = others;
        placed.push(ours);
        (placed, json!(now.to_string()))
    } else {
        if others.len() == taints.len() {
            return Ok(None);
        }
        (others, Value::Null)
    };
    Ok(Some(json!({
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {HELD_SINCE: since},
        },
        "spec": {"taints": taints},
    })))
}
