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

use crate::{GlobalArgs, failure, live, source};

pub struct ClusterStore {
    global: GlobalArgs,
    pub client: Client,
    /// The read taken when the store opened, returned by the first `observe`.
    first: Option<(Arc<Snapshot>, Timestamp)>,
    /// Where the journal ConfigMap lives, once found.
    journal_namespace: Option<String>,
}

impl ClusterStore {
    /// Connects and takes the first read.
    pub async fn open(global: &GlobalArgs) -> Result<(ClusterStore, Arc<Snapshot>, Timestamp)> {
        let client = live::client(global).await?;
        let (mut snapshot, now) = read(global).await?;
        snapshot.migration_guard = read_guard(&client).await;
        let snapshot = Arc::new(snapshot);
        let store = ClusterStore {
            global: global.clone(),
            client,
            first: Some((Arc::clone(&snapshot), now)),
            journal_namespace: None,
        };
        Ok((store, snapshot, now))
    }

    /// The journal ConfigMap, found by name in any namespace (Alfred's namespace varies).
    async fn journal_map(&mut self) -> Result<Option<ConfigMap>, StoreError> {
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
        let (mut snapshot, now) = read(&self.global)
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
        // A merge patch keeps the ConfigMap's other keys; its resourceVersion makes the write
        // conditional on the version read.
        let body = serde_json::json!({
            "metadata": {"resourceVersion": version},
            "data": {journal::STATE_KEY: state, breaker::KEY: breaker},
        });
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &namespace);
        match api
            .patch(
                journal::CONFIG_MAP_NAME,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
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
        let api = Api::<alfred::api::InferenceService>::namespaced(self.client.clone(), namespace);
        api.patch_metadata(
            name,
            &PatchParams::default(),
            &Patch::<()>::Json(patch.clone()),
        )
        .await
        .map(|_| ())
        .map_err(|e| call(format!("patching InferenceService {namespace}/{name}"), e))
    }

    fn new_uuid(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
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
