//! Every command the README and `docs/` show that runs on a file of this repository (the demo
//! snapshot, the example configurations and problems) runs as shown:
//! - in a `sh` block, each `kubectl alfred ... -f manifests/...` line exits 0 (or the code a
//!   trailing `# exits N` names);
//! - in a `text` block, each `$ kubectl alfred ...` command exits 0 and prints the lines shown
//!   under it, in that order (`...` stands for text left out, within a line or for whole lines).
//!
//! The lines run through `bash` with `kubectl` on PATH as a shim that runs this build's plugin,
//! so `kubectl alfred` reads exactly as a user types it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A command a page shows, and what it must do.
struct Example {
    page: String,
    line: usize,
    command: String,
    exit: i32,
    /// The output lines shown under it (a `text` block), in order.
    shown: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A command that needs no cluster: the plugin on a file of this repository.
fn runs_here(command: &str) -> bool {
    (command.starts_with("kubectl alfred ") || command.starts_with("kubectl-alfred "))
        && command.contains("-f manifests/")
        && !command.contains('<')
}

/// The examples of one page.
fn examples(page: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page
        .strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        let Some(lang) = fence.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = lang.trim().to_string();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let block = &lines[start..end];
        match lang.as_str() {
            "sh" | "bash" => out.extend(shell_block(&name, start, block)),
            "text" | "console" => out.extend(text_block(&name, start, block)),
            _ => {}
        }
        i = end + 1;
    }
    out
}

/// Joins a line with the `\`-continued lines after it; returns the command and the next index.
fn logical_line(block: &[&str], mut k: usize) -> (String, usize) {
    let mut command = String::new();
    loop {
        let line = block[k].trim();
        k += 1;
        match line.strip_suffix('\\') {
            Some(part) if k < block.len() => {
                command.push_str(part.trim_end());
                command.push(' ');
            }
            _ => {
                command.push_str(line);
                return (command, k);
            }
        }
    }
}

fn shell_block(page: &str, start: usize, block: &[&str]) -> Vec<Example> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < block.len() {
        let at = k;
        let (command, next) = logical_line(block, k);
        k = next;
        if !runs_here(&command) {
            continue;
        }
        let exit = command
            .split_once("# exits ")
            .and_then(|(_, code)| code.trim().parse().ok())
            .unwrap_or(0);
        out.push(Example {
            page: page.to_string(),
            line: start + at + 1,
            command,
            exit,
            shown: Vec::new(),
        });
    }
    out
}

fn text_block(page: &str, start: usize, block: &[&str]) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut k = 0;
    while k < block.len() {
        let Some(first) = block[k].strip_prefix("$ ") else {
            if let Some(example) = out.last_mut() {
                example.shown.push(block[k].to_string());
            }
            k += 1;
            continue;
        };
        let at = k;
        let mut rest = vec![first];
        rest.extend_from_slice(&block[k + 1..]);
        let (command, next) = logical_line(&rest, 0);
        k += next;
        if runs_here(&command) {
            out.push(Example {
                page: page.to_string(),
                line: start + at + 1,
                command,
                exit: 0,
                shown: Vec::new(),
            });
        } else {
            // Output of a command that does not run here is not checked.
            while k < block.len() && !block[k].starts_with("$ ") {
                k += 1;
            }
        }
    }
    out
}

/// A directory with `kubectl` (a shim for `kubectl alfred`) and `kubectl-alfred`.
fn shim_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_kubectl-alfred");
    let shim = format!(
        "#!/bin/sh\nif [ \"$1\" = alfred ]; then shift; exec '{bin}' \"$@\"; fi\necho \"kubectl $1: only kubectl alfred runs in the docs test\" >&2\nexit 127\n"
    );
    write_executable(dir.path(), "kubectl", &shim);
    let direct = format!("#!/bin/sh\nexec '{bin}' \"$@\"\n");
    write_executable(dir.path(), "kubectl-alfred", &direct);
    dir
}

fn write_executable(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Where each shown line is in `output`, in order; the first shown line missing, if any.
fn missing_line<'a>(shown: &'a [String], output: &str) -> Option<&'a str> {
    let actual: Vec<&str> = output.lines().collect();
    let mut from = 0;
    for line in shown {
        let line = line.trim();
        if line.is_empty() || line == "..." {
            continue;
        }
        let parts: Vec<&str> = line
            .split("...")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        let found = actual[from..].iter().position(|candidate| {
            let mut rest = *candidate;
            parts.iter().all(|part| match rest.find(part) {
                Some(at) => {
                    rest = &rest[at + part.len()..];
                    true
                }
                None => false,
            })
        });
        match found {
            Some(at) => from += at + 1,
            None => return Some(line),
        }
    }
    None
}

#[test]
fn every_command_shown_on_a_file_of_the_repository_runs_as_shown() {
    let shims = shim_dir();
    let path = format!(
        "{}:{}",
        shims.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let examples: Vec<Example> = pages().iter().flat_map(|p| examples(p)).collect();
    assert!(
        examples.len() >= 10,
        "only {} runnable examples found in the README and docs/",
        examples.len()
    );
    let mut failures = Vec::new();
    for example in &examples {
        let out = Command::new("bash")
            .args(["-c", &example.command])
            .current_dir(root())
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let at = format!("{}:{}: {}", example.page, example.line, example.command);
        if out.status.code() != Some(example.exit) {
            failures.push(format!(
                "{at}\n  exited {:?}, the page expects {}\n{output}",
                out.status.code(),
                example.exit
            ));
        } else if let Some(line) = missing_line(&example.shown, &output) {
            failures.push(format!(
                "{at}\n  does not print, in the order shown:\n  {line}\n  it printed:\n{output}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples do not run as shown:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

#[test]
fn shown_lines_match_in_order_with_ellipses() {
    let output = "POOL A  0.5  moves\n  row 1: h100-03 is Unhealthy: move it\nend";
    let shown = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert_eq!(
        missing_line(&shown(&["POOL A ... moves", "...", "end"]), output),
        None
    );
    assert_eq!(
        missing_line(&shown(&["  row 1: ... Unhealthy"]), output),
        None
    );
    assert_eq!(
        missing_line(&shown(&["end", "POOL A"]), output),
        Some("POOL A")
    );
    assert_eq!(missing_line(&shown(&["row 2"]), output), Some("row 2"));
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_between_the_pages_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if fragment.is_empty() || path.is_dir() {
                continue;
            }
            let headings = std::fs::read_to_string(&path).unwrap();
            let found = headings
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .any(|a| a == fragment);
            if !found {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
