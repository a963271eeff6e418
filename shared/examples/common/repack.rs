//! The ideal repack the replays measure against: every movable Instance packed anew in every
//! resource, with the scheduler's node filters.

use alfred::model::Context;
use alfred::model::cluster::Cluster;

/// The movable Instances an ideal repack moves: an Instance that fills its node stays (moving
/// it only swaps which node is full).
pub fn repackable(cluster: &Cluster<'_>, movable: &[bool]) -> Vec<bool> {
    cluster
        .instances
        .iter()
        .zip(movable)
        .map(|(inst, &m)| {
            m && !inst.pods.iter().any(|&p| {
                let pod = &cluster.pods[p];
                pod.host
                    .is_some_and(|n| pod.gpus >= cluster.nodes[n].gpu_total)
            })
        })
        .collect()
}

/// The resources the replays check, in this order.
pub const RESOURCES: [&str; 3] = ["nvidia.com/gpu", "cpu", "memory"];

/// A pod's requests of `RESOURCES`, in milli-units.
pub fn requests_of(cluster: &Cluster<'_>, p: usize) -> [i64; 3] {
    let all = &cluster.pods[p].requests;
    RESOURCES.map(|r| all.iter().find(|(n, _)| *n == r).map_or(0, |(_, v)| *v))
}

/// Each node's allocatable `RESOURCES`, in milli-units.
pub fn allocatable_of(cluster: &Cluster<'_>) -> Vec<[i64; 3]> {
    cluster
        .nodes
        .iter()
        .map(|n| {
            RESOURCES.map(|r| {
                n.node
                    .allocatable()
                    .iter()
                    .find(|(name, _)| *name == r)
                    .and_then(|(_, q)| alfred::kubernetes::quantity::value(q))
                    .map_or(0, |v| (v * 1000.0).round() as i64)
            })
        })
        .collect()
}

/// The ideal repack in every resource: first-fit decreasing (most GPUs first) of the
/// repackable Instances' pods onto the nodes of their pool, fullest first, each where its GPUs,
/// CPU and memory fit beside the pods that stay and the scheduler's node filters allow it.
/// The free GPUs per node it leaves.
pub fn all_resources(ctx: &Context<'_>, repackable: &[bool]) -> Vec<i64> {
    let cluster = &ctx.cluster;
    let surges = alfred::simulate::Surges::new(ctx);
    let requests = |p: usize| requests_of(cluster, p);
    let mut free = allocatable_of(cluster);
    let mut moves = vec![false; cluster.pods.len()];
    for (i, inst) in cluster.instances.iter().enumerate() {
        for &p in &inst.pods {
            moves[p] = repackable[i];
        }
    }
    let mut items: Vec<(usize, [i64; 3])> = Vec::new();
    for (p, pod) in cluster.pods.iter().enumerate() {
        let (Some(n), false) = (pod.host, pod.terminal) else {
            continue;
        };
        let r = requests(p);
        let moves = moves[p];
        if moves && cluster.nodes[n].pool.is_some() {
            items.push((p, r));
        } else {
            for k in 0..3 {
                free[n][k] -= r[k];
            }
        }
    }
    items.sort_by_key(|&(p, r)| (std::cmp::Reverse(r[0]), std::cmp::Reverse(r[1]), p));
    let mut order: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&n| cluster.nodes[n].gpu_total > 0)
        .collect();
    order.sort_by_key(|&n| (free[n][0], n));
    for (p, r) in items {
        let pool = cluster.nodes[cluster.pods[p].host.unwrap()].pool.as_ref();
        let to = order.iter().copied().find(|&n| {
            cluster.nodes[n].pool.as_ref() == pool
                && (0..3).all(|k| free[n][k] >= r[k])
                && surges.allows(p, n)
        });
        // A pod that fits nowhere else stays where it is.
        let to = to.unwrap_or_else(|| cluster.pods[p].host.unwrap());
        for k in 0..3 {
            free[to][k] -= r[k];
        }
    }
    free.iter().map(|f| f[0] / 1000).collect()
}
