//! The pure core of kubectl-alfred: no client, no clock, no I/O. Time comes in as a value,
//! the world as a [`snapshot::Snapshot`].

pub mod admission;
pub mod annotations;
pub mod api;
pub mod config;
pub mod decision;
pub mod execute;
pub mod input;
pub mod kubernetes;
pub mod migration;
pub mod mode;
pub mod model;
pub mod pools;
pub mod reasons;
pub mod rollout;
pub mod simulate;
pub mod snapshot;
pub mod solver;
pub mod vocabulary;
