//! The names completion offers, read from where the command would read them: the snapshot
//! file given with `-f`, else the cluster. A file is scanned for names only (no model is
//! built), so a 10,000-node snapshot completes in well under a second; the cluster is asked
//! for one kind, and not waited on past a second.

use std::time::Duration;

use alfred::api::InferenceService;
use alfred::api::component::ComponentKind;
use alfred::api::replica::{InferenceReplica, InferenceReplicaSpec, InferenceReplicaStatus};
use alfred::execute::journal::{self, Journal};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::ListParams;
use kube::config::Kubeconfig;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::{GlobalArgs, live, source};

/// The longest completion reads its source, file or cluster.
const DEADLINE: Duration = Duration::from_secs(1);

/// What a completion needs read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Workloads,
    Instances,
    Nodes,
    Requests,
}

pub struct Workload {
    /// `NAMESPACE/NAME`.
    pub key: String,
    pub components: Vec<ComponentKind>,
}

#[derive(Default)]
pub struct Catalog {
    pub workloads: Vec<Workload>,
    /// `NAMESPACE/NAME/COMPONENT/INSTANCE`.
    pub instances: Vec<String>,
    pub nodes: Vec<String>,
    /// The UUIDs of Alfred's requests in the dispatch journal.
    pub requests: Vec<String>,
}

impl Catalog {
    /// What `wanted` needs, or nothing when the source cannot be read. The cluster is not
    /// waited on past [`DEADLINE`] (a shell must never hang on a tab); a file is scanned whole,
    /// its time bounded by its size.
    pub async fn read(global: &GlobalArgs, wanted: Wanted) -> Catalog {
        let read = match global.file.clone() {
            Some(path) => tokio::task::spawn_blocking(move || from_file(&path, wanted))
                .await
                .ok()
                .flatten(),
            None => tokio::time::timeout(DEADLINE, from_cluster(global, wanted))
                .await
                .ok()
                .flatten(),
        };
        read.unwrap_or_default()
    }

    fn add_workload(&mut self, namespace: &str, name: &str, components: Vec<ComponentKind>) {
        self.workloads.push(Workload {
            key: format!("{namespace}/{name}"),
            components,
        });
    }

    fn add_replica(
        &mut self,
        namespace: &str,
        spec: &InferenceReplicaSpec,
        status: &InferenceReplicaStatus,
    ) {
        let (Some(parent), Ok(rows)) = (&spec.parent_ref, status.rows()) else {
            return;
        };
        for row in rows.iter() {
            self.instances.push(format!(
                "{namespace}/{}/{}/{}",
                parent.name, spec.component, row.index
            ));
        }
    }

    fn add_journal(&mut self, state: Option<&str>) {
        if let Some(journal) = state.and_then(|s| Journal::load(s).ok()) {
            self.requests
                .extend(journal.entries.into_iter().map(|e| e.uuid));
        }
    }
}

/// The contexts of the kubeconfig the command would use.
pub fn contexts(global: &GlobalArgs) -> Vec<String> {
    let config = match &global.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    };
    config
        .map(|c| c.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

/// One object of a file, as far as names go; `items` when it is a List.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Meta,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    items: Option<Vec<Item<'a>>>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

/// Which components an InferenceService declares.
#[derive(Deserialize)]
struct Components {
    engine: Option<IgnoredAny>,
    decoder: Option<IgnoredAny>,
    router: Option<IgnoredAny>,
}

fn from_file(path: &str, wanted: Wanted) -> Option<Catalog> {
    if path == "-" {
        return None; // standard input is the shell's, not a snapshot, while completing
    }
    let text = source::read_text(path, "snapshot").ok()?;
    let mut catalog = Catalog::default();
    if text.trim_start().starts_with(['{', '[']) {
        // JSON in one pass: the checks a command makes on its input are its own, not
        // completion's, which only offers names.
        for item in serde_json::Deserializer::from_str(&text).into_iter::<Item<'_>>() {
            scan(&mut catalog, item.ok()?, wanted);
        }
        return Some(catalog);
    }
    alfred::input::for_each_document(
        &text,
        |_, json| {
            let item: Item<'_> = serde_json::from_str(json).map_err(|_| ())?;
            scan(&mut catalog, item, wanted);
            Ok(())
        },
        |_, _| (),
    )
    .ok()?;
    Some(catalog)
}

fn scan(catalog: &mut Catalog, item: Item<'_>, wanted: Wanted) {
    let Meta { name, namespace } = &item.metadata;
    match (item.kind.as_str(), wanted) {
        ("InferenceService", Wanted::Workloads | Wanted::Instances) => {
            if let Some(c) = parse::<Components>(item.spec) {
                let declared = [
                    (c.engine, ComponentKind::Engine),
                    (c.decoder, ComponentKind::Decoder),
                    (c.router, ComponentKind::Router),
                ];
                let kinds = declared
                    .into_iter()
                    .filter(|(d, _)| d.is_some())
                    .map(|(_, k)| k)
                    .collect();
                catalog.add_workload(namespace, name, kinds);
            }
        }
        ("InferenceReplica", Wanted::Instances) => {
            if let (Some(spec), Some(status)) = (parse(item.spec), parse(item.status)) {
                catalog.add_replica(namespace, &spec, &status);
            }
        }
        ("Node", Wanted::Nodes) => catalog.nodes.push(name.clone()),
        ("ConfigMap", Wanted::Requests) if name == journal::CONFIG_MAP_NAME => {
            let data: Option<std::collections::BTreeMap<String, String>> = parse(item.data);
            catalog.add_journal(
                data.as_ref()
                    .and_then(|d| d.get(journal::STATE_KEY))
                    .map(String::as_str),
            );
        }
        _ => {}
    }
    for inner in item.items.into_iter().flatten() {
        scan(catalog, inner, wanted);
    }
}

/// A part of an object as `T`, if it reads as one.
fn parse<T: serde::de::DeserializeOwned>(raw: Option<&RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

async fn from_cluster(global: &GlobalArgs, wanted: Wanted) -> Option<Catalog> {
    let client = live::client(global).await.ok()?;
    let all = ListParams::default();
    let mut catalog = Catalog::default();
    match wanted {
        Wanted::Workloads => {
            for isvc in Api::<InferenceService>::all(client).list(&all).await.ok()? {
                let kinds = isvc.spec.components().map(|(k, _)| k).collect();
                let meta = &isvc.metadata;
                catalog.add_workload(meta.namespace.as_deref()?, meta.name.as_deref()?, kinds);
            }
        }
        Wanted::Instances => {
            for ir in Api::<InferenceReplica>::all(client).list(&all).await.ok()? {
                if let Some(status) = &ir.status {
                    catalog.add_replica(ir.metadata.namespace.as_deref()?, &ir.spec, status);
                }
            }
        }
        Wanted::Nodes => {
            let nodes = Api::<Node>::all(client).list_metadata(&all).await.ok()?;
            catalog.nodes = nodes.into_iter().filter_map(|n| n.metadata.name).collect();
        }
        Wanted::Requests => {
            let named = ListParams::default()
                .fields(&format!("metadata.name={}", journal::CONFIG_MAP_NAME));
            for map in Api::<ConfigMap>::all(client).list(&named).await.ok()? {
                let state = map.data.as_ref().and_then(|d| d.get(journal::STATE_KEY));
                catalog.add_journal(state.map(String::as_str));
            }
        }
    }
    Some(catalog)
}
