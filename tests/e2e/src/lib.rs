//! The harness for the end-to-end tests: a local control plane (`tests/cluster/up.sh`), the
//! webhook registered by URL, and `kubectl` with `kubectl-alfred` on PATH, exactly as users
//! run them. The tests are `#[ignore]`d so `cargo test` stays fast; `make e2e` runs them.
//! On failure the control plane's and the webhook's logs stay in `tests/.run/<name>/logs`.

use std::io::Write as _;

pub mod world;

use base64::Engine as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Cluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// PATH with the workspace's freshly built binaries first.
    path: String,
    /// Processes the tests started (the webhook), stopped on drop.
    children: Vec<std::process::Child>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where cargo put the binaries `make e2e` built.
fn binaries() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let dir = target.join("debug");
    for bin in ["alfred-webhook", "kubectl-alfred"] {
        assert!(
            dir.join(bin).exists(),
            "{} is missing: build it first (make e2e does)",
            dir.join(bin).display()
        );
    }
    // Installed beside the plugin, as `make install` and the release archive put it.
    let complete = "kubectl_complete-alfred";
    std::fs::copy(
        workspace().join("kubectl-alfred").join(complete),
        dir.join(complete),
    )
    .expect("the completion script is copied beside the plugin");
    dir
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// The directory of the control plane's binaries (built once per version by
/// `tests/cluster/build.sh`, for the version `$K8S` names).
pub fn control_plane() -> PathBuf {
    let out = Command::new(workspace().join("tests/cluster/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/cluster/build.sh runs");
    assert!(out.status.success(), "tests/cluster/build.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The Kubernetes version the control plane runs (`v1.37.2`), from its build directory's name.
pub fn kubernetes_version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let dir = control_plane();
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        name.trim_start_matches("control-plane-")
            .split("-etcd-")
            .next()
            .unwrap_or_default()
            .to_string()
    })
}

impl Cluster {
    /// Starts a fresh control plane for the test `name` with OME's kinds (the test copies of
    /// its CRDs) and InferenceReplica.
    pub fn up(name: &str) -> Cluster {
        let cluster = Cluster::start(name);
        cluster.install_crds(&["tests/crds", "manifests/crds"]);
        cluster
    }

    /// A cluster running an OME release before OMENative: no InferenceReplica kind.
    pub fn up_without_replicas(name: &str) -> Cluster {
        let cluster = Cluster::start(name);
        cluster.install_crds(&["tests/crds"]);
        cluster
    }

    fn install_crds(&self, dirs: &[&str]) {
        for dir in dirs {
            self.ok(&["apply", "-f", &workspace().join(dir).display().to_string()]);
        }
        self.ok(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ]);
    }

    fn start(name: &str) -> Cluster {
        let dir = workspace().join("tests/.run").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the run directory");
        let up = Command::new(workspace().join("tests/cluster/up.sh"))
            .arg(&dir)
            .stderr(Stdio::inherit())
            .output()
            .expect("tests/cluster/up.sh runs");
        let cluster = Cluster {
            kubeconfig: dir.join("kubeconfig"),
            path: format!(
                "{}:{}:{}",
                binaries().display(),
                std::env::var("PATH").unwrap_or_default(),
                dir.join("bin").display()
            ),
            dir,
            children: Vec::new(),
        };
        assert!(
            up.status.success(),
            "the control plane did not start; logs in {}",
            cluster.dir.join("logs").display()
        );
        cluster
    }

    /// The PATH the cluster's commands run with: the freshly built binaries first.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `kubectl ARGS` against this cluster, with `stdin` fed in.
    pub fn kubectl_with(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).expect("stdin written");
        drop(input);
        child.wait_with_output().expect("kubectl finishes")
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(args, "")
    }

    /// `kubectl ARGS` against this cluster, started in the background (to run several at once).
    pub fn spawn_kubectl(&self, args: &[&str]) -> std::process::Child {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs")
    }

    /// Runs kubectl and insists it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply -f -` of `manifest`.
    pub fn apply(&self, manifest: &str) -> Output {
        self.kubectl_with(&["apply", "-f", "-"], manifest)
    }

    /// Starts `alfred-webhook` against this cluster and registers it by URL with the CA bundle
    /// (`hooks` is the webhook configurations' YAML with `URL` and `CA_BUNDLE` to fill in).
    pub fn start_webhook(&mut self, extra_args: &[&str], hooks: &str) -> u16 {
        let admin = self.kubeconfig.clone();
        self.start_webhook_as(&admin, extra_args, hooks).0
    }

    /// [`Cluster::start_webhook`] with the API identity of `kubeconfig`; returns the serving
    /// and the probe port.
    pub fn start_webhook_as(
        &mut self,
        kubeconfig: &Path,
        extra_args: &[&str],
        hooks: &str,
    ) -> (u16, u16) {
        let (port, probes) = (free_port(), free_port());
        self.spawn_webhook(kubeconfig, port, probes, extra_args);
        let out = self.apply(&self.hooks_at(port, hooks));
        assert!(
            out.status.success(),
            "registering the webhook: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (port, probes)
    }

    /// Starts `alfred-webhook` on `port` (probes on `probes`) without registering it, and
    /// waits for it to listen.
    pub fn spawn_webhook(
        &mut self,
        kubeconfig: &Path,
        port: u16,
        probes: u16,
        extra_args: &[&str],
    ) {
        let pki = self.dir.join("pki");
        let log = std::fs::File::create(self.dir.join("logs/webhook.log")).expect("log file");
        let child = Command::new(binaries().join("alfred-webhook"))
            .args([
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--probe-addr",
                &format!("127.0.0.1:{probes}"),
                "--tls-cert",
                &pki.join("webhook.crt").display().to_string(),
                "--tls-key",
                &pki.join("webhook.key").display().to_string(),
                "--shutdown-delay",
                "0s",
            ])
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("alfred-webhook starts");
        self.children.push(child);
        wait_for(Duration::from_secs(30), "the webhook's /healthz", || {
            std::net::TcpStream::connect(("127.0.0.1", probes)).is_ok()
        });
    }

    /// `hooks` (configurations with `URL` and `CA_BUNDLE` placeholders) pointing at the
    /// webhook on `port`, with the test CA.
    pub fn hooks_at(&self, port: u16, hooks: &str) -> String {
        let ca = std::fs::read(self.dir.join("pki/ca.crt")).expect("the CA");
        hooks
            .replace("URL", &format!("https://127.0.0.1:{port}"))
            .replace(
                "CA_BUNDLE",
                &base64::engine::general_purpose::STANDARD.encode(ca),
            )
    }

    /// GET `path` on the webhook's plain probe port: (status code, body).
    pub fn probe(&self, probes: u16, path: &str) -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", probes)) else {
            return (0, String::new());
        };
        let _ = write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        (code, body)
    }

    /// What the webhook runs with in a cluster: namespaces `ome` and `alfred-system`, the
    /// shipped RBAC and OME's example ConfigMap; returns a kubeconfig of its ServiceAccount.
    pub fn webhook_identity(&self) -> PathBuf {
        for namespace in ["ome", "alfred-system"] {
            self.ok(&["create", "namespace", namespace]);
        }
        let manifests = workspace().join("manifests/webhook");
        for file in ["rbac.yaml", "inferenceservice-config.example.yaml"] {
            self.ok(&["apply", "-f", &manifests.join(file).display().to_string()]);
        }
        self.service_account_kubeconfig("alfred-system", "alfred-webhook")
    }

    /// A kubeconfig acting as ServiceAccount `namespace/name` (a token from the TokenRequest
    /// API), so a component runs with exactly the rights its manifests grant.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.ok(&["create", "token", name, "-n", namespace, "--duration", "2h"]);
        let admin: serde_json::Value = serde_json::from_str(&self.ok(&[
            "config",
            "view",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ]))
        .expect("kubectl config view prints JSON");
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": name, "user": {"token": token.trim()}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
            "current-context": name,
        });
        let path = self.dir.join(format!("kubeconfig-{namespace}-{name}"));
        std::fs::write(&path, config.to_string()).expect("the kubeconfig is written");
        path
    }

    /// Starts kube-scheduler (built from the same module as the API server) with its default
    /// profile against this cluster; its log is `logs/scheduler.log`.
    pub fn start_scheduler(&mut self) {
        let bin = control_plane();
        let log = std::fs::File::create(self.dir.join("logs/scheduler.log")).expect("log file");
        let child = Command::new(bin.join("kube-scheduler"))
            .args(["--kubeconfig", &self.kubeconfig.display().to_string()])
            .args(["--leader-elect=false", "--secure-port=0", "-v=2"])
            // Each node's score by plugin, logged at level 10 by the scheduling cycle alone.
            .arg("--vmodule=schedule_one=10")
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("kube-scheduler starts");
        self.children.push(child);
    }

    /// The API server's metrics (Prometheus text).
    pub fn metrics(&self) -> String {
        self.ok(&["get", "--raw", "/metrics"])
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join("logs").join(name)).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
        let _ = Command::new(workspace().join("tests/cluster/down.sh"))
            .arg(&self.dir)
            .status();
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.dir.join("logs").display());
        }
    }
}

/// Helm, built from its Go module once (`tests/helm/build.sh`, cached like the control plane).
pub fn helm() -> PathBuf {
    let out = Command::new(workspace().join("tests/helm/build.sh"))
        .output()
        .expect("tests/helm/build.sh runs");
    assert!(out.status.success(), "building helm: {}", stderr(&out));
    PathBuf::from(stdout(&out).trim())
}

/// Polls `done` until it holds or `limit` passes (then panics naming `what`).
pub fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The demo cluster snapshot (`manifests/examples/demo-cluster.yaml`), which seeds clusters.
pub fn demo() -> PathBuf {
    workspace().join("manifests/examples/demo-cluster.yaml")
}

/// The demo snapshot's path as an argument.
pub fn demo_arg() -> String {
    demo().display().to_string()
}

/// The shipped webhook configurations (`manifests/webhook/webhooks.yaml`) registered by URL
/// instead of through the Service: same rules, selectors, timeouts and failure policies.
pub fn shipped_hooks() -> String {
    use serde::Deserialize as _;
    let text = std::fs::read_to_string(workspace().join("manifests/webhook/webhooks.yaml"))
        .expect("manifests/webhook/webhooks.yaml");
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut config = serde_json::Value::deserialize(doc).expect("a webhook configuration");
        for hook in config["webhooks"].as_array_mut().expect("webhooks") {
            let path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .expect("a service path")
                .to_string();
            hook["clientConfig"] =
                serde_json::json!({"url": format!("URL{path}"), "caBundle": "CA_BUNDLE"});
        }
        docs.push(config.to_string());
    }
    // A stream of JSON documents (kubectl reads them one after another).
    docs.join("\n")
}

impl Cluster {
    /// Creates the objects of a snapshot file in the cluster, statuses included (written
    /// through the status subresource, as kubelet and controllers do), namespaces first.
    pub fn seed(&self, snapshot: &Path) {
        use serde::Deserialize as _;
        let text = std::fs::read_to_string(snapshot).expect("the snapshot file");
        let mut objects = Vec::new();
        let mut namespaces = std::collections::BTreeSet::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let mut object = serde_json::Value::deserialize(doc).expect("a snapshot object");
            if object["kind"] == "SnapshotInfo" {
                continue;
            }
            if let Some(ns) = object["metadata"]["namespace"].as_str() {
                namespaces.insert(ns.to_string());
            }
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("uid");
                meta.remove("resourceVersion");
            }
            objects.push(object);
        }
        for ns in namespaces {
            let _ = self.kubectl(&["create", "namespace", &ns]);
        }
        let stream = |objects: &[&serde_json::Value]| {
            objects
                .iter()
                .map(|o| o.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let all: Vec<_> = objects.iter().collect();
        let out = self.kubectl_with(&["create", "-f", "-"], &stream(&all));
        assert!(out.status.success(), "seeding: {}", stderr(&out));
        // The API server taints every new Node not-ready (TaintNodesByCondition) until the node
        // controller, which this control plane does not run, sees it Ready: put back the
        // snapshot's own taints, as that controller would for Ready nodes.
        let nodes: Vec<_> = objects.iter().filter(|o| o["kind"] == "Node").collect();
        if !nodes.is_empty() {
            let out = self.kubectl_with(&["replace", "-f", "-"], &stream(&nodes));
            assert!(
                out.status.success(),
                "seeding node taints: {}",
                stderr(&out)
            );
        }
        let with_status: Vec<_> = objects
            .iter()
            .filter(|o| o.get("status").is_some() && o["kind"] != "Node")
            .collect();
        let out = self.kubectl_with(
            &["replace", "--subresource=status", "-f", "-"],
            &stream(&with_status),
        );
        assert!(out.status.success(), "seeding statuses: {}", stderr(&out));
    }

    /// Runs `kubectl alfred ARGS` as users do (kubectl finds the plugin on PATH).
    pub fn alfred(&self, args: &[&str]) -> Output {
        let mut all = vec!["alfred"];
        all.extend_from_slice(args);
        self.kubectl(&all)
    }
}

impl Cluster {
    /// Lines in the API server's audit log so far (a mark for [`Cluster::calls_since`]).
    pub fn audit_mark(&self) -> usize {
        self.log("audit.log").lines().count()
    }

    /// The API calls made after `mark` by clients whose user agent starts with `agent`, as
    /// (verb, request URI).
    pub fn calls_since(&self, mark: usize, agent: &str) -> Vec<(String, String)> {
        self.log("audit.log")
            .lines()
            .skip(mark)
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(agent))
            })
            .map(|e| {
                (
                    e["verb"].as_str().unwrap_or_default().to_string(),
                    e["requestURI"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Asserts that the plugin's calls since `mark` are one read of the cluster: one list per
    /// kind and page (11 kinds and the 4 ConfigMaps by name, one page each here) and the one
    /// discovery request for the PodGroup CRD gangs need; nothing else, whatever the pass
    /// computes.
    pub fn assert_one_read(&self, mark: usize) {
        let calls = self.calls_since(mark, "kubectl-alfred/");
        let lists = calls.iter().filter(|(verb, _)| verb == "list").count();
        assert_eq!(lists, 15, "{calls:#?}");
        assert_eq!(calls.len(), 16, "{calls:#?}");
        assert!(
            calls.contains(&("get".to_string(), "/apis".to_string())),
            "{calls:#?}"
        );
    }
}

impl Cluster {
    /// `kubectl alfred ARGS` as the user `alfred-e2e-viewer`, who has no rights until bound.
    pub fn alfred_as_viewer(&self, args: &[&str]) -> Output {
        let mut all = vec!["alfred", "--kubeconfig"];
        let viewer = self.dir.join("kubeconfig-viewer").display().to_string();
        all.push(&viewer);
        all.extend_from_slice(args);
        self.kubectl(&all)
    }
}

/// The `q` quantile, in seconds, of Prometheus histogram `name` between two scrapes, over the
/// series whose labels contain every one of `labels` (`verb="POST"`), interpolated within a
/// bucket as `histogram_quantile` does. None without observations.
pub fn histogram_quantile(
    before: &str,
    after: &str,
    name: &str,
    labels: &[&str],
    q: f64,
) -> Option<f64> {
    let buckets = |text: &str| {
        let mut by_bound = std::collections::BTreeMap::<u64, f64>::new();
        let prefix = format!("{name}_bucket{{");
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let Some((series, count)) = line.rsplit_once(' ') else {
                continue;
            };
            if !labels.iter().all(|l| series.contains(l)) {
                continue;
            }
            let Some(le) = series
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            *by_bound.entry(bound.to_bits()).or_default() += count.parse::<f64>().unwrap_or(0.0);
        }
        by_bound
    };
    let (before, after) = (buckets(before), buckets(after));
    let mut cumulative: Vec<(f64, f64)> = after
        .iter()
        .map(|(bound, n)| {
            (
                f64::from_bits(*bound),
                n - before.get(bound).unwrap_or(&0.0),
            )
        })
        .collect();
    cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, count) in cumulative {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            return Some(
                lower + (bound - lower) * (rank - below) / (count - below).max(f64::MIN_POSITIVE),
            );
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}
