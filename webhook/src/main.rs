//! `alfred-webhook`: serves `/validate` and `/mutate` for OME's InferenceServices, runtimes and
//! InferenceReplicas over TLS; probes and metrics on a plain port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use alfred_webhook::catalog::Catalog;
use alfred_webhook::guard::Limits;
use alfred_webhook::lookups::{ApiRuntimes, DefaultsSource, SharedDefaults};
use alfred_webhook::metrics::Metrics;
use alfred_webhook::register::Registration;
use alfred_webhook::server::{AppState, Listeners, Shutdown, serve};
use alfred_webhook::tls::CertFiles;
use anyhow::{Context as _, Result, bail};
use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "alfred-webhook", version, about)]
struct Args {
    /// Address for /validate and /mutate (HTTPS).
    #[arg(long, env = "ALFRED_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    addr: SocketAddr,
    /// Address for /healthz, /readyz and /metrics (plain HTTP).
    #[arg(
        long,
        env = "ALFRED_WEBHOOK_PROBE_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    probe_addr: SocketAddr,
    /// Serving certificate chain (PEM); reloaded when it changes.
    #[arg(long, default_value = "/tls/tls.crt")]
    tls_cert: PathBuf,
    /// Serving private key (PEM).
    #[arg(long, default_value = "/tls/tls.key")]
    tls_key: PathBuf,
    /// How often to look for a rotated certificate.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    tls_reload_interval: Duration,
    /// OME's operator defaults from a ConfigMap manifest file instead of the cluster.
    #[arg(long, conflicts_with = "operator_config_map")]
    operator_defaults: Option<PathBuf>,
    /// OME's `inferenceservice-config` ConfigMap, as NAMESPACE/NAME.
    #[arg(long, default_value = "ome/inferenceservice-config")]
    operator_config_map: String,
    /// How often to re-read --operator-defaults (the ConfigMap is watched).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    defaults_refresh_interval: Duration,
    /// Also fill update-strategy defaults into InferenceServices (off: GitOps tools would
    /// report the written defaults as drift).
    #[arg(long)]
    default_inference_services: bool,
    /// How long a runtime read from the API (one no watch has shown yet) is reused.
    #[arg(long, default_value = "30s", value_parser = go_duration)]
    runtime_cache_ttl: Duration,
    /// Time allowed for one API read during a review (the API server's own webhook timeout
    /// must be longer).
    #[arg(long, default_value = "2s", value_parser = positive_duration)]
    api_timeout: Duration,
    /// Register the webhook configurations of this manifest once serving and probed ready
    /// (applied server-side, re-applied every --register-interval), so a failed or
    /// unfinished install never leaves a fail-closed configuration behind.
    #[arg(long, conflicts_with = "standalone")]
    register: Option<PathBuf>,
    /// The serving CA (PEM) for every registered webhook without a caBundle.
    #[arg(long, requires = "register")]
    ca_bundle_file: Option<PathBuf>,
    /// The ClusterRole that owns the registered configurations: deleting it (uninstalling)
    /// deletes them.
    #[arg(long, requires = "register")]
    owner_cluster_role: Option<String>,
    /// After the first ready probe, how long to wait before registering, so the Service's
    /// endpoints list this pod before the API server calls it.
    #[arg(long, default_value = "5s", value_parser = go_duration)]
    register_delay: Duration,
    /// How often the registered configurations are re-applied.
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    register_interval: Duration,
    /// Run without a cluster: no runtime lookups (runtimes count as absent) and defaults
    /// from --operator-defaults or none. For benchmarks and local tests.
    #[arg(long)]
    standalone: bool,
    /// Largest review body accepted, in bytes (an object and its old version); larger is 413.
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u32).range(1..))]
    max_body_bytes: u32,
    /// Open connections at most; more are closed as they arrive. The API server holds a few.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Time for a request's headers (and the TLS handshake) to arrive.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    header_timeout: Duration,
    /// Time for a request's body to arrive after its headers; slower is 408.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    body_timeout: Duration,
    /// A connection that sends and takes nothing for this long is closed.
    #[arg(long, default_value = "90s", value_parser = positive_duration)]
    idle_timeout: Duration,
    /// Bytes of review bodies above 64 KiB held at once, across all requests; past it a
    /// large review is answered 503. Bodies up to 64 KiB never wait for it.
    #[arg(long, default_value_t = 32 << 20, value_parser = clap::value_parser!(u32).range(1..))]
    large_body_budget_bytes: u32,
    /// After SIGTERM, how long to report not-ready before closing, so endpoints drop us first.
    #[arg(long, default_value = "5s", value_parser = go_duration)]
    shutdown_delay: Duration,
    /// Then how long requests in flight may take to finish.
    #[arg(long, default_value = "20s", value_parser = go_duration)]
    shutdown_grace: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value = "json")]
    log_format: LogFormat,
}

impl Args {
    fn limits(&self) -> Limits {
        Limits {
            max_body: self.max_body_bytes as usize,
            max_connections: self.max_connections as usize,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            large_body_budget: self.large_body_budget_bytes as usize,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Json,
    Text,
}

/// Why a duration flag was refused.
#[derive(Debug, thiserror::Error)]
enum DurationFlagError {
    #[error(transparent)]
    Syntax(#[from] alfred::kubernetes::duration::DurationError),
    #[error("{0:?} is negative; give a duration of 0 or more")]
    Negative(String),
    #[error("{0:?} is zero; give a duration above 0 such as 10s")]
    Zero(String),
}

/// A duration in Go syntax (`10s`, `500ms`, `2m`), as the chart writes them.
fn go_duration(text: &str) -> Result<Duration, DurationFlagError> {
    let d = alfred::kubernetes::duration::parse_go_duration(text)?;
    Duration::try_from(d).map_err(|_| DurationFlagError::Negative(text.to_string()))
}

/// An interval or timeout: 0 would spin a background task or fail every read.
fn positive_duration(text: &str) -> Result<Duration, DurationFlagError> {
    let d = go_duration(text)?;
    if d.is_zero() {
        return Err(DurationFlagError::Zero(text.to_string()));
    }
    Ok(d)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("ALFRED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Written straight to stderr: a writer thread measured ~10% fewer reviews/s on two cores.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => logs.event_format(alfred_webhook::logs::JsonLines).init(),
        LogFormat::Text => logs.init(),
    }
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was already installed"))?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    let certs = CertFiles {
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
    };
    let (tls, loaded) = certs
        .load()
        .context("mount the serving certificate (make certs writes one for local use)")?;

    let client = if args.standalone {
        None
    } else {
        let mut config = kube::Config::infer()
            .await
            .context("connecting to the cluster (use --standalone to run without one)")?;
        // Named in the API server's audit log and metrics.
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("alfred-webhook/", env!("CARGO_PKG_VERSION"))),
        ));
        Some(kube::Client::try_from(config).context("creating the Kubernetes client")?)
    };
    let source = match (&args.operator_defaults, args.standalone) {
        (Some(path), _) => Some(DefaultsSource::File(path.clone())),
        (None, true) => None,
        (None, false) => {
            let Some((namespace, name)) = args.operator_config_map.split_once('/') else {
                bail!(
                    "--operator-config-map {:?} must be NAMESPACE/NAME, such as ome/inferenceservice-config",
                    args.operator_config_map
                );
            };
            Some(DefaultsSource::ConfigMap {
                namespace: namespace.into(),
                name: name.into(),
            })
        }
    };
    let defaults = SharedDefaults::default();
    match &source {
        Some(source) => source.refresh(client.as_ref(), &defaults, &metrics).await,
        // Standalone without a file: OME's behaviour with no defaults configured.
        None => defaults.store(Some(Arc::default())),
    }
    let catalog = client.as_ref().map(|c| Catalog::watch(c, &metrics));
    let state = Arc::new(AppState {
        defaults: defaults.clone(),
        default_inference_services: args.default_inference_services,
        runtimes: client.clone().zip(catalog.clone()).map(|(c, catalog)| {
            ApiRuntimes::new(c, catalog, args.runtime_cache_ttl, args.api_timeout)
        }),
        metrics: metrics.clone(),
        shutting_down: AtomicBool::new(false),
        first_ready: Default::default(),
    });
    if let (Some(manifest), Some(client), Some(catalog)) = (&args.register, &client, &catalog) {
        let registration = Registration {
            manifest: manifest.clone(),
            ca_bundle: args.ca_bundle_file.clone(),
            owner: args.owner_cluster_role.clone(),
            interval: args.register_interval,
        };
        let (app, delay, catalog) = (state.clone(), args.register_delay, catalog.clone());
        // Probed ready and past the delay; the watches listed, or given half a minute (until
        // then reviews read from the API).
        let ready = move || {
            app.first_ready.get().is_some_and(|at| {
                at.elapsed() >= delay
                    && (catalog.synced() || at.elapsed() >= Duration::from_secs(30))
            })
        };
        tokio::spawn(registration.run(client.clone(), ready, metrics.clone()));
    }
    if let Some(source) = source {
        let interval = args.defaults_refresh_interval;
        tokio::spawn(source.watch(client, defaults.clone(), interval, metrics.clone()));
    }
    tokio::spawn(certs.watch(tls.clone(), loaded, args.tls_reload_interval, metrics));

    let listeners = Listeners::bind(args.addr, args.probe_addr)
        .with_context(|| format!("binding {} and {}", args.addr, args.probe_addr))?;
    tracing::info!(addr = %args.addr, probes = %args.probe_addr, defaults_read = defaults.load().is_some(), "alfred-webhook serving");
    let shutdown = Shutdown {
        drain_delay: args.shutdown_delay,
        grace: args.shutdown_grace,
    };
    serve(state, tls, listeners, args.limits(), shutdown, terminated())
        .await
        .context("serving")?;
    tracing::info!("alfred-webhook stopped");
    Ok(())
}

/// SIGTERM (kubelet) or Ctrl-C.
async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags' defaults are the library's: one set of limits, written twice, kept equal.
    #[test]
    fn flag_defaults_are_the_default_limits() {
        assert_eq!(
            Args::parse_from(["alfred-webhook"]).limits(),
            Limits::default()
        );
    }
}
