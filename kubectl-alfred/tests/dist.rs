//! The release archive and its krew manifest (`make dist` runs `dist/package.sh` on the release
//! build; here it packs the test build, which is the same as far as packing goes): the manifest
//! names the archive by its sha256, the files it takes are in it, and it installs for this
//! platform.

use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[test]
fn the_manifest_matches_the_archive_it_names() {
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    let out = std::env::temp_dir().join(format!("alfred-dist-{}", std::process::id()));
    let pack = || {
        Command::new(format!("{ROOT}/dist/package.sh"))
            .args([
                &bin_dir,
                &out.display().to_string(),
                "https://example.com/releases/v1",
            ])
            .output()
            .expect("dist/package.sh runs")
    };
    let run = pack();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let manifest: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(out.join("alfred.yaml")).unwrap())
            .expect("the manifest is YAML");
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(
        manifest["metadata"]["name"], "alfred",
        "installs as `kubectl alfred`"
    );
    let spec = &manifest["spec"];
    assert_eq!(spec["version"], format!("v{}", env!("CARGO_PKG_VERSION")));
    for field in ["shortDescription", "description", "caveats"] {
        assert!(
            spec[field].as_str().is_some_and(|t| !t.trim().is_empty()),
            "{field}"
        );
    }
    let caveats = spec["caveats"].as_str().unwrap();
    assert!(
        caveats.contains("webhook") && caveats.contains("manifests/rbac/"),
        "{caveats}"
    );
    // The completion helper goes where krew's uninstall cannot leave it dangling, and the
    // caveat says how to remove it.
    assert!(
        caveats.contains("cp ") && !caveats.contains("ln -s") && !caveats.contains(".krew}/bin"),
        "{caveats}"
    );
    assert!(
        caveats.contains("rm ~/.local/bin/kubectl_complete-alfred"),
        "{caveats}"
    );

    let platforms = spec["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1);
    let platform = &platforms[0];
    let labels = &platform["selector"]["matchLabels"];
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(labels["os"], std::env::consts::OS);
    assert_eq!(labels["arch"], arch);
    let uri = platform["uri"].as_str().unwrap();
    let name = uri
        .strip_prefix("https://example.com/releases/v1/")
        .expect("RELEASE_URL/ARCHIVE");
    let archive = std::fs::read(out.join(name)).expect("the archive the uri names");
    let sha: String = Sha256::digest(&archive)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(platform["sha256"], sha.as_str());

    let list = Command::new("tar")
        .arg("-tzf")
        .arg(out.join(name))
        .output()
        .unwrap();
    let listed = String::from_utf8(list.stdout).unwrap();
    let contents: Vec<&str> = listed.lines().collect();
    assert_eq!(
        contents,
        [
            "kubectl-alfred",
            "kubectl_complete-alfred",
            "LICENSE",
            "README.md"
        ]
    );
    assert_eq!(platform["bin"], "kubectl-alfred");
    // The packed binary is stripped: the build's debug info stays behind.
    let unpacked = out.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(out.join(name))
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(untar.success());
    // The sections as binutils' readelf lists them (binutils is what packs: its strip).
    let debug_sections = |path: &std::path::Path| {
        let out = Command::new("readelf")
            .args(["-S", "--wide"])
            .arg(path)
            .output()
            .expect("readelf runs (Debian: apt-get install binutils)");
        assert!(out.status.success());
        // Line tables and debug info (strip keeps the loaded `.debug_gdb_scripts`).
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        listed.matches(" .debug_line ").count() + listed.matches(" .debug_info ").count()
    };
    let built = std::path::Path::new(&bin_dir).join("kubectl-alfred");
    assert!(debug_sections(&built) > 0, "the test build has line tables");
    let packed = unpacked.join("kubectl-alfred");
    assert_eq!(debug_sections(&packed), 0, "the packed binary is stripped");
    let size = |path: &std::path::Path| std::fs::metadata(path).unwrap().len();
    assert!(size(&packed) < size(&built));
    for file in platform["files"].as_array().unwrap() {
        let from = file["from"].as_str().unwrap();
        assert!(contents.contains(&from), "{from} is not in the archive");
    }
    // The archive is reproducible: packing the same build again gives the same bytes.
    let again = pack();
    assert!(again.status.success());
    assert_eq!(std::fs::read(out.join(name)).unwrap(), archive);
    std::fs::remove_dir_all(out).unwrap();
}
