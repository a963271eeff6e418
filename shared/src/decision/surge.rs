//! Planning one surge move (alfred-reference.md §5 "Move planning"): the new pods start while
//! the old ones run, so they need room on other nodes of the pool that take new pods and can
//! reach the model; the fullest such nodes first.

use crate::annotations::SpotPolicy;
use crate::model::context::Context;

/// Where a move's new pods would go.
#[derive(Clone, Debug, PartialEq)]
pub struct SurgePlan {
    /// The nodes the move may target (indices into the cluster's nodes), fullest first: the
    /// first `LISTED_TARGETS` of them, and any further ones the placements use.
    pub targets: Vec<usize>,
    /// The planned node of each GPU pod (pod index, node index), largest pod first.
    pub placements: Vec<(usize, usize)>,
}

/// The Instance's live GPU pods, largest first (name breaks ties).
pub fn gpu_pods(ctx: &Context<'_>, instance: usize) -> Vec<usize> {
    let cluster = &ctx.cluster;
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

/// How many targets a plan lists: enough for the hints, the arbiter's choices and people;
/// scanning goes further when the pods need it.
pub const LISTED_TARGETS: usize = 16;

/// Nodes that may take the Instance's new pods, fullest first: in its pool, not one of its
/// own nodes, available as a target, not preemptible when avoided, able to reach the model,
/// with room for its smallest pod. Lazy: a pool's nodes are sorted once (`Context`).
/// `exclude` (node indices) are left out too: nodes being drained.
pub fn candidates<'a>(
    ctx: &'a Context<'_>,
    instance: usize,
    exclude: &'a [usize],
) -> impl Iterator<Item = usize> + 'a {
    let cluster = &ctx.cluster;
    let inst = &cluster.instances[instance];
    let order: &[usize] = inst
        .pool
        .as_deref()
        .and_then(|p| ctx.pool_order.get(p))
        .map_or(&[], Vec::as_slice);
    let smallest = gpu_pods(ctx, instance)
        .iter()
        .map(|&p| cluster.pods[p].gpus)
        .min()
        .unwrap_or(0);
    let avoid_spot = ctx.config.spot_policy.avoid_as_target
        || ctx.settings_of(instance).spot_policy == Some(SpotPolicy::Avoid);
    let component = inst.component;
    let first = order.partition_point(|&n| cluster.nodes[n].gpu_free < smallest);
    order[first..].iter().copied().filter(move |&n| {
        let node = &cluster.nodes[n];
        // The pool order holds only nodes available as targets.
        node.is_bin(avoid_spot)
            && !inst.nodes.iter().any(|s| s == node.name)
            && ctx.model_allows(component, n)
            && !exclude.contains(&n)
    })
}

/// The first `limit` candidate targets.
pub fn targets(ctx: &Context<'_>, instance: usize, exclude: &[usize], limit: usize) -> Vec<usize> {
    candidates(ctx, instance, exclude).take(limit).collect()
}

/// Plans the move greedily: each pod, largest first, onto the first target with room left.
/// Err names the pod that fits nowhere.
pub fn plan(ctx: &Context<'_>, instance: usize, exclude: &[usize]) -> Result<SurgePlan, NoRoom> {
    let cluster = &ctx.cluster;
    let inst = &cluster.instances[instance];
    if inst.pool.is_none() {
        return Err(NoRoom::SplitPools);
    }
    let mut more = candidates(ctx, instance, exclude);
    let mut scanned: Vec<(usize, i64)> = Vec::new();
    let mut placements = Vec::new();
    for p in gpu_pods(ctx, instance) {
        let gpus = cluster.pods[p].gpus;
        let found = match scanned.iter().position(|&(_, room)| room >= gpus) {
            Some(k) => Some(k),
            None => loop {
                let Some(n) = more.next() else { break None };
                scanned.push((n, cluster.nodes[n].gpu_free));
                if cluster.nodes[n].gpu_free >= gpus {
                    break Some(scanned.len() - 1);
                }
            },
        };
        let Some(k) = found else {
            let listed: Vec<usize> = scanned.iter().map(|s| s.0).collect();
            return Err(no_room(ctx, instance, p, &listed));
        };
        scanned[k].1 -= gpus;
        placements.push((p, scanned[k].0));
    }
    let mut targets: Vec<usize> = scanned.iter().map(|s| s.0).take(LISTED_TARGETS).collect();
    targets.extend(more.take(LISTED_TARGETS.saturating_sub(targets.len())));
    Ok(SurgePlan {
        targets,
        placements,
    })
}

/// Why an Instance's pods have no room to move to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoRoom {
    #[error("its GPU pods are not all in one pool")]
    SplitPools,
    #[error(
        "no other node of pool {pool} can take its pods (each must take new pods, reach the model and have {gpus} free GPUs)"
    )]
    NoTarget { pool: String, gpus: i64 },
    #[error(
        "its pod {pod} needs {gpus} GPUs while the old pods still run, and no node left has that many free (most free: {most_free})"
    )]
    TooLittleFree {
        pod: String,
        gpus: i64,
        most_free: i64,
    },
    /// Planned jointly: the moves off the same nodes took the room.
    #[error("the free GPUs it needs are taken by the other moves planned off the same nodes")]
    Taken,
    /// Planned jointly: kube-scheduler's filters admit its pods on no node with GPU room.
    #[error(
        "its pod {pod} passes kube-scheduler's filters on no node with GPU room for it (on {node}, the fullest: {reasons})"
    )]
    Refused {
        pod: String,
        node: String,
        reasons: String,
    },
    /// Planned jointly: emptying other nodes wholly leaves it in place.
    #[error(
        "the plan leaves it in place: there is room to empty other nodes wholly, not this one too"
    )]
    Stays,
}

/// Why pod `p` of the Instance fits on none of the targets.
pub fn no_room(ctx: &Context<'_>, instance: usize, p: usize, targets: &[usize]) -> NoRoom {
    let cluster = &ctx.cluster;
    let pod = &cluster.pods[p];
    let inst = &cluster.instances[instance];
    if targets.is_empty() {
        return NoRoom::NoTarget {
            pool: inst.pool.as_deref().unwrap_or("-").to_string(),
            gpus: pod.gpus,
        };
    }
    NoRoom::TooLittleFree {
        pod: pod.name.to_string(),
        gpus: pod.gpus,
        most_free: targets
            .iter()
            .map(|&n| cluster.nodes[n].gpu_free)
            .max()
            .unwrap_or(0),
    }
}
