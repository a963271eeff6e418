//! Shell completion the way kubectl asks plugins for it (kubectl 1.26+ runs
//! `kubectl_complete-alfred ARGS...`, which runs `kubectl-alfred __complete ARGS...`): the words
//! typed so far, the last one being completed, in; candidates one a line, then `:DIRECTIVE`
//! (cobra's protocol), out. Subcommands, flags and flag values come from the command
//! definitions themselves; objects from the source the command would read. Nothing is ever
//! printed to stderr: a source that cannot be read just completes nothing.

mod catalog;

use clap::{Arg, Command, CommandFactory};

use crate::{Cli, GlobalArgs};
use catalog::Catalog;

/// cobra's directives: what the shell does besides offering the candidates.
const DEFAULT: u32 = 0;
const NO_FILE: u32 = 4;

/// Completes `words` (the last one is being typed) and prints the answer.
pub async fn run(words: &[String]) {
    let (candidates, directive) = complete(words).await;
    let mut out = String::new();
    for c in candidates {
        out.push_str(&c);
        out.push('\n');
    }
    out.push_str(&format!(":{directive}\n"));
    // A closed pipe (the shell gave up) is not worth reporting.
    let mut stdout = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut stdout, out.as_bytes())
        .and_then(|()| std::io::Write::flush(&mut stdout));
}

/// What a line typed so far amounts to.
struct Typed<'a> {
    /// The subcommands named, from the root.
    path: Vec<String>,
    /// The command they lead to.
    command: Command,
    /// Positional words given to it so far.
    positionals: Vec<&'a str>,
    /// The flag whose value is being typed.
    pending: Option<Arg>,
    /// Global flags with their values, as a command would read them.
    global: GlobalArgs,
}

async fn complete(words: &[String]) -> (Vec<String>, u32) {
    let Some((last, before)) = words.split_last() else {
        return (Vec::new(), NO_FILE);
    };
    let typed = read(before);
    if let Some(arg) = &typed.pending {
        return value(&typed, arg, last).await;
    }
    if let Some((flag, partial)) = last.split_once('=').filter(|(f, _)| f.starts_with("--")) {
        let name = flag.trim_start_matches('-');
        if let Some(arg) = typed
            .command
            .get_arguments()
            .find(|a| a.get_long() == Some(name))
        {
            let (found, directive) = value(&typed, arg, partial).await;
            let found = found.into_iter().map(|c| format!("{flag}={c}")).collect();
            return (found, directive);
        }
        return (Vec::new(), NO_FILE);
    }
    if last.starts_with('-') {
        return (flags(&typed.command, last), NO_FILE);
    }
    if typed.command.has_subcommands() && typed.positionals.is_empty() {
        let found = typed
            .command
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name().starts_with(last.as_str()))
            .map(|s| described(s.get_name(), s.get_about().map(|a| a.to_string())))
            .collect();
        return (found, NO_FILE);
    }
    objects(&typed, last).await
}

/// Walks the words: subcommands, flags (with their values), positionals.
fn read(words: &[String]) -> Typed<'_> {
    let mut root = Cli::command();
    root.build();
    let mut typed = Typed {
        path: Vec::new(),
        command: root,
        positionals: Vec::new(),
        pending: None,
        global: GlobalArgs::default(),
    };
    for word in words {
        if let Some(arg) = typed.pending.take() {
            typed.global.set(arg.get_id().as_str(), word);
            continue;
        }
        if let Some(flag) = word.strip_prefix("--") {
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            let arg = typed
                .command
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .cloned();
            match (arg, value) {
                (Some(arg), Some(v)) => typed.global.set(arg.get_id().as_str(), v),
                (Some(arg), None) if takes_value(&arg) => typed.pending = Some(arg),
                _ => {}
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = shorts.chars().next().unwrap_or_default();
            let arg = typed
                .command
                .get_arguments()
                .find(|a| a.get_short() == Some(c))
                .cloned();
            if let Some(arg) = arg.filter(takes_value) {
                match &shorts[c.len_utf8()..] {
                    "" => typed.pending = Some(arg),
                    v => typed
                        .global
                        .set(arg.get_id().as_str(), v.trim_start_matches('=')),
                }
            }
        } else if let Some(sub) = typed
            .command
            .find_subcommand(word)
            .filter(|_| typed.positionals.is_empty())
            .cloned()
        {
            typed.path.push(sub.get_name().to_string());
            typed.command = sub;
        } else {
            typed.positionals.push(word);
        }
    }
    typed
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values())
}

/// `name\tdescription`, as cobra prints a candidate with help.
fn described(name: &str, about: Option<String>) -> String {
    match about.and_then(|a| a.lines().next().map(str::to_string)) {
        Some(first) if !first.is_empty() => format!("{name}\t{first}"),
        _ => name.to_string(),
    }
}

/// The flags of the command (its own and the global ones) that start with `prefix`.
fn flags(command: &Command, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let help = arg.get_help().map(|h| h.to_string());
        if let Some(long) = arg.get_long() {
            let flag = format!("--{long}");
            if flag.starts_with(prefix) {
                found.push(described(&flag, help.clone()));
            }
        }
        if let Some(short) = arg.get_short() {
            let flag = format!("-{short}");
            if prefix.len() <= 2 && flag.starts_with(prefix) {
                found.push(described(&flag, help));
            }
        }
    }
    found.sort();
    found
}

/// The values of a flag: its declared choices, kubeconfig contexts, node names, or files.
async fn value(typed: &Typed<'_>, arg: &Arg, partial: &str) -> (Vec<String>, u32) {
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .filter(|v| v.starts_with(partial))
        .collect();
    if !choices.is_empty() {
        return (choices, NO_FILE);
    }
    match arg.get_id().as_str() {
        "file" | "kubeconfig" | "config" | "change" => (Vec::new(), DEFAULT),
        "context" => (matching(catalog::contexts(&typed.global), partial), NO_FILE),
        "component" => (
            matching(
                ["engine", "decoder", "router"].map(String::from).to_vec(),
                partial,
            ),
            NO_FILE,
        ),
        "exclude" => {
            let catalog = Catalog::read(&typed.global, catalog::Wanted::Nodes).await;
            (matching(catalog.nodes, partial), NO_FILE)
        }
        _ => (Vec::new(), NO_FILE),
    }
}

/// The objects a command's positional argument names, read from its source.
async fn objects(typed: &Typed<'_>, partial: &str) -> (Vec<String>, u32) {
    let path: Vec<&str> = typed.path.iter().map(String::as_str).collect();
    match path.as_slice() {
        ["explain"] | ["simulate"] if typed.positionals.is_empty() => {
            let depth = partial.matches('/').count();
            let wanted = if depth >= 3 {
                catalog::Wanted::Instances
            } else {
                catalog::Wanted::Workloads
            };
            let catalog = Catalog::read(&typed.global, wanted).await;
            let found = match depth {
                0 | 1 => catalog.workloads.iter().map(|w| w.key.clone()).collect(),
                2 => catalog
                    .workloads
                    .iter()
                    .flat_map(|w| w.components.iter().map(move |c| format!("{}/{c}", w.key)))
                    .collect(),
                _ => catalog.instances,
            };
            (matching(found, partial), NO_FILE)
        }
        ["rollout", "plan" | "status"] if typed.positionals.is_empty() => {
            let catalog = Catalog::read(&typed.global, catalog::Wanted::Workloads).await;
            let found = catalog.workloads.into_iter().map(|w| w.key).collect();
            (matching(found, partial), NO_FILE)
        }
        ["drain"] => {
            let catalog = Catalog::read(&typed.global, catalog::Wanted::Nodes).await;
            let found = catalog
                .nodes
                .into_iter()
                .filter(|n| !typed.positionals.contains(&n.as_str()))
                .collect();
            (matching(found, partial), NO_FILE)
        }
        ["journal", "show" | "resolve"] if typed.positionals.is_empty() => {
            let catalog = Catalog::read(&typed.global, catalog::Wanted::Requests).await;
            (matching(catalog.requests, partial), NO_FILE)
        }
        ["completion"] if typed.positionals.is_empty() => (
            matching(["bash", "zsh", "fish"].map(String::from).to_vec(), partial),
            NO_FILE,
        ),
        _ => (Vec::new(), NO_FILE),
    }
}

fn matching(mut found: Vec<String>, partial: &str) -> Vec<String> {
    found.retain(|c| c.starts_with(partial));
    found.sort();
    found.dedup();
    found
}
