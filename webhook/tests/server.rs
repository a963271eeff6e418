//! The server on real sockets: TLS round trips, probes, metrics, limits, certificate rotation
//! under load, graceful shutdown.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use alfred::rollout::strategy::OperatorDefaults;
use alfred_webhook::guard::Limits;
use alfred_webhook::lookups::SharedDefaults;
use alfred_webhook::metrics::Metrics;
use alfred_webhook::server::{AppState, Listeners, Shutdown, serve};
use alfred_webhook::tls::{CertFiles, provider};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A CA and a serving certificate for 127.0.0.1 signed by it.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(name: &str) -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{name} webhook"));
    let cert = leaf.signed_by(&key, &ca).unwrap();
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

struct Running {
    addr: SocketAddr,
    probes: SocketAddr,
    metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The test's limits: 1 MiB bodies, else the defaults.
fn test_limits() -> Limits {
    Limits {
        max_body: 1 << 20,
        ..Limits::default()
    }
}

async fn start(dir: &Path, reload: Duration, drain_delay: Duration) -> Running {
    start_with(dir, reload, drain_delay, test_limits()).await
}

async fn start_with(
    dir: &Path,
    reload: Duration,
    drain_delay: Duration,
    limits: Limits,
) -> Running {
    let files = CertFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    let (tls, loaded) = files.load().unwrap();
    let metrics = Arc::new(Metrics::default());
    let defaults = SharedDefaults::default();
    defaults.store(Some(Arc::new(OperatorDefaults::chart())));
    let state = Arc::new(AppState {
        defaults,
        default_inference_services: false,
        runtimes: None,
        metrics: metrics.clone(),
        shutting_down: AtomicBool::new(false),
        first_ready: Default::default(),
    });
    tokio::spawn(files.watch(tls.clone(), loaded, reload, metrics.clone()));
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let listeners = Listeners::bind(local, local).unwrap();
    let addr = listeners.admission.local_addr().unwrap();
    let probes = listeners.probes.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = Shutdown {
        drain_delay,
        grace: Duration::from_secs(5),
    };
    let served = tokio::spawn(serve(state, tls, listeners, limits, shutdown, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        probes,
        metrics,
        stop: Some(stop),
        served,
    }
}

fn write_pair(dir: &Path, pki: &Pki) {
    write_atomically(&dir.join("tls.crt"), &pki.cert);
    write_atomically(&dir.join("tls.key"), &pki.key);
}

/// As kubelet updates a mounted Secret: a whole new file swapped in.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn connector(cas: &[&str]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        use rustls::pki_types::pem::PemObject;
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A keep-alive HTTPS connection and the certificate the server presented.
async fn connect(
    tls: &TlsConnector,
    addr: SocketAddr,
) -> Result<(SendRequest<Full<Bytes>>, CertificateDer<'static>), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let stream = tls
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let peer = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok((sender, peer))
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// A plain HTTP GET on the probe port.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (status, body) = send(&mut sender, "GET", path, Vec::new()).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn reviews_round_trip_over_tls_with_probes_metrics_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let a = pki("alfred-test-a");
    write_pair(dir.path(), &a);
    let mut server = start(dir.path(), Duration::from_secs(60), Duration::ZERO).await;

    let (mut conn, peer) = connect(&connector(&[&a.ca]), server.addr).await.unwrap();
    assert!(!peer.is_empty());
    let (status, body) = send(
        &mut conn,
        "POST",
        "/mutate",
        fixture("irep-create-type-only.json"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    // The same connection carries the next review (keep-alive).
    let (status, body) = send(
        &mut conn,
        "POST",
        "/validate",
        fixture("isvc-create-zero-budget.json"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], false);
    // A review of several TLS records and several socket reads (a 64 KiB annotation, as a
    // large last-applied-configuration makes one) gets the same answer.
    let mut large: Value =
        serde_json::from_slice(&fixture("isvc-create-zero-budget.json")).unwrap();
    large["request"]["object"]["metadata"]["annotations"]["example.com/large"] =
        Value::String("x\\\"y".repeat(16 << 10));
    let (status, large_body) = send(
        &mut conn,
        "POST",
        "/validate",
        serde_json::to_vec(&large).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&large_body).unwrap()["response"]["status"],
        answer["response"]["status"]
    );

    let (status, body) = send(&mut conn, "POST", "/validate", b"not json".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).starts_with("the body is not an AdmissionReview"));
    let (status, _) = send(&mut conn, "POST", "/validate", vec![b' '; 2 << 20])
        .await
        .unwrap();
    assert_eq!(status, 413, "a body over the limit is refused");

    // A client that does not trust the CA is refused at the handshake.
    let stranger = pki("someone-else");
    assert!(
        connect(&connector(&[&stranger.ca]), server.addr)
            .await
            .is_err()
    );

    assert_eq!(get(server.probes, "/healthz").await, (200, "ok".into()));
    assert_eq!(get(server.probes, "/readyz").await, (200, "ok".into()));
    let (_, metrics) = get(server.probes, "/metrics").await;
    assert!(metrics.contains(
        "alfred_webhook_reviews_total{hook=\"mutate\",kind=\"InferenceReplica\",outcome=\"patched\"} 1\n"
    ));
    assert!(metrics.contains(
        "alfred_webhook_reviews_total{hook=\"validate\",kind=\"InferenceService\",outcome=\"denied\"} 2\n"
    ));
    assert!(metrics.contains("alfred_webhook_bad_requests_total 1\n"));
    assert!(metrics.contains("alfred_webhook_bodies_refused_total 1\n"));

    server.stop.take().unwrap().send(()).unwrap();
    server.served.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_without_a_failed_review() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (pki("alfred-test-a"), pki("alfred-test-b"));
    write_pair(dir.path(), &a);
    let server = start(dir.path(), Duration::from_millis(50), Duration::ZERO).await;
    let trust = connector(&[&a.ca, &b.ca]);
    let (mut before, first_peer) = connect(&trust, server.addr).await.unwrap();

    let running = Arc::new(AtomicBool::new(true));
    let (done, errors) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (trust, running, done, errors) =
            (trust.clone(), running.clone(), done.clone(), errors.clone());
        let addr = server.addr;
        clients.push(tokio::spawn(async move {
            let body = fixture("isvc-create-deployment-strategy.json");
            while running.load(Ordering::Relaxed) {
                // A fresh handshake every 20 reviews, so rotation is seen mid-load.
                let Ok((mut conn, _)) = connect(&trust, addr).await else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                for _ in 0..20 {
                    match send(&mut conn, "POST", "/validate", body.clone()).await {
                        Ok((200, _)) => done.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Half a rotation (the new certificate, the old key): refused, the old pair stays.
    write_atomically(&dir.path().join("tls.crt"), &b.cert);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, peer) = connect(&trust, server.addr).await.unwrap();
    assert_eq!(peer, first_peer, "a mismatched pair is not loaded");
    assert!(
        server
            .metrics
            .render()
            .contains("alfred_webhook_tls_reload_failures_total ")
    );
    assert!(
        !server
            .metrics
            .render()
            .contains("alfred_webhook_tls_reload_failures_total 0\n")
    );

    // The key arrives: new handshakes get the new certificate.
    write_atomically(&dir.path().join("tls.key"), &b.key);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, peer) = connect(&trust, server.addr).await.unwrap();
        if peer != first_peer {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rotated certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    running.store(false, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    // A connection opened before the rotation keeps working.
    let (status, _) = send(
        &mut before,
        "POST",
        "/validate",
        fixture("isvc-delete.json"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        errors.load(Ordering::Relaxed),
        0,
        "no review failed during the rotation"
    );
    assert!(done.load(Ordering::Relaxed) > 100, "the load ran");
    assert!(
        server
            .metrics
            .render()
            .contains("alfred_webhook_tls_reloads_total 1\n")
    );
}

#[tokio::test]
async fn shutdown_turns_readiness_off_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    let a = pki("alfred-test-a");
    write_pair(dir.path(), &a);
    let mut server = start(
        dir.path(),
        Duration::from_secs(60),
        Duration::from_millis(500),
    )
    .await;
    let (mut conn, _) = connect(&connector(&[&a.ca]), server.addr).await.unwrap();
    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(server.probes, "/readyz").await.0, 503);
    // Still serving during the drain delay.
    let (status, _) = send(&mut conn, "POST", "/validate", fixture("isvc-delete.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    tokio::time::timeout(Duration::from_secs(10), server.served)
        .await
        .expect("the server stops after the grace period")
        .unwrap()
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Careless and hostile clients: each gets a clear status or a closed connection, in bounded
// time, while good reviews on other connections are answered.

/// A server under `limits` with a certificate of its own, and a client that trusts it (the
/// directory holds the certificate while the server runs).
async fn serving(limits: Limits) -> (tempfile::TempDir, Running, TlsConnector) {
    let dir = tempfile::tempdir().unwrap();
    let a = pki("alfred-test-a");
    write_pair(dir.path(), &a);
    let server = start_with(dir.path(), Duration::from_secs(60), Duration::ZERO, limits).await;
    (dir, server, connector(&[&a.ca]))
}

/// A raw TLS connection, for requests hyper's client would not send.
async fn raw(tls: &TlsConnector, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    tls.connect(name, tcp).await.unwrap()
}

/// Reads until the server closes (or `limit` passes): what it sent, and when it closed.
async fn read_all(
    stream: &mut tokio_rustls::client::TlsStream<TcpStream>,
    limit: Duration,
) -> (String, Option<Duration>) {
    use tokio::io::AsyncReadExt;
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), None),
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (
                    String::from_utf8_lossy(&out).into_owned(),
                    Some(started.elapsed()),
                );
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A good review on a new connection, answered; the connection stays open for the caller.
async fn good_review(tls: &TlsConnector, addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let (mut conn, _) = connect(tls, addr).await.unwrap();
    let (status, _) = send(
        &mut conn,
        "POST",
        "/validate",
        fixture("isvc-create-zero-budget.json"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_bodies_and_headers_get_their_status_not_a_reset() {
    use tokio::io::AsyncWriteExt;
    let (_dir, server, tls) = serving(test_limits()).await;

    // 2 MiB with Content-Length (the limit is 1 MiB): 413, read whole by the client.
    let mut s = raw(&tls, server.addr).await;
    let body = vec![b' '; 2 << 20];
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let _ = s.write_all(&body).await;
    let (answer, closed) = read_all(&mut s, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("larger than --max-body-bytes"), "{answer}");
    assert!(closed.is_some());

    // A 1 MiB header: 431.
    let mut s = raw(&tls, server.addr).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\nx-padding: {}\r\ncontent-length: 2\r\n\r\n{{}}",
        "a".repeat(1 << 20)
    );
    let _ = s.write_all(head.as_bytes()).await;
    let (answer, _) = read_all(&mut s, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");

    good_review(&tls, server.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_idle_and_stalled_clients_are_closed_in_time() {
    use tokio::io::AsyncWriteExt;
    let limits = Limits {
        header_timeout: Duration::from_millis(600),
        body_timeout: Duration::from_millis(600),
        idle_timeout: Duration::from_millis(900),
        ..test_limits()
    };
    let (_dir, server, tls) = serving(limits).await;

    // Slow loris: a header byte every 100 ms, never idle, closed at the header deadline.
    let mut loris = raw(&tls, server.addr).await;
    let drip = tokio::spawn(async move {
        let started = Instant::now();
        for b in b"POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
            if loris.write_all(&[*b]).await.is_err() || loris.flush().await.is_err() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    });

    // A body that stops arriving: 408 at the body deadline.
    let mut stalled = raw(&tls, server.addr).await;
    stalled
        .write_all(b"POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 500000\r\n\r\n{\"apiVersion\":")
        .await
        .unwrap();
    stalled.flush().await.unwrap();

    // An idle connection: closed at the idle deadline.
    let mut idle = raw(&tls, server.addr).await;

    // Meanwhile good reviews are answered.
    good_review(&tls, server.addr).await;

    let (answer, closed) = read_all(&mut stalled, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("--body-timeout"), "{answer}");
    assert!(closed.is_some());
    let (answer, closed) = read_all(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.is_empty(), "{answer:?}");
    let closed = closed.expect("the idle connection is closed");
    assert!(closed < Duration::from_secs(3), "{closed:?}");
    let dripped = drip.await.unwrap().expect("the slow client is cut off");
    assert!(dripped < Duration::from_secs(3), "{dripped:?}");
    good_review(&tls, server.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_and_large_bodies_share_a_budget() {
    use tokio::io::AsyncWriteExt;
    let limits = Limits {
        max_connections: 3,
        large_body_budget: 300 << 10,
        ..test_limits()
    };
    let (_dir, server, tls) = serving(limits).await;

    // Two stalled large bodies: the first holds 200 KiB of the 300 KiB budget, the second
    // cannot have its 200 KiB and is answered 503 at once.
    let head = "POST /validate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 900000\r\n\r\n";
    let chunk = vec![b' '; (64 << 10) + (200 << 10)];
    let mut first = raw(&tls, server.addr).await;
    first.write_all(head.as_bytes()).await.unwrap();
    first.write_all(&chunk).await.unwrap();
    first.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut second = raw(&tls, server.addr).await;
    second.write_all(head.as_bytes()).await.unwrap();
    second.write_all(&chunk).await.unwrap();
    second.flush().await.unwrap();
    let (answer, _) = read_all(&mut second, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("--large-body-budget-bytes"), "{answer}");
    drop(second);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Small reviews never wait for the budget.
    let conn = good_review(&tls, server.addr).await;
    // With `first` and `conn` open, one more fits under the cap of three; then none.
    let mut third = raw(&tls, server.addr).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    assert!(
        tls.connect(name, tcp).await.is_err(),
        "a fourth connection is closed"
    );
    drop(conn);
    third.shutdown().await.unwrap();
    drop(third);
    tokio::time::sleep(Duration::from_millis(200)).await;
    good_review(&tls, server.addr).await;
    drop(first);
}
