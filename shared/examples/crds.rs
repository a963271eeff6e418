//! Writes the generated CRDs under the repository given as the first argument (`make crds`):
//! `manifests/crds/` (shipped) and `tests/crds/` (test copies of OME's own kinds).

fn main() -> std::io::Result<()> {
    let root = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    for (path, crd) in alfred::api::crds::all() {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, alfred::api::crds::to_yaml(&crd))?;
    }
    Ok(())
}
