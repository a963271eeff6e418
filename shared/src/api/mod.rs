//! OME v1.3 API types (group `ome.io`, version `v1beta1`) and the well-known keys.

pub mod columnar;
pub mod component;
pub mod core;
pub mod crds;
pub mod isvc;
pub mod keys;
pub mod lifecycle;
pub mod model;
pub mod replica;
pub mod runtime;
mod schema;

pub use component::{ComponentKind, ComponentSpec, PodParts, Runner, RunnerName};
pub use isvc::{InferenceService, InferenceServiceSpec, InferenceServiceStatus};
pub use lifecycle::{LifecycleSpec, RollingUpdate, UpdateStrategy, UpdateStrategyType};
pub use model::{BaseModel, ClusterBaseModel};
pub use replica::{InferenceReplica, InferenceReplicaSpec, InferenceReplicaStatus};
pub use runtime::{ClusterServingRuntime, ServingRuntime};
