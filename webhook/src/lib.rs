//! `alfred-webhook`: the admission webhook, a thin adapter over the core's rules
//! (`alfred::admission`): [`review`] answers one AdmissionReview, [`server`] serves them over
//! TLS within what [`guard`] lets connections and bodies cost, [`catalog`] watches what the
//! defaulting reads, [`lookups`] answers from it (or the API) and reads OME's defaults,
//! [`register`] writes its own webhook configurations once it can answer, [`tls`] loads and
//! reloads certificates.

pub mod catalog;
pub mod guard;
pub mod logs;
pub mod lookups;
pub mod metrics;
pub mod register;
pub mod review;
pub mod server;
pub mod tls;
pub mod view;
