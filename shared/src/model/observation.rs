//! Whether an OMENative component can be observed (alfred-reference.md §4: "IR missing or status
//! not fresh or observation invalid ⇒ OMENativeObservationInvalid"; omenative-reference.md
//! §1.7a). Instances exist only through exactly one readable, current InferenceReplica: when
//! it is missing, duplicated, stale or its rows cannot be read, no Instance is built, from its
//! rows or from pod labels. Alfred refuses to guess; every command reads this one rule.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use crate::api::InferenceReplica;
use crate::api::columnar::RowsError;
use crate::api::component::ComponentKind;
use crate::api::replica::InstanceStatus;
use crate::snapshot::{Snapshot, UnreadableKind, UnreadableObject};

/// Why a component's Instances cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unobservable {
    #[error(
        "the cluster serves no InferenceReplica (an OME release before OMENative), so no OMENative component can be observed"
    )]
    Unserved,
    #[error(
        "no InferenceReplica serves it (none in {namespace} has spec.parentRef.name {isvc} and spec.component {kind})"
    )]
    Missing {
        namespace: String,
        isvc: String,
        kind: ComponentKind,
    },
    #[error(
        "{} InferenceReplicas claim it ({}); OME keeps one per component, so which one is current cannot be told",
        .0.len(), .0.join(", ")
    )]
    Duplicated(Vec<String>),
    #[error("InferenceReplica {replica} cannot be read: {problem}")]
    Unreadable { replica: String, problem: String },
    #[error("InferenceReplica {0} has no status yet")]
    NoStatus(String),
    #[error(
        "InferenceReplica {replica} status is stale (status.observedGeneration {observed} < metadata.generation {generation}): OME has not yet observed its latest spec"
    )]
    Stale {
        replica: String,
        observed: i64,
        generation: i64,
    },
    #[error("InferenceReplica {replica} rows cannot be read: {error}")]
    RowsUnreadable { replica: String, error: RowsError },
}

/// A component's InferenceReplica as observed: the replica and its rows, or why there is no
/// trustworthy observation (with the replica when one exists, as a stale one does).
pub struct Observed<'s> {
    pub replica: Option<&'s InferenceReplica>,
    pub rows: Result<Vec<Cow<'s, InstanceStatus>>, Unobservable>,
}

/// An InferenceReplica as the snapshot holds it: typed, or kept unreadable.
#[derive(Clone, Copy)]
pub(crate) enum Held<'s> {
    Readable(&'s InferenceReplica),
    Unreadable(&'s UnreadableObject),
}

impl<'s> Held<'s> {
    pub(crate) fn name(self) -> &'s str {
        match self {
            Held::Readable(r) => r.metadata.name.as_deref().unwrap_or_default(),
            Held::Unreadable(u) => &u.name,
        }
    }

    /// `spec.parentRef.name` and `spec.component`, as far as they can be read.
    pub(crate) fn claims(self) -> (Option<&'s str>, Option<ComponentKind>) {
        match self {
            Held::Readable(r) => (
                r.spec.parent_ref.as_ref().map(|p| p.name.as_str()),
                Some(r.spec.component),
            ),
            Held::Unreadable(u) => (u.parent.as_deref(), u.component),
        }
    }
}

/// Every InferenceReplica by the component it claims: by `spec.parentRef` and component, or,
/// without a parentRef, by OME's projected name `{isvc}-{component}`.
pub struct ReplicaIndex<'s> {
    claims: HashMap<(&'s str, &'s str, ComponentKind), BTreeMap<&'s str, Held<'s>>>,
    unserved: bool,
}

impl<'s> ReplicaIndex<'s> {
    pub fn new(snapshot: &'s Snapshot) -> Self {
        let mut claims: HashMap<_, BTreeMap<&str, Held>> = HashMap::new();
        for (namespace, h) in held_replicas(snapshot) {
            let (parent, component) = h.claims();
            let Some(kind) = component else { continue };
            let projected = || h.name().strip_suffix(kind.as_str())?.strip_suffix('-');
            let Some(parent) = parent.or_else(projected) else {
                continue;
            };
            claims
                .entry((namespace, parent, kind))
                .or_default()
                .insert(h.name(), h);
        }
        ReplicaIndex {
            claims,
            unserved: snapshot.replicas_unserved(),
        }
    }

    /// The one InferenceReplica of a component and its rows, or why there is none to trust.
    pub fn observe(&self, namespace: &str, isvc: &str, kind: ComponentKind) -> Observed<'s> {
        let unobserved = |why| Observed {
            replica: None,
            rows: Err(why),
        };
        if self.unserved {
            return unobserved(Unobservable::Unserved);
        }
        let held = self.claims.get(&(namespace, isvc, kind));
        let replica = match held.map(|h| (h.len(), h.values().next())) {
            Some((1, Some(Held::Readable(r)))) => *r,
            Some((1, Some(Held::Unreadable(u)))) => {
                return unobserved(Unobservable::Unreadable {
                    replica: u.name.clone(),
                    problem: u.problem(),
                });
            }
            Some((n, _)) if n > 1 => {
                let names = held
                    .into_iter()
                    .flat_map(|h| h.keys())
                    .map(|n| n.to_string());
                return unobserved(Unobservable::Duplicated(names.collect()));
            }
            _ => {
                return unobserved(Unobservable::Missing {
                    namespace: namespace.to_string(),
                    isvc: isvc.to_string(),
                    kind,
                });
            }
        };
        Observed {
            replica: Some(replica),
            rows: rows_of(replica),
        }
    }
}

/// Every InferenceReplica the snapshot holds, readable or not, with its namespace.
pub(crate) fn held_replicas(snapshot: &Snapshot) -> impl Iterator<Item = (&str, Held<'_>)> {
    let readable = snapshot.inference_replicas.iter().map(|r| {
        let namespace = r.metadata.namespace.as_deref().unwrap_or("default");
        (namespace, Held::Readable(r))
    });
    let unreadable = snapshot
        .unreadable
        .iter()
        .filter(|u| u.kind == UnreadableKind::InferenceReplica)
        .map(|u| (u.namespace.as_str(), Held::Unreadable(u)));
    readable.chain(unreadable)
}

/// The rows of a current status, or why the status is not to be trusted.
fn rows_of(replica: &InferenceReplica) -> Result<Vec<Cow<'_, InstanceStatus>>, Unobservable> {
    let name = || replica.metadata.name.clone().unwrap_or_default();
    let status = replica
        .status
        .as_ref()
        .ok_or_else(|| Unobservable::NoStatus(name()))?;
    let observed = status.observed_generation.unwrap_or(0);
    let generation = replica.metadata.generation.unwrap_or(0);
    if observed < generation {
        return Err(Unobservable::Stale {
            replica: name(),
            observed,
            generation,
        });
    }
    match status.rows() {
        Ok(Cow::Borrowed(rows)) => Ok(rows.iter().map(Cow::Borrowed).collect()),
        Ok(Cow::Owned(rows)) => Ok(rows.into_iter().map(Cow::Owned).collect()),
        Err(error) => Err(Unobservable::RowsUnreadable {
            replica: name(),
            error,
        }),
    }
}
