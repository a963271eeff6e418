//! The tables of `recommend`'s text output: pools, rows and nodes.

use std::fmt::Write as _;

use alfred::decision::{self, Decision, PoolScore};
use anyhow::Result;

use crate::render;

pub(super) fn pools_table(d: &Decision, wide: bool, out: &mut String) -> Result<()> {
    let lines: Vec<Vec<String>> = d
        .pools
        .iter()
        .map(|p| {
            vec![
                p.pool.clone(),
                format!("{:.3}", p.score),
                format!("{:.3}", p.observed),
                format!("{:.3}", p.reclaimable),
                format!("{:.3}", p.pending_pressure),
                p.free_gpus.to_string(),
                p.largest_free_block.to_string(),
                state(p).to_string(),
            ]
        })
        .collect();
    render::columns(
        out,
        &[
            "POOL",
            "SCORE",
            "OBSERVED",
            "RECLAIMABLE",
            "PENDING",
            "FREE",
            "LARGEST-BLOCK",
            "STATE",
        ],
        &lines,
    );
    if wide {
        for p in &d.pools {
            let part = |f: &dyn Fn(&decision::score::SizeTerm) -> String| {
                p.sizes.iter().map(f).collect::<Vec<_>>().join("  ")
            };
            writeln!(out, "  {}:", p.pool)?;
            writeln!(
                out,
                "    weight  {}",
                part(&|s| format!("{}:{:.3}", s.size, s.weight))
            )?;
            writeln!(
                out,
                "    frag    {}",
                part(&|s| format!("{}:{:.3}", s.size, s.observed_frag))
            )?;
            writeln!(
                out,
                "    best    {}",
                part(&|s| format!("{}:{:.3}", s.size, s.best_frag))
            )?;
            for pending in &p.repackable_pending {
                writeln!(
                    out,
                    "    pending {} ({} GPUs, {:.0} min, urgency {:.3}) fits only after a repack",
                    pending.pod, pending.gpus, pending.age_minutes, pending.urgency
                )?;
            }
        }
    }
    writeln!(
        out,
        "STATE: moves = score above the threshold, Alfred plans moves; advice = only fragmentation no move can fix; quiet = nothing to do."
    )?;
    Ok(())
}

pub(super) fn rows_table(
    shown: &[(usize, &decision::Recommendation)],
    wide: bool,
    out: &mut String,
) -> Result<()> {
    let lines: Vec<Vec<String>> = shown
        .iter()
        .map(|(k, r)| {
            let mut line = vec![(k + 1).to_string()];
            line.extend(render::row_cells(&r.row));
            line.extend([
                r.row.outcome.as_str().into(),
                r.row.why().unwrap_or("-").into(),
                render::or_dash(&r.row.from_node),
                render::or_dash(&r.row.hint_targets.join(",")),
                format!("{:.3}", r.row.score),
                if r.row.emergency { "yes" } else { "" }.into(),
            ]);
            line
        })
        .collect();
    let headers: Vec<&str> = ["#"]
        .into_iter()
        .chain(render::ROW_HEADERS)
        .chain([
            "OUTCOME",
            "REASON-CODE",
            "FROM",
            "HINTS",
            "SCORE",
            "EMERGENCY",
        ])
        .collect();
    render::columns(out, &headers, &lines);
    writeln!(out)?;
    writeln!(out, "Why:")?;
    // Rows that share an explanation are listed together, in order of first appearance.
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut group_of: std::collections::HashMap<&str, usize> = Default::default();
    for (k, r) in shown {
        let g = *group_of.entry(&r.detail).or_insert_with(|| {
            groups.push((&r.detail, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(k + 1);
    }
    for (detail, rows) in &groups {
        writeln!(out, "  {}: {detail}", row_ranges(rows))?;
    }
    if wide {
        for (k, r) in shown {
            if !r.planned.is_empty() {
                let planned: Vec<String> = r
                    .planned
                    .iter()
                    .map(|(p, n)| format!("{p} -> {n}"))
                    .collect();
                writeln!(
                    out,
                    "  {}: planned {}; may target {}",
                    k + 1,
                    planned.join(", "),
                    r.placement_targets.join(", ")
                )?;
            }
            if let Some(sim) = &r.simulation {
                let mut line = format!(
                    "  {}: scheduler predicts {:?}/{}",
                    k + 1,
                    sim.status,
                    sim.reason
                );
                let placed: Vec<String> = sim
                    .placements
                    .iter()
                    .map(|p| format!("{} -> {}", p.pod, p.node))
                    .collect();
                if !placed.is_empty() {
                    write!(line, ": {}", placed.join(", "))?;
                } else if !sim.message.is_empty() {
                    write!(line, ": {}", sim.message)?;
                }
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

/// `1-3, 5, 7-8`.
fn row_ranges(rows: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let mut j = i;
        while j + 1 < rows.len() && rows[j + 1] == rows[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", rows[i], rows[j])
        } else {
            rows[i].to_string()
        });
        i = j + 1;
    }
    let label = if rows.len() == 1 { "row" } else { "rows" };
    format!("{label} {}", parts.join(", "))
}

pub(super) fn nodes_table(d: &Decision, out: &mut String) -> Result<()> {
    let lines: Vec<Vec<String>> = d
        .nodes
        .iter()
        .map(|(key, r)| {
            vec![
                key.strip_prefix("node.").unwrap_or(key).to_string(),
                match r.suspect_until {
                    Some(t) => format!("{} until {t}", r.state),
                    None => r.state.clone(),
                },
                render::or_dash(&r.maintenance.triggers.join(",")),
                if r.ome_gpu_occupants_present {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                render::or_dash(&r.workloads.join(",")),
            ]
        })
        .collect();
    writeln!(
        out,
        "Node records (nodes that are not Clear or are due for maintenance):"
    )?;
    render::columns(
        out,
        &["NODE", "STATE", "MAINTENANCE", "OME-GPU-PODS", "WORKLOADS"],
        &lines,
    );
    Ok(())
}

pub(super) fn state(p: &PoolScore) -> &'static str {
    if p.execution_open {
        "moves"
    } else if p.advisory_open {
        "advice"
    } else {
        "quiet"
    }
}
