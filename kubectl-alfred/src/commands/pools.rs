//! `kubectl alfred pools`: each GPU pool drawn node by node, its GPUs used and free.

use anyhow::Result;

use crate::{GlobalArgs, render, source};

pub async fn run(global: &GlobalArgs) -> Result<()> {
    let input = source::load(global).await?;
    let cluster = input.cluster();
    let reports = alfred::pools::pool_reports(&cluster, input.config.spot_policy.avoid_as_target);
    render::pools(&reports, global.output)?;
    drop(cluster);
    // The process ends here: freeing a large snapshot object by object would take longer than
    // the command itself.
    std::mem::forget(input);
    Ok(())
}
