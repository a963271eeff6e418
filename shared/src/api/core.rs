//! Nodes and pods as the product reads them: only the fields a policy or the scheduler
//! simulation uses, so a snapshot of 80,000 pods loads in a fraction of the time and memory the
//! full Kubernetes types take. Unknown fields are skipped; `null` reads as empty. The nested
//! scheduling types (affinity, tolerations, taints, spread constraints) are Kubernetes' own.

use k8s_openapi::api::core::v1::{Affinity, Taint, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Reads `null` (which `kubectl` prints for some empty fields) as the type's default.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A string-keyed map stored as a vector sorted by key. A pod's labels and resource lists hold a
/// handful of entries each; a B-tree would spend a mostly empty node on each of them, which at
/// 80,000 pods is hundreds of megabytes and much of the load time.
#[derive(Clone, Debug, PartialEq)]
pub struct FlatMap<V>(Vec<(String, V)>);

impl<V> Default for FlatMap<V> {
    fn default() -> Self {
        FlatMap(Vec::new())
    }
}

impl<V> FlatMap<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl<V> FromIterator<(String, V)> for FlatMap<V> {
    /// Sorted by key; of duplicate keys the last wins, as in a JSON object.
    fn from_iter<I: IntoIterator<Item = (String, V)>>(entries: I) -> Self {
        let mut entries: Vec<(String, V)> = entries.into_iter().collect();
        entries.reverse();
        entries.sort_by(|a, b| a.0.cmp(&b.0)); // stable: the last duplicate comes first
        entries.dedup_by(|later, first| later.0 == first.0);
        FlatMap(entries)
    }
}

impl<V: Serialize> Serialize for FlatMap<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for FlatMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = FlatMap<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FlatMap<V>, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(entries.into_iter().collect())
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// The metadata fields the product reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub namespace: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub uid: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub labels: FlatMap<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub annotations: FlatMap<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Timestamp>,
    /// Set while the object is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Timestamp>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub owner_references: Vec<OwnerReference>,
}

impl Meta {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// A condition of a node or pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Timestamp>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub reason: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub message: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: NodeSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: NodeStatus,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Cordoned.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub unschedulable: bool,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub taints: Vec<Taint>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub capacity: FlatMap<Quantity>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub allocatable: FlatMap<Quantity>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<Condition>,
}

impl Node {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// What the scheduler may place here: allocatable, or capacity when allocatable is absent.
    pub fn allocatable(&self) -> &FlatMap<Quantity> {
        if self.status.allocatable.is_empty() {
            &self.status.capacity
        } else {
            &self.status.allocatable
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: PodStatus,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub node_name: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub scheduler_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub init_containers: Vec<Container>,
    /// Per-pod resources the runtime class adds on top of the containers.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub overhead: FlatMap<Quantity>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub node_selector: FlatMap<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<Affinity>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tolerations: Vec<Toleration>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub volumes: Vec<Volume>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub resources: Resources,
    /// `Always` on an init container makes it a sidecar that runs alongside the app.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub restart_policy: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub limits: FlatMap<Quantity>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "FlatMap::is_empty"
    )]
    pub requests: FlatMap<Quantity>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimSource>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    pub claim_name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub phase: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<Condition>,
    /// When the kubelet started the pod (recent-placement cooldown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// The app containers' restarts and waiting states (crash loops, restart windows).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub container_statuses: Vec<ContainerStatus>,
}

/// What the kubelet reports of one container; only what rollouts read.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub restart_count: i32,
    #[serde(default, deserialize_with = "nullable")]
    pub state: ContainerState,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerWaiting>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerWaiting {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub reason: String,
}

impl Pod {
    /// The pod's phase; a pod without status is Pending.
    pub fn phase(&self) -> &str {
        match self.status.phase.as_str() {
            "" => "Pending",
            phase => phase,
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Its containers are ready (`ContainersReady`, or `Ready`, is True): what OME's counters
    /// count as a ready pod.
    pub fn containers_ready(&self) -> bool {
        ["ContainersReady", "Ready"]
            .iter()
            .any(|t| self.condition(t).is_some_and(|c| c.status == "True"))
    }

    /// A container waits in `CrashLoopBackOff`: it keeps exiting and the kubelet backs off.
    pub fn crash_looping(&self) -> bool {
        self.status.container_statuses.iter().any(|c| {
            c.state
                .waiting
                .as_ref()
                .is_some_and(|w| w.reason == "CrashLoopBackOff")
        })
    }

    /// A container has restarted since the pod started.
    pub fn restarted(&self) -> bool {
        self.status
            .container_statuses
            .iter()
            .any(|c| c.restart_count > 0)
    }
}

/// A revision of a controller's pod template (`apps/v1`); only its identity is read: which
/// revisions a component keeps and prunes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevision {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default)]
    pub revision: i64,
}

impl ControllerRevision {
    /// The owner of the given kind, if any.
    pub fn owner(&self, kind: &str) -> Option<&str> {
        self.metadata
            .owner_references
            .iter()
            .find(|o| o.kind == kind)
            .map(|o| o.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_map_sorts_keeps_the_last_duplicate_and_round_trips() {
        let map: FlatMap<String> =
            serde_json::from_str(r#"{"b": "1", "a": "2", "b": "3"}"#).unwrap();
        assert_eq!(map.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(map.get("b").map(String::as_str), Some("3"));
        assert_eq!(map.get("c"), None);
        assert_eq!(serde_json::to_string(&map).unwrap(), r#"{"a":"2","b":"3"}"#);
    }

    #[test]
    fn null_fields_read_as_empty() {
        let pod: Pod = serde_json::from_str(
            r#"{"metadata": {"name": "p", "labels": null, "creationTimestamp": null},
                "spec": {"containers": null, "nodeName": null}, "status": null}"#,
        )
        .unwrap();
        assert!(pod.metadata.labels.is_empty() && pod.spec.containers.is_empty());
        assert_eq!(pod.phase(), "Pending");
    }
}
