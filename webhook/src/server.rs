//! The HTTP layer: `/validate` and `/mutate` over TLS, `/healthz`, `/readyz` and `/metrics`
//! on a plain port of their own (kubelet and Prometheus need no certificate), one log line
//! per refused, patched or failed review with the request's uid.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use hyper_util::rt::TokioTimer;

use crate::guard::{BodyBudget, GuardedAcceptor, Limits, MAX_HEADER_BYTES, read_body};
use crate::lookups::{ApiRuntimes, SharedDefaults};
use crate::metrics::{Event, Metrics};
use crate::review::{Context, Hook, ReviewOutcome, answer, parse};

pub struct AppState {
    pub defaults: SharedDefaults,
    pub default_inference_services: bool,
    /// None when running without a cluster: every runtime lookup finds none.
    pub runtimes: Option<ApiRuntimes>,
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: readiness goes off so endpoints drop this pod before it closes.
    pub shutting_down: AtomicBool,
    /// When a readiness probe was first answered ready (the kubelet's, in a cluster).
    pub first_ready: std::sync::OnceLock<Instant>,
}

/// The admission routes' state: the app's, and what a review body may cost.
struct Admission {
    app: Arc<AppState>,
    limits: Limits,
    budget: BodyBudget,
}

/// The admission routes, reading bodies within `limits`.
pub fn admission(state: Arc<AppState>, limits: Limits) -> Router {
    let admission = Arc::new(Admission {
        app: state,
        budget: BodyBudget::new(&limits),
        limits,
    });
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .with_state(admission)
}

/// The probe and metrics routes.
pub fn probes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn validate(State(admission): State<Arc<Admission>>, request: Request) -> Response {
    receive(&admission, Hook::Validate, request).await
}

async fn mutate(State(admission): State<Arc<Admission>>, request: Request) -> Response {
    receive(&admission, Hook::Mutate, request).await
}

/// Reads the body within the limits, then answers the review.
async fn receive(admission: &Admission, hook: Hook, request: Request) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = read_body(
        request.into_body(),
        declared,
        &admission.limits,
        &admission.budget,
    )
    .await;
    match body {
        Ok(body) => handle(&admission.app, hook, &body).await,
        Err((status, message)) => {
            admission.app.metrics.event(Event::BodyRefused);
            tracing::warn!(hook = hook.as_str(), status = status.as_u16(), error = %message, "review body refused");
            (status, message).into_response()
        }
    }
}

async fn handle(state: &AppState, hook: Hook, body: &[u8]) -> Response {
    let started = Instant::now();
    let parsed = match parse(body) {
        Ok(p) => p,
        Err(e) => {
            state.metrics.event(Event::BadRequest);
            tracing::warn!(hook = hook.as_str(), error = %e, "review refused: not an AdmissionReview v1");
            return (StatusCode::BAD_REQUEST, e.to_string()).into_response();
        }
    };
    let defaults = state.defaults.load_full();
    let ctx = Context {
        defaults: defaults.as_deref(),
        default_inference_services: state.default_inference_services,
    };
    let found = match (parsed.lookup(hook, &ctx), &state.runtimes) {
        (Some(lookup), Some(runtimes)) => runtimes.find(&lookup, &state.metrics).await,
        _ => Ok(None),
    };
    let answer = answer(&parsed, hook, &ctx, found);
    let took = started.elapsed();
    state
        .metrics
        .review(hook, parsed.kind(), answer.outcome, took);
    // Refusals and written defaults are worth a line each; plain allows (with or without
    // warnings, which the user sees anyway) only at debug.
    if answer.outcome != ReviewOutcome::Allowed {
        tracing::info!(
            uid = parsed.uid(),
            hook = hook.as_str(),
            operation = parsed.operation(),
            kind = parsed.kind(),
            namespace = parsed.namespace(),
            name = parsed.name(),
            outcome = answer.outcome.as_str(),
            detail = answer.message.as_deref().unwrap_or(""),
            micros = took.as_micros() as u64,
            "review"
        );
    } else {
        tracing::debug!(
            uid = parsed.uid(),
            hook = hook.as_str(),
            kind = parsed.kind(),
            namespace = parsed.namespace(),
            name = parsed.name(),
            detail = answer.message.as_deref().unwrap_or(""),
            micros = took.as_micros() as u64,
            "review allowed"
        );
    }
    ([(header::CONTENT_TYPE, "application/json")], answer.body).into_response()
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response()
    } else if state.defaults.load().is_none() {
        // Without them the webhook could only admit replicas unpatched.
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "OME's operator defaults are not read yet (see the log)",
        )
            .into_response()
    } else {
        state.first_ready.get_or_init(Instant::now);
        "ok".into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// The two listening sockets, bound before serving so a caller (a test) can learn the ports.
pub struct Listeners {
    pub admission: std::net::TcpListener,
    pub probes: std::net::TcpListener,
}

impl Listeners {
    pub fn bind(admission: SocketAddr, probes: SocketAddr) -> std::io::Result<Listeners> {
        let bind = |addr| {
            let l = std::net::TcpListener::bind(addr)?;
            l.set_nonblocking(true)?;
            Ok::<_, std::io::Error>(l)
        };
        Ok(Listeners {
            admission: bind(admission)?,
            probes: bind(probes)?,
        })
    }
}

/// How shutdown goes: stop reporting ready, wait `drain_delay` for endpoints to drop this
/// pod, then let requests in flight finish within `grace`.
#[derive(Clone, Copy, Debug)]
pub struct Shutdown {
    pub drain_delay: Duration,
    pub grace: Duration,
}

/// Serves until `stop` resolves, then shuts down gracefully.
pub async fn serve(
    state: Arc<AppState>,
    tls: RustlsConfig,
    listeners: Listeners,
    limits: Limits,
    shutdown: Shutdown,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle: Handle<SocketAddr> = Handle::new();
    let probe_handle: Handle<SocketAddr> = Handle::new();
    let app = admission(state.clone(), limits);
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(limits.header_timeout)
        .acceptor(GuardedAcceptor::new(&limits));
    let mut server = axum_server::from_tcp(listeners.admission)?
        .acceptor(acceptor)
        .handle(handle.clone());
    // Headers: a deadline, and a size the API server never comes near (431 past it).
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    server
        .http_builder()
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(32);
    let server = server
        .accept_error_handler(|_, e| tracing::warn!(error = %e, "connection not accepted"))
        .serve(app.into_make_service());
    let probe_server = axum_server::from_tcp(listeners.probes)?
        .handle(probe_handle.clone())
        .serve(probes(state.clone()).into_make_service());
    let stopper = {
        let state = state.clone();
        async move {
            stop.await;
            state.shutting_down.store(true, Ordering::Relaxed);
            tracing::info!(?shutdown, "shutting down: readiness off");
            tokio::time::sleep(shutdown.drain_delay).await;
            handle.graceful_shutdown(Some(shutdown.grace));
            probe_handle.graceful_shutdown(Some(Duration::from_secs(1)));
        }
    };
    tokio::spawn(stopper);
    let (a, b) = tokio::join!(server, probe_server);
    a.and(b)
}
