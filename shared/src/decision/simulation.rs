//! The `scheduling` block of a pass's rows (alfred-policies.md "In recommend-only mode"): the
//! OMENative rows about one Instance, best first, are simulated up to the pass's budget; the
//! rest say `SimulationBudgetExceeded`. A prediction reserves nothing, so each row is simulated
//! against the cluster as it is, without the Instance's source node.

use super::{Recommendation, Scheduling};
use crate::mode::DeploymentMode;
use crate::model::context::Context;
use crate::simulate::{self, Ledger, SchedulingReason, SimulationOutcome, Status};

/// Rows simulated in one pass.
pub const SIMULATION_BUDGET: usize = 8;

pub fn attach(ctx: &Context<'_>, rows: &mut [Recommendation]) {
    let cluster = &ctx.cluster;
    let mut ledger: Option<Ledger> = None;
    let mut done = 0;
    for r in rows.iter_mut() {
        let Some(instance) = cluster.instance_of(&r.row.workload, r.row.component, r.row.instance)
        else {
            continue; // a row about a whole component
        };
        let component = &cluster.components[cluster.instances[instance].component];
        if component.mode != DeploymentMode::OmeNative {
            continue;
        }
        let outcome = if done < SIMULATION_BUDGET {
            done += 1;
            let ledger = ledger.get_or_insert_with(|| Ledger::new(cluster));
            let exclude: Vec<usize> = cluster.node_index(&r.row.from_node).into_iter().collect();
            simulate::simulate(
                ctx,
                ledger,
                &simulate::surge_pods(cluster, instance, &r.surge_hints()),
                &exclude,
            )
        } else {
            SimulationOutcome {
                status: Status::Unavailable,
                reason: SchedulingReason::SimulationBudgetExceeded,
                profile: None,
                placements: Vec::new(),
                message: format!("only {SIMULATION_BUDGET} rows are simulated a pass"),
                rejections: Default::default(),
            }
        };
        r.row.scheduling = Some(summary(ctx, &outcome));
        r.simulation = Some(outcome);
    }
}

fn summary(ctx: &Context<'_>, o: &SimulationOutcome) -> Scheduling {
    let p = o.profile.as_ref();
    let text = |f: fn(&simulate::Profile) -> &String| p.map(f).cloned().unwrap_or_default();
    Scheduling {
        scheduler_name: text(|p| &p.scheduler_name),
        backend: text(|p| &p.backend),
        scheduler_version: text(|p| &p.scheduler_version),
        configuration_id: text(|p| &p.configuration_id),
        status: o.status,
        reason: o.reason,
        snapshot_id: format!("snapshot-{}", ctx.now().as_second()),
        snapshot_time: Some(ctx.now()),
        placements: o.placements.clone(),
    }
}
