//! A snapshot taken apart into its objects and put together again: what a cache of the
//! cluster keeps between reads (one object per key, replaced as the API server reports
//! changes), read through the same loader as every snapshot.

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};

use super::{ItemType, Snapshot, SnapshotError, UnreadableObject};
use crate::api::core::{ControllerRevision, Node, Pod};
use crate::api::{
    BaseModel, ClusterBaseModel, ClusterServingRuntime, InferenceReplica, InferenceService,
    ServingRuntime,
};

/// One object a snapshot holds, of any kind it reads. The kinds larger than a pod are boxed:
/// a cache holds one of these per object, and a persistent volume inline is 3.4 KB.
#[derive(Clone, Debug)]
pub enum Object {
    Node(Node),
    Pod(Pod),
    InferenceService(Box<InferenceService>),
    ServingRuntime(ServingRuntime),
    ClusterServingRuntime(ClusterServingRuntime),
    InferenceReplica(Box<InferenceReplica>),
    BaseModel(BaseModel),
    ClusterBaseModel(ClusterBaseModel),
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    PersistentVolume(Box<PersistentVolume>),
    ConfigMap(ConfigMap),
    ControllerRevision(ControllerRevision),
    Unreadable(UnreadableObject),
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
            .chain(
                inference_services
                    .into_iter()
                    .map(|o| Object::InferenceService(Box::new(o))),
            )
            .chain(serving_runtimes.into_iter().map(Object::ServingRuntime))
            .chain(
                cluster_serving_runtimes
                    .into_iter()
                    .map(Object::ClusterServingRuntime),
            )
            .chain(
                inference_replicas
                    .into_iter()
                    .map(|o| Object::InferenceReplica(Box::new(o))),
            )
            .chain(base_models.into_iter().map(Object::BaseModel))
            .chain(
                cluster_base_models
                    .into_iter()
                    .map(Object::ClusterBaseModel),
            )
            .chain(
                persistent_volume_claims
                    .into_iter()
                    .map(|o| Object::PersistentVolumeClaim(Box::new(o))),
            )
            .chain(
                persistent_volumes
                    .into_iter()
                    .map(|o| Object::PersistentVolume(Box::new(o))),
            )
            .chain(config_maps.into_iter().map(Object::ConfigMap))
            .chain(
                controller_revisions
                    .into_iter()
                    .map(Object::ControllerRevision),
            )
            .chain(unreadable.into_iter().map(Object::Unreadable))
    }

    /// Adds one object after the others of its kind.
    pub fn push(&mut self, object: Object) {
        match object {
            Object::Node(o) => self.nodes.push(o),
            Object::Pod(o) => self.pods.push(o),
            Object::InferenceService(o) => self.inference_services.push(*o),
            Object::ServingRuntime(o) => self.serving_runtimes.push(o),
            Object::ClusterServingRuntime(o) => self.cluster_serving_runtimes.push(o),
            Object::InferenceReplica(o) => self.inference_replicas.push(*o),
            Object::BaseModel(o) => self.base_models.push(o),
            Object::ClusterBaseModel(o) => self.cluster_base_models.push(o),
            Object::PersistentVolumeClaim(o) => self.persistent_volume_claims.push(*o),
            Object::PersistentVolume(o) => self.persistent_volumes.push(*o),
            Object::ConfigMap(o) => self.config_maps.push(o),
            Object::ControllerRevision(o) => self.controller_revisions.push(o),
            Object::Unreadable(o) => self.unreadable.push(o),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_no_larger_than_a_pod_and_its_tag() {
        assert!(std::mem::size_of::<Object>() <= std::mem::size_of::<Pod>() + 8);
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
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
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
}
