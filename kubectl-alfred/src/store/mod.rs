//! Where an execute pass reads and writes: the live cluster, or a snapshot file (dry runs).
//! The pass itself is `alfred::execute::run`; these are its two [`Store`]s.

pub mod cluster;
mod file;

use std::sync::Arc;

use alfred::config::Config;
use alfred::execute::arbiter::{self, Caps, DispatchHistory};
use alfred::execute::breaker::Breaker;
use alfred::execute::dispatch::{self, Plan};
use alfred::execute::journal::Journal;
use alfred::execute::run::{JournalDoc, ServiceState, Store, StoreError};
use alfred::model::Context;
use alfred::snapshot::Snapshot;
use anyhow::{Result, anyhow};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

pub use cluster::ClusterStore;
pub use file::FileStore;

use crate::{GlobalArgs, source};

/// The store `-f` asks for, opened on its first read.
pub enum PassStore {
    Cluster(ClusterStore),
    File(FileStore),
}

impl PassStore {
    /// Opens the store and reads the pass's configuration (`--config`, else the snapshot's).
    pub async fn open(global: &GlobalArgs) -> Result<(PassStore, Config)> {
        let (store, config) = match global.file {
            Some(_) => {
                let store = FileStore::open(global).await?;
                let config = source::load_config(global.config.as_deref(), store.snapshot().0)?;
                (PassStore::File(store), config)
            }
            None => {
                let (store, snapshot, _) = ClusterStore::open(global).await?;
                let config = source::load_config(global.config.as_deref(), &snapshot)?;
                (PassStore::Cluster(store), config)
            }
        };
        Ok((store, config))
    }

    /// Whether this process may write now (a caretaker that no longer leads may not).
    pub async fn may_write(&self) -> Result<(), StoreError> {
        match self {
            PassStore::Cluster(s) => s.may_write().await,
            PassStore::File(_) => Ok(()),
        }
    }

    /// Alfred's namespace, when the store knows it (the caretaker's).
    pub fn alfred_namespace(&self) -> Option<&str> {
        match self {
            PassStore::Cluster(s) => s.alfred_namespace(),
            PassStore::File(_) => None,
        }
    }

    /// The client, when the store is the live cluster.
    pub fn client(&self) -> Option<&Client> {
        match self {
            PassStore::Cluster(s) => Some(&s.client),
            PassStore::File(_) => None,
        }
    }
}

impl Store for PassStore {
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError> {
        match self {
            PassStore::Cluster(s) => s.observe().await,
            PassStore::File(s) => s.observe().await,
        }
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError> {
        match self {
            PassStore::Cluster(s) => s.read_journal().await,
            PassStore::File(s) => s.read_journal().await,
        }
    }

    async fn write_journal(
        &mut self,
        version: &str,
        state: &str,
        breaker: &str,
    ) -> Result<Option<String>, StoreError> {
        match self {
            PassStore::Cluster(s) => s.write_journal(version, state, breaker).await,
            PassStore::File(s) => s.write_journal(version, state, breaker).await,
        }
    }

    async fn read_service(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
    ) -> Result<Option<ServiceState>, StoreError> {
        match self {
            PassStore::Cluster(s) => s.read_service(namespace, name, uuid).await,
            PassStore::File(s) => s.read_service(namespace, name, uuid).await,
        }
    }

    async fn patch_service(
        &mut self,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
    ) -> Result<(), StoreError> {
        match self {
            PassStore::Cluster(s) => s.patch_service(namespace, name, patch).await,
            PassStore::File(s) => s.patch_service(namespace, name, patch).await,
        }
    }

    fn new_uuid(&mut self) -> String {
        match self {
            PassStore::Cluster(s) => s.new_uuid(),
            PassStore::File(s) => s.new_uuid(),
        }
    }
}

/// The journal and breaker as they stand after reconciling with the cluster (nothing written).
pub struct Standing {
    pub journal: Journal,
    pub breaker: Breaker,
    pub plan: Plan,
    pub caps: Caps,
    pub config: Config,
    pub now: Timestamp,
}

/// Opens the store and reads where the journal stands.
pub async fn standing(global: &GlobalArgs) -> Result<(PassStore, Standing)> {
    let (mut store, config) = PassStore::open(global).await?;
    let (snapshot, now) = store.observe().await?;
    let doc = store.read_journal().await?;
    let ctx = Context::build(&snapshot, &config, now);
    let plan = dispatch::plan(&ctx, doc.state.as_deref(), doc.breaker.as_deref());
    let state = plan.journal.as_ref().map_err(|e| anyhow!("{e}"))?;
    let (journal, breaker) = (state.journal.clone(), state.breaker.clone());
    let history = DispatchHistory::from_journal(&journal, &ctx);
    let caps = arbiter::caps(&ctx, &history);
    drop(ctx);
    Ok((
        store,
        Standing {
            journal,
            breaker,
            plan,
            caps,
            config,
            now,
        },
    ))
}
