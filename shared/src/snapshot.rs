//! A Snapshot: everything a command reads from a cluster, from a file (`kubectl get -o yaml|json`
//! output: a `List`, single objects, multi-document YAML, any mix of kinds) or from a live
//! cluster. Every command takes one, so any decision can be replayed offline.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;
use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::api::core::{ControllerRevision, Node, Pod};
use crate::input::located;

mod objects;
mod parallel;
pub mod protobuf;
use crate::api::component::ComponentKind;
use crate::api::isvc::RuntimeKind;
use crate::api::runtime::RuntimeFields;
use crate::api::{
    BaseModel, ClusterBaseModel, ClusterServingRuntime, ComponentSpec, InferenceReplica,
    InferenceService, ServingRuntime,
};
pub use objects::{Change, Object, Source};

/// The ConfigMaps the product reads or owns; other ConfigMaps are skipped.
pub const CONFIG_MAP_NAMES: [&str; 4] = [
    "alfred-config",
    "alfred-recommendations",
    "alfred-dispatch-state",
    "inferenceservice-config",
];

/// The resource of OME's InferenceReplica, which releases before OMENative do not serve.
pub const INFERENCE_REPLICAS: &str = "inferencereplicas.ome.io";

/// The apiVersion and kind of the item that records when and where a snapshot was taken.
pub const SNAPSHOT_INFO_API_VERSION: &str = "alfred.ome.io/v1alpha1";
pub const SNAPSHOT_INFO_KIND: &str = "SnapshotInfo";

/// Every object is shared: a clone (a cache's next snapshot while a pass holds the one
/// before) copies a pointer per object, not the object.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub inference_services: Vec<Arc<InferenceService>>,
    pub serving_runtimes: Vec<Arc<ServingRuntime>>,
    pub cluster_serving_runtimes: Vec<Arc<ClusterServingRuntime>>,
    pub inference_replicas: Vec<Arc<InferenceReplica>>,
    pub base_models: Vec<Arc<BaseModel>>,
    pub cluster_base_models: Vec<Arc<ClusterBaseModel>>,
    pub persistent_volume_claims: Vec<Arc<PersistentVolumeClaim>>,
    pub persistent_volumes: Vec<Arc<PersistentVolume>>,
    pub config_maps: Vec<Arc<ConfigMap>>,
    /// Revisions owned by InferenceReplicas (others are skipped).
    pub controller_revisions: Vec<Arc<ControllerRevision>>,
    /// OME objects the API server holds but that cannot be read as their kind (a field of the
    /// wrong type, a required field missing): each costs its own component, not the whole read.
    pub unreadable: Vec<UnreadableObject>,
    /// When the snapshot was taken, if it says; commands use it as `now` when replaying.
    pub info: Option<SnapshotInfo>,
    /// Objects of kinds the product does not read, by kind.
    pub skipped: BTreeMap<String, usize>,
    /// The guard on `migrate`'s writes, as read (execute mode sends only while it holds).
    pub migration_guard: GuardRead,
}

/// The name of the guard on `migrate`'s writes: a ValidatingAdmissionPolicy and its binding
/// (checked in the execute module's guard).
pub const MIGRATION_GUARD: &str = "alfred-migration-writes";

/// What a read of the cluster found of one of the guard's two objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Fetched {
    /// Not looked for (a snapshot file that holds neither object).
    #[default]
    NotRead,
    Found(serde_json::Value),
    Missing,
    /// The read failed (a missing permission, say): its error.
    Unreadable(String),
}

/// Both objects as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GuardRead {
    pub policy: Fetched,
    pub binding: Fetched,
}

impl GuardRead {
    /// The objects found, as the API server returned them.
    pub fn found(&self) -> impl Iterator<Item = &serde_json::Value> {
        [&self.policy, &self.binding]
            .into_iter()
            .filter_map(|f| match f {
                Fetched::Found(value) => Some(value),
                _ => None,
            })
    }
}

/// The snapshot's own record: when it was captured and from where.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInfo {
    pub captured_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The PodGroup resources the cluster serves (`podgroups.<group>`), as discovery found
    /// them; absent when not looked up (a hand-written file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_resources: Option<Vec<String>>,
    /// Kinds the cluster does not serve (their list was not found), e.g.
    /// `inferencereplicas.ome.io` on an OME release before OMENative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved: Vec<String>,
}

crate::named! {
    /// The kinds a snapshot keeps when they cannot be read: each is one workload's or one
    /// component's, so it costs only that.
    pub enum UnreadableKind {
        InferenceService,
        InferenceReplica,
    }
}

/// An InferenceService or InferenceReplica that cannot be read as its kind: an older
/// controller, a hand edit or a CRD without OME's validation can leave one in the API server.
/// What identifies it is read leniently; the object is kept as read, so a snapshot written
/// from this one holds it unchanged.
#[derive(Clone, Debug)]
pub struct UnreadableObject {
    pub kind: UnreadableKind,
    pub namespace: String,
    pub name: String,
    /// An InferenceReplica's `spec.parentRef.name`, when it can be read.
    pub parent: Option<String>,
    /// An InferenceReplica's `spec.component`, when it can be read.
    pub component: Option<ComponentKind>,
    /// The field that cannot be read, e.g. `status.instanceStatuses[0].operation`.
    pub path: Option<String>,
    pub message: String,
    pub raw: Box<serde_json::value::RawValue>,
}

impl UnreadableObject {
    /// `Kind namespace/name`.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    /// What cannot be read: `field F: why`, or just why.
    pub fn problem(&self) -> String {
        match &self.path {
            Some(path) => format!("field {path}: {}", self.message),
            None => self.message.clone(),
        }
    }

    /// Reads what identifies an object whose typed read failed at `path` with `message`.
    fn read(
        kind: UnreadableKind,
        json: &str,
        path: Option<String>,
        message: String,
    ) -> Option<UnreadableObject> {
        let value: serde_json::Value = serde_json::from_str(json).ok()?;
        let text = |pointer: &str| value.pointer(pointer).and_then(|v| v.as_str());
        Some(UnreadableObject {
            kind,
            namespace: text("/metadata/namespace").unwrap_or("default").to_string(),
            name: text("/metadata/name")?.to_string(),
            parent: text("/spec/parentRef/name").map(str::to_string),
            component: text("/spec/component").and_then(ComponentKind::parse),
            path,
            message,
            raw: serde_json::value::RawValue::from_string(json.to_string()).ok()?,
        })
    }
}

/// What was wrong with a snapshot, and where.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{}{message}", location(*.document, *.item, .object.as_deref(), .path.as_deref()))]
pub struct SnapshotError {
    /// 1-based document index in the file (YAML documents or concatenated JSON values).
    pub document: usize,
    /// 0-based item index when the document is a List.
    pub item: Option<usize>,
    /// `Kind namespace/name` of the object, when it could be read.
    pub object: Option<String>,
    /// The field path inside the object, e.g. `spec.containers[0].resources`.
    pub path: Option<String>,
    pub message: String,
}

impl SnapshotError {
    /// An error about a whole document, before any object in it could be read.
    fn in_document(document: usize, message: String) -> SnapshotError {
        SnapshotError {
            document,
            item: None,
            object: None,
            path: None,
            message,
        }
    }
}

fn location(
    document: usize,
    item: Option<usize>,
    object: Option<&str>,
    path: Option<&str>,
) -> String {
    let mut out = format!("document {document}");
    if let Some(item) = item {
        out.push_str(&format!(", item {item}"));
    }
    if let Some(object) = object {
        out.push_str(&format!(" ({object})"));
    }
    if let Some(path) = path {
        out.push_str(&format!(", field {path}"));
    }
    out.push_str(": ");
    out
}

/// The type a typed List (`NodeList`, as the API server sends it) gives its items.
struct ItemType {
    api_version: String,
    kind: String,
}

#[derive(Deserialize)]
#[serde(expecting = "a Kubernetes object (a mapping with apiVersion, kind and metadata)")]
struct Header {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<HeaderMeta>,
}

#[derive(Deserialize)]
#[serde(expecting = "object metadata (a mapping with name and namespace)")]
struct HeaderMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl Snapshot {
    /// Reads `kubectl get -o json|yaml` output. JSON is detected by its first character.
    pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
        let mut snapshot = Snapshot::default();
        for_each_document(text, |document, json| {
            snapshot.add_json_document(document, json).map(drop)
        })?;
        if let Some(key) = snapshot.repeated_object() {
            return Err(locate_repeat(text, key));
        }
        Ok(snapshot)
    }

    /// The first object held twice (same kind, namespace and name), as (kind, namespace, name).
    /// A cluster never holds one twice, so a file that does was put together wrongly (two
    /// captures concatenated), and reading either copy would be a guess.
    pub fn repeated_object(&self) -> Option<(&'static str, String, String)> {
        let mut keys: Vec<(&'static str, &str, &str)> = Vec::with_capacity(self.object_count());
        fn kube(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (&str, &str) {
            (
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            )
        }
        macro_rules! kube_kind {
            ($kind:literal, $field:ident) => {
                for o in &self.$field {
                    let (namespace, name) = kube(&o.metadata);
                    keys.push(($kind, namespace, name));
                }
            };
        }
        keys.extend(
            self.nodes
                .iter()
                .map(|n| ("Node", "", n.metadata.name.as_str())),
        );
        keys.extend(self.pods.iter().map(|p| {
            (
                "Pod",
                p.metadata.namespace.as_str(),
                p.metadata.name.as_str(),
            )
        }));
        keys.extend(self.controller_revisions.iter().map(|r| {
            (
                "ControllerRevision",
                r.metadata.namespace.as_str(),
                r.metadata.name.as_str(),
            )
        }));
        kube_kind!("InferenceService", inference_services);
        kube_kind!("ServingRuntime", serving_runtimes);
        kube_kind!("ClusterServingRuntime", cluster_serving_runtimes);
        kube_kind!("InferenceReplica", inference_replicas);
        kube_kind!("BaseModel", base_models);
        kube_kind!("ClusterBaseModel", cluster_base_models);
        kube_kind!("PersistentVolumeClaim", persistent_volume_claims);
        kube_kind!("PersistentVolume", persistent_volumes);
        kube_kind!("ConfigMap", config_maps);
        keys.extend(
            self.unreadable
                .iter()
                .map(|u| (u.kind.as_str(), u.namespace.as_str(), u.name.as_str())),
        );
        let mut seen = HashSet::with_capacity(keys.len());
        keys.into_iter()
            .find(|key| !seen.insert(*key))
            .map(|(kind, namespace, name)| (kind, namespace.to_string(), name.to_string()))
    }

    /// Total objects read (not counting skipped ones).
    pub fn object_count(&self) -> usize {
        self.nodes.len()
            + self.pods.len()
            + self.inference_services.len()
            + self.serving_runtimes.len()
            + self.cluster_serving_runtimes.len()
            + self.inference_replicas.len()
            + self.base_models.len()
            + self.cluster_base_models.len()
            + self.persistent_volume_claims.len()
            + self.persistent_volumes.len()
            + self.config_maps.len()
            + self.controller_revisions.len()
            + self.unreadable.len()
            + self.migration_guard.found().count()
    }

    /// The cluster serves no InferenceReplica (an OME release before OMENative): no component
    /// is OMENative-observable.
    pub fn replicas_unserved(&self) -> bool {
        self.info
            .as_ref()
            .is_some_and(|i| i.unserved.iter().any(|k| k == INFERENCE_REPLICAS))
    }

    /// What a reader should know once about what the snapshot could not hold.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for kind in self.info.iter().flat_map(|i| &i.unserved) {
            notes.push(if kind == INFERENCE_REPLICAS {
                format!(
                    "this cluster serves no InferenceReplica ({kind}: an OME release before OMENative), so no OMENative component can be observed and OMENative moves are unavailable; pools, node health, RawDeployment and MultiNode advice, drain and simulate still work"
                )
            } else {
                format!("this cluster does not serve {kind}; read none")
            });
        }
        for u in &self.unreadable {
            let cost = match u.kind {
                UnreadableKind::InferenceReplica => {
                    "the component it serves is not observed (OMENativeObservationInvalid)"
                }
                UnreadableKind::InferenceService => {
                    "nothing is decided for it (its pods still count on their nodes)"
                }
            };
            notes.push(format!(
                "{} cannot be read ({}): {cost}; every other object is read as usual",
                u.object(),
                u.problem()
            ));
        }
        notes
    }

    /// A PersistentVolumeClaim by namespace and name.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.persistent_volume_claims
            .iter()
            .find(|c| {
                c.metadata.name.as_deref() == Some(name)
                    && c.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .map(|c| c.as_ref())
    }

    /// A PersistentVolume by name.
    pub fn volume(&self, name: &str) -> Option<&PersistentVolume> {
        self.persistent_volumes
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(|p| p.as_ref())
    }

    /// The runtime an InferenceService names, found where OME looks
    /// ([`RuntimeKind::LOOKUP_ORDER`]): its kind, its name as users write it, and its fields.
    pub fn runtime(
        &self,
        namespace: &str,
        isvc: &InferenceService,
    ) -> Option<(RuntimeKind, String, &RuntimeFields)> {
        let r = isvc.spec.runtime.as_ref()?;
        let named = |name: Option<&String>| name.map(String::as_str) == Some(r.name.as_str());
        RuntimeKind::LOOKUP_ORDER.iter().find_map(|&k| match k {
            RuntimeKind::ServingRuntime => self
                .serving_runtimes
                .iter()
                .find(|s| {
                    named(s.metadata.name.as_ref())
                        && s.metadata.namespace.as_deref().unwrap_or("default") == namespace
                })
                .map(|s| (k, format!("{namespace}/{}", r.name), &s.spec.fields)),
            RuntimeKind::ClusterServingRuntime => self
                .cluster_serving_runtimes
                .iter()
                .find(|s| named(s.metadata.name.as_ref()))
                .map(|s| (k, r.name.clone(), &s.spec.fields)),
        })
    }

    /// The runtime's config for a component of an InferenceService ([`Snapshot::runtime`]).
    pub fn runtime_component(
        &self,
        namespace: &str,
        isvc: &InferenceService,
        kind: ComponentKind,
    ) -> Option<&ComponentSpec> {
        self.runtime(namespace, isvc)?.2.component(kind)
    }

    /// The ConfigMap with this name, if the snapshot holds it.
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .map(|c| c.as_ref())
    }

    /// Adds one JSON document: a `*List` with `items`, or a single object. `document` is the
    /// 1-based index errors report. Returns a List page's `metadata.continue` token when the
    /// API server has more pages, read in the same scan as the items.
    pub fn add_json_document(
        &mut self,
        document: usize,
        json: &str,
    ) -> Result<Option<String>, SnapshotError> {
        let not_object = |message: String| SnapshotError::in_document(document, message);
        if !json.trim_start().starts_with('{') {
            return Err(not_object(
                "expected a Kubernetes object or List (a mapping with `kind`)".into(),
            ));
        }
        match parallel::read_list(document, json)? {
            Some(list) => {
                self.append(list.snapshot);
                Ok(list.continue_token)
            }
            None => self.add_object(document, None, json, None).map(|()| None),
        }
    }

    /// Moves everything `other` holds to the end of this snapshot.
    pub fn append(&mut self, mut other: Snapshot) {
        self.nodes.append(&mut other.nodes);
        self.pods.append(&mut other.pods);
        self.inference_services
            .append(&mut other.inference_services);
        self.serving_runtimes.append(&mut other.serving_runtimes);
        self.cluster_serving_runtimes
            .append(&mut other.cluster_serving_runtimes);
        self.inference_replicas
            .append(&mut other.inference_replicas);
        self.base_models.append(&mut other.base_models);
        self.cluster_base_models
            .append(&mut other.cluster_base_models);
        self.persistent_volume_claims
            .append(&mut other.persistent_volume_claims);
        self.persistent_volumes
            .append(&mut other.persistent_volumes);
        self.config_maps.append(&mut other.config_maps);
        self.controller_revisions
            .append(&mut other.controller_revisions);
        self.unreadable.append(&mut other.unreadable);
        if other.info.is_some() {
            self.info = other.info;
        }
        if other.migration_guard != Default::default() {
            self.migration_guard = other.migration_guard;
        }
        for (kind, count) in other.skipped {
            *self.skipped.entry(kind).or_default() += count;
        }
    }

    /// Adds one object; `implied` is the type its List gives items that carry none.
    fn add_object(
        &mut self,
        document: usize,
        item: Option<usize>,
        json: &str,
        implied: Option<&ItemType>,
    ) -> Result<(), SnapshotError> {
        let err = |object: Option<String>, path: Option<String>, message: String| SnapshotError {
            document,
            item,
            object,
            path,
            message,
        };
        let refused = |(object, path, message)| err(Some(object), Some(path), message);
        // Else another kind, an unusual key order, or an error to locate.
        if let Ok(core) = crate::input::from_json::<CoreObject>(json) {
            return self.push_core(core).map_err(refused);
        }
        let header: Header = located(json).map_err(|(path, message)| {
            err(None, path, format!("not a Kubernetes object: {message}"))
        })?;
        let (kind, api_version) = match (header.kind, implied) {
            (Some(kind), _) => (kind, header.api_version.unwrap_or_default()),
            (None, Some(t)) => (t.kind.clone(), t.api_version.clone()),
            (None, None) => return Err(err(
                None,
                Some("kind".into()),
                "missing `kind`; every object needs apiVersion and kind (as `kubectl get -o yaml` prints them)".into(),
            )),
        };
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let meta = header.metadata;
        let name = meta
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        let object = match meta.as_ref().and_then(|m| m.namespace.as_deref()) {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        macro_rules! push {
            ($field:ident) => {{
                if name.is_empty() {
                    return Err(err(
                        Some(object),
                        Some("metadata.name".into()),
                        CUT_SHORT.into(),
                    ));
                }
                self.$field.push(Arc::new(lean(
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?,
                )))
            }};
        }
        // A workload object that cannot be read costs its component, not the whole read: it is
        // kept as unreadable, and the cluster model says why that component is not observed.
        macro_rules! push_or_keep {
            ($field:ident, $kind:expr) => {{
                if name.is_empty() {
                    return Err(err(
                        Some(object),
                        Some("metadata.name".into()),
                        CUT_SHORT.into(),
                    ));
                }
                match located(json) {
                    Ok(value) => self.$field.push(Arc::new(lean(value))),
                    Err((path, message)) => {
                        match UnreadableObject::read($kind, json, path.clone(), message.clone()) {
                            Some(kept) => self.unreadable.push(kept),
                            None => return Err(err(Some(object), path, message)),
                        }
                    }
                }
            }};
        }
        match (group, kind.as_str()) {
            ("", "Node") => {
                let node =
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?;
                self.push_core(CoreObject::Node(node)).map_err(refused)?;
            }
            ("", "Pod") => {
                let pod =
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?;
                self.push_core(CoreObject::Pod(pod)).map_err(refused)?;
            }
            ("", "PersistentVolumeClaim") => push!(persistent_volume_claims),
            ("", "PersistentVolume") => push!(persistent_volumes),
            ("", "ConfigMap") if CONFIG_MAP_NAMES.contains(&name.as_str()) => push!(config_maps),
            ("ome.io", "InferenceService") => {
                push_or_keep!(inference_services, UnreadableKind::InferenceService)
            }
            ("ome.io", "ServingRuntime") => push!(serving_runtimes),
            ("ome.io", "ClusterServingRuntime") => push!(cluster_serving_runtimes),
            ("ome.io", "InferenceReplica") => {
                push_or_keep!(inference_replicas, UnreadableKind::InferenceReplica)
            }
            ("ome.io", "BaseModel") => push!(base_models),
            ("ome.io", "ClusterBaseModel") => push!(cluster_base_models),
            ("apps", "ControllerRevision") => {
                let revision: ControllerRevision =
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?;
                match revision.owner("InferenceReplica") {
                    Some(_) => self.controller_revisions.push(Arc::new(revision)),
                    None => *self.skipped.entry(kind).or_default() += 1,
                }
            }
            (
                "admissionregistration.k8s.io",
                "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding",
            ) if name == MIGRATION_GUARD => {
                let value =
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?;
                let found = Fetched::Found(value);
                match kind.as_str() {
                    "ValidatingAdmissionPolicy" => self.migration_guard.policy = found,
                    _ => self.migration_guard.binding = found,
                }
            }
            ("alfred.ome.io", SNAPSHOT_INFO_KIND) => {
                self.info = Some(
                    located(json).map_err(|(path, message)| err(Some(object), path, message))?,
                )
            }
            _ => *self.skipped.entry(kind).or_default() += 1,
        }
        Ok(())
    }
}

impl Snapshot {
    /// Adds a node or pod, refusing GPU counts no machine has (read on, a node would vanish
    /// from its pool or a sum overflow). Err is (object, field path, why).
    fn push_core(&mut self, core: CoreObject) -> Result<(), (String, String, String)> {
        match core {
            CoreObject::Node(node) => {
                let object = || format!("Node {}", node.metadata.name);
                if node.metadata.name.is_empty() {
                    return Err((object(), "metadata.name".into(), CUT_SHORT.into()));
                }
                if let Some((path, why)) = crate::kubernetes::quantity::node_gpu_problem(&node) {
                    return Err((object(), path, why.to_string()));
                }
                self.nodes.push(Arc::new(node));
            }
            CoreObject::Pod(pod) => {
                let m = &pod.metadata;
                let object = || format!("Pod {}/{}", m.namespace, m.name);
                if m.name.is_empty() {
                    return Err((object(), "metadata.name".into(), CUT_SHORT.into()));
                }
                if pod.spec.containers.is_empty() {
                    return Err((
                        object(),
                        "spec.containers".into(),
                        "empty; every pod the API server holds has a container, so the file may be cut short".into(),
                    ));
                }
                if let Some((path, why)) = crate::kubernetes::quantity::pod_gpu_problem(&pod) {
                    return Err((object(), path, why.to_string()));
                }
                self.pods.push(Arc::new(pod));
            }
        }
        Ok(())
    }
}

/// The object without its `managedFields`, which nothing reads: as the API server returns
/// them, an InferenceReplica's take more memory than the rest of it (20,000 OME objects held
/// 300 MB of them in a cache).
fn lean<K: kube::Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// What a missing name says: the API server returns every object with one.
const CUT_SHORT: &str =
    "missing; every object the API server returns has a name, so the file may be cut short";

/// Nodes and pods, most of a large snapshot, read in one pass. `apiVersion` and `kind` come
/// before `metadata`, `spec` and `status` in everything the API server and kubectl print, so the
/// type of the body is known when it starts. Anything else fails fast and is left to the general
/// read, which takes two passes (the header, then the typed object) and locates errors.
// One exists at a time, moved straight into the snapshot: boxing the pod would only add an
// allocation per pod.
#[allow(clippy::large_enum_variant)]
enum CoreObject {
    Node(Node),
    Pod(Pod),
}

impl<'de> Deserialize<'de> for CoreObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(CoreObjectVisitor)
    }
}

struct CoreObjectVisitor;

impl<'de> Visitor<'de> for CoreObjectVisitor {
    type Value = CoreObject;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a v1 Node or Pod with apiVersion and kind first")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CoreObject, A::Error> {
        fn part<'de, A: MapAccess<'de>, T: Deserialize<'de> + Default>(
            map: &mut A,
        ) -> Result<T, A::Error> {
            Ok(map.next_value::<Option<T>>()?.unwrap_or_default())
        }
        let not_core = || A::Error::custom("not a core object in the usual key order");
        let mut api_version: Option<&'de str> = None;
        let mut object: Option<CoreObject> = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            match (key, &mut object) {
                ("apiVersion", None) => api_version = Some(map.next_value()?),
                ("kind", None) => {
                    object = match (api_version, map.next_value::<&str>()?) {
                        (Some("v1"), "Node") => Some(CoreObject::Node(Node::default())),
                        (Some("v1"), "Pod") => Some(CoreObject::Pod(Pod::default())),
                        _ => return Err(not_core()),
                    }
                }
                ("metadata", Some(CoreObject::Node(n))) => n.metadata = part(&mut map)?,
                ("spec", Some(CoreObject::Node(n))) => n.spec = part(&mut map)?,
                ("status", Some(CoreObject::Node(n))) => n.status = part(&mut map)?,
                ("metadata", Some(CoreObject::Pod(p))) => p.metadata = part(&mut map)?,
                ("spec", Some(CoreObject::Pod(p))) => p.spec = part(&mut map)?,
                ("status", Some(CoreObject::Pod(p))) => p.status = part(&mut map)?,
                ("metadata" | "spec" | "status", None) => return Err(not_core()),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        object.ok_or_else(not_core)
    }
}

/// Feeds each document to `f` as checked JSON text, with its 1-based index.
fn for_each_document(
    text: &str,
    f: impl FnMut(usize, &str) -> Result<(), SnapshotError>,
) -> Result<(), SnapshotError> {
    crate::input::for_each_document(text, f, |document, e| {
        SnapshotError::in_document(document, e.to_string())
    })
}

/// Where an object held twice is: the error names its second place and its first. A second,
/// header-only read, so the common case (no repeat) pays nothing for it.
fn locate_repeat(text: &str, (kind, namespace, name): (&str, String, String)) -> SnapshotError {
    #[derive(Deserialize)]
    struct Document {
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        metadata: Option<HeaderMeta>,
        #[serde(default)]
        items: Option<Vec<ItemHeader>>,
    }
    #[derive(Deserialize)]
    struct ItemHeader {
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        metadata: Option<HeaderMeta>,
    }
    let object = if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    };
    let is_it = |k: Option<&str>, meta: Option<&HeaderMeta>| {
        k == Some(kind)
            && meta.is_some_and(|m| {
                m.name.as_deref() == Some(name.as_str())
                    && m.namespace.as_deref().unwrap_or_default() == namespace
            })
    };
    let mut places: Vec<(usize, Option<usize>)> = Vec::new();
    let _ = for_each_document(text, |document, json| {
        let Ok(doc) = serde_json::from_str::<Document>(json) else {
            return Ok(());
        };
        match (&doc.items, doc.kind.as_deref()) {
            (Some(items), Some(list)) if list.ends_with("List") => {
                let implied = list.strip_suffix("List").filter(|k| !k.is_empty());
                for (i, item) in items.iter().enumerate() {
                    if is_it(item.kind.as_deref().or(implied), item.metadata.as_ref()) {
                        places.push((document, Some(i)));
                    }
                }
            }
            _ if is_it(doc.kind.as_deref(), doc.metadata.as_ref()) => places.push((document, None)),
            _ => {}
        }
        Ok(())
    });
    let place = |(document, item): (usize, Option<usize>)| match item {
        Some(i) => format!("document {document}, item {i}"),
        None => format!("document {document}"),
    };
    let (second, first) = match places.as_slice() {
        [first, second, ..] => (*second, place(*first)),
        _ => ((0, None), "another place".into()),
    };
    SnapshotError {
        document: second.0,
        item: second.1,
        object: Some(object),
        path: None,
        message: format!(
            "the same object is also at {first}; a cluster holds each object once, so the file joins two captures or repeats an object: keep one"
        ),
    }
}

impl Snapshot {
    /// The snapshot as one `v1 List` (the items of [`Snapshot::list_items`]), the form
    /// `kubectl alfred snapshot` writes and [`Snapshot::parse`] reads back.
    pub fn to_list(&self) -> serde_json::Value {
        let items: Vec<serde_json::Value> = self.list_items().collect();
        serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
    }

    /// The items of the snapshot's `v1 List`, one at a time, `SnapshotInfo` first, so a writer
    /// never holds more than one of them besides the snapshot.
    pub fn list_items(&self) -> impl Iterator<Item = serde_json::Value> + '_ {
        fn typed<T: Serialize>(objects: &[T]) -> impl Iterator<Item = serde_json::Value> + '_ {
            objects.iter().filter_map(|o| serde_json::to_value(o).ok())
        }
        // The lean core types carry no apiVersion and kind of their own.
        fn core<'a, T: Serialize>(
            api_version: &'static str,
            kind: &'static str,
            objects: &'a [T],
        ) -> impl Iterator<Item = serde_json::Value> + 'a {
            objects.iter().map(move |o| {
                let mut object = serde_json::Map::new();
                object.insert("apiVersion".into(), api_version.into());
                object.insert("kind".into(), kind.into());
                if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(o) {
                    object.extend(fields);
                }
                serde_json::Value::Object(object)
            })
        }
        let info = self.info.as_ref().map(|info| {
            let mut value = serde_json::json!({
                "apiVersion": SNAPSHOT_INFO_API_VERSION,
                "kind": SNAPSHOT_INFO_KIND,
                "metadata": {"name": "snapshot"},
            });
            if let (Some(map), Ok(serde_json::Value::Object(fields))) =
                (value.as_object_mut(), serde_json::to_value(info))
            {
                map.extend(fields);
            }
            value
        });
        let unreadable = self
            .unreadable
            .iter()
            .filter_map(|u| serde_json::from_str(u.raw.get()).ok());
        info.into_iter()
            .chain(core("v1", "Node", &self.nodes))
            .chain(typed(&self.persistent_volumes))
            .chain(typed(&self.persistent_volume_claims))
            .chain(typed(&self.config_maps))
            .chain(typed(&self.cluster_base_models))
            .chain(typed(&self.base_models))
            .chain(typed(&self.cluster_serving_runtimes))
            .chain(typed(&self.serving_runtimes))
            .chain(typed(&self.inference_services))
            .chain(typed(&self.inference_replicas))
            .chain(unreadable)
            .chain(self.migration_guard.found().cloned())
            .chain(core("v1", "Pod", &self.pods))
            .chain(core(
                "apps/v1",
                "ControllerRevision",
                &self.controller_revisions,
            ))
    }
}
