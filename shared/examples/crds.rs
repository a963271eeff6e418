//! Writes the generated CRDs into the directory given as the first argument (`make crds`).

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "manifests/crds".into());
    std::fs::create_dir_all(&dir)?;
    for (file, crd) in alfred::api::crds::all() {
        std::fs::write(format!("{dir}/{file}"), alfred::api::crds::to_yaml(&crd))?;
    }
    Ok(())
}
