//! `recommend --record`: writes the pass into the recommendations ConfigMap the way Alfred
//! does: update only (the chart creates it), every other key kept, retried on conflicts.

use alfred::config::Config;
use alfred::decision::record::updated_data;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

/// What a pass records: its rows in the `last-cycle.json` schema and its node records.
pub struct Pass<'a> {
    pub rows: &'a [alfred::decision::Row],
    pub nodes: &'a std::collections::BTreeMap<String, alfred::decision::NodeRecord>,
    pub mode: &'a str,
}

/// Read-modify-write attempts before giving up on conflicting writers.
const ATTEMPTS: usize = 5;

/// Where a pass was recorded, and the node events its new episode stamps made.
pub struct Recorded {
    /// The ConfigMap's `namespace/name`.
    pub at: String,
    pub node_events: Vec<alfred::decision::record::NodeEvent>,
}

/// Writes the pass, then records the node events of the stamps it stored.
/// `namespace` is Alfred's when known (the caretaker's); else the ConfigMap is found by name.
pub async fn record(
    client: &Client,
    namespace: Option<&str>,
    config: &Config,
    pass: &Pass<'_>,
    now: Timestamp,
) -> Result<Recorded> {
    if !config.recommendations_config_map_enabled {
        bail!(
            "recommendationsConfigMapEnabled is false in Alfred's configuration: nothing to record into"
        );
    }
    let name = &config.recommendations_config_map_name;
    for _ in 0..ATTEMPTS {
        let found = match namespace {
            Some(ns) => Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .with_context(|| format!("reading ConfigMap {ns}/{name}"))?
                .into_iter()
                .collect(),
            None => {
                Api::<ConfigMap>::all(client.clone())
                    .list(&ListParams::default().fields(&format!("metadata.name={name}")))
                    .await
                    .with_context(|| format!("reading ConfigMap {name}"))?
                    .items
            }
        };
        let mut current = match found.len() {
            1 => found.into_iter().next().expect("one"),
            0 => bail!(
                "ConfigMap {name} is missing: Alfred only updates it (the ome-alfred chart creates it); create it in Alfred's namespace, e.g. kubectl create configmap {name} -n ome"
            ),
            n => bail!("{n} ConfigMaps are named {name}; keep the one in Alfred's namespace"),
        };
        let namespace = current.metadata.namespace.clone().unwrap_or_default();
        let existing = current.data.take().unwrap_or_default();
        let updated = updated_data(&existing, pass.rows, pass.nodes, pass.mode, now);
        current.data = Some(updated.data);
        match Api::<ConfigMap>::namespaced(client.clone(), &namespace)
            .replace(name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => {
                if updated.rows_omitted > 0 {
                    eprintln!(
                        "note: {namespace}/{name} holds {} of the pass's {} rows: a ConfigMap holds at most 1 MiB (requests, node health and verdicts are kept first; -o json shows every row)",
                        pass.rows.len() - updated.rows_omitted,
                        pass.rows.len()
                    );
                }
                // Once per episode: the stamps that made these events are now stored.
                crate::events::record_nodes(client, &updated.events).await;
                return Ok(Recorded {
                    at: format!("{namespace}/{name}"),
                    node_events: updated.events,
                });
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(kube::Error::Api(status)) if status.code == 403 => bail!(
                "not allowed to update ConfigMap {namespace}/{name}: {}; grant update on it",
                status.message
            ),
            Err(e) => {
                return Err(e).with_context(|| format!("updating ConfigMap {namespace}/{name}"));
            }
        }
    }
    bail!("ConfigMap {name} kept changing under {ATTEMPTS} attempts to update it; run again")
}
