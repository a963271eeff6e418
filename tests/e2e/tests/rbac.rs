//! Least privilege for the read path: without rights the plugin says which permission is
//! missing and where to find the role; with `manifests/rbac/reader.yaml` bound, it reads.

use alfred_e2e::{Cluster, stderr, stdout};

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn the_reader_role_suffices_and_a_missing_permission_is_named() {
    let cluster = Cluster::up("rbac");
    let out = cluster.alfred_as_viewer(&["pools"]);
    assert!(!out.status.success());
    let error = stderr(&out);
    assert!(
        error.contains("listing nodes at https://127.0.0.1:")
            && error.contains(": forbidden (403): nodes is forbidden: User \"alfred-e2e-viewer\" cannot list resource \"nodes\"")
            && error.contains("grant that permission (manifests/rbac/ has the roles Alfred needs)"),
        "{error}"
    );

    let role = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/rbac/reader.yaml"
    );
    cluster.ok(&["apply", "-f", role]);
    cluster.ok(&[
        "create",
        "clusterrolebinding",
        "alfred-reader-viewer",
        "--clusterrole=alfred-reader",
        "--user=alfred-e2e-viewer",
    ]);
    // RBAC changes apply at once; the viewer now reads everything the pass needs.
    let out = cluster.alfred_as_viewer(&["pools"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cluster.alfred_as_viewer(&["snapshot"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("SnapshotInfo"));

    // ConfigMaps only by the four names the read asks for: no other can be listed or read.
    let viewer = cluster.dir.join("kubeconfig-viewer").display().to_string();
    let as_viewer = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", viewer.as_str()];
        all.extend_from_slice(args);
        cluster.kubectl(&all)
    };
    cluster.ok(&[
        "create",
        "configmap",
        "secret-ish",
        "-n",
        "default",
        "--from-literal=k=v",
    ]);
    cluster.ok(&[
        "create",
        "configmap",
        "alfred-config",
        "-n",
        "default",
        "--from-literal=config.yaml=schemaVersion: 1",
    ]);
    for refused in [
        &["get", "configmaps", "-A"][..],
        &["get", "configmaps", "-n", "default"],
        &["get", "configmap", "secret-ish", "-n", "default"],
        &["get", "configmap", "alfred-config", "-n", "default"],
        &[
            "get",
            "configmaps",
            "-A",
            "--field-selector",
            "metadata.name=secret-ish",
        ],
    ] {
        let out = as_viewer(refused);
        assert!(
            !out.status.success() && stderr(&out).contains("forbidden"),
            "{refused:?}: {}",
            stderr(&out)
        );
    }
    let out = as_viewer(&[
        "get",
        "configmaps",
        "-A",
        "--field-selector",
        "metadata.name=alfred-config",
        "-o",
        "name",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "configmap/alfred-config");
    // The plugin still reads its configuration through that grant.
    let out = cluster.alfred_as_viewer(&["recommend", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
