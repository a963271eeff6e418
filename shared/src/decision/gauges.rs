//! What the observation loop publishes on every replica (alfred-reference.md §3.5 "Cluster"):
//! each value as its metric names it, worked out from one read. The metrics themselves live
//! with the process that serves them.

use std::collections::BTreeMap;

use super::score::{PoolScore, score_pools};
use crate::model::Context;

/// One pool's gauges.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolGauges {
    pub pool: String,
    /// `fragmentation_observed{pool,size}`: Frag(s) per ladder size.
    pub observed: Vec<(i64, f64)>,
    pub reclaimable: f64,
    pub pending_pressure: f64,
    /// `surge_headroom_gpus`: the most free GPUs on one node Alfred may place on.
    pub surge_headroom: i64,
}

/// One GPU node's `gpu_capacity{node,status}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCapacity {
    pub node: String,
    pub total: i64,
    pub allocated: i64,
    pub free: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClusterGauges {
    /// `cluster_fragmentation_score`: the highest pool score (0 without pools).
    pub fragmentation_score: f64,
    pub pools: Vec<PoolGauges>,
    pub nodes: Vec<NodeCapacity>,
    pub pending_pods: usize,
    /// `pending_pod_gpu_requirements{size}`: pending GPU pods by the GPUs each asks for.
    pub pending_by_size: BTreeMap<i64, usize>,
}

impl ClusterGauges {
    /// The gauges of one read.
    pub fn observe(ctx: &Context<'_>) -> ClusterGauges {
        ClusterGauges::of(ctx, &score_pools(ctx, &super::movable(ctx)))
    }

    /// The gauges, with the pools scored as a pass scored them.
    pub fn of(ctx: &Context<'_>, scores: &[PoolScore]) -> ClusterGauges {
        let cluster = &ctx.cluster;
        let headroom = |pool: &str| {
            cluster
                .nodes
                .iter()
                .filter(|n| n.pool.as_deref() == Some(pool) && !n.unavailable_as_target())
                .map(|n| n.gpu_free)
                .max()
                .unwrap_or(0)
        };
        let pools = scores
            .iter()
            .map(|s| PoolGauges {
                pool: s.pool.clone(),
                observed: s.sizes.iter().map(|t| (t.size, t.observed_frag)).collect(),
                reclaimable: s.reclaimable,
                pending_pressure: s.pending_pressure,
                surge_headroom: headroom(&s.pool),
            })
            .collect();
        let nodes = cluster
            .nodes
            .iter()
            .filter(|n| n.gpu_total > 0)
            .map(|n| NodeCapacity {
                node: n.name.to_string(),
                total: n.gpu_total,
                allocated: n.gpu_used,
                free: n.gpu_free,
            })
            .collect();
        let mut pending_by_size = BTreeMap::new();
        for p in &cluster.pending {
            *pending_by_size.entry(p.gpus).or_default() += 1;
        }
        ClusterGauges {
            fragmentation_score: scores.iter().map(|s| s.score).fold(0.0, f64::max),
            pools,
            nodes,
            pending_pods: cluster.pending.len(),
            pending_by_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::snapshot::Snapshot;

    /// On the demo: every GPU node, pool and pending pod appears, and the values agree with
    /// the pass's own pool scores.
    #[test]
    fn the_demo_gauges_agree_with_the_pool_scores() {
        let text = include_str!("../../../manifests/examples/demo-cluster.yaml");
        let snapshot = Snapshot::parse(text).unwrap();
        let config = Config::default();
        let now = snapshot.info.as_ref().unwrap().captured_at;
        let ctx = Context::build(&snapshot, &config, now);
        let gauges = ClusterGauges::observe(&ctx);
        let decision = crate::decision::plan(&ctx);
        assert_eq!(gauges, ClusterGauges::of(&ctx, &decision.pools));
        assert_eq!(gauges.pools.len(), decision.pools.len());
        let max = decision.pools.iter().map(|p| p.score).fold(0.0, f64::max);
        assert_eq!(gauges.fragmentation_score, max);
        let gpu_nodes = ctx.cluster.nodes.iter().filter(|n| n.gpu_total > 0).count();
        assert_eq!(gauges.nodes.len(), gpu_nodes);
        for n in &gauges.nodes {
            // A node can hold more than it has while pods terminate (a100-02 in the demo).
            assert_eq!(n.free, (n.total - n.allocated).max(0), "{}", n.node);
        }
        assert_eq!(
            gauges.pending_by_size.values().sum::<usize>(),
            gauges.pending_pods
        );
        for p in &gauges.pools {
            assert_eq!(p.observed.len(), config.defragmentation.size_ladder.len());
            let most_free = gauges.nodes.iter().map(|n| n.free).max().unwrap();
            assert!(p.surge_headroom <= most_free);
        }
    }
}
