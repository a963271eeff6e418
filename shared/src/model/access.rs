//! Where a component's model lets its pods run (alfred-reference.md §5 "Model location"): on
//! the nodes where OME's model agent reports the model `Ready`, where a model volume's node
//! affinity allows, nowhere new when a ReadWriteOnce claim pins it, or unknown.

use k8s_openapi::api::core::v1::NodeSelector;

use crate::api::model::{ModelStorage, cluster_model_label, namespaced_model_label};
use crate::kubernetes::selector;
use crate::model::cluster::{Cluster, Component, NodeView};
use crate::snapshot::Snapshot;

#[derive(Clone, Debug, PartialEq)]
pub enum ModelAccess {
    /// Nodes whose label `key` is `Ready`.
    NodesLabelled { key: String },
    /// A shared volume: where its PersistentVolume's node affinity allows (None: anywhere).
    Volume {
        claim: String,
        node_affinity: Option<NodeSelector>,
    },
    /// A ReadWriteOnce or ReadWriteOncePod claim: the workload cannot move (`VolumePinned`).
    Pinned { claim: String, access_mode: String },
    /// The model reference resolves to no object or volume (`ModelUnresolved`).
    Unresolved(String),
    /// The component runs no model of its own (a router).
    NotNeeded,
}

impl ModelAccess {
    /// May the component's new pods run on this node?
    pub fn allows(&self, node: &NodeView<'_>) -> bool {
        match self {
            Self::NodesLabelled { key } => node.label(key) == Some("Ready"),
            Self::Volume { node_affinity, .. } => node_affinity
                .as_ref()
                .is_none_or(|s| selector::matches(s, node.node)),
            Self::NotNeeded => true,
            Self::Pinned { .. } | Self::Unresolved(_) => false,
        }
    }

    /// Where the model is, for explanations.
    pub fn describe(&self) -> String {
        match self {
            Self::NodesLabelled { key } => format!("on nodes labelled {key}=Ready"),
            Self::Volume {
                claim,
                node_affinity: None,
            } => format!("on volume claim {claim}, reachable from every node"),
            Self::Volume { claim, .. } => {
                format!(
                    "on volume claim {claim}, reachable where its volume's node affinity allows"
                )
            }
            Self::Pinned { claim, access_mode } => {
                format!(
                    "on volume claim {claim} ({access_mode}), which only its current node can mount"
                )
            }
            Self::Unresolved(why) => why.clone(),
            Self::NotNeeded => "no model of its own (router)".into(),
        }
    }
}

pub fn resolve(
    cluster: &Cluster<'_>,
    snapshot: &Snapshot,
    component: &Component<'_>,
) -> ModelAccess {
    let w = &cluster.workloads[component.workload];
    if component.kind == crate::api::component::ComponentKind::Router {
        return ModelAccess::NotNeeded;
    }
    let Some(model) = &w.isvc.spec.model else {
        return ModelAccess::Unresolved(format!("{} names no model (spec.model)", w.key));
    };
    // As OME's controller: a BaseModel in the namespace, else the ClusterBaseModel, whatever
    // the reference's `kind` says.
    let namespaced = snapshot.base_models.iter().find(|m| {
        m.metadata.name.as_deref() == Some(model.name.as_str())
            && m.metadata.namespace.as_deref().unwrap_or("default") == w.namespace
    });
    let storage: Option<&ModelStorage> = match namespaced {
        Some(m) => Some(&m.spec.fields),
        None => snapshot
            .cluster_base_models
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(model.name.as_str()))
            .map(|m| &m.spec.fields),
    }
    .map(|fields| fields.storage.as_ref().unwrap_or(&EMPTY_STORAGE));
    let namespaced = namespaced.is_some();
    let Some(storage) = storage else {
        return ModelAccess::Unresolved(format!(
            "neither BaseModel {}/{} nor ClusterBaseModel {} is in the cluster",
            w.namespace, model.name, model.name
        ));
    };
    let Some(claim) = storage.pvc_claim() else {
        let key = if namespaced {
            namespaced_model_label(w.namespace, &model.name)
        } else {
            cluster_model_label(&model.name)
        };
        return ModelAccess::NodesLabelled { key };
    };
    let Some(pvc) = snapshot.claim(w.namespace, claim) else {
        return ModelAccess::Unresolved(format!(
            "the model's volume claim {}/{claim} is not in the cluster",
            w.namespace
        ));
    };
    let spec = pvc.spec.as_ref();
    let modes = spec
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    if let Some(mode) = modes
        .iter()
        .find(|m| *m == "ReadWriteOnce" || *m == "ReadWriteOncePod")
    {
        return ModelAccess::Pinned {
            claim: format!("{}/{claim}", w.namespace),
            access_mode: mode.clone(),
        };
    }
    let volume = spec.and_then(|s| s.volume_name.as_deref());
    let pv = volume.and_then(|v| snapshot.volume(v));
    match (volume, pv) {
        (Some(_), Some(pv)) => ModelAccess::Volume {
            claim: format!("{}/{claim}", w.namespace),
            node_affinity: pv
                .spec
                .as_ref()
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.clone()),
        },
        (Some(v), None) => ModelAccess::Unresolved(format!(
            "the model's claim {}/{claim} is bound to volume {v}, which is not in the cluster",
            w.namespace
        )),
        (None, _) => ModelAccess::Unresolved(format!(
            "the model's claim {}/{claim} is not bound to a volume",
            w.namespace
        )),
    }
}

static EMPTY_STORAGE: ModelStorage = ModelStorage {
    storage_uri: None,
    path: None,
    node_selector: std::collections::BTreeMap::new(),
};
