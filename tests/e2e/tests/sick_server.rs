//! Live commands against a sick API server: a connection that stalls after a few kilobytes
//! ends within `--request-timeout` with a sentence, and `migrate --watch` outlives an API
//! server restart, reporting the failed passes in one line each and reading again after it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use alfred_e2e::{Cluster, demo, stderr, wait_for};

/// A TCP proxy to `upstream` that passes the client's bytes on, but only the first `budget`
/// bytes of each answer back: past them the connection stays open and silent, as a stalled
/// server or a broken middlebox leaves it.
fn stalling_proxy(upstream: u16, budget: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut to_server, mut from_client) =
                (server.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_client, &mut to_server);
            });
            std::thread::spawn(move || {
                let (mut from_server, mut to_client) = (server, client);
                let mut sent = 0;
                let mut buf = [0u8; 1024];
                while sent < budget {
                    let Ok(n) = from_server.read(&mut buf) else {
                        return;
                    };
                    let n = n.min(budget - sent);
                    if n == 0 || to_client.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    sent += n;
                }
                // Hold both ends open and say nothing more.
                std::thread::sleep(Duration::from_secs(600));
            });
        }
    });
    port
}

fn api_port(cluster: &Cluster) -> u16 {
    let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap();
    server
        .rsplit(':')
        .next()
        .unwrap()
        .trim_matches('"')
        .parse()
        .unwrap()
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn a_stalled_connection_ends_within_the_request_timeout() {
    let cluster = Cluster::up("stalled");
    cluster.seed(&demo());
    let upstream = api_port(&cluster);
    // Enough for the TLS handshake and the start of an answer, then silence.
    let proxy = stalling_proxy(upstream, 6_000);
    let kubeconfig = cluster.dir.join("kubeconfig-stalled");
    let text = std::fs::read_to_string(&cluster.kubeconfig)
        .unwrap()
        .replace(
            &format!("127.0.0.1:{upstream}"),
            &format!("127.0.0.1:{proxy}"),
        );
    std::fs::write(&kubeconfig, text).unwrap();
    let kubeconfig = kubeconfig.display().to_string();

    for command in [&["recommend"][..], &["migrate", "--dry-run"], &["version"]] {
        let mut args = vec!["--kubeconfig", &kubeconfig, "--request-timeout", "3s"];
        args.extend_from_slice(command);
        let started = Instant::now();
        let out = cluster.alfred(&args);
        let took = started.elapsed();
        let err = format!("{}{}", alfred_e2e::stdout(&out), stderr(&out));
        let said =
            format!("at https://127.0.0.1:{proxy}: no answer within 3 s (--request-timeout)");
        assert!(
            took < Duration::from_secs(20),
            "{command:?} took {took:?}: {err}"
        );
        assert!(err.contains(&said), "{command:?}: {err}");
        if command != ["version"] {
            assert!(!out.status.success(), "{command:?}");
        }
        for noise in ["Error:", "Error {", "docs.rs", "SendRequest", "Status {"] {
            assert!(!err.contains(noise), "{command:?} printed {noise:?}: {err}");
        }
    }
}

/// The command line the API server runs with, to start it again the same way.
fn command_line(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn migrate_watch_outlives_an_api_server_restart() {
    let cluster = Cluster::up("watch-restart");
    cluster.seed(&demo());
    // The journal a pass reads, which the chart creates.
    cluster.ok(&["create", "configmap", "alfred-dispatch-state", "-n", "ome"]);
    let config = cluster.dir.join("alfred-config.yaml");
    std::fs::write(&config, "schemaVersion: 1\ndecisionLoopInterval: 2s\n").unwrap();
    let config = config.display().to_string();
    let mut watch = cluster.spawn_kubectl(&[
        "alfred",
        "migrate",
        "--watch",
        "--dry-run",
        "--config",
        &config,
        "--request-timeout",
        "2s",
    ]);
    let mut errors = watch.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = errors.read_to_string(&mut text);
        text
    });
    let passes = || -> usize {
        let mark = 0;
        cluster
            .calls_since(mark, "kubectl-alfred/")
            .iter()
            .filter(|(verb, uri)| verb == "list" && uri.starts_with("/api/v1/nodes"))
            .count()
    };
    // Two passes have read the cluster: the first is done, and its interval known.
    wait_for(Duration::from_secs(60), "two passes", || passes() >= 2);

    // The API server goes away for a few passes, then comes back on the same port.
    let pid_file = cluster.dir.join("kube-apiserver.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let args = command_line(pid);
    Command::new("kill").arg(pid.to_string()).status().unwrap();
    wait_for(Duration::from_secs(30), "the API server to stop", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        watch.try_wait().unwrap().is_none(),
        "the watch stopped at the first failed pass"
    );
    // Started in the background as up.sh starts it; down.sh stops it by its pid file.
    let log = cluster.dir.join("logs/kube-apiserver.log");
    let started = Command::new("bash")
        .args(["-c", "\"$@\" >>\"$LOG\" 2>&1 & echo $!", "restart"])
        .args(&args)
        .env("LOG", &log)
        .output()
        .unwrap();
    std::fs::write(&pid_file, &started.stdout).unwrap();
    wait_for(Duration::from_secs(60), "the API server to answer", || {
        cluster
            .kubectl(&["get", "--raw", "/readyz"])
            .status
            .success()
    });
    let before = passes();
    wait_for(Duration::from_secs(60), "a pass after the restart", || {
        passes() > before
    });
    assert!(
        watch.try_wait().unwrap().is_none(),
        "the watch is still running"
    );

    // Interrupted, it ends cleanly.
    Command::new("kill")
        .args(["-INT", &watch.id().to_string()])
        .status()
        .unwrap();
    let status = watch.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(status.success(), "{status:?}: {err}");
    let failed: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("pass failed: "))
        .collect();
    assert!(!failed.is_empty(), "{err}");
    for line in &failed {
        assert!(line.contains("the next pass starts in "), "{line}");
        assert!(line.contains("at https://127.0.0.1:"), "{line}");
        assert!(
            !line.contains("Error") && !line.contains("docs.rs"),
            "{line}"
        );
    }
    // Waits grow while the API keeps failing, never past the loop's 2 s.
    let waits: Vec<u64> = failed
        .iter()
        .filter_map(|l| {
            l.rsplit("starts in ")
                .next()?
                .trim_end_matches(" s")
                .parse()
                .ok()
        })
        .collect();
    assert!(
        waits.windows(2).all(|w| w[0] <= w[1]) && waits.iter().all(|&w| w <= 2),
        "{waits:?}"
    );
}
