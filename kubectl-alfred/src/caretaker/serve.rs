//! What the caretaker serves (`/metrics`; `/healthz` and `/readyz`) and how it counts its
//! requests to the API server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::{self, Metrics};
use super::{CaretakerArgs, Shared};

/// Binds both listeners (so a taken port fails at start) and serves them in the background.
pub async fn start(args: &CaretakerArgs, shared: &Arc<Shared>) -> Result<()> {
    let m = Arc::clone(&shared.metrics);
    let scrape = Router::new().route(
        "/metrics",
        get(move || {
            let m = Arc::clone(&m);
            async move { ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], m.render()) }
        }),
    );
    let (live, ready) = (Arc::clone(shared), Arc::clone(shared));
    let probes = Router::new()
        .route(
            "/healthz",
            get(move || async move { answer(live.wedged()) }),
        )
        .route(
            "/readyz",
            get(move || async move { answer(ready.unready()) }),
        );
    for (address, router, what) in [
        (args.metrics_bind_address, scrape, "metrics"),
        (args.health_probe_bind_address, probes, "probes"),
    ] {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("listening for {what} on {address}"))?;
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("warning: the {what} server stopped: {e}");
            }
        });
    }
    Ok(())
}

/// 200 `ok`, or 503 with what is wrong.
fn answer(problem: Option<String>) -> impl IntoResponse {
    match problem {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// The requests of one pass, by verb in [`metrics::VERBS`] order.
#[derive(Default)]
pub struct PassRequests(pub [std::sync::atomic::AtomicU64; metrics::VERBS.len()]);

tokio::task_local! {
    /// Set around a pass: the requests made from its task count there too.
    pub static PASS_REQUESTS: Arc<PassRequests>;
}

/// A layer on the Kubernetes client that counts every request by verb and times its answer.
#[derive(Clone)]
pub struct CountRequests(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: Arc::clone(&self.0),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = metrics::verb_of(request.method(), request.uri().query());
        let metrics = Arc::clone(&self.metrics);
        let started = Instant::now();
        let answer = self.inner.call(request);
        // Polled by the caller's task (the client's buffer hands the future back), so a pass
        // counts its own requests here.
        Box::pin(async move {
            let _ = PASS_REQUESTS.try_with(|pass| {
                if let Some(i) = metrics::VERBS.iter().position(|v| *v == verb) {
                    pass.0[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
            let answered = answer.await;
            metrics.api_request(verb, started.elapsed());
            answered
        })
    }
}
