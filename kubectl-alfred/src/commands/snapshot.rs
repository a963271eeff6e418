//! `kubectl alfred snapshot`: the live cluster written as a snapshot file any command replays
//! with `-f`, with the migration guard's objects when the caller may read them.

use anyhow::{Result, bail};

use crate::store::cluster::read_guard;
use crate::{GlobalArgs, live, render};

pub async fn run(global: &GlobalArgs) -> Result<()> {
    if global.file.is_some() {
        bail!("snapshot reads the live cluster; drop -f (the file already is a snapshot)");
    }
    let mut snapshot = live::read_snapshot(global).await?;
    // The guard on migrate's writes, so that `migrate --dry-run -f` checks it as a live run does.
    snapshot.migration_guard = read_guard(&live::client(global).await?).await;
    render::snapshot(&snapshot, global.output)
}
