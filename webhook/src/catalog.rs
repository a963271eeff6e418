//! What the defaulting hooks read, kept current by watches as controllers keep their caches:
//! each InferenceService's runtime reference and every runtime's component fields. A review
//! is answered from here; the API is asked only for what no watch has shown yet (an object
//! created a moment ago, or a watch still listing).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use alfred::api::isvc::{RuntimeKind, RuntimeRef};
use alfred::api::runtime::RuntimeFields;
use alfred::api::{ClusterServingRuntime, InferenceService, ServingRuntime};
use futures::StreamExt as _;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt as _};
use serde::Deserialize as _;

use crate::metrics::{Event as Metric, Metrics};
use crate::review::LookupError;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
type Key = (String, String);

/// One kind's objects as its watch last listed and updated them.
struct Watched<V> {
    /// None until the first list has ended: until then nothing here is known to be absent.
    current: Option<HashMap<Key, V>>,
    /// A list in progress, swapped in whole when it ends (so deletions missed while the watch
    /// was down disappear).
    listing: HashMap<Key, V>,
}

impl<V> Default for Watched<V> {
    fn default() -> Self {
        Watched {
            current: None,
            listing: HashMap::new(),
        }
    }
}

impl<V> Watched<V> {
    fn apply(&mut self, event: Event<DynamicObject>, read: fn(&DynamicObject) -> V) {
        let key = |o: &DynamicObject| (o.namespace().unwrap_or_default(), o.name_any());
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(o) => {
                self.listing.insert(key(&o), read(&o));
            }
            Event::InitDone => self.current = Some(std::mem::take(&mut self.listing)),
            Event::Apply(o) => {
                let value = read(&o);
                self.current.get_or_insert_default().insert(key(&o), value);
            }
            Event::Delete(o) => {
                if let Some(current) = &mut self.current {
                    current.remove(&key(&o));
                }
            }
        }
    }
}

/// What a watch holds of an object: the value, or why the object could not be read (the
/// review then says so, as a GET of the same object would).
type Read<T> = Result<T, LookupError>;

#[derive(Default)]
pub struct Catalog {
    services: RwLock<Watched<Read<Option<RuntimeRef>>>>,
    serving: RwLock<Watched<Read<RuntimeFields>>>,
    cluster: RwLock<Watched<Read<RuntimeFields>>>,
}

/// What the catalog knows of one object.
#[derive(Debug, PartialEq)]
pub enum Known<T> {
    /// Read from the watch.
    Found(Read<T>),
    /// The watch has listed and the object is not there.
    Absent,
    /// Not listed yet: ask the API.
    Unknown,
}

impl Catalog {
    /// Starts the three watches; the catalog fills as they list.
    pub fn watch(client: &Client, metrics: &Arc<Metrics>) -> Arc<Catalog> {
        let catalog = Arc::new(Catalog::default());
        let follow = |resource: ApiResource, read: fn(&Catalog, Event<DynamicObject>)| {
            let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
            let (catalog, metrics) = (catalog.clone(), metrics.clone());
            tokio::spawn(async move {
                let kind = resource.kind.clone();
                // Any list semantics: served from the API server's watch cache, as informers do.
                let mut events = watcher::watcher(api, watcher::Config::default().any_semantic())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => read(&catalog, event),
                        Err(e) => {
                            metrics.event(Metric::WatchFailed);
                            tracing::warn!(kind = %kind, error = %e, "watch failed; retrying (reviews read from the API meanwhile)");
                        }
                    }
                }
            });
        };
        follow(ApiResource::erase::<InferenceService>(&()), |c, e| {
            write(&c.services).apply(e, runtime_ref)
        });
        follow(ApiResource::erase::<ServingRuntime>(&()), |c, e| {
            write(&c.serving).apply(e, |o| runtime_fields(o, "ServingRuntime"))
        });
        follow(ApiResource::erase::<ClusterServingRuntime>(&()), |c, e| {
            write(&c.cluster).apply(e, |o| runtime_fields(o, "ClusterServingRuntime"))
        });
        catalog
    }

    /// Whether every watch has listed once.
    pub fn synced(&self) -> bool {
        read(&self.services).current.is_some()
            && read(&self.serving).current.is_some()
            && read(&self.cluster).current.is_some()
    }

    /// The runtime InferenceService `namespace/name` names.
    pub fn service_runtime(&self, namespace: &str, name: &str) -> Known<Option<RuntimeRef>> {
        known(&self.services, namespace, name)
    }

    /// Runtime `name` as a review in `namespace` resolves it: the namespace's ServingRuntime
    /// first, then the ClusterServingRuntime ([`RuntimeKind::LOOKUP_ORDER`]). Unknown while
    /// an earlier kind in that order has not been listed.
    pub fn runtime(&self, namespace: &str, name: &str) -> Known<RuntimeFields> {
        for kind in RuntimeKind::LOOKUP_ORDER {
            let found = match kind {
                RuntimeKind::ServingRuntime => known(&self.serving, namespace, name),
                RuntimeKind::ClusterServingRuntime => known(&self.cluster, "", name),
            };
            match found {
                Known::Absent => continue,
                found => return found,
            }
        }
        Known::Absent
    }
}

fn known<T: Clone>(watched: &RwLock<Watched<Read<T>>>, namespace: &str, name: &str) -> Known<T> {
    let watched = read(watched);
    let Some(current) = &watched.current else {
        return Known::Unknown;
    };
    match current.get(&(namespace.to_string(), name.to_string())) {
        Some(value) => Known::Found(value.clone()),
        None => Known::Absent,
    }
}

/// A runtime's component fields (its spec, whose other fields are not read).
fn runtime_fields(object: &DynamicObject, kind: &str) -> Read<RuntimeFields> {
    let spec = object.data.get("spec").unwrap_or(&serde_json::Value::Null);
    RuntimeFields::deserialize(spec).map_err(|e| LookupError::Unreadable {
        object: format!("{kind} {}", object.name_any()),
        field: "spec",
        message: e.to_string(),
    })
}

/// `spec.runtime` of an InferenceService, read alone so the rest of its spec cannot fail it.
fn runtime_ref(object: &DynamicObject) -> Read<Option<RuntimeRef>> {
    match object.data.get("spec").and_then(|s| s.get("runtime")) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(runtime) => {
            RuntimeRef::deserialize(runtime)
                .map(Some)
                .map_err(|e| LookupError::Unreadable {
                    object: format!(
                        "InferenceService {}/{}",
                        object.namespace().unwrap_or_default(),
                        object.name_any()
                    ),
                    field: "spec.runtime",
                    message: e.to_string(),
                })
        }
    }
}

// A poisoned lock only means a panic elsewhere mid-update; the map itself stays usable.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(namespace: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}))
        .unwrap()
    }

    /// A relist replaces the map whole: what was deleted while the watch was down is gone,
    /// and nothing is known to be absent before the first list ends.
    #[test]
    fn a_relist_replaces_what_the_watch_held() {
        let mut services = Watched::default();
        let vllm = serde_json::json!({"runtime": {"name": "vllm"}});
        services.apply(Event::Init, runtime_ref);
        services.apply(
            Event::InitApply(object("prod", "a", vllm.clone())),
            runtime_ref,
        );
        let lock = RwLock::new(services);
        assert_eq!(known(&lock, "prod", "a"), Known::Unknown, "still listing");
        write(&lock).apply(Event::InitDone, runtime_ref);
        let vllm_ref = RuntimeRef {
            name: "vllm".into(),
            kind: None,
            api_group: None,
        };
        assert_eq!(known(&lock, "prod", "a"), Known::Found(Ok(Some(vllm_ref))));
        assert_eq!(known(&lock, "prod", "b"), Known::Absent);

        write(&lock).apply(
            Event::Apply(object("prod", "b", serde_json::json!({"runtime": 3}))),
            runtime_ref,
        );
        let Known::Found(Err(why)) = known(&lock, "prod", "b") else {
            panic!("a malformed reference is kept as its error");
        };
        let why = why.to_string();
        assert!(
            why.starts_with("cannot read InferenceService prod/b: spec.runtime: "),
            "{why}"
        );

        write(&lock).apply(Event::Init, runtime_ref);
        write(&lock).apply(Event::InitApply(object("prod", "b", vllm)), runtime_ref);
        write(&lock).apply(Event::InitDone, runtime_ref);
        assert_eq!(
            known(&lock, "prod", "a"),
            Known::Absent,
            "deleted while down"
        );
        assert!(matches!(
            known(&lock, "prod", "b"),
            Known::Found(Ok(Some(_)))
        ));
        write(&lock).apply(
            Event::Delete(object("prod", "b", serde_json::json!({}))),
            runtime_ref,
        );
        assert_eq!(known(&lock, "prod", "b"), Known::Absent);
    }
}
