//! One rule that turns a failed call to the API server into a sentence: what was being done,
//! against which server, why, and what to try. Never a type name, a link or a cause twice;
//! errors, warnings and `migrate --watch`'s pass lines all go through it.

use std::error::Error as StdError;
use std::sync::OnceLock;
use std::time::Duration;

/// The server this process talks to and its request limit, as the client was configured.
static SERVER: OnceLock<(String, Option<Duration>)> = OnceLock::new();

pub fn remember_server(url: &str, limit: Option<Duration>) {
    let _ = SERVER.set((url.trim_end_matches('/').to_string(), limit));
}

fn server() -> &'static str {
    SERVER
        .get()
        .map_or("the API server", |(url, _)| url.as_str())
}

/// A call that failed, as a sentence: what was being done and where, then why and what to
/// try; `lasting` when another attempt cannot fix it (the credentials or a permission).
#[derive(Debug, thiserror::Error)]
#[error("{doing}: {why}")]
pub struct CallFailed {
    pub doing: String,
    pub why: String,
    pub lasting: bool,
}

/// The request took longer than `--request-timeout`.
pub fn timed_out(action: &str, limit: Duration) -> CallFailed {
    CallFailed {
        doing: format!("{action} at {}", server()),
        why: stalled(Some(limit)),
        lasting: false,
    }
}

/// `action` failed with the client's error `e`.
pub fn call_failed(action: &str, e: &kube::Error) -> CallFailed {
    let (why, lasting) = why(e);
    CallFailed {
        doing: format!("{action} at {}", server()),
        why,
        lasting,
    }
}

fn stalled(limit: Option<Duration>) -> String {
    match limit {
        Some(limit) => format!(
            "no answer within {} (--request-timeout); the API server or the network is stalled: try again, or allow longer with --request-timeout",
            seconds(limit)
        ),
        None => "the connection timed out; try again".to_string(),
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Why a call failed and what to try, and whether it lasts.
fn why(e: &kube::Error) -> (String, bool) {
    if let kube::Error::Api(status) = e {
        let message = status.message.trim_end_matches('.');
        return match status.code {
            401 => (
                "the API server does not accept these credentials (401 Unauthorized): renew them in the kubeconfig (log in again), then retry".to_string(),
                true,
            ),
            403 => (
                format!(
                    "forbidden (403): {message}; grant that permission (manifests/rbac/ has the roles Alfred needs)"
                ),
                true,
            ),
            404 => (format!("not found (404): {message}"), false),
            409 => (
                format!(
                    "conflict (409): {message}; someone else wrote it first, and the next attempt reads it again"
                ),
                false,
            ),
            429 => (
                format!("too many requests (429): {message}; the API server asks to slow down: retry shortly"),
                false,
            ),
            code if code >= 500 => (
                format!("the API server failed ({code}): {message}; retry shortly"),
                false,
            ),
            code => (format!("refused ({code} {}): {message}", status.reason), false),
        };
    }
    (transport(e), false)
}

const CLOSED: &str = "the connection closed before the answer was complete (the API server may be restarting, or something between cut it); try again";

/// Why a request found no answer: the connection refused, timed out, cut, or its TLS failed.
fn transport(e: &kube::Error) -> String {
    let limit = SERVER.get().and_then(|(_, limit)| *limit);
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(s) = source {
        if let Some(tls) = s.downcast_ref::<rustls::Error>() {
            return format!(
                "the TLS handshake failed ({}); check the kubeconfig's server address and certificate-authority data",
                without_link(&tls.to_string())
            );
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused => {
                    return "the connection was refused: is the API server running at that address, and is this the right cluster (--context, --kubeconfig)?".to_string();
                }
                TimedOut => return stalled(limit),
                UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
                    return CLOSED.to_string();
                }
                _ => {}
            }
        }
        if let Some(hyper) = s.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message() || hyper.is_closed() || hyper.is_canceled())
        {
            return CLOSED.to_string();
        }
        innermost = s.to_string();
        source = s.source();
    }
    without_link(&innermost)
}

/// A library's message without the documentation link some append (rustls points at its
/// docs).
fn without_link(text: &str) -> String {
    match text.find("https://docs.rs/") {
        Some(at) => text[..at].trim_end_matches([' ', ':']).to_string(),
        None => text.to_string(),
    }
}

/// An error as the plugin prints it: each context once, then the cause. A client error in the
/// chain becomes its sentence, and what lies below it is not repeated.
pub fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        if let Some(kube) = cause.downcast_ref::<kube::Error>() {
            // The contexts above say what was being done; this says where and why.
            let (why, _) = why(kube);
            let at = format!("at {}: {why}", server());
            if out.is_empty() {
                return at;
            }
            return format!("{out} {at}");
        }
        let text = without_link(&cause.to_string());
        // A library that prints its source in its own message would say it twice.
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        if cause.downcast_ref::<CallFailed>().is_some() {
            break; // already a whole sentence
        }
    }
    out
}

/// Alfred's configuration cannot be used: no later pass reads it differently until someone
/// fixes it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadConfiguration(pub String);

/// Another attempt cannot fix it: a bad configuration, no permission, or credentials the
/// server refuses.
pub fn lasting(e: &anyhow::Error) -> bool {
    use alfred::execute::run::{PassError, StoreError};
    e.chain().any(|cause| {
        cause.downcast_ref::<BadConfiguration>().is_some()
            || cause
                .downcast_ref::<CallFailed>()
                .is_some_and(|c| c.lasting)
            || cause
                .downcast_ref::<kube::Error>()
                .is_some_and(|k| why(k).1)
            || matches!(
                cause.downcast_ref::<PassError>(),
                Some(PassError::Store(StoreError::Call { lasting: true, .. }))
            )
    })
}
