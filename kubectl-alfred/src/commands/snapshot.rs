//! `kubectl alfred snapshot`: the live cluster written as a snapshot file any command replays
//! with `-f`.

use anyhow::{Result, bail};

use crate::{GlobalArgs, live, render};

pub async fn run(global: &GlobalArgs) -> Result<()> {
    if global.file.is_some() {
        bail!("snapshot reads the live cluster; drop -f (the file already is a snapshot)");
    }
    let snapshot = live::read_snapshot(global).await?;
    render::snapshot(&snapshot, global.output)
}
