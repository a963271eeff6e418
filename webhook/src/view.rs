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
use alfred::api::runtime::RuntimeFields;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, de::DeserializeOwned};
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

/// Reads an object of an ome.io `kind` this webhook reviews; None for any other kind.
pub fn read(kind: &str, json: &str) -> Option<Result<Object, String>> {
    let object = match kind {
        "InferenceService" => parse::<ServiceSpec>(json).and_then(|o| o.into_object()),
        "ServingRuntime" | "ClusterServingRuntime" => {
            parse::<RuntimeSpec>(json).and_then(|o| o.spec.into_fields().map(Object::Runtime))
        }
        "InferenceReplica" => parse::<ReplicaSpec>(json).and_then(|o| o.into_object()),
        _ => return None,
    };
    Some(object.map_err(|e| format!("cannot read the {kind}: {e}")))
}

/// The annotations the rules read of an object (an update's stored one).
pub fn annotations(json: &str) -> Result<BTreeMap<String, String>, String> {
    #[derive(Deserialize)]
    struct Annotated {
        #[serde(default)]
        metadata: Meta,
    }
    serde_json::from_str::<Annotated>(json)
        .map(|a| a.metadata.annotations)
        .map_err(|e| e.to_string())
}

fn parse<S: DeserializeOwned>(json: &str) -> Result<Read<S>, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}

#[derive(Deserialize)]
#[serde(bound = "S: DeserializeOwned")]
struct Read<S> {
    #[serde(default)]
    metadata: Meta,
    spec: S,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default, deserialize_with = "read_annotations")]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceSpec {
    #[serde(default)]
    deployment_mode: Option<SpecDeploymentMode>,
    #[serde(default)]
    runtime: Option<RuntimeRef>,
    #[serde(default)]
    engine: Option<Component>,
    #[serde(default)]
    decoder: Option<Component>,
    #[serde(default)]
    router: Option<Component>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeSpec {
    #[serde(default)]
    engine_config: Option<Component>,
    #[serde(default)]
    decoder_config: Option<Component>,
    #[serde(default)]
    router_config: Option<Component>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaSpec {
    component: ComponentKind,
    #[serde(default)]
    parent_ref: Option<ParentRef>,
    #[serde(default)]
    lifecycle: Option<Value>,
}

#[derive(Deserialize)]
struct ParentRef {
    name: String,
}

/// What the rules read of a component: the mode annotation, whether it has a leader or
/// workers, the RawDeployment strategy and the lifecycle.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Component {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    leader: Option<Box<LeaderSpec>>,
    #[serde(default)]
    worker: Option<Box<WorkerSpec>>,
    #[serde(default)]
    deployment_strategy: Option<Value>,
    #[serde(default)]
    lifecycle: Option<Value>,
}

fn lifecycle(value: Option<&Value>, path: &str) -> Result<Option<LifecycleSpec>, String> {
    value
        .map(|v| LifecycleSpec::deserialize(v).map_err(|e| format!("{path}.lifecycle: {e}")))
        .transpose()
}

/// `{"lifecycle": value}`, or `{}` without one.
fn lifecycle_tree(value: Option<Value>) -> Value {
    Value::Object(
        value
            .map(|v| ("lifecycle".to_string(), v))
            .into_iter()
            .collect(),
    )
}

impl Component {
    /// The component as the core's type, with what the defaults fill beside it.
    fn into_spec(self, path: &str) -> Result<(Box<ComponentSpec>, Value), String> {
        let spec = ComponentSpec {
            annotations: self.annotations,
            leader: self.leader,
            worker: self.worker,
            deployment_strategy: self.deployment_strategy,
            lifecycle: lifecycle(self.lifecycle.as_ref(), path)?,
            ..Default::default()
        };
        Ok((Box::new(spec), lifecycle_tree(self.lifecycle)))
    }
}

impl Read<ServiceSpec> {
    fn into_object(self) -> Result<Object, String> {
        let ServiceSpec {
            deployment_mode,
            runtime,
            engine,
            decoder,
            router,
        } = self.spec;
        let mut tree = Map::new();
        let mut component = |c: Option<Component>, kind: ComponentKind| {
            c.map(|c| {
                let (spec, lifecycles) = c.into_spec(&format!("spec.{kind}"))?;
                tree.insert(kind.as_str().to_string(), lifecycles);
                Ok::<_, String>(spec)
            })
            .transpose()
        };
        let spec = InferenceServiceSpec {
            deployment_mode,
            runtime,
            engine: component(engine, ComponentKind::Engine)?,
            decoder: component(decoder, ComponentKind::Decoder)?,
            router: component(router, ComponentKind::Router)?,
            ..Default::default()
        };
        let metadata = ObjectMeta {
            annotations: Some(self.metadata.annotations),
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
}

impl RuntimeSpec {
    fn into_fields(self) -> Result<RuntimeFields, String> {
        let config = |c: Option<Component>, kind: ComponentKind| {
            c.map(|c| {
                c.into_spec(&format!("spec.{kind}Config"))
                    .map(|(spec, _)| spec)
            })
            .transpose()
        };
        Ok(RuntimeFields {
            engine_config: config(self.engine_config, ComponentKind::Engine)?,
            decoder_config: config(self.decoder_config, ComponentKind::Decoder)?,
            router_config: config(self.router_config, ComponentKind::Router)?,
            disabled: None,
        })
    }
}

impl Read<ReplicaSpec> {
    fn into_object(self) -> Result<Object, String> {
        let spec = self.spec;
        Ok(Object::Replica {
            component: spec.component,
            parent: spec.parent_ref.map(|p| p.name),
            lifecycle: lifecycle(spec.lifecycle.as_ref(), "spec")?,
            lifecycles: spec_tree(lifecycle_tree(spec.lifecycle)),
        })
    }
}

fn spec_tree(spec: Value) -> Value {
    Value::Object(Map::from_iter([("spec".to_string(), spec)]))
}

/// Reads `metadata.annotations` (null reads as none), keeping only those the rules read; the
/// others are skipped without being copied (`last-applied-configuration` alone repeats the
/// whole object).
fn read_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = BTreeMap<String, String>;
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
