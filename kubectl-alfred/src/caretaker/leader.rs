//! Who leads: a `coordination.k8s.io` Lease held through `kube-lease-manager`, and the fence
//! that every write of a pass goes through. The crate says whether this replica holds the
//! lease; the fence asks the API server before each write, and allows it only while the lease's
//! last renewal is younger than the renew deadline, which is shorter than the lease: a leader
//! that cannot renew stops writing before any other replica may take the lease over.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// OME's Alfred's Lease (alfred-reference.md §1), so the two never lead at once.
pub const LEASE_NAME: &str = "alfred.ome.io";

/// How the lease is held: OME's figures (lease 15 s, renew deadline 10 s, retry 2 s).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub lease: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// The order the fence depends on: renewals come more often than the deadline, which
    /// ends before the lease does.
    pub fn check(&self) -> Result<(), String> {
        let secs = |d: Duration| d.as_secs();
        if secs(self.retry) == 0 || self.retry.subsec_nanos() != 0 {
            return Err("--leader-elect-retry-period must be whole seconds, at least 1s".into());
        }
        if self.lease.subsec_nanos() != 0 || self.renew_deadline.subsec_nanos() != 0 {
            return Err("lease durations are whole seconds (a Lease counts in seconds)".into());
        }
        if !(self.retry < self.renew_deadline && self.renew_deadline < self.lease) {
            return Err(format!(
                "need retry period < renew deadline < lease duration, got {}s, {}s, {}s",
                secs(self.retry),
                secs(self.renew_deadline),
                secs(self.lease)
            ));
        }
        Ok(())
    }
}

/// This replica's part in the election.
pub struct Election {
    /// True while the lease manager holds the lease for this replica.
    pub leading: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    pub fence: Arc<Fence>,
}

impl Election {
    /// Joins the election on the Lease in `namespace` (created if missing).
    pub async fn join(
        client: &Client,
        namespace: &str,
        identity: &str,
        timing: Timing,
    ) -> anyhow::Result<Election> {
        let lease = timing.lease.as_secs();
        // The crate renews `grace` seconds before expiry: every `retry`.
        let grace = lease - timing.retry.as_secs();
        let manager = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(lease)
            .with_grace(grace)
            .build()
            .await
            .map_err(|e| {
                anyhow::anyhow!("joining the election on Lease {namespace}/{LEASE_NAME}: {e}")
            })?;
        let (leading, task) = manager.watch().await;
        let fence = Arc::new(Fence {
            api: Api::namespaced(client.clone(), namespace),
            identity: identity.to_string(),
            renew_deadline: timing.renew_deadline,
        });
        Ok(Election {
            leading,
            task,
            fence,
        })
    }

    /// Gives the lease up (on SIGTERM), so a standby takes over at once instead of after the
    /// lease expires.
    pub async fn resign(self) {
        drop(self.leading);
        match self.task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("note: the lease was not released: {e}"),
            Err(e) => eprintln!("note: the lease was not released: {e}"),
        }
    }
}

/// The check before every write of a pass.
pub struct Fence {
    api: Api<Lease>,
    identity: String,
    renew_deadline: Duration,
}

/// Why the fence refused a write.
#[derive(Debug, thiserror::Error)]
#[error("this replica does not lead now ({0}); it writes nothing until it leads again")]
pub struct Fenced(pub String);

impl Fence {
    /// Reads the Lease: the instant until which this replica may still write (its last
    /// renewal plus the renew deadline), or why it may not.
    pub async fn confirm(&self) -> Result<Instant, Fenced> {
        let asked = Instant::now();
        let lease = self
            .api
            .get_opt(LEASE_NAME)
            .await
            .map_err(|e| Fenced(format!("reading Lease {LEASE_NAME}: {e}")))?
            .ok_or_else(|| Fenced(format!("Lease {LEASE_NAME} is gone")))?;
        let left = left_to_write(
            &lease.spec.unwrap_or_default(),
            &self.identity,
            self.renew_deadline,
            SystemTime::now(),
        )?;
        // Counted from before the read, on the clock that renewed it.
        Ok(asked + left)
    }
}

/// How long a replica may still write under `lease` at `now`: it must hold it, and its last
/// renewal must be younger than the renew deadline.
fn left_to_write(
    lease: &LeaseSpec,
    identity: &str,
    renew_deadline: Duration,
    now: SystemTime,
) -> Result<Duration, Fenced> {
    let holder = lease.holder_identity.as_deref().unwrap_or_default();
    if holder != identity {
        return Err(Fenced(match holder {
            "" => "the lease is free".into(),
            h => format!("{h} holds the lease"),
        }));
    }
    let renewed: SystemTime = lease
        .renew_time
        .as_ref()
        .map(|t| t.0.into())
        .ok_or_else(|| Fenced("the lease has no renewTime".into()))?;
    let age = now.duration_since(renewed).unwrap_or(Duration::ZERO);
    renew_deadline
        .checked_sub(age)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Fenced(format!(
                "its last renewal is {} s old, past the {} s renew deadline",
                age.as_secs(),
                renew_deadline.as_secs()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_must_leave_the_fence_room() {
        assert_eq!(Timing::default().check(), Ok(()));
        let s = Duration::from_secs;
        let bad = Timing {
            lease: s(10),
            renew_deadline: s(10),
            retry: s(2),
        };
        assert!(bad.check().unwrap_err().contains("renew deadline < lease"));
        let fractional = Timing {
            retry: Duration::from_millis(1500),
            ..Timing::default()
        };
        assert!(fractional.check().is_err());
    }

    #[test]
    fn only_the_holder_writes_and_only_until_the_renew_deadline() {
        let renewed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let spec = |holder: &str| LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                renewed.try_into().unwrap(),
            )),
            ..LeaseSpec::default()
        };
        let deadline = Duration::from_secs(10);
        let at = |secs| renewed + Duration::from_secs(secs);
        assert_eq!(
            left_to_write(&spec("r1"), "r1", deadline, at(3)).unwrap(),
            Duration::from_secs(7)
        );
        let taken = left_to_write(&spec("r2"), "r1", deadline, at(3)).unwrap_err();
        assert_eq!(taken.0, "r2 holds the lease");
        let late = left_to_write(&spec("r1"), "r1", deadline, at(10)).unwrap_err();
        assert!(late.0.contains("past the 10 s renew deadline"), "{late}");
        let free = left_to_write(&LeaseSpec::default(), "r1", deadline, at(0)).unwrap_err();
        assert_eq!(free.0, "the lease is free");
    }
}
