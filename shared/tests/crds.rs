//! The committed CRDs match the Rust types (`make crds` regenerates them), and only
//! InferenceReplica's is shipped to users: OME's own CRDs must never be replaced.

use alfred::api::crds::{OME_OWNED_ANNOTATION, SHIPPED_DIR, TEST_COPIES_DIR};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[test]
fn committed_crds_are_current() {
    for (path, crd) in alfred::api::crds::all() {
        let committed = std::fs::read_to_string(format!("{ROOT}/{path}"))
            .unwrap_or_else(|e| panic!("{path} is missing ({e}); run `make crds`"));
        assert_eq!(
            committed,
            alfred::api::crds::to_yaml(&crd),
            "{path} is stale; run `make crds` and commit"
        );
    }
}

#[test]
fn users_are_shipped_no_crd_of_omes_own_kinds() {
    let shipped: Vec<String> = std::fs::read_dir(format!("{ROOT}/{SHIPPED_DIR}"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(shipped, ["inferencereplicas.yaml"]);
    for (path, _) in alfred::api::crds::all() {
        if path.starts_with(TEST_COPIES_DIR) {
            let text = std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap();
            assert!(
                text.contains(OME_OWNED_ANNOTATION),
                "{path} is marked as OME's"
            );
        }
    }
}

#[test]
fn crds_carry_the_schema_checks() {
    let all = alfred::api::crds::all();
    let yaml = |name: &str| {
        let (_, crd) = all.iter().find(|(f, _)| f.ends_with(name)).unwrap();
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
    assert!(irep.contains("instanceStatusColumns"), "both stored forms");
}
