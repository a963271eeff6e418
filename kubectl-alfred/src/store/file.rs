//! The execute pass's store on a snapshot file: every read is the file as read once (with the
//! journal ConfigMap it carries), and nothing is written, so only dry runs use it.

use std::sync::Arc;

use alfred::execute::journal;
use alfred::execute::run::{JournalDoc, ServiceState, Store, StoreError};
use alfred::snapshot::Snapshot;
use anyhow::Result;
use k8s_openapi::jiff::Timestamp;

use super::cluster::doc_of;
use crate::{GlobalArgs, source};

pub struct FileStore {
    snapshot: Arc<Snapshot>,
    now: Timestamp,
    journal: JournalDoc,
}

impl FileStore {
    pub async fn open(global: &GlobalArgs) -> Result<FileStore> {
        let snapshot = source::read_snapshot(global).await?;
        let now = source::evaluation_time(global, &snapshot)?;
        // A snapshot carries the journal ConfigMap when the cluster had one.
        let journal = snapshot
            .config_map(journal::CONFIG_MAP_NAME)
            .map(doc_of)
            .unwrap_or_default();
        Ok(FileStore {
            snapshot: Arc::new(snapshot),
            now,
            journal,
        })
    }

    pub fn snapshot(&self) -> (&Snapshot, Timestamp) {
        (&self.snapshot, self.now)
    }
}

impl Store for FileStore {
    async fn observe(&mut self) -> Result<(Arc<Snapshot>, Timestamp), StoreError> {
        Ok((Arc::clone(&self.snapshot), self.now))
    }

    async fn read_journal(&mut self) -> Result<JournalDoc, StoreError> {
        Ok(self.journal.clone())
    }

    async fn write_journal(
        &mut self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<Option<String>, StoreError> {
        Err(StoreError::ReadOnly)
    }

    async fn read_service(
        &mut self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<Option<ServiceState>, StoreError> {
        Err(StoreError::ReadOnly)
    }

    async fn patch_service(
        &mut self,
        _: &str,
        _: &str,
        _: &json_patch::Patch,
    ) -> Result<(), StoreError> {
        Err(StoreError::ReadOnly)
    }

    fn new_uuid(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}
