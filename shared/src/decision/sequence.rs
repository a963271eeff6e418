//! `recommend --plan`: beyond Alfred's one move per pass, the whole sequence of surge moves that
//! takes a pool from what is observed to the repacked best, with the fragmentation after each
//! step. A move goes when its targets have room for the new pods while the old ones still run;
//! moves that wait on room no remaining move frees are reported as blocked.

use std::collections::HashMap;

use serde::Serialize;

use super::context::Context;
use super::score::PoolScore;
use crate::api::component::ComponentKind;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub workload: String,
    pub component: ComponentKind,
    pub instance: i32,
    pub gpus: i64,
    pub from: Vec<String>,
    pub to: Vec<String>,
    /// The pool's weighted fragmentation once this step is done.
    pub fragmentation_after: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSequence {
    pub pool: String,
    pub observed: f64,
    pub best: f64,
    pub steps: Vec<Step>,
    /// Moves of the repack no order makes room for (`ns/name/component/instance`).
    pub blocked: Vec<String>,
}

/// One Instance's part of the repack: its pods' bin changes.
struct InstanceMove {
    instance: usize,
    /// (pod GPUs, from bin, to bin)
    pods: Vec<(i64, usize, usize)>,
}

pub fn sequence(ctx: &Context<'_, '_>, pool: &PoolScore) -> PoolSequence {
    let cluster = ctx.cluster;
    let mut instance_of: HashMap<usize, usize> = HashMap::new();
    for (i, inst) in cluster.instances.iter().enumerate() {
        if inst.pool.as_deref() == Some(pool.pool.as_str()) {
            instance_of.extend(inst.pods.iter().map(|&p| (p, i)));
        }
    }
    let mut moves: Vec<InstanceMove> = Vec::new();
    let mut move_of: HashMap<usize, usize> = HashMap::new();
    for m in &pool.repack_moves {
        let Some(&instance) = instance_of.get(&m.pod) else {
            continue;
        };
        let k = *move_of.entry(instance).or_insert_with(|| {
            moves.push(InstanceMove {
                instance,
                pods: Vec::new(),
            });
            moves.len() - 1
        });
        moves[k].pods.push((cluster.pods[m.pod].gpus, m.from, m.to));
    }
    let mut free: Vec<i64> = pool.bins.iter().map(|b| b.free).collect();
    let mut shares = pool.shares.clone();
    let mut steps = Vec::new();
    // Passes over the waiting moves in repack order, each taking every move that fits, until
    // one takes none.
    loop {
        let before = moves.len();
        let mut waiting = Vec::new();
        for m in moves {
            if !fits(&m, &free) {
                waiting.push(m);
                continue;
            }
            let mut changes: Vec<(usize, i64)> = Vec::new(); // (bin, free before)
            let mut touch = |b: usize, free: &[i64]| {
                if !changes.iter().any(|c| c.0 == b) {
                    changes.push((b, free[b]));
                }
            };
            for &(gpus, from, to) in &m.pods {
                touch(to, &free);
                free[to] -= gpus;
                touch(from, &free);
            }
            for &(gpus, from, _) in &m.pods {
                free[from] = (free[from] + gpus).min(pool.bins[from].capacity);
            }
            let deltas: Vec<(i64, i64, i64)> = changes
                .iter()
                .map(|&(b, old)| (pool.bins[b].capacity, old, free[b]))
                .collect();
            pool.measure.update_shares(&mut shares, &deltas);
            steps.push(step(
                ctx,
                pool,
                &m,
                pool.measure.fragmentation_after(&shares, &[]),
            ));
        }
        moves = waiting;
        if moves.is_empty() || moves.len() == before {
            break;
        }
    }
    let blocked = moves
        .iter()
        .map(|m| {
            let inst = &cluster.instances[m.instance];
            format!(
                "{}/{}/{}",
                ctx.workload_key(m.instance),
                cluster.components[inst.component].kind,
                inst.index
            )
        })
        .collect();
    PoolSequence {
        pool: pool.pool.clone(),
        observed: pool.observed,
        best: pool.best,
        steps,
        blocked,
    }
}

fn step(
    ctx: &Context<'_, '_>,
    pool: &PoolScore,
    m: &InstanceMove,
    fragmentation_after: f64,
) -> Step {
    let inst = &ctx.cluster.instances[m.instance];
    let names = |bins: &mut dyn Iterator<Item = usize>| {
        let mut names: Vec<String> = bins.map(|b| pool.bins[b].node.clone()).collect();
        names.dedup();
        names
    };
    Step {
        workload: ctx.workload_key(m.instance).to_string(),
        component: ctx.cluster.components[inst.component].kind,
        instance: inst.index,
        gpus: m.pods.iter().map(|p| p.0).sum(),
        from: names(&mut m.pods.iter().map(|p| p.1)),
        to: names(&mut m.pods.iter().map(|p| p.2)),
        fragmentation_after,
    }
}

/// The move's new pods fit beside everything now running.
fn fits(m: &InstanceMove, free: &[i64]) -> bool {
    let mut need: Vec<(usize, i64)> = Vec::new();
    for &(gpus, _, to) in &m.pods {
        match need.iter_mut().find(|n| n.0 == to) {
            Some(n) => n.1 += gpus,
            None => need.push((to, gpus)),
        }
    }
    need.iter().all(|&(to, gpus)| free[to] >= gpus)
}
