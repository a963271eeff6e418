//! What the scheduler costs: had a GPU-packing profile placed today's GPU pods, how many of the
//! waiting ones would still wait? The GPU pods whose scheduler spreads them are placed again
//! on the same simulator, in the order they were created, with their profile turned to
//! bin-packing (`MostAllocated`, the GPUs weighed `GPU_WEIGHT` times); every other pod stays
//! where it runs, and so do GPU pods on cordoned nodes. An estimate from today's pods only:
//! pods that ran and left before now are not replayed, and an Instance's pods are placed one
//! by one.

use std::collections::BTreeMap;

use serde::Serialize;

use super::placer::Placer;
use super::resources::Ledger;
use super::{NewPod, Profile, profile_named, scheduler_of};
use crate::config::ScoringStrategy;
use crate::kubernetes::quantity::is_gpu_resource;
use crate::model::Context;

/// How much more a GPU counts than cpu or memory (weight 1 each) in the packing profile.
pub const GPU_WEIGHT: i64 = 3;

/// Today's waiting GPU pods, and how many would wait had a GPU-packing profile placed them.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerCost {
    /// The schedulers whose profiles spread the GPU pods replayed.
    pub schedulers: Vec<String>,
    pub waiting_pods: usize,
    pub waiting_gpus: i64,
    pub packed_waiting_pods: usize,
    pub packed_waiting_gpus: i64,
    /// `waitingGpus - packedWaitingGpus`: below 0 when packing would have done worse.
    pub avoided_gpus: i64,
}

/// Does the profile already pack GPUs (MostAllocated, a GPU among the resources it scores)?
pub fn packs_gpus(profile: &Profile) -> bool {
    profile.scoring == ScoringStrategy::MostAllocated
        && profile
            .scoring_resources
            .iter()
            .any(|(name, weight)| is_gpu_resource(name) && *weight > 0)
}

/// The profile with GPU-packing scores: the same filters and plugins, NodeResourcesFit
/// `MostAllocated` over cpu, memory and the GPU resources named.
fn packing(profile: &Profile, gpu_resources: &[String]) -> Profile {
    let mut packed = profile.clone();
    packed.scoring = ScoringStrategy::MostAllocated;
    packed.configuration_id = format!("{}, GPU-packing", profile.configuration_id);
    packed
        .scoring_resources
        .retain(|(name, _)| !is_gpu_resource(name));
    packed
        .scoring_resources
        .extend(gpu_resources.iter().map(|name| (name.clone(), GPU_WEIGHT)));
    packed
}

/// The cost of today's spreading profiles, when a GPU pod they place waits; None when none does.
pub fn scheduler_cost(ctx: &Context<'_>) -> Option<SchedulerCost> {
    let cluster = &ctx.cluster;
    let gpu_resources: Vec<String> = {
        let mut names: Vec<String> = cluster
            .pods
            .iter()
            .filter(|p| p.gpus > 0)
            .flat_map(|p| p.requests.iter().copied())
            .filter(|(name, _)| is_gpu_resource(name))
            .map(|(name, _)| name.to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    };
    // Each scheduler's packing profile; None where its profile packs already or is unknown.
    let mut profiles: BTreeMap<String, Option<Profile>> = BTreeMap::new();
    let mut packing_of = |scheduler: &str| -> Option<Profile> {
        profiles
            .entry(scheduler.to_string())
            .or_insert_with(|| {
                profile_named(ctx.config, scheduler)
                    .ok()
                    .filter(|p| !packs_gpus(p))
                    .map(|p| packing(&p, &gpu_resources))
            })
            .clone()
    };
    let waiting: Vec<bool> = {
        let mut waiting = vec![false; cluster.pods.len()];
        for pending in &cluster.pending {
            waiting[pending.pod] = true;
        }
        waiting
    };
    // The pods placed again, in creation order, each with its packing profile.
    let mut replayed: Vec<(usize, Profile)> = Vec::new();
    for (i, p) in cluster.pods.iter().enumerate() {
        let placed_again = p.gpus > 0
            && !p.terminal
            && !p.terminating
            && match p.host {
                Some(n) => !cluster.nodes[n].node.spec.unschedulable,
                None => waiting[i],
            };
        if !placed_again {
            continue;
        }
        if let Some(profile) = packing_of(scheduler_of(&p.pod.spec)) {
            replayed.push((i, profile));
        }
    }
    if !replayed.iter().any(|(i, _)| waiting[*i]) {
        return None;
    }
    let created = |i: usize| {
        let p = &cluster.pods[i];
        let at = p.pod.metadata.creation_timestamp.unwrap_or(cluster.now);
        (at, p.namespace, p.name)
    };
    replayed.sort_by_key(|(i, _)| created(*i));
    let mut ledger = Ledger::new(cluster);
    let mut lifted = vec![false; cluster.pods.len()];
    for &(i, _) in &replayed {
        lifted[i] = true;
        if let Some(n) = cluster.pods[i].host {
            let request = ledger.requests_of(&cluster.pods[i].pod.spec);
            ledger.remove(n, &request);
        }
    }
    let pods: Vec<NewPod> = replayed
        .iter()
        .map(|(i, _)| NewPod::like(&cluster.pods[*i]))
        .collect();
    let mut placer = Placer::new(ctx, ledger, &pods, &lifted).streaming();
    let mut schedulers: Vec<String> = Vec::new();
    let (mut waiting_pods, mut waiting_gpus) = (0, 0);
    let (mut packed_waiting_pods, mut packed_waiting_gpus) = (0, 0);
    for ((i, profile), pod) in replayed.iter().zip(&pods) {
        let gpus = cluster.pods[*i].gpus;
        if waiting[*i] {
            waiting_pods += 1;
            waiting_gpus += gpus;
        }
        if !schedulers.contains(&profile.scheduler_name) {
            schedulers.push(profile.scheduler_name.clone());
        }
        let request = placer.ledger.requests_of(&pod.spec);
        if placer.place(pod, &request, profile, &[]).is_none() {
            packed_waiting_pods += 1;
            packed_waiting_gpus += gpus;
        }
    }
    schedulers.sort();
    Some(SchedulerCost {
        schedulers,
        waiting_pods,
        waiting_gpus,
        packed_waiting_pods,
        packed_waiting_gpus,
        avoided_gpus: waiting_gpus - packed_waiting_gpus,
    })
}
