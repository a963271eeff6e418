//! `kubectl alfred version` against a real API server: what it finds about OME, the webhook
//! and the caller's rights, as the cluster changes.

use std::path::Path;

use alfred_e2e::{Cluster, stderr, stdout};

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn version_says_what_the_cluster_serves_and_allows() {
    let cluster = Cluster::up("version");
    let out = cluster.alfred(&["version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("kubectl-alfred {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("OME: ome.io v1beta1"), "{text}");
    assert!(text.contains("InferenceReplica: served"), "{text}");
    assert!(text.contains("webhook: none registered"), "{text}");
    assert!(text.contains("you may patch InferenceServices"), "{text}");

    // The viewer reads but may not patch; it may not list webhook configurations either.
    let out = cluster.alfred_as_viewer(&["version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "you may not patch InferenceServices (migrate needs manifests/rbac/migrator.yaml)"
        ),
        "{}",
        stdout(&out)
    );

    // Registered webhooks are named; the configurations alone (no Service behind them), so
    // nothing else is written after them.
    let webhooks = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/webhook/webhooks.yaml"
    ));
    cluster.ok(&["apply", "-f", webhooks.to_str().unwrap()]);
    let out = cluster.alfred(&["version", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(report["cluster"]["state"], "reachable");
    assert_eq!(
        report["cluster"]["webhookConfigurations"]["known"],
        serde_json::json!([
            "ValidatingWebhookConfiguration/alfred-webhook",
            "MutatingWebhookConfiguration/alfred-webhook"
        ])
    );
    assert_eq!(
        report["cluster"]["mayPatchInferenceServices"]["known"],
        true
    );
    assert_eq!(
        report["cluster"]["omeVersions"],
        serde_json::json!(["v1beta1"])
    );

    // An OME release before OMENative: no InferenceReplica kind.
    let old = Cluster::up_without_replicas("version-old");
    let out = old.alfred(&["version"]);
    assert!(
        stdout(&out).contains("InferenceReplica: not served"),
        "{}",
        stdout(&out)
    );
}
