//! The defragmentation score of each GPU pool (alfred-policies.md "The score formulas";
//! alfred-reference.md §5 "Scoring per pool"): ladder fragmentation weighted by demand and
//! prior, the best a repack of the movable Instances could reach, pending pressure.

use serde::Serialize;

use crate::mode::DeploymentMode;
use crate::model::cluster::{Cluster, Pool};
use crate::model::context::Context;

/// A node whose free GPUs count: available as a target (and not preemptible when avoided).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bin {
    pub node: String,
    #[serde(skip)]
    pub index: usize,
    pub capacity: i64,
    pub free: i64,
}

/// The ladder with its fixed weights, and the pool facts that fragmentation is measured
/// against (the observed free total is the denominator before and after any move).
#[derive(Clone, Debug, PartialEq)]
pub struct Measure {
    pub sizes: Vec<i64>,
    pub weights: Vec<f64>,
    pub total_free: i64,
    pub max_capacity: i64,
}

impl Measure {
    /// One bin's share of the size-s slots: the size-s Instances it seats, or for sizes larger
    /// than any node, 1 when it is a whole empty node of the largest shape.
    fn per_bin(&self, size: i64, capacity: i64, free: i64) -> i64 {
        if size <= self.max_capacity {
            free.max(0) / size
        } else {
            i64::from(capacity == self.max_capacity && free >= capacity)
        }
    }

    /// Slots from the bins' summed shares: larger-than-node sizes take several whole nodes.
    fn slots_from(&self, size: i64, shares: i64) -> i64 {
        if size <= self.max_capacity {
            shares
        } else if self.max_capacity <= 0 {
            0
        } else {
            shares / ((size + self.max_capacity - 1) / self.max_capacity)
        }
    }

    /// The bins' summed shares for each ladder size (see `fragmentation_after`).
    pub fn shares(&self, bins: &[(i64, i64)]) -> Vec<i64> {
        self.sizes
            .iter()
            .map(|&s| bins.iter().map(|&(c, f)| self.per_bin(s, c, f)).sum())
            .collect()
    }

    /// Size-s Instances the bins' free GPUs can seat.
    pub fn slots(&self, size: i64, bins: &[(i64, i64)]) -> i64 {
        self.slots_from(
            size,
            bins.iter().map(|&(c, f)| self.per_bin(size, c, f)).sum(),
        )
    }

    /// frag(s) = max(0, 1 - slots(s) * s / total free), 0 when nothing is free.
    pub fn frag(&self, size: i64, slots: i64) -> f64 {
        if self.total_free <= 0 {
            return 0.0;
        }
        (1.0 - (slots * size) as f64 / self.total_free as f64).max(0.0)
    }

    /// The weighted fragmentation of bins given as (capacity, free).
    pub fn fragmentation(&self, bins: &[(i64, i64)]) -> f64 {
        self.fragmentation_after(&self.shares(bins), &[])
    }

    /// The weighted fragmentation after some bins change, from the shares before: only the
    /// changed bins (capacity, free before, free after) are recounted, so a move costs
    /// O(ladder) whatever the pool's size.
    pub fn fragmentation_after(&self, shares: &[i64], changes: &[(i64, i64, i64)]) -> f64 {
        self.sizes
            .iter()
            .zip(&self.weights)
            .zip(shares)
            .map(|((&s, &w), &base)| {
                let shares = changes.iter().fold(base, |acc, &(cap, old, new)| {
                    acc - self.per_bin(s, cap, old) + self.per_bin(s, cap, new)
                });
                w * self.frag(s, self.slots_from(s, shares))
            })
            .sum()
    }

    /// Updates the shares for bins that changed (capacity, free before, free after).
    pub fn update_shares(&self, shares: &mut [i64], changes: &[(i64, i64, i64)]) {
        for (k, &s) in self.sizes.iter().enumerate() {
            for &(cap, old, new) in changes {
                shares[k] += self.per_bin(s, cap, new) - self.per_bin(s, cap, old);
            }
        }
    }

    /// The smallest ladder size of at least `gpus`, else the largest.
    pub fn snap(&self, gpus: i64) -> i64 {
        snap(&self.sizes, gpus)
    }
}

pub fn snap(ladder: &[i64], gpus: i64) -> i64 {
    ladder
        .iter()
        .copied()
        .find(|&s| s >= gpus)
        .or_else(|| ladder.last().copied())
        .unwrap_or(gpus)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SizeTerm {
    pub size: i64,
    /// GPUs of running OME pods and pending pods of this size.
    pub demand: i64,
    pub weight: f64,
    pub observed_slots: i64,
    pub best_slots: i64,
    pub observed_frag: f64,
    pub best_frag: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTerm {
    pub pod: String,
    pub gpus: i64,
    pub age_minutes: f64,
    pub urgency: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolScore {
    pub pool: String,
    pub score: f64,
    pub observed: f64,
    pub best: f64,
    pub reclaimable: f64,
    pub pending_pressure: f64,
    /// Free GPUs on nodes that can take new pods.
    pub free_gpus: i64,
    pub largest_free_block: i64,
    /// Score above the threshold: the policy plans moves.
    pub execution_open: bool,
    /// Only fragmentation no move can fix is above the threshold: advice.
    pub advisory_open: bool,
    pub sizes: Vec<SizeTerm>,
    /// Pending pods that fit nowhere now but would after the repack.
    pub repackable_pending: Vec<PendingTerm>,
    pub movable_instances: usize,
    pub bins: Vec<Bin>,
    #[serde(skip)]
    pub measure: Measure,
    /// The bins' shares per ladder size now (`Measure::fragmentation_after`).
    #[serde(skip)]
    pub shares: Vec<i64>,
    /// The pods the repack behind `best` moves, in its order.
    #[serde(skip)]
    pub repack_moves: Vec<RepackMove>,
}

/// A pod the repack moves from one bin to another (indices into `PoolScore::bins`).
#[derive(Clone, Debug, PartialEq)]
pub struct RepackMove {
    pub pod: usize,
    pub from: usize,
    pub to: usize,
}

impl PoolScore {
    /// The bin of a node, if the node is one.
    pub fn bin_of(&self, node: usize) -> Option<usize> {
        self.bins.binary_search_by_key(&node, |b| b.index).ok()
    }
}

/// The pool's bins, by node name.
pub fn bins(cluster: &Cluster<'_>, pool: &Pool, avoid_preemptible: bool) -> Vec<Bin> {
    pool.nodes
        .iter()
        .map(|&i| (i, &cluster.nodes[i]))
        .filter(|(_, n)| n.is_bin(avoid_preemptible))
        .map(|(i, n)| Bin {
            node: n.name.to_string(),
            index: i,
            capacity: n.gpu_total,
            free: n.gpu_free,
        })
        .collect()
}

/// Scores every pool; `movable[i]` says whether Instance i passes defragmentation eligibility.
pub fn score_pools(ctx: &Context<'_>, movable: &[bool]) -> Vec<PoolScore> {
    ctx.cluster
        .pools
        .iter()
        .map(|pool| score_pool(ctx, pool, movable))
        .collect()
}

fn score_pool(ctx: &Context<'_>, pool: &Pool, movable: &[bool]) -> PoolScore {
    let cluster = &ctx.cluster;
    let defrag = &ctx.config.defragmentation;
    let now = ctx.now();
    let bins = bins(cluster, pool, ctx.config.spot_policy.avoid_as_target);
    let ladder = &defrag.size_ladder;
    let in_pool = |host: Option<usize>| {
        host.is_some_and(|n| cluster.nodes[n].pool.as_deref() == Some(pool.name.as_str()))
    };

    // Demand: running OME pods in the pool and pending pods attributed to it (or to none).
    let mut demand = vec![0i64; ladder.len()];
    let mut add_demand = |gpus: i64| {
        let s = snap(ladder, gpus);
        if let Some(k) = ladder.iter().position(|&x| x == s) {
            demand[k] += gpus;
        }
    };
    for p in &cluster.pods {
        if p.owner.is_some() && p.gpus > 0 && !p.terminal && in_pool(p.host) {
            add_demand(p.gpus);
        }
    }
    let pending: Vec<_> = cluster
        .pending
        .iter()
        .filter(|p| p.counts_in(&pool.name))
        .collect();
    for p in &pending {
        add_demand(p.gpus);
    }
    let demand_total: i64 = demand.iter().sum();
    let prior_total: f64 = defrag.size_prior.values().sum();
    let lambda = defrag.demand_blend_lambda;
    let weights: Vec<f64> = ladder
        .iter()
        .zip(&demand)
        .map(|(s, &d)| {
            let share = if demand_total > 0 {
                d as f64 / demand_total as f64
            } else {
                0.0
            };
            let prior = if prior_total > 0.0 {
                defrag.size_prior.get(s).copied().unwrap_or(0.0) / prior_total
            } else {
                0.0
            };
            (1.0 - lambda) * share + lambda * prior
        })
        .collect();
    let measure = Measure {
        sizes: ladder.clone(),
        weights,
        total_free: bins.iter().map(|b| b.free).sum(),
        max_capacity: bins.iter().map(|b| b.capacity).max().unwrap_or(0),
    };
    let observed_bins: Vec<(i64, i64)> = bins.iter().map(|b| (b.capacity, b.free)).collect();
    let (best_bins, movable_instances, repack_moves) = repack(ctx, pool, &bins, movable);

    let mut sizes = Vec::with_capacity(ladder.len());
    let (mut observed, mut best) = (0.0, 0.0);
    for (k, &s) in ladder.iter().enumerate() {
        let observed_slots = measure.slots(s, &observed_bins);
        let best_slots = measure.slots(s, &best_bins);
        let term = SizeTerm {
            size: s,
            demand: demand[k],
            weight: measure.weights[k],
            observed_slots,
            best_slots,
            observed_frag: measure.frag(s, observed_slots),
            best_frag: measure.frag(s, best_slots),
        };
        observed += term.weight * term.observed_frag;
        best += term.weight * term.best_frag;
        sizes.push(term);
    }
    let reclaimable = (observed - best).max(0.0);

    let tau = defrag.pending_urgency_tau_minutes as f64;
    let mut repackable_pending = Vec::new();
    let mut calm = 1.0;
    for p in pending {
        let s = snap(ladder, p.gpus);
        let Some(term) = sizes.iter().find(|t| t.size == s) else {
            continue;
        };
        if term.observed_slots == 0 && term.best_slots >= 1 {
            let age = p.age_minutes(now).max(0.0);
            let urgency = 1.0 - (-age / tau).exp();
            calm *= 1.0 - urgency;
            let pod = &cluster.pods[p.pod];
            repackable_pending.push(PendingTerm {
                pod: format!("{}/{}", pod.namespace, pod.name),
                gpus: p.gpus,
                age_minutes: age,
                urgency,
            });
        }
    }
    let pending_pressure = 1.0 - calm;
    let score = 1.0 - (1.0 - reclaimable) * (1.0 - pending_pressure);
    let threshold = defrag.fragmentation_threshold;
    PoolScore {
        pool: pool.name.clone(),
        score,
        observed,
        best,
        reclaimable,
        pending_pressure,
        free_gpus: measure.total_free,
        largest_free_block: bins.iter().map(|b| b.free).max().unwrap_or(0),
        execution_open: score > threshold,
        advisory_open: (observed - reclaimable).max(0.0) > threshold,
        sizes,
        repackable_pending,
        movable_instances,
        shares: measure.shares(&observed_bins),
        repack_moves,
        bins,
        measure,
    }
}

/// The bins after a first-fit-decreasing repack of the movable Instances' GPU pods: each pod
/// lifted off its node, then placed largest first on the fullest bin that takes it (bins in
/// post-lift order); a pod that fits nowhere goes back home. Unlike the reference, only pods
/// on bins are repacked (see below), so the best is never worse than what is observed.
fn repack(
    ctx: &Context<'_>,
    pool: &Pool,
    bins: &[Bin],
    movable: &[bool],
) -> (Vec<(i64, i64)>, usize, Vec<RepackMove>) {
    let cluster = &ctx.cluster;
    let mut free: Vec<i64> = bins.iter().map(|b| b.free).collect();
    let bin_of = |host: Option<usize>| bins.binary_search_by_key(&host?, |b| b.index).ok();
    let mut items: Vec<(i64, (&str, &str), usize, usize)> = Vec::new();
    let mut moves = Vec::new();
    let mut count = 0;
    for (i, instance) in cluster.instances.iter().enumerate() {
        let component = &cluster.components[instance.component];
        if !movable[i]
            || component.mode != DeploymentMode::OmeNative
            || instance.gpus <= 0
            || instance.pool.as_deref() != Some(pool.name.as_str())
        {
            continue;
        }
        count += 1;
        for &p in &instance.pods {
            let pod = &cluster.pods[p];
            if pod.terminal || pod.gpus <= 0 {
                continue;
            }
            // Pods on nodes that take no new pods are node health's to move: repacking them
            // into the bins would spend the very free GPUs being measured.
            let Some(home) = bin_of(pod.host) else {
                continue;
            };
            free[home] += pod.gpus;
            items.push((pod.gpus, (pod.namespace, pod.name), home, p));
        }
    }
    items.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut order: Vec<usize> = (0..bins.len()).collect();
    order.sort_by(|&a, &b| {
        free[a]
            .cmp(&free[b])
            .then_with(|| bins[a].node.cmp(&bins[b].node))
    });
    // Free never exceeds capacity here, so "free >= gpus" is the whole fit test.
    let mut first_fit = FirstFit::new(order.iter().map(|&b| free[b]).collect());
    for (gpus, _, home, pod) in items {
        match first_fit.take(gpus) {
            Some(k) => {
                let to = order[k];
                free[to] -= gpus;
                if to != home {
                    moves.push(RepackMove {
                        pod,
                        from: home,
                        to,
                    });
                }
            }
            None => free[home] = (free[home] - gpus).max(0),
        }
    }
    (
        bins.iter()
            .zip(free)
            .map(|(b, f)| (b.capacity, f))
            .collect(),
        count,
        moves,
    )
}

/// First fit in a fixed order in O(log n): a max-tree over the bins' free GPUs finds the first
/// bin with enough room.
struct FirstFit {
    leaves: usize,
    tree: Vec<i64>,
}

impl FirstFit {
    fn new(free: Vec<i64>) -> FirstFit {
        let leaves = free.len().next_power_of_two().max(1);
        let mut tree = vec![i64::MIN; 2 * leaves];
        tree[leaves..leaves + free.len()].copy_from_slice(&free);
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        FirstFit { leaves, tree }
    }

    /// Takes `amount` from the first bin that has it; its position, if any.
    fn take(&mut self, amount: i64) -> Option<usize> {
        if self.tree[1] < amount {
            return None;
        }
        let mut i = 1;
        while i < self.leaves {
            i = if self.tree[2 * i] >= amount {
                2 * i
            } else {
                2 * i + 1
            };
        }
        self.tree[i] -= amount;
        let position = i - self.leaves;
        while i > 1 {
            i /= 2;
            self.tree[i] = self.tree[2 * i].max(self.tree[2 * i + 1]);
        }
        Some(position)
    }
}

#[cfg(test)]
mod tests {
    use super::FirstFit;

    #[test]
    fn first_fit_takes_from_the_first_bin_with_room() {
        let mut f = FirstFit::new(vec![1, 4, 2, 8, 3]);
        assert_eq!(f.take(2), Some(1));
        assert_eq!(f.take(2), Some(1));
        assert_eq!(f.take(2), Some(2));
        assert_eq!(f.take(5), Some(3));
        assert_eq!(f.take(4), None);
        assert_eq!(f.take(3), Some(3));
        assert_eq!(f.take(3), Some(4));
        assert_eq!(f.take(1), Some(0));
        assert_eq!(f.take(1), None);
    }
}
