//! Warm caches of every kind a pass reads: one list, then a watch, per kind (kube's watcher:
//! paged lists, bookmarks, a re-list after `410 Gone`, backoff), each object read through the
//! snapshot loader as it arrives. The caches are one snapshot, changed in place when a pass
//! asks for it (its lists of shared objects copied only when a pass still holds the one
//! before and the cluster changed),
//! so a pass costs the same however many came before, a standby that becomes leader passes at
//! once, and a replica holds the cluster once.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use alfred::execute::guard::GuardRead;
use alfred::snapshot::{Object, Snapshot, SnapshotError, SnapshotInfo, Source};
use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::core::{ApiResource, DynamicResourceScope};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::live::{self, Kind};

/// An object as the API server sent it: its metadata (what the watcher tracks) and its JSON,
/// which the snapshot loader reads.
#[derive(Clone, Debug)]
pub struct Raw {
    meta: ObjectMeta,
    json: Box<RawValue>,
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
        #[derive(Deserialize)]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            #[serde(rename = "resourceVersion")]
            resource_version: Option<String>,
            uid: Option<String>,
        }
        #[derive(Deserialize)]
        struct Header {
            metadata: Option<Meta>,
        }
        let json = Box::<RawValue>::deserialize(d)?;
        let header: Header = serde_json::from_str(json.get()).map_err(D::Error::custom)?;
        let m = header
            .metadata
            .ok_or_else(|| D::Error::missing_field("metadata"))?;
        let meta = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            resource_version: m.resource_version,
            uid: m.uid,
            ..ObjectMeta::default()
        };
        Ok(Raw { meta, json })
    }
}

impl Resource for Raw {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The resource a kind's list path names (`/apis/apps/v1/controllerrevisions`).
fn resource(kind: &Kind) -> ApiResource {
    let parts: Vec<&str> = kind.path.trim_start_matches('/').split('/').collect();
    let (group, version, plural) = match parts.as_slice() {
        ["api", version, plural] => ("", *version, *plural),
        [_, group, version, plural] => (*group, *version, *plural),
        _ => unreachable!("every list path is /api/V/P or /apis/G/V/P"),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: match group {
            "" => version.into(),
            g => format!("{g}/{version}"),
        },
        kind: kind.name.into(),
        plural: plural.into(),
    }
}

type Key = (String, String);

/// Changes not yet applied to the snapshot, the last one per key.
type Pending = BTreeMap<(Source, String, String), Option<Object>>;

/// One watched list: a kind, maybe narrowed to a namespace and a name.
struct Watched {
    kind: &'static Kind,
    source: Source,
    namespace: Option<String>,
    name: Option<&'static str>,
    state: Mutex<WatchState>,
}

#[derive(Default)]
struct WatchState {
    /// The keys of the objects it holds in the snapshot.
    keys: BTreeSet<Key>,
    /// Objects the loader refuses (a pass cannot run on a cluster it cannot read).
    refused: BTreeMap<Key, SnapshotError>,
    /// What a re-list has found so far; it replaces what the list held when complete.
    relist: Option<(BTreeMap<Key, Object>, BTreeMap<Key, SnapshotError>)>,
    /// A complete list has been read at least once.
    synced: bool,
    /// The cluster does not serve this optional kind.
    unserved: bool,
    /// The last failure of its list or watch, until the next success.
    failing: Option<String>,
}

impl Watched {
    fn state(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn describe(&self) -> String {
        match (self.name, &self.namespace) {
            (Some(name), Some(ns)) => format!("{} {ns}/{name}", self.kind.what),
            (Some(name), None) => format!("{} named {name}", self.kind.what),
            _ => self.kind.what.to_string(),
        }
    }
}

/// Every kind a pass reads, kept current by watches.
pub struct Caches {
    watched: Vec<Arc<Watched>>,
    /// Bumped on every change, for those who wait on one.
    generation: AtomicU64,
    changed: tokio::sync::watch::Sender<u64>,
    /// The cluster as of the last `snapshot()`, and what changed since.
    current: Mutex<Arc<Snapshot>>,
    pending: Mutex<Pending>,
    /// Set when what the snapshot says about itself (PodGroups, the guard) changed.
    stale_info: std::sync::atomic::AtomicBool,
    pod_groups: Mutex<Option<Vec<String>>>,
    /// The migration guard as last read (two GETs a pass: the objects are tiny).
    guard: Mutex<GuardRead>,
    client: Client,
}

/// Why the caches cannot give a snapshot yet.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("the caches are not synced yet: {0}")]
    NotSynced(String),
    #[error("reading {0}")]
    Refused(String),
}

impl Caches {
    /// Starts a watch per kind (the ConfigMaps Alfred owns in `namespace`, the others in every
    /// namespace); the caches fill in the background.
    pub fn start(client: &Client, namespace: &str) -> Arc<Caches> {
        let mut watched: Vec<Watched> = live::KINDS
            .iter()
            .map(|kind| Watched::new(kind, None, None))
            .collect();
        for name in alfred::snapshot::CONFIG_MAP_NAMES {
            // OME's own configuration lives in OME's namespace, wherever that is.
            let ns = (name != "inferenceservice-config").then(|| namespace.to_string());
            watched.push(Watched::new(&live::CONFIG_MAPS, ns, Some(name)));
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        let caches = Arc::new(Caches {
            watched: watched.into_iter().map(Arc::new).collect(),
            generation: AtomicU64::new(0),
            changed,
            current: Mutex::new(Arc::new(Snapshot::default())),
            pending: Mutex::new(Pending::new()),
            stale_info: std::sync::atomic::AtomicBool::new(true),
            pod_groups: Mutex::new(None),
            guard: Mutex::new(GuardRead::default()),
            client: client.clone(),
        });
        for w in &caches.watched {
            tokio::spawn(Arc::clone(&caches).watch(Arc::clone(w)));
        }
        tokio::spawn(Arc::clone(&caches).discover());
        caches
    }

    /// Every change, as a count that grows.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Why the caches are not ready, or None once every kind has been listed.
    pub fn unsynced(&self) -> Option<String> {
        let waiting: Vec<String> = self
            .watched
            .iter()
            .filter_map(|w| {
                let s = w.state();
                (!s.synced && !s.unserved).then(|| match &s.failing {
                    Some(why) => format!("{} ({why})", w.describe()),
                    None => w.describe(),
                })
            })
            .collect();
        (!waiting.is_empty()).then(|| waiting.join(", "))
    }

    /// The cluster as the caches hold it now; the same `Arc` while nothing changed. While a
    /// pass holds the one before, the changes go into a copy, which shares every object
    /// (a pointer each: half a megabyte at 10,000 nodes).
    pub fn snapshot(&self) -> Result<Arc<Snapshot>, CacheError> {
        if let Some(waiting) = self.unsynced() {
            return Err(CacheError::NotSynced(waiting));
        }
        for w in &self.watched {
            if let Some(e) = w.state().refused.values().next() {
                return Err(CacheError::Refused(format!("{}: {e}", w.kind.what)));
            }
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let changes = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let restamp = self.stale_info.swap(false, Ordering::AcqRel);
        if changes.is_empty() && !restamp {
            return Ok(Arc::clone(&current));
        }
        let snapshot = Arc::make_mut(&mut current);
        snapshot.apply(changes.into_iter().collect());
        snapshot.migration_guard = self.guard.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let unserved = self
            .watched
            .iter()
            .filter(|w| w.state().unserved)
            .map(|w| w.kind.what.to_string())
            .collect();
        snapshot.info = Some(SnapshotInfo {
            captured_at: Timestamp::now(),
            source: None,
            pod_group_resources: self
                .pod_groups
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            unserved,
        });
        Ok(Arc::clone(&current))
    }

    /// One of Alfred's ConfigMaps as the caches hold it now, without merging the other
    /// changes into the snapshot (the reload looks after every change; merging them is for
    /// the passes and the observations).
    pub fn config_map(&self, name: &str) -> Option<Arc<k8s_openapi::api::core::v1::ConfigMap>> {
        let w = self.watched.iter().find(|w| w.name == Some(name))?;
        let namespace = w.namespace.clone().unwrap_or_default();
        let key = (Source::ConfigMaps, namespace.clone(), name.to_string());
        if let Some(change) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return match change {
                Some(Object::ConfigMap(map)) => Some(map.clone()),
                _ => None,
            };
        }
        let current = Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()));
        current
            .config_maps
            .iter()
            .find(|m| {
                m.metadata.name.as_deref() == Some(name)
                    && m.metadata.namespace.as_deref() == Some(namespace.as_str())
            })
            .cloned()
    }

    /// Keeps the guard as just read; a change makes the next snapshot anew.
    pub fn set_guard(&self, read: GuardRead) {
        let mut guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        if *guard != read {
            *guard = read;
            drop(guard);
            self.stale_info.store(true, Ordering::Release);
            self.bump();
        }
    }

    fn bump(&self) {
        let g = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.changed.send_replace(g);
    }

    /// Keeps one kind current for as long as the process runs.
    async fn watch(self: Arc<Self>, w: Arc<Watched>) {
        let resource = resource(w.kind);
        let api: Api<Raw> = match &w.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let mut config = watcher::Config::default().page_size(live::PAGE_SIZE);
        if let Some(name) = w.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = events.next().await {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let changed = match event {
                Ok(event) => w.apply(event, &resource, &mut pending),
                Err(e) => w.failed(&e, &mut pending),
            };
            drop(pending);
            if changed {
                self.bump();
            }
        }
    }

    /// The PodGroup resources the cluster serves, looked up again every minute.
    async fn discover(self: Arc<Self>) {
        loop {
            let found = live::pod_group_resources(&self.client).await;
            let changed = {
                let mut known = self.pod_groups.lock().unwrap_or_else(|e| e.into_inner());
                let changed = found.is_some() && *known != found;
                if changed {
                    *known = found;
                }
                changed
            };
            if changed {
                self.stale_info.store(true, Ordering::Release);
                self.bump();
            }
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        }
    }
}

impl Watched {
    fn new(kind: &'static Kind, namespace: Option<String>, name: Option<&'static str>) -> Watched {
        Watched {
            kind,
            source: source_of(kind),
            namespace,
            name,
            state: Mutex::new(WatchState::default()),
        }
    }

    fn change(&self, pending: &mut Pending, key: &Key, object: Option<Object>) {
        pending.insert((self.source, key.0.clone(), key.1.clone()), object);
    }

    /// Applies one event to `pending`; true when what a pass reads changed.
    fn apply(&self, event: Event<Raw>, resource: &ApiResource, pending: &mut Pending) -> bool {
        let mut guard = self.state();
        let s = &mut *guard;
        s.failing = None;
        let read =
            |raw: &Raw| Snapshot::read_item(&resource.api_version, &resource.kind, raw.json.get());
        let key = |raw: &Raw| {
            (
                raw.meta.namespace.clone().unwrap_or_default(),
                raw.meta.name.clone().unwrap_or_default(),
            )
        };
        match event {
            Event::Init => {
                s.relist = Some(Default::default());
                false
            }
            Event::InitApply(raw) => {
                let (objects, refused) = s.relist.get_or_insert_with(Default::default);
                match read(&raw) {
                    Ok(Some(object)) => {
                        objects.insert(key(&raw), object);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        refused.insert(key(&raw), e);
                    }
                }
                false
            }
            Event::InitDone => {
                let (objects, refused) = s.relist.take().unwrap_or_default();
                for gone in s.keys.iter().filter(|k| !objects.contains_key(*k)) {
                    self.change(pending, gone, None);
                }
                s.keys = objects.keys().cloned().collect();
                for (key, object) in objects {
                    self.change(pending, &key, Some(object));
                }
                s.refused = refused;
                s.synced = true;
                s.unserved = false;
                true
            }
            Event::Apply(raw) => {
                let key = key(&raw);
                let object = match read(&raw) {
                    Ok(object) => {
                        s.refused.remove(&key);
                        object
                    }
                    Err(e) => {
                        s.refused.insert(key.clone(), e);
                        None
                    }
                };
                match object.is_some() {
                    true => s.keys.insert(key.clone()),
                    false => s.keys.remove(&key),
                };
                self.change(pending, &key, object);
                true
            }
            Event::Delete(raw) => {
                let key = key(&raw);
                s.refused.remove(&key);
                let held = s.keys.remove(&key);
                self.change(pending, &key, None);
                held
            }
        }
    }

    /// Notes a failed list or watch (the watcher retries with backoff); an optional kind the
    /// cluster does not serve counts as listed, and empty.
    fn failed(&self, e: &watcher::Error, pending: &mut Pending) -> bool {
        let mut s = self.state();
        let not_found = matches!(
            e,
            watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404
        );
        if not_found && !self.kind.required {
            let changed = !s.unserved;
            s.unserved = true;
            for key in std::mem::take(&mut s.keys) {
                self.change(pending, &key, None);
            }
            s.refused.clear();
            s.failing = None;
            return changed;
        }
        s.failing = Some(match not_found {
            true => format!(
                "the API is not installed in this cluster: {}",
                live::INSTALL_HINT
            ),
            false => e.to_string(),
        });
        false
    }
}

/// Where a kind's objects go in a snapshot.
fn source_of(kind: &Kind) -> Source {
    match kind.name {
        "Node" => Source::Nodes,
        "Pod" => Source::Pods,
        "InferenceService" => Source::InferenceServices,
        "ServingRuntime" => Source::ServingRuntimes,
        "ClusterServingRuntime" => Source::ClusterServingRuntimes,
        "InferenceReplica" => Source::InferenceReplicas,
        "BaseModel" => Source::BaseModels,
        "ClusterBaseModel" => Source::ClusterBaseModels,
        "PersistentVolumeClaim" => Source::PersistentVolumeClaims,
        "PersistentVolume" => Source::PersistentVolumes,
        "ConfigMap" => Source::ConfigMaps,
        "ControllerRevision" => Source::ControllerRevisions,
        other => unreachable!("no snapshot list for {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_paths_name_their_resources() {
        let r = resource(&live::KINDS[2]);
        assert_eq!(
            (
                r.group.as_str(),
                r.version.as_str(),
                r.api_version.as_str(),
                r.plural.as_str()
            ),
            ("apps", "v1", "apps/v1", "controllerrevisions")
        );
        assert_eq!(r.kind, "ControllerRevision");
        let nodes = resource(&live::KINDS[0]);
        assert_eq!(
            (nodes.group.as_str(), nodes.api_version.as_str()),
            ("", "v1")
        );
    }

    /// A re-list replaces what the list held: an object not listed again is gone from the
    /// snapshot the changes make.
    #[test]
    fn a_relist_replaces_what_was_held() {
        let w = Watched::new(&live::KINDS[0], None, None);
        let r = resource(w.kind);
        let node = |name: &str| {
            serde_json::from_str::<Raw>(&format!(
                r#"{{"metadata":{{"name":"{name}","resourceVersion":"1"}},"status":{{"allocatable":{{"nvidia.com/gpu":"8"}}}}}}"#
            ))
            .unwrap()
        };
        let mut snapshot = Snapshot::default();
        let mut step = |events: Vec<Event<Raw>>| {
            let mut pending = Pending::new();
            let changed: Vec<bool> = events
                .into_iter()
                .map(|e| w.apply(e, &r, &mut pending))
                .collect();
            snapshot.apply(pending.into_iter().collect());
            let names: Vec<String> = snapshot
                .nodes
                .iter()
                .map(|n| n.metadata.name.clone())
                .collect();
            (changed, names)
        };
        let (changed, names) = step(vec![
            Event::Init,
            Event::InitApply(node("b")),
            Event::InitApply(node("a")),
            Event::InitDone,
        ]);
        assert_eq!(
            changed,
            [false, false, false, true],
            "nothing changes before the list is complete"
        );
        assert_eq!(names, ["a", "b"], "in the API server's order");
        let (_, names) = step(vec![
            Event::Init,
            Event::InitApply(node("b")),
            Event::InitDone,
        ]);
        assert_eq!(names, ["b"]);
        let (changed, names) = step(vec![Event::Apply(node("c")), Event::Delete(node("b"))]);
        assert_eq!(changed, [true, true]);
        assert_eq!(names, ["c"]);
    }
}
