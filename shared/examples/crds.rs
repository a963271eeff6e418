//! Writes the generated CRDs under the repository given as the first argument (`make crds`):
//! `manifests/crds/` (shipped) and `tests/crds/` (test copies of OME's own kinds).

/// Writes the CRDs generated from the Rust types.
#[derive(clap::Parser)]
struct Args {
    /// The repository's root
    #[arg(default_value = ".")]
    root: std::path::PathBuf,
}

fn main() -> std::io::Result<()> {
    let Args { root } = clap::Parser::parse();
    for (path, crd) in alfred::api::crds::all() {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, alfred::api::crds::to_yaml(&crd))?;
    }
    Ok(())
}
