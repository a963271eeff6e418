//! A reviewed object as the rules and the defaults read it, taken straight from the review's
//! JSON: the annotations the rules name ([`reads_annotation`]) and the spec fields they read.
//! Everything else (containers, `managedFields`, `last-applied-configuration`, status) is
//! skipped unbuilt: it is most of what the API server sends, and the CRD schema checks it.
//! A rule that reads a new field must find it here; `tests/review.rs` answers every fixture
//! both ways, through this view and through the full types, and wants the same answer.

use std::collections::BTreeMap;
use std::fmt;

use alfred::admission::reads_annotation;
use alfred::api::InferenceService;
use alfred::api::component::{ComponentKind, ComponentSpec, LeaderSpec, WorkerSpec};
use alfred::api::isvc::{InferenceServiceSpec, RuntimeRef, SpecDeploymentMode};
use alfred::api::lifecycle::LifecycleSpec;
use alfred::api::replica::ParentRef;
use alfred::api::runtime::RuntimeFields;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The object of a review, by kind.
pub enum Object {
    Service {
        isvc: Box<InferenceService>,
        /// `{"spec": {<component>: {"lifecycle": ...}}}`: where defaults are filled, as sent.
        lifecycles: Value,
    },
    Runtime(RuntimeFields),
    Replica {
        component: ComponentKind,
        /// The InferenceService it belongs to (`spec.parentRef.name`).
        parent: Option<String>,
        lifecycle: Option<LifecycleSpec>,
        /// `{"spec": {"lifecycle": ...}}`, as sent.
        lifecycles: Value,
    },
}

/// Why a reviewed object does not read as its kind: the review is refused with it.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the {kind}: {}", alfred::input::cut_message(&.problem.to_string()))]
pub struct Unreadable {
    kind: String,
    problem: FieldError,
}

/// The first field of an object that does not read.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    #[error("spec is missing")]
    SpecMissing,
    #[error("spec.component is missing")]
    ComponentMissing,
    #[error("{path}: {message}")]
    Type { path: String, message: String },
    #[error("metadata.annotations[{key:?}]: {value} is not a string")]
    Annotation { key: String, value: Value },
}

/// An object as the review carries it, read in the same pass as the review: what the rules
/// read, each field still JSON (a field of the wrong type is the object's fault, refused with
/// its path by [`Sent::read`], not a malformed review), everything else skipped.
#[derive(Deserialize)]
#[serde(expecting = "an object (request.object)")]
pub struct Sent {
    #[serde(default)]
    metadata: Meta,
    /// Boxed, as are the components: serde moves each field's value through Options and
    /// returns, and unboxed the spec is over a kilobyte.
    #[serde(default)]
    spec: Option<Box<SentSpec>>,
}

/// The spec fields read, of every kind reviewed (their names do not overlap).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", expecting = "an object (the object's spec)")]
struct SentSpec {
    // InferenceService
    deployment_mode: Option<Value>,
    runtime: Option<Value>,
    engine: Option<Box<SentComponent>>,
    decoder: Option<Box<SentComponent>>,
    router: Option<Box<SentComponent>>,
    // ServingRuntime, ClusterServingRuntime
    engine_config: Option<Box<SentComponent>>,
    decoder_config: Option<Box<SentComponent>>,
    router_config: Option<Box<SentComponent>>,
    // InferenceReplica
    component: Option<Value>,
    parent_ref: Option<Value>,
    lifecycle: Option<Value>,
}

/// What the rules read of a component: the mode annotation, whether it has a leader or
/// workers, the RawDeployment strategy and the lifecycle.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    expecting = "an object (a component of the spec)"
)]
struct SentComponent {
    annotations: Option<Value>,
    leader: Option<Value>,
    worker: Option<Value>,
    deployment_strategy: Option<Value>,
    lifecycle: Option<Value>,
}

/// The stored object of an update: only its annotations are read.
#[derive(Deserialize)]
#[serde(expecting = "an object (request.oldObject)")]
pub struct Stored {
    #[serde(default)]
    metadata: Meta,
}

impl Stored {
    /// The annotations the rules read; None when one is not a string.
    pub fn annotations(&self) -> Option<BTreeMap<String, String>> {
        self.metadata.strings().ok()
    }
}

#[derive(Deserialize, Default)]
#[serde(expecting = "an object (metadata)")]
struct Meta {
    #[serde(default, deserialize_with = "read_annotations")]
    annotations: BTreeMap<String, Value>,
}

impl Meta {
    fn strings(&self) -> Result<BTreeMap<String, String>, FieldError> {
        self.annotations
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(FieldError::Annotation {
                    key: k.clone(),
                    value: other.clone(),
                }),
            })
            .collect()
    }
}

impl Sent {
    /// The object as an ome.io `kind` this webhook reviews; None for any other kind.
    pub fn read(&self, kind: &str) -> Option<Result<Object, Unreadable>> {
        let object = match kind {
            "InferenceService" => self.service(),
            "ServingRuntime" | "ClusterServingRuntime" => self.runtime().map(Object::Runtime),
            "InferenceReplica" => self.replica(),
            _ => return None,
        };
        Some(object.map_err(|problem| Unreadable {
            kind: kind.to_string(),
            problem,
        }))
    }

    fn spec(&self) -> Result<&SentSpec, FieldError> {
        self.spec.as_deref().ok_or(FieldError::SpecMissing)
    }

    fn service(&self) -> Result<Object, FieldError> {
        let sent = self.spec()?;
        let mut tree = Map::new();
        let mut component = |c: &Option<Box<SentComponent>>, kind: ComponentKind| {
            c.as_ref()
                .map(|c| {
                    let spec = c.read(format_args!("spec.{kind}"))?;
                    tree.insert(kind.as_str().to_string(), lifecycle_tree(&c.lifecycle));
                    Ok::<_, FieldError>(spec)
                })
                .transpose()
        };
        let spec = InferenceServiceSpec {
            deployment_mode: typed::<SpecDeploymentMode>(
                &sent.deployment_mode,
                "spec.deploymentMode",
            )?,
            runtime: typed::<RuntimeRef>(&sent.runtime, "spec.runtime")?,
            engine: component(&sent.engine, ComponentKind::Engine)?,
            decoder: component(&sent.decoder, ComponentKind::Decoder)?,
            router: component(&sent.router, ComponentKind::Router)?,
            ..Default::default()
        };
        let metadata = ObjectMeta {
            annotations: Some(self.metadata.strings()?),
            ..Default::default()
        };
        Ok(Object::Service {
            isvc: Box::new(InferenceService {
                metadata,
                spec,
                status: None,
            }),
            lifecycles: spec_tree(Value::Object(tree)),
        })
    }

    fn runtime(&self) -> Result<RuntimeFields, FieldError> {
        let sent = self.spec()?;
        let config = |c: &Option<Box<SentComponent>>, kind: ComponentKind| {
            c.as_ref()
                .map(|c| c.read(format_args!("spec.{kind}Config")))
                .transpose()
        };
        Ok(RuntimeFields {
            engine_config: config(&sent.engine_config, ComponentKind::Engine)?,
            decoder_config: config(&sent.decoder_config, ComponentKind::Decoder)?,
            router_config: config(&sent.router_config, ComponentKind::Router)?,
            disabled: None,
        })
    }

    fn replica(&self) -> Result<Object, FieldError> {
        let sent = self.spec()?;
        Ok(Object::Replica {
            component: typed(&sent.component, "spec.component")?
                .ok_or(FieldError::ComponentMissing)?,
            parent: typed::<ParentRef>(&sent.parent_ref, "spec.parentRef")?.map(|p| p.name),
            lifecycle: typed(&sent.lifecycle, "spec.lifecycle")?,
            lifecycles: spec_tree(lifecycle_tree(&sent.lifecycle)),
        })
    }
}

impl SentComponent {
    fn read(&self, path: fmt::Arguments) -> Result<Box<ComponentSpec>, FieldError> {
        Ok(Box::new(ComponentSpec {
            annotations: typed(&self.annotations, format_args!("{path}.annotations"))?
                .unwrap_or_default(),
            leader: typed::<LeaderSpec>(&self.leader, format_args!("{path}.leader"))?.map(Box::new),
            worker: typed::<WorkerSpec>(&self.worker, format_args!("{path}.worker"))?.map(Box::new),
            deployment_strategy: self.deployment_strategy.clone(),
            lifecycle: typed(&self.lifecycle, format_args!("{path}.lifecycle"))?,
            ..Default::default()
        }))
    }
}

/// A field read as its type; Err names it (the path is formatted only then).
fn typed<T: DeserializeOwned>(
    value: &Option<Value>,
    path: impl fmt::Display,
) -> Result<Option<T>, FieldError> {
    value
        .as_ref()
        .map(|v| {
            T::deserialize(v).map_err(|e| FieldError::Type {
                path: path.to_string(),
                message: alfred::input::cut_message(&e.to_string()),
            })
        })
        .transpose()
}

/// `{"lifecycle": value}`, or `{}` without one.
fn lifecycle_tree(value: &Option<Value>) -> Value {
    Value::Object(
        value
            .iter()
            .map(|v| ("lifecycle".to_string(), v.clone()))
            .collect(),
    )
}

fn spec_tree(spec: Value) -> Value {
    Value::Object(Map::from_iter([("spec".to_string(), spec)]))
}

/// Reads `metadata.annotations` (null reads as none), keeping only those the rules read; the
/// others are skipped without being copied (`last-applied-configuration` alone repeats the
/// whole object).
fn read_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Value>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = BTreeMap<String, Value>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(Key(key)) = map.next_key()? {
                match key {
                    Some(key) => {
                        kept.insert(key, map.next_value()?);
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_option(Annotations)
}

/// An annotation key, copied only when the rules read it.
struct Key(Option<String>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an annotation key")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(Key(reads_annotation(key).then(|| key.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}
