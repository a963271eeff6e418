//! The ideal repack the replays measure against: every movable Instance packed anew in every
//! resource, with the scheduler's node filters.

use std::collections::HashMap;

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
    // Each pool's nodes in that order, indexed by their free GPUs: the first node with room
    // is found without looking at every full one before it.
    let mut fits: Vec<FirstFit> = Vec::new();
    let mut fit_of_pool: HashMap<&str, usize> = HashMap::new();
    let mut place: Vec<Option<(usize, usize)>> = vec![None; cluster.nodes.len()];
    for &n in &order {
        if let Some(pool) = &cluster.nodes[n].pool {
            let f = *fit_of_pool.entry(pool).or_insert_with(|| {
                fits.push(FirstFit::default());
                fits.len() - 1
            });
            place[n] = Some((f, fits[f].nodes.len()));
            fits[f].nodes.push(n);
        }
    }
    for fit in &mut fits {
        fit.index(|n| free[n][0]);
    }
    for (p, r) in items {
        let from = cluster.pods[p].host.unwrap();
        let to = place[from].and_then(|(f, _)| {
            let fit = &fits[f];
            fit.first(r[0], |n| {
                (1..3).all(|k| free[n][k] >= r[k]) && surges.allows(p, n)
            })
        });
        // A pod that fits nowhere else stays where it is.
        let to = to.unwrap_or(from);
        for k in 0..3 {
            free[to][k] -= r[k];
        }
        if let Some((f, at)) = place[to] {
            fits[f].set(at, free[to][0]);
        }
    }
    free.iter().map(|f| f[0] / 1000).collect()
}

/// Nodes in first-fit order under a tree of the most free GPUs of each stretch of them.
#[derive(Default)]
struct FirstFit {
    nodes: Vec<usize>,
    /// `most[1]` covers every node; `most[k]` covers the stretches of `most[2k]` and
    /// `most[2k + 1]`; the leaves start at `leaves`.
    most: Vec<i64>,
    leaves: usize,
}

impl FirstFit {
    fn index(&mut self, free_gpus: impl Fn(usize) -> i64) {
        self.leaves = self.nodes.len().next_power_of_two();
        self.most = vec![i64::MIN; 2 * self.leaves];
        for (at, &n) in self.nodes.iter().enumerate() {
            self.most[self.leaves + at] = free_gpus(n);
        }
        for k in (1..self.leaves).rev() {
            self.most[k] = self.most[2 * k].max(self.most[2 * k + 1]);
        }
    }

    fn set(&mut self, at: usize, free_gpus: i64) {
        let mut k = self.leaves + at;
        self.most[k] = free_gpus;
        while k > 1 {
            k /= 2;
            self.most[k] = self.most[2 * k].max(self.most[2 * k + 1]);
        }
    }

    /// The first node in order with at least `gpus` free that `fits` accepts.
    fn first(&self, gpus: i64, fits: impl Fn(usize) -> bool) -> Option<usize> {
        let mut stack = vec![1];
        // Depth first, left before right, skipping every stretch without the GPUs.
        while let Some(k) = stack.pop() {
            if self.most[k] < gpus {
                continue;
            }
            if k >= self.leaves {
                let n = self.nodes[k - self.leaves];
                if fits(n) {
                    return Some(n);
                }
            } else {
                stack.push(2 * k + 1);
                stack.push(2 * k);
            }
        }
        None
    }
}
