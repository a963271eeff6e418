//! One file per command, named after it.

pub mod completion;
pub mod drain;
pub mod explain;
pub mod journal;
pub mod migrate;
pub mod pools;
pub mod recommend;
pub mod rollout;
pub mod simulate;
pub mod snapshot;
pub mod solve;
pub mod status;
pub mod version;
