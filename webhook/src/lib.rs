//! `alfred-webhook`: the admission webhook, a thin adapter over the core's rules
//! (`alfred::admission`): [`review`] answers one AdmissionReview, [`server`] serves them over
//! TLS, [`cluster`] reads runtimes and OME's defaults, [`tls`] loads and reloads certificates.

pub mod cluster;
pub mod guard;
pub mod logs;
pub mod metrics;
pub mod review;
pub mod server;
pub mod tls;
pub mod view;
