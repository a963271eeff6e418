//! The soak's processes: the caretaker replicas (started, killed and started again as a
//! Deployment would), kube-scheduler and KWOK, and the control plane `tests/cluster/up.sh`
//! started, restarted with the very command line it was started with.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use alfred_e2e::{Cluster, free_port};
use anyhow::{Context, bail};

/// A process the soak started, killed when dropped.
pub struct Process {
    pub child: Child,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What starts processes against the cluster: its directory, kubeconfig and PATH.
#[derive(Clone)]
pub struct Launcher {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub path: String,
}

impl Launcher {
    pub fn of(cluster: &Cluster) -> Launcher {
        Launcher {
            dir: cluster.dir.clone(),
            kubeconfig: cluster.kubeconfig.clone(),
            path: cluster.path().to_string(),
        }
    }

    fn log(&self, name: &str, ext: &str) -> anyhow::Result<std::fs::File> {
        let path = self.dir.join("logs").join(format!("{name}.{ext}"));
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("{}", path.display()))
    }

    /// Starts `program` with `kubeconfig`; its stdout goes to logs/NAME.out, its stderr to
    /// logs/NAME.log (appended: a restarted process continues its files).
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        kubeconfig: &Path,
    ) -> anyhow::Result<Process> {
        let child = Command::new(program)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .stdout(self.log(name, "out")?)
            .stderr(self.log(name, "log")?)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Process { child })
    }

    /// Stops the control plane's process `name` (kube-apiserver, etcd) with `signal` and starts
    /// it again with the same command line, its log continued and its pid file updated, as a
    /// kubelet restarts a static pod.
    pub fn restart(&self, name: &str, signal: &str) -> anyhow::Result<()> {
        let pid_file = self.dir.join(format!("{name}.pid"));
        let pid = std::fs::read_to_string(&pid_file)?.trim().to_string();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .with_context(|| format!("{name} (pid {pid}) is not running"))?;
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let status = Command::new("kill").args([signal, &pid]).status()?;
        if !status.success() {
            bail!("kill {signal} {pid} ({name}) failed");
        }
        for _ in 0..300 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = self.log(name, "log")?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name} again"))?;
        std::fs::write(&pid_file, child.id().to_string())?;
        // Left running: down.sh stops it by its pid file.
        std::mem::forget(child);
        Ok(())
    }
}

/// One caretaker replica and where it serves its probes.
pub struct Replica {
    pub identity: String,
    pub process: Process,
    pub probes: u16,
}

impl Replica {
    /// Starts `kubectl alfred caretaker` as `identity`, reaching the API server through
    /// `kubeconfig`.
    pub fn start(
        launcher: &Launcher,
        plugin: &Path,
        identity: &str,
        kubeconfig: &Path,
    ) -> anyhow::Result<Replica> {
        let (metrics, probes) = (free_port(), free_port());
        let args: Vec<String> = [
            "caretaker",
            "--namespace",
            "ome",
            "--identity",
            identity,
            "--metrics-bind-address",
            &format!("127.0.0.1:{metrics}"),
            "--health-probe-bind-address",
            &format!("127.0.0.1:{probes}"),
            "--enable-maintenance-cordon",
            "-o",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let process =
            launcher.spawn(&format!("caretaker-{identity}"), plugin, &args, kubeconfig)?;
        Ok(Replica {
            identity: identity.into(),
            process,
            probes,
        })
    }

    /// Resident memory in KiB, from /proc.
    pub fn rss_kib(&self) -> Option<u64> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.process.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}
