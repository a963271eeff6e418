//! `alfred-webhook`: the admission webhook's adapter over the core's rules
//! (`alfred::admission`). The server (axum + rustls) is being built; see the issues.

pub mod review;
