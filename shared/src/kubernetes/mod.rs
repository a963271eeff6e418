//! Small readers of Kubernetes' own grammars: object names and labels, resource quantities
//! (and which resources are GPUs), Go durations, label and node selectors.

pub mod duration;
pub mod names;
pub mod quantity;
pub mod selector;
