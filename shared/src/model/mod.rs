//! The cluster model every policy reads: the [`cluster::Cluster`] built from a snapshot, the
//! configuration and `now`, node health, and the [`Context`] around it (each workload's
//! annotations, runtime and model access). Below the policies: the simulator, the decision
//! passes and the rollout report all read it, and it reads none of them.

pub mod access;
pub mod cluster;
pub mod context;
pub mod health;
pub mod observation;
pub mod requests;

pub use access::ModelAccess;
pub use context::{Context, WorkloadSettings};
