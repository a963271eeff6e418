//! Holds (`policies.defragmentation.holdMinutes`): after an execute pass, each hold it asks for
//! is written with merge patches under the resourceVersions read just before, as
//! `alfred::execute::hold` says. Failures are reported and never stop the pass; the next pass
//! sees what stands and carries on.

use alfred::decision::consolidate::persist::HoldChange;
use alfred::execute::hold;
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;

/// Writes `changes` (those due after the pass: see `alfred::execute::hold::due`).
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

/// An object as read, in the core's types, with its resourceVersion.
async fn read<K, T>(api: &Api<K>, name: &str, what: &str) -> Result<(Option<T>, String)>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    T: DeserializeOwned,
{
    let live = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {what}"))?;
    let version = live
        .as_ref()
        .and_then(|o| o.meta().resource_version.clone())
        .unwrap_or_default();
    let object = live
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
        .transpose()
        .with_context(|| format!("reading the {what} the API server returned"))?;
    Ok((object, version))
}

/// True when something was written.
async fn apply_one(client: &Client, change: &HoldChange) -> Result<bool> {
    let patch = |value: &serde_json::Value| Patch::Merge(value.clone());
    if change.place {
        let pods = Api::<Pod>::namespaced(client.clone(), &change.namespace);
        let what = format!("pod {}/{}", change.namespace, change.pod);
        let (pod, version) = read(&pods, &change.pod, &what).await?;
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
    let (node, version) = read(&nodes, &change.node, &what).await?;
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
