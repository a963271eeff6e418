//! The core's modules form layers: no import cycle between the top-level modules of
//! `shared/src` (a cycle makes a reader learn both sides at once). Read from the `crate::`
//! paths of the sources, tests left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module and the top-level modules its sources name.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let top = |name: &str| name.trim_end_matches(".rs").to_string();
    let modules: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| top(&e.unwrap().file_name().to_string_lossy()))
        .filter(|m| m != "lib")
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root, &mut files);
    for file in files {
        let relative = file.strip_prefix(&root).unwrap();
        let owner = top(&relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy());
        if owner == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) && name != owner {
                edges.entry(owner.clone()).or_default().insert(name);
            }
        }
    }
    edges
}

/// A cycle through `from`, as the modules on it.
fn cycle(
    edges: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|m| m == from) {
        return Some(path[at..].to_vec());
    }
    path.push(from.to_string());
    for next in edges.get(from).into_iter().flatten() {
        if let Some(c) = cycle(edges, next, path) {
            return Some(c);
        }
    }
    path.pop();
    None
}

#[test]
fn no_module_of_the_core_imports_one_that_imports_it() {
    let edges = dependencies();
    assert!(edges.contains_key("decision"), "the sources were read");
    for module in edges.keys() {
        if let Some(c) = cycle(&edges, module, &mut Vec::new()) {
            panic!("import cycle: {} -> {}", c.join(" -> "), c[0]);
        }
    }
    // The layering the README draws.
    assert!(!edges["model"].contains("decision") && !edges["model"].contains("simulate"));
    assert!(edges["decision"].contains("model") && edges["simulate"].contains("model"));
}
