//! Output: tables for people, JSON and YAML for scripts.

use std::fmt::Write as _;
use std::io::Write as _;

use alfred::decision::Row;
use alfred::execute::dispatch::Withhold;
use alfred::pools::PoolReport;
use alfred::snapshot::Snapshot;
use anyhow::Result;
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Padding, Style};

use crate::Output;

/// Writes a command's output to stdout. A reader that stops early (`| head`) is not an error.
pub fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

/// A table cell: the text, or `-` when there is none.
pub fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// The columns that name a recommendation row, first in every pass table.
pub const ROW_HEADERS: [&str; 5] = ["WORKLOAD", "COMPONENT", "INSTANCE", "POLICY", "REASON"];

/// A row's `ROW_HEADERS` cells; a row about a whole component shows instance `all`.
pub fn row_cells(row: &Row) -> Vec<String> {
    vec![
        row.workload.clone(),
        row.component.to_string(),
        if row.instance < 0 {
            "all".into()
        } else {
            row.instance.to_string()
        },
        row.policy.as_str().into(),
        row.reason.as_str().into(),
    ]
}

/// JSON or YAML for scripts; None for the table formats.
pub fn structured<T: Serialize>(value: &T, output: Output) -> Result<Option<String>> {
    Ok(match output {
        Output::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
        Output::Yaml => Some(serde_yaml_ng::to_string(value)?),
        Output::Table | Output::Wide => None,
    })
}

/// Each pool: one line per node with its GPUs as cells (█ used, ░ free), then the totals.
pub fn pools(reports: &[PoolReport], output: Output) -> Result<()> {
    if let Some(text) = structured(&reports, output)? {
        return emit(&text);
    }
    if reports.is_empty() {
        return emit("No GPU nodes found.\n");
    }
    let mut out = String::new();
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
            writeln!(out)?;
        }
        let t = &pool.totals;
        writeln!(
            out,
            "POOL {}  ({} nodes, {} GPUs)",
            pool.pool, t.nodes, t.gpus
        )?;
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
            writeln!(
                out,
                "  {:<name_width$}  {cells}{}  {:>2} free{markers}",
                n.name,
                " ".repeat(pad),
                n.free
            )?;
        }
        writeln!(
            out,
            "  total: {} used, {} free, {} free where new pods can land, largest free block {}",
            t.used, t.free, t.schedulable_free, t.largest_free_block
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "█ used GPU  ░ free GPU; nodes marked unhealthy, unknown, suspect, maintenance, cordoned,"
    )?;
    writeln!(
        out,
        "scale-down or preemptible take no new pods from Alfred and are left out of the free block."
    )?;
    emit(&out)
}

/// Writes the snapshot as it goes, item by item, never the whole List in memory at once.
pub fn snapshot(snapshot: &Snapshot, output: Output) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match write_list(&mut out, snapshot, output).and_then(|()| std::io::Write::flush(&mut out)) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        result => result?,
    }
    eprintln!("snapshot: {} objects", snapshot.object_count());
    Ok(())
}

/// The snapshot's `v1 List`: JSON on one line, or YAML with the items as a block sequence.
fn write_list(
    out: &mut impl std::io::Write,
    snapshot: &Snapshot,
    output: Output,
) -> std::io::Result<()> {
    let mut items = snapshot.list_items().peekable();
    if output == Output::Json {
        out.write_all(br#"{"apiVersion":"v1","kind":"List","metadata":{},"items":["#)?;
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut *out, &item)?;
        }
        return out.write_all(b"]}\n");
    }
    out.write_all(b"apiVersion: v1\nkind: List\nmetadata: {}\n")?;
    if items.peek().is_none() {
        return out.write_all(b"items: []\n");
    }
    out.write_all(b"items:\n")?;
    for item in items {
        let text = serde_yaml_ng::to_string(&item).map_err(std::io::Error::other)?;
        for (i, line) in text.lines().enumerate() {
            out.write_all(if i == 0 { b"- " } else { b"  " })?;
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// A reason code and what exactly it is about, as the execute commands print them.
#[derive(Serialize)]
pub struct Reasoned {
    pub reason: String,
    pub detail: String,
}

impl From<&Withhold> for Reasoned {
    fn from(w: &Withhold) -> Reasoned {
        Reasoned {
            reason: w.reason.as_str().into(),
            detail: w.detail.clone(),
        }
    }
}

/// A kubectl-style table: no borders, a header line, columns left-aligned and three spaces
/// apart (kubectl's tabwriter padding), states in colour on a terminal ([`colour`]); colour
/// codes take no width, so painted columns stay aligned.
pub fn columns(out: &mut String, headers: &[&str], rows: &[Vec<String>]) {
    table(out, headers, rows, colour());
}

fn table(out: &mut String, headers: &[&str], rows: &[Vec<String>], paint: bool) {
    let mut builder = Builder::with_capacity(rows.len() + 1, headers.len());
    builder.push_record(headers.iter().copied());
    for row in rows {
        builder.push_record(row.iter().map(
            |cell| match paint.then(|| state_colour(cell)).flatten() {
                Some(code) => format!("\x1b[{code}m{cell}\x1b[0m"),
                None => cell.clone(),
            },
        ));
    }
    let mut table = builder.build();
    table
        .with(Style::empty())
        .with(Padding::new(0, 3, 0, 0))
        .modify(Columns::last(), Padding::zero());
    for line in table.to_string().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Whether tables are coloured: when stdout is a terminal (or `CLICOLOR_FORCE` asks for it),
/// never when `NO_COLOR` is set (https://no-color.org), never in a pipe.
pub fn colour() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return false;
        }
        set("CLICOLOR_FORCE") || std::io::IsTerminal::is_terminal(&std::io::stdout())
    })
}

/// The SGR colour of a cell that states something worth a glance, by its first word: red for
/// trouble, yellow for waiting or doubt, green for a request on its way or done.
fn state_colour(cell: &str) -> Option<&'static str> {
    match cell.split_whitespace().next()? {
        "Unhealthy" | "rejected" | "failed" | "stalled" | "refused" => Some("31"),
        "Suspect" | "Unknown" | "withheld" | "NoSurgeHeadroom" => Some("33"),
        "submitted" | "acknowledged" | "completed" | "would-submit" => Some("32"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed List reads back as the List built whole, in both forms.
    /// Colour codes take no width: a painted table is the plain one with codes around states.
    #[test]
    fn painted_columns_stay_aligned() {
        let rows = [
            vec!["h100-0".into(), "Unhealthy".into(), "NodeUnhealthy".into()],
            vec!["a100-17".into(), "-".into(), "".into()],
        ];
        let (mut plain, mut painted) = (String::new(), String::new());
        table(&mut plain, &["NODE", "STATE", "REASON"], &rows, false);
        table(&mut painted, &["NODE", "STATE", "REASON"], &rows, true);
        assert_eq!(
            plain,
            "NODE      STATE       REASON\nh100-0    Unhealthy   NodeUnhealthy\na100-17   -\n"
        );
        assert_eq!(
            painted,
            plain.replace("Unhealthy ", "\x1b[31mUnhealthy\x1b[0m ")
        );
    }

    #[test]
    fn a_streamed_snapshot_reads_back_the_same() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/examples/demo-cluster.yaml"
        );
        let demo = Snapshot::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
        for output in [Output::Json, Output::Yaml] {
            let mut text = Vec::new();
            write_list(&mut text, &demo, output).unwrap();
            let again = Snapshot::parse(std::str::from_utf8(&text).unwrap()).unwrap();
            assert_eq!(again.to_list(), demo.to_list(), "{output:?}");
        }
        let mut text = Vec::new();
        write_list(&mut text, &Snapshot::default(), Output::Yaml).unwrap();
        assert_eq!(
            Snapshot::parse(std::str::from_utf8(&text).unwrap())
                .unwrap()
                .object_count(),
            0
        );
    }
}
