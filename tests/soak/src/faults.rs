//! The faults, on a schedule drawn from the seed and the run's length: a leader SIGKILLed (and
//! started again under a new name, as a Deployment replaces its pod), kube-apiserver
//! restarted, etcd killed, the caretakers' connections stalled, an `alfred-config` that does
//! not load, the migration guard removed, a node turning GpuUnhealthy and one labelled for
//! maintenance, and bursts of pods that pile up pending. Each is logged with its time.

use std::time::Duration;

use anyhow::Context;

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "fault")]
pub enum Fault {
    LeaderKill,
    ApiServerRestart,
    EtcdKill,
    /// The caretakers' connections stall for this long.
    Stall {
        seconds: u64,
    },
    /// `alfred-config` holds a document that does not load for this long.
    BadConfig {
        seconds: u64,
    },
    /// The migration guard is deleted for this long.
    GuardRemoved {
        seconds: u64,
    },
    GpuUnhealthy,
    Maintenance,
    /// This many 8-GPU pods arrive at once and leave after `seconds`.
    Burst {
        pods: usize,
        seconds: u64,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Planned {
    /// Seconds from the start of the run.
    pub at: u64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// One quick step of a fault: a fault with a length is a start and an end, a leader kill a
/// kill and, 5 s later, a new replica, so one sequence of steps keeps every fault's times.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    KillLeader,
    StartReplica,
    RestartApiServer,
    KillEtcd,
    Stall(bool),
    BadConfig(bool),
    /// The guard present (true) or deleted.
    Guard(bool),
    GpuUnhealthy,
    Maintenance,
    /// A burst's pods created (with its number) or deleted.
    Burst(usize, usize, bool),
}

/// The plan as steps, in time order (seconds from the start).
pub fn steps(plan: &[Planned]) -> Vec<(u64, Step)> {
    let mut steps = Vec::new();
    let mut bursts = 0;
    for p in plan {
        // (the step now, and the step that ends it with how long after)
        let (now, end) = match &p.fault {
            Fault::LeaderKill => (Step::KillLeader, Some((Step::StartReplica, 5))),
            Fault::ApiServerRestart => (Step::RestartApiServer, None),
            Fault::EtcdKill => (Step::KillEtcd, None),
            Fault::Stall { seconds } => (Step::Stall(true), Some((Step::Stall(false), *seconds))),
            Fault::BadConfig { seconds } => (
                Step::BadConfig(true),
                Some((Step::BadConfig(false), *seconds)),
            ),
            Fault::GuardRemoved { seconds } => {
                (Step::Guard(false), Some((Step::Guard(true), *seconds)))
            }
            Fault::GpuUnhealthy => (Step::GpuUnhealthy, None),
            Fault::Maintenance => (Step::Maintenance, None),
            Fault::Burst { pods, seconds } => {
                bursts += 1;
                let end = Step::Burst(bursts, *pods, false);
                (Step::Burst(bursts, *pods, true), Some((end, *seconds)))
            }
        };
        steps.push((p.at, now));
        if let Some((step, after)) = end {
            steps.push((p.at + after, step));
        }
    }
    steps.sort_by_key(|(at, _)| *at);
    steps
}

/// How many of each fault a run of `run` gets, and when, from `seed`. A run of two hours gets
/// what the issue asks of the soak (12 leader kills, 6 API server restarts, one etcd kill, 10
/// minutes of stalls, one bad configuration, one removed guard, ...); a short run fewer, at
/// least one of each. Nothing happens in the first and last tenth (a start and an end to
/// measure from), and the nodes are signalled in the first 30% (time to empty them).
pub fn plan(run: Duration, seed: u64) -> Vec<Planned> {
    let seconds = run.as_secs();
    let minutes = seconds as f64 / 60.0;
    let count = |every_minutes: f64| ((minutes / every_minutes).round() as usize).max(1);
    let stall_total = seconds / 12; // 10 minutes in 2 hours
    let stall = (stall_total / 4).clamp(20, 150);
    let window = (seconds / 10).clamp(20, 180); // bad config, removed guard
    let kinds: Vec<(usize, Fault)> = vec![
        (count(10.0), Fault::LeaderKill),
        (count(20.0), Fault::ApiServerRestart),
        (1, Fault::EtcdKill),
        (
            ((stall_total as f64 / stall as f64).ceil() as usize).max(1),
            Fault::Stall { seconds: stall },
        ),
        (1, Fault::BadConfig { seconds: window }),
        (1, Fault::GuardRemoved { seconds: window }),
        (1, Fault::GpuUnhealthy),
        (1, Fault::Maintenance),
        (
            count(30.0),
            Fault::Burst {
                pods: 200,
                seconds: window,
            },
        ),
    ];
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut draw = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut planned = Vec::new();
    for (n, fault) in kinds {
        // A node signalled in the first 30%, so that there is time to empty it; the rest
        // spread evenly over the run, each moved by up to a third of the spacing.
        let last = if matches!(fault, Fault::GpuUnhealthy | Fault::Maintenance) {
            0.3
        } else {
            0.9
        };
        let (from, to) = (seconds as f64 * 0.1, seconds as f64 * last);
        let spacing = (to - from) / n as f64;
        for i in 0..n {
            let at = from + spacing * (i as f64 + 0.5) + spacing * (draw() - 0.5) * 0.66;
            planned.push(Planned {
                at: at as u64,
                fault: fault.clone(),
            });
        }
    }
    planned.sort_by_key(|p| p.at);
    planned
}

/// What the faults act on.
pub struct Stage {
    pub launcher: crate::harness::Launcher,
    pub replicas: std::sync::Arc<std::sync::Mutex<Vec<crate::harness::Replica>>>,
    pub plugin: std::path::PathBuf,
    /// The kubeconfig through the stalling proxy, which the caretakers use.
    pub through_proxy: std::path::PathBuf,
    pub proxy: crate::proxy::Proxy,
    pub client: kube::Client,
    pub config: String,
    pub guard: String,
    /// Replicas started so far (a restarted one gets the next number, as a new pod a new name).
    pub started: usize,
    pub record: std::fs::File,
    /// Nodes that turned GpuUnhealthy or were put under maintenance, with the OME pods each
    /// held then.
    pub signalled: Vec<(String, Vec<String>)>,
    /// When each leader kill happened (ms since the epoch), for the failover gaps.
    pub kills: Vec<u64>,
    pub seed: u64,
}

impl Stage {
    fn note(&mut self, what: &serde_json::Value) {
        use std::io::Write;
        let at = crate::objects::stamp(k8s_openapi::jiff::Timestamp::now());
        let mut line = serde_json::json!({"at": at});
        if let (Some(line), Some(what)) = (line.as_object_mut(), what.as_object()) {
            line.extend(what.clone());
        }
        let _ = writeln!(self.record, "{line}");
    }

    fn kubectl(&self, args: &[&str], stdin: &str) -> anyhow::Result<String> {
        use std::io::Write;
        let mut child = std::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.launcher.kubeconfig)
            .env("PATH", &self.launcher.path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            anyhow::bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn set_config(&self, text: &str) -> anyhow::Result<()> {
        let map = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alfred-config", "namespace": "ome"}, "data": {"config.yaml": text}});
        self.kubectl(&["apply", "-f", "-"], &map.to_string())
            .map(|_| ())
    }

    /// Starts a new caretaker replica (the next name).
    pub fn start_replica(&mut self) -> anyhow::Result<()> {
        let identity = format!("soak-{}", self.started);
        self.started += 1;
        let replica = crate::harness::Replica::start(
            &self.launcher,
            &self.plugin,
            &identity,
            &self.through_proxy,
        )?;
        self.replicas.lock().expect("not poisoned").push(replica);
        Ok(())
    }

    /// The Lease's holder, read from the API server (tried for up to a minute).
    async fn leader(&self) -> Option<String> {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(self.client.clone(), "ome");
        for _ in 0..60 {
            if let Ok(lease) = leases.get("alfred.ome.io").await {
                return lease.spec.and_then(|s| s.holder_identity);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        None
    }

    /// A node holding OME pods, and those pods: drawn from the seed, or the one holding the
    /// fewest (maintenance is planned where it disturbs least).
    async fn busy_node(&mut self, skip: &[String], fewest: bool) -> Option<(String, Vec<String>)> {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), crate::objects::NAMESPACE);
        let list = pods
            .list(&kube::api::ListParams::default().labels("ome.io/inferenceservice"))
            .await
            .ok()?;
        let mut by_node: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for p in list.items {
            if let Some(node) = p
                .spec
                .and_then(|s| s.node_name)
                .filter(|n| !skip.contains(n))
            {
                by_node
                    .entry(node)
                    .or_default()
                    .push(p.metadata.name.unwrap_or_default());
            }
        }
        self.seed = self
            .seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if fewest {
            return by_node.into_iter().min_by_key(|(_, pods)| pods.len());
        }
        let pick = (self.seed >> 33) as usize % by_node.len().max(1);
        by_node.into_iter().nth(pick)
    }

    /// Carries out one step.
    pub async fn apply(&mut self, step: &Step) -> anyhow::Result<()> {
        self.note(&serde_json::json!({"step": format!("{step:?}")}));
        match step {
            Step::KillLeader => {
                let Some(leader) = self.leader().await else {
                    anyhow::bail!("no leader to kill");
                };
                let victim = {
                    let mut replicas = self.replicas.lock().expect("not poisoned");
                    let i = replicas.iter().position(|r| r.identity == leader);
                    i.map(|i| replicas.remove(i))
                };
                let Some(mut victim) = victim else {
                    anyhow::bail!("the leader {leader} is not one of the soak's replicas");
                };
                let _ = victim.process.child.kill(); // SIGKILL
                self.kills.push(crate::checker::now_ms());
                self.note(&serde_json::json!({"killed": leader}));
            }
            Step::StartReplica => self.start_replica()?,
            Step::RestartApiServer => self.launcher.restart("kube-apiserver", "-TERM")?,
            Step::KillEtcd => self.launcher.restart("etcd", "-KILL")?,
            Step::Stall(on) => self.proxy.stall(*on),
            Step::BadConfig(on) => {
                let text = if *on {
                    "schemaVersion: 2\nmode: execute\n".to_string()
                } else {
                    self.config.clone()
                };
                self.set_config(&text)?;
            }
            Step::Guard(present) => {
                let verb = if *present { "apply" } else { "delete" };
                self.kubectl(&[verb, "-f", &self.guard.clone()], "")?;
            }
            Step::GpuUnhealthy => {
                let (node, pods) = self.pick_busy_node(false).await?;
                let now = crate::objects::stamp(k8s_openapi::jiff::Timestamp::now());
                // The health checker raises the condition; the device plugin withdraws the
                // node's GPUs, so nothing new lands there.
                let patch = serde_json::json!({"status": {"allocatable": {"nvidia.com/gpu": "0"},
                    "conditions": [{"type": "GpuUnhealthy", "status": "True", "reason": "XidErrors",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
                self.kubectl(
                    &[
                        "patch",
                        "node",
                        &node,
                        "--subresource=status",
                        "-p",
                        &patch.to_string(),
                    ],
                    "",
                )?;
                self.note(&serde_json::json!({"node": node, "omePods": pods}));
                self.signalled.push((node, pods));
            }
            Step::Maintenance => {
                let (node, pods) = self.pick_busy_node(true).await?;
                self.kubectl(
                    &[
                        "label",
                        "node",
                        &node,
                        "maintenance.example.com/state=patching",
                    ],
                    "",
                )?;
                self.note(&serde_json::json!({"node": node, "omePods": pods}));
                self.signalled.push((node, pods));
            }
            Step::Burst(burst, pods, arrive) => {
                let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                    kube::Api::namespaced(self.client.clone(), crate::objects::NAMESPACE);
                for i in 0..*pods {
                    let name = format!("burst-{burst}-{i:03}");
                    if !*arrive {
                        let _ = api.delete(&name, &Default::default()).await;
                        continue;
                    }
                    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
                        serde_json::json!({
                        "metadata": {"name": name},
                        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "burst:1",
                            "resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}}}]}}),
                    )?;
                    let _ = api.create(&Default::default(), &pod).await;
                }
            }
        }
        Ok(())
    }

    async fn pick_busy_node(&mut self, fewest: bool) -> anyhow::Result<(String, Vec<String>)> {
        let skip: Vec<String> = self.signalled.iter().map(|(n, _)| n.clone()).collect();
        self.busy_node(&skip, fewest)
            .await
            .context("no node holds OME pods")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(plan: &[Planned], f: impl Fn(&Fault) -> bool) -> usize {
        plan.iter().filter(|p| f(&p.fault)).count()
    }

    #[test]
    fn two_hours_get_what_the_soak_must_show() {
        let run = Duration::from_secs(7200);
        let plan = plan(run, 1);
        assert!(count(&plan, |f| *f == Fault::LeaderKill) >= 10);
        assert!(count(&plan, |f| *f == Fault::ApiServerRestart) >= 5);
        assert_eq!(count(&plan, |f| *f == Fault::EtcdKill), 1);
        let stalled: u64 = plan
            .iter()
            .filter_map(|p| match p.fault {
                Fault::Stall { seconds } => Some(seconds),
                _ => None,
            })
            .sum();
        assert!(stalled >= 600, "{stalled} s of stalls");
        assert_eq!(count(&plan, |f| matches!(f, Fault::BadConfig { .. })), 1);
        assert_eq!(count(&plan, |f| matches!(f, Fault::GuardRemoved { .. })), 1);
        assert!(plan.iter().all(|p| p.at >= 720 && p.at <= 6480), "{plan:?}");
        assert!(plan.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn every_fault_with_a_length_ends_and_a_killed_leader_is_replaced() {
        let plan = plan(Duration::from_secs(7200), 3);
        let steps = steps(&plan);
        let count = |s: &Step| steps.iter().filter(|(_, x)| x == s).count();
        assert_eq!(count(&Step::Stall(true)), count(&Step::Stall(false)));
        assert_eq!(count(&Step::KillLeader), count(&Step::StartReplica));
        assert_eq!(count(&Step::Guard(false)), 1);
        assert_eq!(count(&Step::Guard(true)), 1);
        assert!(steps.windows(2).all(|w| w[0].0 <= w[1].0));
        let last_stall_end = steps
            .iter()
            .rev()
            .find(|(_, s)| *s == Step::Stall(false))
            .unwrap();
        assert!(last_stall_end.0 <= 7200);
    }

    #[test]
    fn a_short_run_gets_one_of_each_and_the_same_seed_the_same_plan() {
        let run = Duration::from_secs(360);
        let plan = plan(run, 7);
        for kind in [
            Fault::LeaderKill,
            Fault::ApiServerRestart,
            Fault::EtcdKill,
            Fault::GpuUnhealthy,
            Fault::Maintenance,
        ] {
            assert_eq!(count(&plan, |f| *f == kind), 1, "{kind:?}");
        }
        assert_eq!(format!("{plan:?}"), format!("{:?}", super::plan(run, 7)));
    }
}
