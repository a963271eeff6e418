//! The committed CRDs under manifests/crds match the Rust types (`make crds` regenerates them).

#[test]
fn committed_crds_are_current() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crds");
    for (file, crd) in alfred::api::crds::all() {
        let committed = std::fs::read_to_string(format!("{dir}/{file}"))
            .unwrap_or_else(|e| panic!("{file} is missing ({e}); run `make crds`"));
        assert_eq!(
            committed,
            alfred::api::crds::to_yaml(&crd),
            "manifests/crds/{file} is stale; run `make crds` and commit"
        );
    }
}

#[test]
fn crds_carry_the_schema_checks() {
    let all = alfred::api::crds::all();
    let yaml = |name: &str| {
        let (_, crd) = all.iter().find(|(f, _)| *f == name).unwrap();
        alfred::api::crds::to_yaml(crd)
    };
    let isvc = yaml("inferenceservices.yaml");
    assert!(isvc.contains("RollingUpdateZeroBudget"));
    assert!(isvc.contains("- InPlaceIfPossible"));
    assert!(isvc.contains("x-kubernetes-int-or-string: true"));
    assert!(isvc.contains("shortNames:\n    - isvc"));
    let irep = yaml("inferencereplicas.yaml");
    assert!(irep.contains("shortNames:\n    - irep"));
    assert!(irep.contains("specReplicasPath: .spec.replicas"));
    assert!(irep.contains("labelSelectorPath: .status.labelSelector"));
    assert!(irep.contains("component is immutable"));
    for file in ["basemodels.yaml", "clusterbasemodels.yaml"] {
        assert!(
            yaml(file).contains(alfred::api::crds::OME_OWNED_ANNOTATION),
            "{file} is marked as OME's"
        );
    }
}
