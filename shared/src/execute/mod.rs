//! Execute mode (alfred-policies.md "The arbiter", "Safety bounds"; alfred-reference.md §3.2,
//! §3.3, §5): the arbiter, the dispatch journal and its reconciliation, the circuit breaker,
//! and the dispatcher's decisions. Pure, like the rest of the core: the plugin reads and
//! writes the cluster, these modules decide.

pub mod arbiter;
pub mod breaker;
pub mod cordon;
pub mod dispatch;
pub mod events;
pub mod guard;
pub mod hold;
pub mod journal;
pub mod recheck;
pub mod reconcile;
pub mod run;
