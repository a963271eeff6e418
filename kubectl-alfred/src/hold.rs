//! Holds (`policies.defragmentation.holdMinutes`): after an execute pass, each hold it asks for
//! is written with merge patches under the resourceVersions read just before, as
//! `alfred::execute::hold` says. Failures are reported and never stop the pass; the next pass
//! sees what stands and carries on.

use alfred::decision::consolidate::holds::HoldChange;
use alfred::execute::hold;
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// Writes the pass's `changes`.
pub async fn apply(client: &Client, changes: &[HoldChange]) {
    for change in changes {
        match apply_one(client, change).await {
            Ok(true) => eprintln!("{}", change.message),
            Ok(false) => {}
            Err(e) => eprintln!(
                "warning: hold on node {} not {}: {}; the next pass tries again",
                change.node,
                if change.place { "placed" } else { "released" },
                crate::failure::describe(&e)
            ),
        }
    }
}

/// True when something was written.
async fn apply_one(client: &Client, change: &HoldChange) -> Result<bool> {
    let patch = |value: &serde_json::Value| Patch::Merge(value.clone());
    if change.place {
        let pods = Api::<Pod>::namespaced(client.clone(), &change.namespace);
        let what = format!("pod {}/{}", change.namespace, change.pod);
        let (pod, version) = crate::live::read_again(&pods, &change.pod, &what).await?;
        match hold::toleration_patch(change, pod.as_ref(), &version) {
            Err(why) => {
                eprintln!("note: node {} not held: {why}", change.node);
                return Ok(false);
            }
            Ok(None) => {}
            Ok(Some(p)) => {
                pods.patch(&change.pod, &PatchParams::default(), &patch(&p))
                    .await
                    .with_context(|| format!("adding the hold's toleration to {what}"))?;
            }
        }
    }
    let nodes = Api::<Node>::all(client.clone());
    let what = format!("node {}", change.node);
    let (node, version) = crate::live::read_again(&nodes, &change.node, &what).await?;
    match hold::node_patch(change, node.as_ref(), &version, Timestamp::now()) {
        Err(why) => {
            eprintln!("note: node {} not held: {why}", change.node);
            Ok(false)
        }
        Ok(None) => Ok(false),
        Ok(Some(p)) => {
            nodes
                .patch(&change.node, &PatchParams::default(), &patch(&p))
                .await
                .with_context(|| format!("writing the hold on {what}"))?;
            Ok(true)
        }
    }
}
