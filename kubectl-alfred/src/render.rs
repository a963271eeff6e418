//! Output: tables for people, JSON and YAML for scripts.

use alfred::pools::PoolReport;
use alfred::snapshot::Snapshot;
use anyhow::Result;
use serde::Serialize;

use crate::Output;

fn structured<T: Serialize>(value: &T, output: Output) -> Result<bool> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Output::Table | Output::Wide => return Ok(false),
    }
    Ok(true)
}

/// Each pool: one line per node with its GPUs as cells (█ used, ░ free), then the totals.
pub fn pools(reports: &[PoolReport], output: Output) -> Result<()> {
    if structured(&reports, output)? {
        return Ok(());
    }
    if reports.is_empty() {
        println!("No GPU nodes found.");
        return Ok(());
    }
    let name_width = reports
        .iter()
        .flat_map(|p| p.nodes.iter().map(|n| n.name.len()))
        .max()
        .unwrap_or(4)
        .max(4);
    let cell_width = reports
        .iter()
        .flat_map(|p| p.nodes.iter().map(|n| n.gpus))
        .max()
        .unwrap_or(0) as usize;
    for (i, pool) in reports.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let t = &pool.totals;
        println!("POOL {}  ({} nodes, {} GPUs)", pool.pool, t.nodes, t.gpus);
        for n in &pool.nodes {
            let used = n.used.max(0) as usize;
            let free = n.free.max(0) as usize;
            let cells = format!("{}{}", "█".repeat(used), "░".repeat(free));
            let pad = cell_width.saturating_sub(used + free);
            let markers = if n.markers.is_empty() {
                String::new()
            } else {
                format!("  [{}]", n.markers.join(", "))
            };
            println!(
                "  {:<name_width$}  {cells}{}  {:>2} free{markers}",
                n.name,
                " ".repeat(pad),
                n.free
            );
        }
        println!(
            "  total: {} used, {} free, {} free where new pods can land, largest free block {}",
            t.used, t.free, t.schedulable_free, t.largest_free_block
        );
    }
    println!();
    println!(
        "█ used GPU  ░ free GPU; nodes marked unhealthy, unknown, suspect, maintenance, cordoned,"
    );
    println!(
        "scale-down or preemptible take no new pods from Alfred and are left out of the free block."
    );
    Ok(())
}

pub fn snapshot(snapshot: &Snapshot, output: Output) -> Result<()> {
    let list = snapshot.to_list();
    match output {
        Output::Json => println!("{}", serde_json::to_string(&list)?),
        _ => print!("{}", serde_yaml_ng::to_string(&list)?),
    }
    eprintln!("snapshot: {} objects", snapshot.object_count());
    Ok(())
}
