//! The execute pass's store on a live cluster: reads through the same loader as every command,
//! writes the journal ConfigMap and the request annotation.

use std::sync::Arc;

use alfred::execute::breaker;
use alfred::execute::guard::{self, Fetched, GuardRead};
use alfred::execute::journal;
use alfred::execute::run::{JournalDoc, ServiceState, Store, StoreError};
use alfred::migration;
use alfred::snapshot::Snapshot;
use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};

use crate::caretaker::cache::Caches;
use crate::caretaker::leader::Fence;
use crate::{GlobalArgs, failure, live, source};

pub struct ClusterStore {
    reader: Reader,
    pub client: Client,
    /// The read taken when the store opened, returned by the first `observe`.
    first: Option<(Arc<Snapshot>, Timestamp)>,
    /// Where the journal ConfigMap lives: found on the first read, or Alfred's namespace.
    journal_namespace: Option<String>,
    /// Every write first asks it whether this replica still leads (the caretaker's).
    fence: Option<Arc<Fence>>,
}

/// Where each read of the cluster comes from.
enum Reader {
    /// A list per kind, every read (a command run by hand).
    Lists(GlobalArgs),
    /// The caretaker's watch caches.
    Caches(Arc<Caches>),
}

impl ClusterStore {
    /// Connects and takes the first read.
    pub async fn open(global: &GlobalArgs) -> Result<(ClusterStore, Arc<Snapshot>, Timestamp)> {
        let client = live::client(global).await?;
        let (mut snapshot, now) = read(global).await?;
        snapshot.migration_guard = read_guard(&client).await;
        let snapshot = Arc::new(snapshot);
        let store = ClusterStore {
            reader: Reader::Lists(global.clone()),
            client,
            first: Some((Arc::clone(&snapshot), now)),
            journal_namespace: None,
            fence: None,
        };
        Ok((store, snapshot, now))
    }

    /// A store that reads from warm caches, keeps its journal in `namespace`, and writes only
    /// through `fence`.
    pub fn cached(
        client: &Client,
        caches: Arc<Caches>,
        namespace: &str,
        fence: Option<Arc<Fence>>,
    ) -> ClusterStore {
        ClusterStore {
            reader: Reader::Caches(caches),
            client: client.clone(),
            first: None,
            journal_namespace: Some(namespace.to_string()),
            fence,
        }
    }

    /// Alfred's namespace, when it was given rather than found.
    pub fn alfred_namespace(&self) -> Option<&str> {
        match self.reader {
            Reader::Caches(_) => self.journal_namespace.as_deref(),
            Reader::Lists(_) => None,
        }
    }

    /// Whether this process may write now (always, without a fence); the caller's writes
    /// that are not the pass's own (holds, cordons, records, events) ask it too.
    pub async fn may_write(&self) -> Result<(), StoreError> {
        self.confirm().await.map(drop)
    }

    /// The instant until which a write may start, if fenced.
    async fn confirm(&self) -> Result<Option<std::time::Instant>, StoreError> {
        match &self.fence {
            Some(fence) => fence
                .confirm()
                .await
                .map(Some)
                .map_err(|e| StoreError::Fenced(e.to_string())),
            None => Ok(None),
        }
    }

    /// The journal ConfigMap: in Alfred's namespace when it is known, else found by name in
    /// any namespace (a command run by hand does not know where Alfred runs).
    async fn journal_map(&mut self) -> Result<Option<ConfigMap>, StoreError> {
        if let (Reader::Caches(_), Some(ns)) = (&self.reader, &self.journal_namespace) {
            return Api::<ConfigMap>::namespaced(self.client.clone(), ns)
                .get_opt(journal::CONFIG_MAP_NAME)
                .await
                .map_err(|e| {
                    call(
                        format!("reading ConfigMap {ns}/{}", journal::CONFIG_MAP_NAME),
                        e,
                    )
                });
        }
        let found = Api::<ConfigMap>::all(self.client.clone())
            .list(
                &ListParams::default()
                    .fields(&format!("metadata.name={}", journal::CONFIG_MAP_NAME)),
            )
            .await
            .map_err(|e| call(format!("reading ConfigMap {}", journal::CONFIG_MAP_NAME), e))?;
        match found.items.len() {
            0 => Ok(None),
            1 => {
                let map = found.items.into_iter().next().expect("one");
                self.journal_namespace = map.metadata.namespace.clone();
                Ok(Some(map))
            }
            count => Err(StoreError::JournalAmbiguous { count }),
        }
    }
}

async fn read(global: &GlobalArgs) -> Result<(Snapshot, Timestamp)> {
    let snapshot = source::read_snapshot(global).await?;
    let now = source::evaluation_time(global, &snapshot)?;
    Ok((snapshot, now))
}

fn call(action: String, e: kube::Error) -> StoreError {
    let failed = failure::call_failed(&action, &e);
    StoreError::Call {
        action: failed.doing,
        cause: failed.why,
        lasting: failed.lasting,
    }
}

/// The journal's keys and version as a ConfigMap holds them.
pub fn doc_of(map: &ConfigMap) -> JournalDoc {
    let data = map.data.as_ref();
    JournalDoc {
        state: data.and_then(|d| d.get(journal::STATE_KEY)).cloned(),
        breaker: data.and_then(|d| d.get(breaker::KEY)).cloned(),
        version: map.metadata.resource_version.clone().unwrap_or_default(),
    }
}

impl Store for ClusterStore {
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        let global = match &self.reader {
            Reader::Lists(global) => global,
            Reader::Caches(caches) => {
                caches.set_guard(read_guard(&self.client).await);
                let snapshot = caches
                    .snapshot()
                    .map_err(|e| StoreError::Observe(e.to_string()))?;
                return Ok((snapshot, Timestamp::now()));
            }
        };
        let (mut snapshot, now) = read(global)
            .await
            .map_err(|e| StoreError::Observe(failure::describe(&e)))?;
        snapshot.migration_guard = read_guard(&self.client).await;
        Ok((Arc::new(snapshot), now))
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError> {
        match self.journal_map().await? {
            Some(map) => Ok(doc_of(&map)),
            None => Err(StoreError::JournalMissing),
        }
    }

    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, StoreError> {
        let namespace = self
            .journal_namespace
            .clone()
            .ok_or(StoreError::JournalMissing)?;
        let until = self.confirm().await?;
        // A merge patch keeps the ConfigMap's other keys; its resourceVersion makes the write
        // conditional on the version read.
        let body = serde_json::json!({
            "metadata": {"resourceVersion": version},
            "data": {journal::STATE_KEY: state, breaker::KEY: breaker},
        });
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &namespace);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let write = api.patch(journal::CONFIG_MAP_NAME, &params, &patch);
        match fenced(until, write).await? {
            Ok(map) => Ok(Some(map.metadata.resource_version.unwrap_or_default())),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(e) => Err(call(
                format!("writing ConfigMap {namespace}/{}", journal::CONFIG_MAP_NAME),
                e,
            )),
        }
    }

    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, StoreError> {
        let api = Api::<alfred::api::InferenceService>::namespaced(self.client.clone(), namespace);
        let meta = api
            .get_metadata_opt(name)
            .await
            .map_err(|e| call(format!("reading InferenceService {namespace}/{name}"), e))?;
        Ok(meta.map(|m| {
            let annotations = m.metadata.annotations.unwrap_or_default();
            ServiceState {
                uid: m.metadata.uid.unwrap_or_default(),
                resource_version: m.metadata.resource_version.unwrap_or_default(),
                has_annotations: !annotations.is_empty(),
                request: annotations.get(&migration::annotation_key(uuid)).cloned(),
            }
        }))
    }

    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), StoreError> {
        let until = self.confirm().await?;
        let api = Api::<alfred::api::InferenceService>::namespaced(self.client.clone(), namespace);
        let patch = Patch::<()>::Json(patch.clone());
        let params = PatchParams::default();
        let write = api.patch_metadata(name, &params, &patch);
        fenced(until, write)
            .await?
            .map(|_| ())
            .map_err(|e| call(format!("patching InferenceService {namespace}/{name}"), e))
    }

    fn new_uuid(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// Runs a write that must start, and end, before `until` (none without a fence): a leader
/// that cannot renew must have stopped writing before another replica may lead.
async fn fenced<T>(
    until: Option<std::time::Instant>,
    write: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, StoreError> {
    let Some(until) = until else {
        return Ok(write.await);
    };
    let left = until.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(StoreError::Fenced(
            "the lease's renew deadline passed before the write could start".into(),
        ));
    }
    tokio::time::timeout(left, write).await.map_err(|_| {
        StoreError::Fenced(format!(
            "the write did not finish within the {} ms left before the renew deadline; the next leader reconciles it",
            left.as_millis()
        ))
    })
}

/// The migration guard's policy and binding as the API server holds them (their JSON, so that
/// every field is compared, not only those a typed client knows).
pub async fn read_guard(client: &Client) -> GuardRead {
    let fetch = async |plural: &str| -> Fetched {
        let path = format!(
            "/apis/admissionregistration.k8s.io/v1/{plural}/{}",
            guard::NAME
        );
        let Ok(request) = http::Request::get(path).body(Vec::new()) else {
            return Fetched::Unreadable("the request could not be built".into());
        };
        match client.request::<serde_json::Value>(request).await {
            Ok(value) => Fetched::Found(value),
            Err(kube::Error::Api(status)) if status.code == 404 => Fetched::Missing,
            Err(e) => {
                Fetched::Unreadable(failure::call_failed(&format!("reading {plural}"), &e).why)
            }
        }
    };
    GuardRead {
        policy: fetch("validatingadmissionpolicies").await,
        binding: fetch("validatingadmissionpolicybindings").await,
    }
}
