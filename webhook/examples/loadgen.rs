//! Load generator for alfred-webhook: AdmissionReviews over TLS on keep-alive connections,
//! as the API server sends them. Two modes:
//! - as fast as it goes (`--rate 0`): sustained throughput;
//! - a fixed rate (`--rate N`): latency measured from each request's scheduled send time, so a
//!   stalled server cannot hide its queue (no coordinated omission).
//!
//! `cargo run --release -p alfred-webhook --example loadgen -- --ca certs/ca.crt [--pid PID]`

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

struct Args {
    addr: SocketAddr,
    ca: PathBuf,
    connections: usize,
    rate: u64,
    duration: Duration,
    /// The webhook's pid, to report its memory.
    pid: Option<u32>,
    http2: bool,
    /// Reviews in flight on each HTTP/2 connection.
    streams: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 8443)),
        ca: PathBuf::from("certs/ca.crt"),
        connections: 16,
        rate: 0,
        duration: Duration::from_secs(10),
        pid: None,
        http2: false,
        streams: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => a.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--ca" => a.ca = value()?.into(),
            "--connections" => a.connections = number(value()?)?.max(1) as usize,
            "--rate" => a.rate = number(value()?)?,
            "--seconds" => a.duration = Duration::from_secs(number(value()?)?),
            "--pid" => a.pid = Some(number(value()?)? as u32),
            "--http2" => a.http2 = true,
            "--streams" => a.streams = number(value()?)?.max(1) as usize,
            _ => {
                return Err(format!(
                    "unknown flag {flag}; flags: --addr --ca --connections --rate --seconds --pid --http2 --streams"
                ));
            }
        }
    }
    Ok(a)
}

/// The mix: refusals, warnings, patches and plain allows, as in a busy cluster.
fn bodies() -> Vec<(&'static str, Bytes)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    [
        ("/validate", "isvc-create-deployment-strategy.json"),
        ("/validate", "isvc-create-zero-budget.json"),
        ("/validate", "isvc-update-bad-cooldown.json"),
        ("/validate", "runtime-zero-budgets.json"),
        ("/mutate", "irep-create-type-only.json"),
        ("/validate", "irep-create-type-only.json"),
    ]
    .into_iter()
    .map(|(path, f)| {
        let body = std::fs::read(format!("{dir}/{f}")).expect("fixture");
        (path, Bytes::from(body))
    })
    .collect()
}

fn connector(ca: &PathBuf) -> Result<TlsConnector, String> {
    let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

#[derive(Default)]
struct Tally {
    micros: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

/// A keep-alive connection: HTTP/1.1 carries one review at a time; HTTP/2 (what the API
/// server negotiates with webhooks) carries many at once.
#[derive(Clone)]
enum Sender {
    H1(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn send(
        &self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        match self {
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await.map_err(|e| e.to_string())
            }
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await.map_err(|e| e.to_string())
            }
        }
    }
}

async fn open(tls: &TlsConnector, addr: SocketAddr, http2: bool) -> Result<Sender, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let mut tls_config = (**tls.config()).clone();
    tls_config.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let stream = TlsConnector::from(Arc::new(tls_config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let io = TokioIo::new(stream);
    if http2 {
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Sender::H1(Arc::new(tokio::sync::Mutex::new(sender))))
    }
}

/// One stream of reviews on `sender`, until `end`.
async fn worker(
    sender: Sender,
    bodies: Arc<Vec<(&'static str, Bytes)>>,
    offset: usize,
    interval: Option<Duration>,
    start: Instant,
    end: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let fail = |t: &mut Tally, e: String| {
        t.errors += 1;
        t.first_error.get_or_insert(e);
    };
    let mut i = offset;
    let mut scheduled = start;
    if interval.is_some() {
        scheduled -= interval.unwrap_or_default();
    }
    loop {
        // Latency counts from the scheduled time when the previous review ran past it (the
        // server's queue), and from the timer's wake-up otherwise (its millisecond granularity
        // is the generator's, not the server's).
        let sent = match interval {
            Some(every) => {
                scheduled += every;
                if Instant::now() < scheduled {
                    tokio::time::sleep_until(scheduled.into()).await;
                    Instant::now()
                } else {
                    scheduled
                }
            }
            None => Instant::now(),
        };
        if sent >= end {
            break;
        }
        let (path, body) = &bodies[i % bodies.len()];
        i += 1;
        let request = hyper::Request::post(*path)
            .header("host", "alfred-webhook")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let result = async {
            let response = sender.send(request).await?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status != 200 || !body.starts_with(b"{\"apiVersion\":\"admission.k8s.io/v1\"") {
                return Err(format!(
                    "status {status}: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => tally
                .micros
                .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32),
            Err(e) => fail(&mut tally, e),
        }
    }
    tally
}

fn memory(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim().to_string())
    };
    Some(format!(
        "webhook memory: peak RSS {}, RSS now {}",
        field("VmHWM:")?,
        field("VmRSS:")?
    ))
}

/// The process's CPU time (user + system), from `/proc/PID/stat` in clock ticks of 10 ms.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces: utime and stime are 14th and 15th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

// One thread: the generator shares the machine with the server and should take little of it.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let args = args()?;
    let tls = connector(&args.ca)?;
    let bodies = Arc::new(bodies());
    let streams = if args.http2 { args.streams } else { 1 };
    let workers = args.connections * streams;
    let interval =
        (args.rate > 0).then(|| Duration::from_nanos(1_000_000_000 * workers as u64 / args.rate));
    let mut senders = Vec::new();
    for _ in 0..args.connections {
        senders.push(open(&tls, args.addr, args.http2).await?);
    }
    let cpu_before = args.pid.and_then(cpu_seconds);
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + args.duration;
    let mut tasks = Vec::new();
    for (c, sender) in senders.into_iter().enumerate() {
        for s in 0..streams {
            let w = c * streams + s;
            let stagger = interval.map_or(Duration::ZERO, |i| i * w as u32 / workers as u32);
            tasks.push(tokio::spawn(worker(
                sender.clone(),
                bodies.clone(),
                w,
                interval,
                start + stagger,
                end,
            )));
        }
    }
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await.map_err(|e| e.to_string())?;
        all.micros.extend(t.micros);
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let cpu = args
        .pid
        .and_then(cpu_seconds)
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    all.micros.sort_unstable();
    let n = all.micros.len();
    let pct = |p: f64| {
        all.micros
            .get(((n as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(0.0, |m| *m as f64 / 1000.0)
    };
    let mode = match args.rate {
        0 => "max".to_string(),
        r => format!("{r}/s"),
    };
    println!(
        "{} rate {mode}, {} connections x {streams} in flight, {:?}: {n} reviews ({:.0}/s), {} errors; latency ms p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        if args.http2 { "HTTP/2" } else { "HTTP/1.1" },
        args.connections,
        args.duration,
        n as f64 / args.duration.as_secs_f64(),
        all.errors,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        pct(1.0),
    );
    if let Some(e) = all.first_error {
        println!("first error: {e}");
    }
    if let Some(m) = args.pid.and_then(memory) {
        println!("{m}");
    }
    // What a review costs the server, steadier than the rate on a shared machine.
    if let Some(cpu) = cpu.filter(|_| n > 0) {
        println!(
            "webhook CPU: {:.2} cores busy, {:.1} µs per review",
            cpu / args.duration.as_secs_f64(),
            cpu * 1e6 / n as f64
        );
    }
    if all.errors > 0 {
        return Err(format!("{} reviews failed", all.errors));
    }
    Ok(())
}
