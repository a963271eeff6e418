//! Planning one surge move (alfred-reference.md §5 "Move planning"): the new pods start while
//! the old ones run, so they need room on other nodes of the pool that take new pods and can
//! reach the model; the fullest such nodes first.

use super::context::Context;
use crate::annotations::SpotPolicy;

/// Where a move's new pods would go.
#[derive(Clone, Debug, PartialEq)]
pub struct SurgePlan {
    /// Every node the move may target (indices into the cluster's nodes), fullest first.
    pub targets: Vec<usize>,
    /// The planned node of each GPU pod (pod index, node index), largest pod first.
    pub placements: Vec<(usize, usize)>,
}

/// The Instance's live GPU pods, largest first (name breaks ties).
pub fn gpu_pods(ctx: &Context<'_, '_>, instance: usize) -> Vec<usize> {
    let cluster = ctx.cluster;
    let mut pods: Vec<usize> = cluster.instances[instance]
        .pods
        .iter()
        .copied()
        .filter(|&p| !cluster.pods[p].terminal && cluster.pods[p].gpus > 0)
        .collect();
    pods.sort_by(|&a, &b| {
        let (a, b) = (&cluster.pods[a], &cluster.pods[b]);
        b.gpus.cmp(&a.gpus).then_with(|| a.name.cmp(b.name))
    });
    pods
}

/// Nodes that may take the Instance's new pods, fullest first: in its pool, not one of its
/// own nodes, available as a target, not preemptible when avoided, able to reach the model,
/// with room for its smallest pod.
pub fn targets(ctx: &Context<'_, '_>, instance: usize) -> Vec<usize> {
    let cluster = ctx.cluster;
    let inst = &cluster.instances[instance];
    let Some(pool) = inst.pool.as_deref() else {
        return Vec::new();
    };
    let Some(pool) = cluster.pools.iter().find(|p| p.name == pool) else {
        return Vec::new();
    };
    let smallest = gpu_pods(ctx, instance)
        .iter()
        .map(|&p| cluster.pods[p].gpus)
        .min()
        .unwrap_or(0);
    let avoid_spot = ctx.config.spot_policy.avoid_as_target
        || ctx.settings_of(instance).spot_policy == Some(SpotPolicy::Avoid);
    let access = &ctx.access[inst.component];
    let mut targets: Vec<usize> = pool
        .nodes
        .iter()
        .copied()
        .filter(|&n| {
            let node = &cluster.nodes[n];
            node.is_bin(avoid_spot)
                && !inst.nodes.iter().any(|s| s == node.name)
                && node.gpu_free >= smallest
                && access.allows(node)
        })
        .collect();
    targets.sort_by(|&a, &b| {
        let (a, b) = (&cluster.nodes[a], &cluster.nodes[b]);
        a.gpu_free.cmp(&b.gpu_free).then_with(|| a.name.cmp(b.name))
    });
    targets
}

/// Plans the move greedily: each pod, largest first, onto the first target with room left.
/// Err names the pod that fits nowhere.
pub fn plan(ctx: &Context<'_, '_>, instance: usize) -> Result<SurgePlan, String> {
    let cluster = ctx.cluster;
    let inst = &cluster.instances[instance];
    if inst.pool.is_none() {
        return Err("its GPU pods are not all in one pool".into());
    }
    let targets = targets(ctx, instance);
    let mut room: Vec<i64> = targets.iter().map(|&n| cluster.nodes[n].gpu_free).collect();
    let mut placements = Vec::new();
    for p in gpu_pods(ctx, instance) {
        let gpus = cluster.pods[p].gpus;
        let Some(k) = room.iter().position(|&r| r >= gpus) else {
            return Err(no_room(ctx, instance, p, &targets));
        };
        room[k] -= gpus;
        placements.push((p, targets[k]));
    }
    Ok(SurgePlan {
        targets,
        placements,
    })
}

/// Why pod `p` of the Instance fits on none of the targets.
pub fn no_room(ctx: &Context<'_, '_>, instance: usize, p: usize, targets: &[usize]) -> String {
    let cluster = ctx.cluster;
    let pod = &cluster.pods[p];
    let inst = &cluster.instances[instance];
    if targets.is_empty() {
        return format!(
            "no other node of pool {} can take its pods (each must take new pods, reach the model and have {} free GPUs)",
            inst.pool.as_deref().unwrap_or("-"),
            pod.gpus
        );
    }
    format!(
        "its pod {} needs {} GPUs while the old pods still run, and no node left has that many free (most free: {})",
        pod.name,
        pod.gpus,
        targets
            .iter()
            .map(|&n| cluster.nodes[n].gpu_free)
            .max()
            .unwrap_or(0)
    )
}
