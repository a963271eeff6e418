//! What the webhook reads from the cluster: the runtime a defaulting needs (from the watched
//! [`Catalog`]; read from the API only for what no watch has shown yet, and such reads cached
//! for a short while: OME creates an InferenceService's replicas in bursts) and OME's operator
//! defaults (watched too, or polled from a file).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alfred::api::isvc::RuntimeKind;
use alfred::api::{ClusterServingRuntime, InferenceService, ServingRuntime};
use alfred::input::InputError;
use alfred::rollout::strategy::{DefaultsError, OperatorDefaults};
use arc_swap::ArcSwapOption;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::catalog::{Catalog, Known};
use crate::metrics::{Event, Metrics};
use crate::review::{Found, Lookup, LookupError};

/// Entries beyond this are dropped (expired first) so a burst of names cannot grow memory.
const CACHE_LIMIT: usize = 4096;

pub struct ApiRuntimes {
    client: Client,
    catalog: Arc<Catalog>,
    ttl: Duration,
    timeout: Duration,
    cache: Mutex<HashMap<Lookup, (Instant, Found)>>,
}

impl ApiRuntimes {
    pub fn new(client: Client, catalog: Arc<Catalog>, ttl: Duration, timeout: Duration) -> Self {
        ApiRuntimes {
            client,
            catalog,
            ttl,
            timeout,
            cache: Mutex::default(),
        }
    }

    /// The runtime for `lookup`: from the watched catalog, else from the short-lived cache of
    /// API reads while fresh, else from the API within the timeout. Failures are not cached, so
    /// the next review tries again.
    pub async fn find(&self, lookup: &Lookup, metrics: &Metrics) -> Found {
        if let Some(found) = self.watched(lookup) {
            metrics.event(Event::RuntimeCacheHit);
            return found;
        }
        let now = Instant::now();
        if let Some((at, found)) = self.cache.lock().ok().and_then(|c| c.get(lookup).cloned())
            && now.duration_since(at) < self.ttl
        {
            metrics.event(Event::RuntimeCacheHit);
            return found;
        }
        metrics.event(Event::RuntimeLookup);
        let found = match tokio::time::timeout(self.timeout, self.read(lookup)).await {
            Ok(found) => found,
            Err(_) => Err(LookupError::Timeout(self.timeout)),
        };
        match &found {
            Err(_) => metrics.event(Event::RuntimeLookupFailed),
            Ok(_) => {
                if let Ok(mut cache) = self.cache.lock() {
                    if cache.len() >= CACHE_LIMIT {
                        cache.retain(|_, (at, _)| now.duration_since(*at) < self.ttl);
                    }
                    if cache.len() >= CACHE_LIMIT {
                        cache.clear();
                    }
                    cache.insert(lookup.clone(), (now, found.clone()));
                }
            }
        }
        found
    }

    /// The answer when the watches have seen every object it rests on.
    fn watched(&self, lookup: &Lookup) -> Option<Found> {
        let (namespace, runtime) = match lookup {
            Lookup::Runtime { namespace, runtime } => (namespace, runtime.name.clone()),
            Lookup::Replica { namespace, isvc } => {
                match self.catalog.service_runtime(namespace, isvc) {
                    Known::Found(Ok(Some(runtime))) => (namespace, runtime.name),
                    Known::Found(found) => return Some(found.map(|_| None)),
                    Known::Absent | Known::Unknown => return None,
                }
            }
        };
        match self.catalog.runtime(namespace, &runtime) {
            Known::Found(fields) => Some(fields.map(Some)),
            Known::Absent | Known::Unknown => None,
        }
    }

    async fn read(&self, lookup: &Lookup) -> Found {
        let (namespace, runtime) = match lookup {
            Lookup::Runtime { namespace, runtime } => (namespace, runtime.clone()),
            Lookup::Replica { namespace, isvc } => {
                let api: Api<InferenceService> = Api::namespaced(self.client.clone(), namespace);
                let found = api.get_opt(isvc).await.map_err(|e| LookupError::Api {
                    object: format!("InferenceService {namespace}/{isvc}"),
                    message: e.to_string(),
                })?;
                let Some(service) = found else {
                    return Err(LookupError::NoService(format!("{namespace}/{isvc}")));
                };
                match service.spec.runtime {
                    Some(r) => (namespace, r),
                    None => return Ok(None),
                }
            }
        };
        if let Known::Found(fields) = self.catalog.runtime(namespace, &runtime.name) {
            return fields.map(Some);
        }
        for kind in RuntimeKind::LOOKUP_ORDER {
            let name = &runtime.name;
            let fields = match kind {
                RuntimeKind::ServingRuntime => {
                    Api::<ServingRuntime>::namespaced(self.client.clone(), namespace)
                        .get_opt(name)
                        .await
                        .map(|r| r.map(|r| r.spec.fields))
                }
                RuntimeKind::ClusterServingRuntime => {
                    Api::<ClusterServingRuntime>::all(self.client.clone())
                        .get_opt(name)
                        .await
                        .map(|r| r.map(|r| r.spec.fields))
                }
            }
            .map_err(|e| LookupError::Api {
                object: format!("{kind:?} {name}"),
                message: e.to_string(),
            })?;
            if fields.is_some() {
                return Ok(fields);
            }
        }
        Err(LookupError::NoRuntime {
            name: runtime.name,
            namespace: namespace.clone(),
        })
    }
}

/// Where OME's operator defaults come from.
#[derive(Clone, Debug)]
pub enum DefaultsSource {
    /// A ConfigMap manifest on disk (mounted, or for running without a cluster).
    File(PathBuf),
    /// OME's ConfigMap in the cluster; absent means OME runs without defaults.
    ConfigMap { namespace: String, name: String },
}

/// Why OME's operator defaults were not read (the last good ones stay in force).
#[derive(Debug, thiserror::Error)]
pub enum DefaultsReadError {
    #[error("not a ConfigMap manifest: {0}")]
    NotConfigMap(InputError),
    #[error(transparent)]
    Invalid(#[from] DefaultsError),
    #[error("cannot read {}: {error}", path.display())]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is {size} bytes; a ConfigMap manifest is at most {MAX_DEFAULTS_FILE_BYTES}", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    /// The manifest file named, around what is wrong inside it.
    #[error("{}: {error}", path.display())]
    InFile {
        path: PathBuf,
        error: Box<DefaultsReadError>,
    },
    #[error("no API client to read the ConfigMap with")]
    NoClient,
    #[error(
        "cannot read ConfigMap {config_map}: the API server did not answer within {DEFAULTS_READ_DEADLINE:?}"
    )]
    Timeout { config_map: String },
    #[error("cannot read ConfigMap {config_map}: {error}")]
    Api {
        config_map: String,
        error: kube::Error,
    },
    #[error("ConfigMap {config_map}: {error}")]
    InConfigMap {
        config_map: String,
        error: DefaultsError,
    },
}

/// OME's defaults from a ConfigMap manifest (YAML or JSON), as `--operator-defaults` reads it.
pub fn defaults_from_manifest(text: &str) -> Result<OperatorDefaults, DefaultsReadError> {
    let config_map: ConfigMap =
        alfred::input::read_one(text).map_err(DefaultsReadError::NotConfigMap)?;
    Ok(OperatorDefaults::from_config_map(&config_map)?)
}

/// A ConfigMap holds at most 1 MiB of data; its manifest, with room for layout.
const MAX_DEFAULTS_FILE_BYTES: u64 = 4 << 20;

/// The longest a read of OME's ConfigMap may take (at startup, before the watch).
const DEFAULTS_READ_DEADLINE: Duration = Duration::from_secs(10);

/// The defaults in force; None until a first good read.
pub type SharedDefaults = Arc<ArcSwapOption<OperatorDefaults>>;

impl DefaultsSource {
    /// Reads the defaults once.
    pub async fn read(
        &self,
        client: Option<&Client>,
    ) -> Result<OperatorDefaults, DefaultsReadError> {
        match self {
            DefaultsSource::File(path) => {
                let cannot = |error| DefaultsReadError::File {
                    path: path.clone(),
                    error,
                };
                let size = tokio::fs::metadata(path).await.map_err(cannot)?.len();
                if size > MAX_DEFAULTS_FILE_BYTES {
                    return Err(DefaultsReadError::TooLarge {
                        path: path.clone(),
                        size,
                    });
                }
                let text = tokio::fs::read_to_string(path).await.map_err(cannot)?;
                defaults_from_manifest(&text).map_err(|e| DefaultsReadError::InFile {
                    path: path.clone(),
                    error: Box::new(e),
                })
            }
            DefaultsSource::ConfigMap { namespace, name } => {
                let client = client.ok_or(DefaultsReadError::NoClient)?;
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                let config_map = format!("{namespace}/{name}");
                let read = tokio::time::timeout(DEFAULTS_READ_DEADLINE, api.get_opt(name)).await;
                let Ok(read) = read else {
                    return Err(DefaultsReadError::Timeout { config_map });
                };
                match read {
                    Ok(Some(cm)) => OperatorDefaults::from_config_map(&cm)
                        .map_err(|error| DefaultsReadError::InConfigMap { config_map, error }),
                    Ok(None) => Ok(OperatorDefaults::default()),
                    Err(error) => Err(DefaultsReadError::Api { config_map, error }),
                }
            }
        }
    }

    /// Keeps `shared` current after the first read: OME's ConfigMap is watched (an edit is in
    /// force within a moment), a file re-read every `interval`. A failed read keeps the last
    /// good defaults.
    pub async fn watch(
        self,
        client: Option<Client>,
        shared: SharedDefaults,
        interval: Duration,
        metrics: Arc<Metrics>,
    ) {
        if let (DefaultsSource::ConfigMap { namespace, name }, Some(client)) = (&self, client) {
            let api: Api<ConfigMap> = Api::namespaced(client, namespace);
            let only = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = watcher::watcher(api, only).default_backoff().boxed();
            let mut listed = None;
            while let Some(event) = events.next().await {
                let config_map = match event {
                    Ok(watcher::Event::Init) => {
                        listed = None;
                        continue;
                    }
                    Ok(watcher::Event::InitApply(cm)) => {
                        listed = Some(cm);
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => listed.take(),
                    Ok(watcher::Event::Apply(cm)) => Some(cm),
                    Ok(watcher::Event::Delete(_)) => None,
                    Err(e) => {
                        metrics.event(Event::WatchFailed);
                        tracing::warn!(source = ?self, error = %e, "watching the operator defaults failed; retrying");
                        continue;
                    }
                };
                let defaults = match config_map {
                    Some(cm) => OperatorDefaults::from_config_map(&cm).map_err(|error| {
                        DefaultsReadError::InConfigMap {
                            config_map: format!("{namespace}/{name}"),
                            error,
                        }
                    }),
                    // Absent: OME runs without defaults.
                    None => Ok(OperatorDefaults::default()),
                };
                self.settle(defaults, &shared, &metrics);
            }
            return;
        }
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first read happened at startup
        loop {
            tick.tick().await;
            self.refresh(None, &shared, &metrics).await;
        }
    }

    /// One read into `shared`.
    pub async fn refresh(
        &self,
        client: Option<&Client>,
        shared: &SharedDefaults,
        metrics: &Metrics,
    ) {
        self.settle(self.read(client).await, shared, metrics);
    }

    /// Puts what a read gave in force, logged when the value changes or the read failed.
    fn settle(
        &self,
        read: Result<OperatorDefaults, DefaultsReadError>,
        shared: &SharedDefaults,
        metrics: &Metrics,
    ) {
        match read {
            Ok(defaults) => {
                metrics.event(Event::DefaultsRead);
                if shared.load().as_deref() != Some(&defaults) {
                    tracing::info!(source = ?self, defaults = ?defaults, "operator defaults in force");
                    shared.store(Some(Arc::new(defaults)));
                }
            }
            Err(e) => {
                metrics.event(Event::DefaultsReadFailed);
                tracing::warn!(error = %e, "operator defaults not read; the last good ones stay");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn defaults_are_read_from_a_config_map_file_and_kept_when_a_read_fails() {
        let path = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/webhook/inferenceservice-config.example.yaml"
        ));
        let source = DefaultsSource::File(path);
        let shared = SharedDefaults::default();
        let metrics = Metrics::default();
        source.refresh(None, &shared, &metrics).await;
        assert_eq!(shared.load().as_deref(), Some(&OperatorDefaults::chart()));

        let dir = tempfile::tempdir().unwrap();
        let broken = dir.path().join("cm.yaml");
        std::fs::write(
            &broken,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  deploy: '{\"updateStrategy\": {\"engine\": {\"maxSurge\": \"x%\"}}}'\n",
        )
        .unwrap();
        let error = DefaultsSource::File(broken.clone())
            .read(None)
            .await
            .unwrap_err();
        let error = error.to_string();
        assert!(error.starts_with(&broken.display().to_string()), "{error}");
        DefaultsSource::File(broken)
            .refresh(None, &shared, &metrics)
            .await;
        assert_eq!(
            shared.load().as_deref(),
            Some(&OperatorDefaults::chart()),
            "the last good defaults stay"
        );
        assert!(
            metrics
                .render()
                .contains("alfred_webhook_operator_defaults_read_failures_total 1\n")
        );
    }
}
