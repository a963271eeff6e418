//! Our data must be shaped as the API server stores OME's objects: no fixture, golden file,
//! demo object or e2e object may carry a field OME does not persist.

use std::path::{Path, PathBuf};

/// Row fields OME computes but never stores (omenative-reference.md §1.7).
const COMPAT_FIELDS: [&str; 3] = ["readyPodCount", "scheduledPodCount", "nodesOccupied"];

/// Where fixtures, golden files, the demo, examples and e2e objects live.
const DATA_DIRS: [&str; 7] = [
    "manifests",
    "tests",
    "shared/tests",
    "shared/examples",
    "kubectl-alfred/tests",
    "webhook/tests",
    "webhook/examples",
];

/// This file names the fields to look for them.
const SELF: &str = "shared/tests/stored_forms.rs";

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            // Build caches and run directories of the e2e suite are not ours.
            if !name.starts_with('.') && name != "target" {
                files(&path, out);
            }
        } else if ["yaml", "yml", "json", "rs", "py"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

#[test]
fn no_fixture_carries_a_field_ome_does_not_persist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    for dir in DATA_DIRS {
        files(&root.join(dir), &mut all);
    }
    assert!(all.len() > 20, "found only {} files", all.len());
    let mut found = Vec::new();
    for path in all {
        let relative = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .to_string_lossy()
            .to_string();
        if relative == SELF {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for field in COMPAT_FIELDS {
            if text.contains(field) {
                found.push(format!("{relative}: {field}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "fields OME does not persist, in data that must look like a real cluster:\n{}",
        found.join("\n")
    );
}
