//! Load generator for alfred-webhook: AdmissionReviews over TLS on keep-alive connections,
//! shaped as the API server sends them (`shape.rs`; `--as-written` sends the test fixtures
//! unchanged). Two modes:
//! - as fast as it goes (`--rate 0`): sustained throughput;
//! - a fixed rate (`--rate N`): latency measured from each request's scheduled send time, so a
//!   stalled server cannot hide its queue (no coordinated omission).
//!
//!
//! With `--stalled N` and `--loris N`, hostile clients run beside the measured load: each
//! stalled client sends 7 MiB of an 8 MiB body and stops; each slow-loris client drips its
//! headers a byte a second. Both reconnect a second after the webhook cuts them off.
//!
//! `cargo run --release -p alfred-webhook --example loadgen -- --ca certs/ca.crt [--pid PID]`

mod shape;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// AdmissionReviews over TLS on keep-alive connections, shaped as the API server sends them.
#[derive(clap::Parser)]
struct Args {
    /// The webhook's address
    #[arg(long, default_value = "127.0.0.1:8443")]
    addr: SocketAddr,
    /// The CA that signed the webhook's certificate
    #[arg(long, default_value = "certs/ca.crt")]
    ca: PathBuf,
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    connections: u64,
    /// Reviews a second; 0 sends as fast as the webhook answers
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How long the measured load runs
    #[arg(long = "seconds", default_value = "10", value_parser = seconds)]
    duration: Duration,
    /// The webhook's pid, to report its memory.
    #[arg(long)]
    pid: Option<u32>,
    #[arg(long)]
    http2: bool,
    /// Reviews in flight on each HTTP/2 connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    streams: u64,
    /// Send the fixtures as written instead of as the API server sends them.
    #[arg(long)]
    as_written: bool,
    /// Only write the mix as the API server sends it into this directory (for wrk), and exit.
    #[arg(long, value_name = "DIR")]
    write_mix: Option<PathBuf>,
    /// Clients that send most of a large body and stall.
    #[arg(long, default_value_t = 0)]
    stalled: usize,
    /// Clients that drip their headers.
    #[arg(long, default_value_t = 0)]
    loris: usize,
}

fn seconds(text: &str) -> Result<Duration, std::num::ParseIntError> {
    text.parse().map(Duration::from_secs)
}

/// The mix: refusals, warnings, patches and plain allows. Heavier in refusals and patches than
/// a real cluster's traffic, where most reviews are allowed: each of those costs a log line.
const MIX: [(&str, &str); 6] = [
    ("/validate", "isvc-create-deployment-strategy.json"),
    ("/validate", "isvc-create-zero-budget.json"),
    ("/validate", "isvc-update-bad-cooldown.json"),
    ("/validate", "runtime-zero-budgets.json"),
    ("/mutate", "irep-create-type-only.json"),
    ("/validate", "irep-create-type-only.json"),
];

/// The fixtures as written and as the API server sends them, in pairs.
fn mix() -> Result<Vec<(Review, Review)>, String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    MIX.iter()
        .map(|(path, f)| {
            let fixture = std::fs::read(format!("{dir}/{f}")).map_err(|e| format!("{f}: {e}"))?;
            let sent = shape::as_apiserver_sends(&fixture).map_err(|e| format!("{f}: {e}"))?;
            Ok((review(path, fixture), review(path, sent)))
        })
        .collect()
}

/// The webhook must answer a review as the API server sends it exactly as it answers the
/// fixture: the extra bytes are load, not a different question.
async fn same_answers(connection: &mut Connection, mix: &[(Review, Review)]) -> Result<(), String> {
    for (written, sent) in mix {
        let (a, b) = (
            connection.exchange(written).await?,
            connection.exchange(sent).await?,
        );
        if a != b {
            return Err(format!(
                "{} answers differently as the API server sends it:\n{}\n{}",
                written.path,
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    Ok(())
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

/// One review of the mix: where it goes, its body, and the whole HTTP/1.1 request, written
/// once so that a send costs the generator as little as possible.
struct Review {
    path: &'static str,
    body: Bytes,
    http1: Vec<u8>,
}

fn review(path: &'static str, body: Vec<u8>) -> Review {
    let mut http1 = format!(
        "POST {path} HTTP/1.1\r\nhost: alfred-webhook\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    http1.extend_from_slice(&body);
    Review {
        path,
        body: Bytes::from(body),
        http1,
    }
}

/// A keep-alive connection. HTTP/1.1 carries one review at a time and is spoken directly over
/// TLS (hyper's client costs the generator more CPU than the server's whole HTTP layer, and
/// the two share the machine); HTTP/2, what the API server negotiates with webhooks, carries
/// many at once through hyper.
enum Connection {
    Http1 {
        stream: Box<TlsStream<TcpStream>>,
        buf: Vec<u8>,
    },
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    /// Sends one review and checks the answer: status 200 and an AdmissionReview body.
    async fn exchange(&mut self, review: &Review) -> Result<Bytes, String> {
        let (status, body) = match self {
            Connection::Http1 { stream, buf } => {
                stream
                    .write_all(&review.http1)
                    .await
                    .map_err(|e| e.to_string())?;
                stream.flush().await.map_err(|e| e.to_string())?;
                let (status, head, length) = read_head(stream, buf).await?;
                while buf.len() < head + length {
                    read_more(stream, buf).await?;
                }
                if buf.len() > head + length {
                    return Err("bytes after the response, which was not asked for".into());
                }
                (status, Bytes::copy_from_slice(&buf[head..]))
            }
            Connection::Http2(sender) => {
                let request = hyper::Request::post(review.path)
                    .header("host", "alfred-webhook")
                    .header("content-type", "application/json")
                    .body(Full::new(review.body.clone()))
                    .map_err(|e| e.to_string())?;
                sender.ready().await.map_err(|e| e.to_string())?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status().as_u16();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                (status, body.to_bytes())
            }
        };
        if status != 200 || !body.starts_with(b"{\"apiVersion\":\"admission.k8s.io/v1\"") {
            return Err(format!(
                "status {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(body)
    }
}

/// Reads an HTTP/1.1 response head into `buf` (cleared first): status, head length and
/// content length.
async fn read_head(
    stream: &mut TlsStream<TcpStream>,
    buf: &mut Vec<u8>,
) -> Result<(u16, usize, usize), String> {
    buf.clear();
    loop {
        read_more(stream, buf).await?;
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        let head = match response.parse(buf) {
            Ok(httparse::Status::Complete(head)) => head,
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(format!("not an HTTP/1.1 response: {e}")),
        };
        let length = response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
            .ok_or("a response without a content-length")?;
        return Ok((response.code.unwrap_or(0), head, length));
    }
}

async fn read_more(stream: &mut TlsStream<TcpStream>, buf: &mut Vec<u8>) -> Result<(), String> {
    match stream.read_buf(buf).await {
        Ok(0) => Err("the server closed the connection".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

async fn open(tls: &TlsConnector, addr: SocketAddr, http2: bool) -> Result<Connection, String> {
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
    if !http2 {
        return Ok(Connection::Http1 {
            stream: Box::new(stream),
            buf: Vec::with_capacity(4096),
        });
    }
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(Connection::Http2(sender))
}

/// One stream of reviews on `connection`, until `end`.
async fn worker(
    mut connection: Connection,
    mix: Arc<Vec<Review>>,
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
        let result = connection.exchange(&mix[i % mix.len()]).await.map(drop);
        i += 1;
        match result {
            Ok(()) => tally
                .micros
                .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32),
            Err(e) => fail(&mut tally, e),
        }
    }
    tally
}

/// What the webhook did to hostile clients: answers by status line, and connections closed
/// or refused without one.
#[derive(Default)]
struct Hostile {
    answers: std::collections::BTreeMap<String, u64>,
    closed: u64,
    refused: u64,
}

impl Hostile {
    fn add(&mut self, other: Hostile) {
        for (status, n) in other.answers {
            *self.answers.entry(status).or_default() += n;
        }
        self.closed += other.closed;
        self.refused += other.refused;
    }
}

/// One hostile client until `end`: `stall` sends 7 MiB of an 8 MiB body and waits; otherwise
/// it drips its headers a byte a second. Reconnects a second after being cut off.
async fn hostile(tls: TlsConnector, addr: SocketAddr, stall: bool, end: Instant) -> Hostile {
    let mut seen = Hostile::default();
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: alfred-webhook\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        8 << 20
    );
    let body = vec![b' '; 7 << 20];
    while Instant::now() < end {
        let mut stream = match open(&tls, addr, false).await {
            Ok(Connection::Http1 { stream, .. }) => stream,
            _ => {
                seen.refused += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let sent: Result<(), std::io::Error> = async {
            if stall {
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body).await?;
                stream.flush().await
            } else {
                for b in head.as_bytes() {
                    stream.write_all(&[*b]).await?;
                    stream.flush().await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(())
            }
        }
        .await;
        // Whatever the webhook answered before closing, or nothing.
        let mut answer = Vec::new();
        let _ = tokio::time::timeout_at(end.into(), stream.read_to_end(&mut answer)).await;
        match answer
            .split(|b| *b == b'\r')
            .next()
            .filter(|l| !l.is_empty())
        {
            Some(line) => {
                *seen
                    .answers
                    .entry(String::from_utf8_lossy(line).into_owned())
                    .or_default() += 1
            }
            None if Instant::now() < end || sent.is_err() => seen.closed += 1,
            None => {}
        }
        // Stalled clients come back, but not in a storm of handshakes.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    seen
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
    let args: Args = clap::Parser::parse();
    let tls = connector(&args.ca)?;
    let pairs = mix()?;
    if let Some(dir) = &args.write_mix {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for ((_, file), (_, sent)) in MIX.iter().zip(&pairs) {
            let path = dir.join(file);
            std::fs::write(&path, &sent.body).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        return Ok(());
    }
    same_answers(&mut open(&tls, args.addr, false).await?, &pairs).await?;
    let mix: Vec<Review> = pairs
        .into_iter()
        .map(|(written, sent)| if args.as_written { written } else { sent })
        .collect();
    let bytes = mix.iter().map(|r| r.body.len()).sum::<usize>() / mix.len();
    let mix = Arc::new(mix);
    let streams = if args.http2 { args.streams as usize } else { 1 };
    let workers = args.connections as usize * streams;
    let interval =
        (args.rate > 0).then(|| Duration::from_nanos(1_000_000_000 * workers as u64 / args.rate));
    let mut connections = Vec::new();
    for _ in 0..args.connections {
        let connection = open(&tls, args.addr, args.http2).await?;
        if let Connection::Http2(sender) = &connection {
            for _ in 1..streams {
                connections.push(Connection::Http2(sender.clone()));
            }
        }
        connections.push(connection);
    }
    // Hostile clients get a few seconds' head start, so the measured load meets them settled.
    let settle = if args.stalled + args.loris > 0 {
        Duration::from_secs(3)
    } else {
        Duration::ZERO
    };
    let hostile_end = Instant::now() + settle + args.duration;
    // On a thread of their own, so that the measured clients' latency is the webhook's.
    let hostiles = (args.stalled + args.loris > 0).then(|| {
        let (tls, addr, stalled, loris) = (tls.clone(), args.addr, args.stalled, args.loris);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            runtime.map(|r| {
                r.block_on(async move {
                    let tasks: Vec<_> = (0..stalled + loris)
                        .map(|i| tokio::spawn(hostile(tls.clone(), addr, i < stalled, hostile_end)))
                        .collect();
                    let mut seen = Hostile::default();
                    for t in tasks {
                        if let Ok(h) = t.await {
                            seen.add(h);
                        }
                    }
                    seen
                })
            })
        })
    });
    tokio::time::sleep(settle).await;
    let cpu_before = args.pid.and_then(cpu_seconds);
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + args.duration;
    let mut tasks = Vec::new();
    for (w, connection) in connections.into_iter().enumerate() {
        let stagger = interval.map_or(Duration::ZERO, |i| i * w as u32 / workers as u32);
        tasks.push(tokio::spawn(worker(
            connection,
            mix.clone(),
            w,
            interval,
            start + stagger,
            end,
        )));
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
        "{} rate {mode}, {} connections x {streams} in flight, {:?}, {} reviews of {bytes} bytes on average: {n} reviews ({:.0}/s), {} errors; latency ms p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        if args.http2 { "HTTP/2" } else { "HTTP/1.1" },
        args.connections,
        args.duration,
        if args.as_written {
            "fixture"
        } else {
            "API-server"
        },
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
    if let Some(hostiles) = hostiles {
        let seen = hostiles
            .join()
            .map_err(|_| "the hostile clients' thread panicked".to_string())?
            .map_err(|e| e.to_string())?;
        let answers: Vec<String> = seen
            .answers
            .iter()
            .map(|(s, n)| format!("{n} x {s}"))
            .collect();
        println!(
            "hostile clients: {} stalled bodies, {} slow-loris; answered {}; closed without an answer {}; connections refused {}",
            args.stalled,
            args.loris,
            if answers.is_empty() {
                "none".to_string()
            } else {
                answers.join(", ")
            },
            seen.closed,
            seen.refused
        );
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
