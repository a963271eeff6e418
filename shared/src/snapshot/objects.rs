//! A snapshot taken apart into its objects and put together again: what a cache of the
//! cluster keeps between reads (one object per key, replaced as the API server reports
//! changes), read through the same loader as every snapshot.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};

use super::{ItemType, Snapshot, SnapshotError, UnreadableObject};
use crate::api::core::{ControllerRevision, Node, Pod};
use crate::api::{
    BaseModel, ClusterBaseModel, ClusterServingRuntime, InferenceReplica, InferenceService,
    ServingRuntime,
};

/// One object a snapshot holds, of any kind it reads, shared with the snapshots that hold it
/// (a cache's next snapshot copies pointers, not objects).
#[derive(Clone, Debug)]
pub enum Object {
    Node(Arc<Node>),
    Pod(Arc<Pod>),
    InferenceService(Arc<InferenceService>),
    ServingRuntime(Arc<ServingRuntime>),
    ClusterServingRuntime(Arc<ClusterServingRuntime>),
    InferenceReplica(Arc<InferenceReplica>),
    BaseModel(Arc<BaseModel>),
    ClusterBaseModel(Arc<ClusterBaseModel>),
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    PersistentVolume(Arc<PersistentVolume>),
    ConfigMap(Arc<ConfigMap>),
    ControllerRevision(Arc<ControllerRevision>),
    Unreadable(Box<UnreadableObject>),
}

impl Snapshot {
    /// Reads one item of a List of `kind` (items carry no kind of their own, as the API
    /// server lists them; a watch event's object may carry one): the object, or None when
    /// the snapshot skips it (a ConfigMap or ControllerRevision that is not the product's).
    pub fn read_item(
        api_version: &str,
        kind: &str,
        json: &str,
    ) -> Result<Option<Object>, SnapshotError> {
        let mut one = Snapshot::default();
        let implied = ItemType {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        };
        one.add_object(1, None, json, Some(&implied))?;
        Ok(one.into_objects().next())
    }

    /// Every object, kind by kind (what the snapshot says about itself is dropped).
    pub fn into_objects(self) -> impl Iterator<Item = Object> {
        let Snapshot {
            nodes,
            pods,
            inference_services,
            serving_runtimes,
            cluster_serving_runtimes,
            inference_replicas,
            base_models,
            cluster_base_models,
            persistent_volume_claims,
            persistent_volumes,
            config_maps,
            controller_revisions,
            unreadable,
            ..
        } = self;
        (nodes.into_iter().map(Object::Node))
            .chain(pods.into_iter().map(Object::Pod))
            .chain(inference_services.into_iter().map(Object::InferenceService))
            .chain(serving_runtimes.into_iter().map(Object::ServingRuntime))
            .chain(
                cluster_serving_runtimes
                    .into_iter()
                    .map(Object::ClusterServingRuntime),
            )
            .chain(inference_replicas.into_iter().map(Object::InferenceReplica))
            .chain(base_models.into_iter().map(Object::BaseModel))
            .chain(
                cluster_base_models
                    .into_iter()
                    .map(Object::ClusterBaseModel),
            )
            .chain(
                persistent_volume_claims
                    .into_iter()
                    .map(Object::PersistentVolumeClaim),
            )
            .chain(persistent_volumes.into_iter().map(Object::PersistentVolume))
            .chain(config_maps.into_iter().map(Object::ConfigMap))
            .chain(
                controller_revisions
                    .into_iter()
                    .map(Object::ControllerRevision),
            )
            .chain(
                unreadable
                    .into_iter()
                    .map(|o| Object::Unreadable(Box::new(o))),
            )
    }

    /// Adds one object after the others of its kind.
    pub fn push(&mut self, object: Object) {
        match object {
            Object::Node(o) => self.nodes.push(o),
            Object::Pod(o) => self.pods.push(o),
            Object::InferenceService(o) => self.inference_services.push(o),
            Object::ServingRuntime(o) => self.serving_runtimes.push(o),
            Object::ClusterServingRuntime(o) => self.cluster_serving_runtimes.push(o),
            Object::InferenceReplica(o) => self.inference_replicas.push(o),
            Object::BaseModel(o) => self.base_models.push(o),
            Object::ClusterBaseModel(o) => self.cluster_base_models.push(o),
            Object::PersistentVolumeClaim(o) => self.persistent_volume_claims.push(o),
            Object::PersistentVolume(o) => self.persistent_volumes.push(o),
            Object::ConfigMap(o) => self.config_maps.push(o),
            Object::ControllerRevision(o) => self.controller_revisions.push(o),
            Object::Unreadable(o) => self.unreadable.push(*o),
        }
    }
}

/// A list a cache watches, which decides where its objects go in a snapshot (an
/// InferenceService or InferenceReplica that cannot be read goes among the unreadable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Nodes,
    Pods,
    InferenceServices,
    ServingRuntimes,
    ClusterServingRuntimes,
    InferenceReplicas,
    BaseModels,
    ClusterBaseModels,
    PersistentVolumeClaims,
    PersistentVolumes,
    ConfigMaps,
    ControllerRevisions,
}

/// One change to a snapshot: the object now under this key of its source, or None when it is
/// gone.
pub type Change = ((Source, String, String), Option<Object>);

fn node_key(o: &Node) -> (&str, &str) {
    ("", o.metadata.name.as_str())
}

fn pod_key(o: &Pod) -> (&str, &str) {
    (o.metadata.namespace.as_str(), o.metadata.name.as_str())
}

fn revision_key(o: &ControllerRevision) -> (&str, &str) {
    (o.metadata.namespace.as_str(), o.metadata.name.as_str())
}

fn unreadable_key(o: &UnreadableObject) -> (&str, &str) {
    (o.namespace.as_str(), o.name.as_str())
}

/// `(namespace, name)` of a kube-typed object.
fn kube_key<K: kube::Resource>(o: &K) -> (&str, &str) {
    let m = o.meta();
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
}

/// Each list of shared objects a snapshot keeps, with its source and its key, for `$each!`:
/// one table for every step that walks them all.
macro_rules! lists {
    ($each:ident) => {
        $each!(nodes, Source::Nodes, node_key);
        $each!(pods, Source::Pods, pod_key);
        $each!(inference_services, Source::InferenceServices, kube_key);
        $each!(serving_runtimes, Source::ServingRuntimes, kube_key);
        $each!(
            cluster_serving_runtimes,
            Source::ClusterServingRuntimes,
            kube_key
        );
        $each!(inference_replicas, Source::InferenceReplicas, kube_key);
        $each!(base_models, Source::BaseModels, kube_key);
        $each!(cluster_base_models, Source::ClusterBaseModels, kube_key);
        $each!(
            persistent_volume_claims,
            Source::PersistentVolumeClaims,
            kube_key
        );
        $each!(persistent_volumes, Source::PersistentVolumes, kube_key);
        $each!(config_maps, Source::ConfigMaps, kube_key);
        $each!(
            controller_revisions,
            Source::ControllerRevisions,
            revision_key
        );
    };
}

impl Snapshot {
    /// Applies changes in place: each key's object replaced, added or removed, every list
    /// kept in (namespace, name) order as the API server lists it. What a cache of the cluster
    /// does between passes, instead of building a new snapshot.
    pub fn apply(&mut self, changes: Vec<Change>) {
        use std::collections::BTreeSet;
        let touched: BTreeSet<(Source, &str, &str)> = changes
            .iter()
            .map(|((source, ns, name), _)| (*source, ns.as_str(), name.as_str()))
            .collect();
        let gone = |source: Source, key: (&str, &str)| touched.contains(&(source, key.0, key.1));
        macro_rules! drop_touched {
            ($field:ident, $source:expr, $key:expr) => {
                if touched.iter().any(|t| t.0 == $source) {
                    self.$field.retain(|o| !gone($source, $key(o.as_ref())));
                }
            };
        }
        lists!(drop_touched);
        self.unreadable.retain(|u| {
            let source = match u.kind {
                super::UnreadableKind::InferenceService => Source::InferenceServices,
                super::UnreadableKind::InferenceReplica => Source::InferenceReplicas,
            };
            !gone(source, (u.namespace.as_str(), u.name.as_str()))
        });
        drop(touched);
        let added = changes.into_iter().filter_map(|(_, o)| o);
        let mut any = false;
        for object in added {
            self.push(object);
            any = true;
        }
        if any {
            self.sort_by_key();
        }
    }

    /// Every list in (namespace, name) order.
    fn sort_by_key(&mut self) {
        fn by<T>(list: &mut [Arc<T>], key: impl Fn(&T) -> (&str, &str)) {
            if !list.is_sorted_by(|a, b| key(a) <= key(b)) {
                list.sort_by(|a, b| key(a).cmp(&key(b)));
            }
        }
        macro_rules! sort {
            ($field:ident, $source:expr, $key:expr) => {
                by(&mut self.$field, $key)
            };
        }
        lists!(sort);
        if !self
            .unreadable
            .is_sorted_by(|a, b| unreadable_key(a) <= unreadable_key(b))
        {
            self.unreadable
                .sort_by(|a, b| unreadable_key(a).cmp(&unreadable_key(b)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache holds one per object: a tag and a pointer to what the snapshots share.
    #[test]
    fn an_object_is_a_tag_and_a_pointer() {
        assert!(std::mem::size_of::<Object>() <= 2 * std::mem::size_of::<usize>());
    }

    /// The demo snapshot taken apart and put together again reads as the same cluster.
    #[test]
    fn a_snapshot_taken_apart_and_put_together_lists_the_same_objects() {
        let text = include_str!("../../../manifests/examples/demo-cluster.yaml");
        let snapshot = Snapshot::parse(text).expect("the demo reads");
        let before = snapshot.to_list()["items"].clone();
        let count = snapshot.object_count();
        let info = snapshot.info.clone();
        let guard = snapshot.migration_guard.clone();
        let mut again = Snapshot::default();
        for object in snapshot.into_objects() {
            again.push(object);
        }
        again.info = info;
        again.migration_guard = guard;
        assert_eq!(again.object_count(), count);
        assert_eq!(again.to_list()["items"], before);
    }

    /// A List item as the API server sends it (no kind) and a watch event's object (kind
    /// first) read as the same pod; a ConfigMap that is not the product's is skipped.
    #[test]
    fn items_read_with_or_without_their_own_kind() {
        let item = r#"{"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{"containers":[{"name":"c"}],"nodeName":"n1"},"status":{"phase":"Running"}}"#;
        let event = format!(r#"{{"apiVersion":"v1","kind":"Pod",{}"#, &item[1..]);
        let (Some(Object::Pod(a)), Some(Object::Pod(b))) = (
            Snapshot::read_item("v1", "Pod", item).unwrap(),
            Snapshot::read_item("v1", "Pod", &event).unwrap(),
        ) else {
            panic!("both read as pods");
        };
        assert_eq!(a.metadata.name, "p");
        assert_eq!(
            serde_json::to_value(&*a).unwrap(),
            serde_json::to_value(&*b).unwrap()
        );
        let other = r#"{"metadata":{"name":"kube-root-ca.crt","namespace":"ns"},"data":{}}"#;
        assert!(
            Snapshot::read_item("v1", "ConfigMap", other)
                .unwrap()
                .is_none()
        );
        let config = r#"{"metadata":{"name":"alfred-config","namespace":"ome","managedFields":[{"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:config.yaml":{}}}}]},"data":{}}"#;
        let Some(Object::ConfigMap(map)) = Snapshot::read_item("v1", "ConfigMap", config).unwrap()
        else {
            panic!("Alfred's ConfigMap is read");
        };
        assert_eq!(
            map.metadata.managed_fields, None,
            "nothing reads them; they are not kept"
        );
        let bad = r#"{"metadata":{"name":"p","namespace":"ns"},"spec":{"containers":"x"}}"#;
        let e = Snapshot::read_item("v1", "Pod", bad).unwrap_err();
        assert_eq!(e.object.as_deref(), Some("Pod ns/p"));
    }

    /// Changes applied in place give the snapshot a fresh read would: the demo with a pod
    /// replaced, one removed, one added and an InferenceService turned unreadable.
    #[test]
    fn changes_applied_in_place_read_as_a_fresh_snapshot() {
        let text = include_str!("../../../manifests/examples/demo-cluster.yaml");
        let before = Snapshot::parse(text).unwrap();
        let mut sorted = Snapshot::default();
        for o in before.clone().into_objects() {
            sorted.push(o);
        }
        sorted.sort_by_key();
        let pod = |name: &str| {
            let p = sorted
                .pods
                .iter()
                .find(|p| p.metadata.name == name)
                .unwrap();
            Pod::clone(p)
        };
        let first = Pod::clone(&sorted.pods[0]);
        let second = Pod::clone(&sorted.pods[1]);
        let mut moved = first.clone();
        moved.spec.node_name = "somewhere-else".into();
        let mut added = pod(&second.metadata.name);
        added.metadata.name = "zz-new".into();
        let isvc = sorted.inference_services[0].clone();
        let (ns, name) = kube_key(&*isvc);
        let (ns, name) = (ns.to_string(), name.to_string());
        let broken = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}},"spec":{{"engine":{{"minReplicas":"x"}}}}}}"#
        );
        let unreadable = Snapshot::read_item("ome.io/v1beta1", "InferenceService", &broken)
            .unwrap()
            .unwrap();
        assert!(matches!(unreadable, Object::Unreadable(_)));
        let key = |p: &Pod| {
            (
                Source::Pods,
                p.metadata.namespace.clone(),
                p.metadata.name.clone(),
            )
        };
        let mut applied = sorted.clone();
        applied.apply(vec![
            (key(&first), Some(Object::Pod(Arc::new(moved.clone())))),
            (key(&second), None),
            (key(&added), Some(Object::Pod(Arc::new(added.clone())))),
            (
                (Source::InferenceServices, ns.clone(), name.clone()),
                Some(unreadable.clone()),
            ),
        ]);
        let mut fresh = Snapshot::default();
        for o in sorted.into_objects() {
            match o {
                Object::Pod(p) if p.metadata.name == first.metadata.name => {
                    fresh.push(Object::Pod(Arc::new(moved.clone())))
                }
                Object::Pod(p) if p.metadata.name == second.metadata.name => {}
                Object::InferenceService(i) if kube_key(&*i) == (ns.as_str(), name.as_str()) => {
                    fresh.push(unreadable.clone())
                }
                o => fresh.push(o),
            }
        }
        fresh.push(Object::Pod(Arc::new(added)));
        fresh.sort_by_key();
        assert_eq!(applied.to_list(), fresh.to_list());
        assert_eq!(applied.unreadable.len(), 1);
    }
}
