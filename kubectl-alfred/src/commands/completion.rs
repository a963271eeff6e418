//! `kubectl alfred completion bash|zsh|fish`: completion scripts for running `kubectl-alfred`
//! directly. Each asks `kubectl-alfred __complete` for the candidates, as kubectl does through
//! `kubectl_complete-alfred`, so both complete the same things.

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::render;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args)]
pub struct CompletionArgs {
    /// The shell to print the script for.
    pub shell: Shell,
}

pub fn run(args: &CompletionArgs) -> Result<()> {
    render::emit(match args.shell {
        Shell::Bash => include_str!("completion/kubectl-alfred.bash"),
        Shell::Zsh => include_str!("completion/kubectl-alfred.zsh"),
        Shell::Fish => include_str!("completion/kubectl-alfred.fish"),
    })
}
