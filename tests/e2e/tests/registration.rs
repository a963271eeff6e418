//! The webhook registers its own configurations (`--register`), running as its ServiceAccount
//! with the shipped RBAC: nothing is registered, and writes pass, until it serves and is
//! probed ready; then the fail-closed configuration is there with the serving CA and the
//! ClusterRole as owner, refusals reach the user, and a deleted configuration comes back.

use std::time::Duration;

use alfred_e2e::{Cluster, free_port, shipped_hooks, stderr, wait_for};
use base64::Engine as _;

fn isvc(name: &str) -> String {
    format!(
        r#"{{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {{"name": "{name}", "namespace": "prod",
                          "annotations": {{"alfred.ome.io/cooldown-minutes": "30m"}}}},
            "spec": {{"deploymentMode": "OMENative", "engine": {{"minReplicas": 1}}}}}}"#
    )
}

fn configurations(cluster: &Cluster) -> String {
    cluster.ok(&[
        "get",
        "validatingwebhookconfigurations,mutatingwebhookconfigurations",
        "-o",
        "name",
    ])
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn the_webhook_registers_itself_once_it_can_answer() {
    let mut cluster = Cluster::up("registration");
    cluster.ok(&["create", "namespace", "prod"]);
    let identity = cluster.webhook_identity();

    let (port, probes) = (free_port(), free_port());
    // The shipped configurations by URL as YAML documents, their caBundle left for the
    // webhook to fill.
    let manifest = cluster.dir.join("webhooks.yaml");
    let hooks = shipped_hooks()
        .replace("}\n{", "}\n---\n{")
        .replace("CA_BUNDLE", "");
    std::fs::write(&manifest, cluster.hooks_at(port, &hooks)).unwrap();
    let ca = cluster.dir.join("pki/ca.crt");
    cluster.spawn_webhook(
        &identity,
        port,
        probes,
        &[
            "--register",
            manifest.to_str().unwrap(),
            "--ca-bundle-file",
            ca.to_str().unwrap(),
            "--owner-cluster-role",
            "alfred-webhook",
            "--register-delay",
            "0s",
            "--register-interval",
            "1s",
        ],
    );

    // Serving, but no readiness probe has seen it ready: nothing registered, writes pass.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(configurations(&cluster), "");
    let out = cluster.apply(&isvc("early"));
    assert!(out.status.success(), "{}", stderr(&out));

    // Probed ready (as the kubelet does): registered, and refusals reach the user.
    wait_for(Duration::from_secs(20), "the webhook to be ready", || {
        cluster.probe(probes, "/readyz").0 == 200
    });
    wait_for(Duration::from_secs(20), "the registration", || {
        configurations(&cluster).lines().count() == 2
    });
    let role_uid = cluster.ok(&[
        "get",
        "clusterrole",
        "alfred-webhook",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let validating: serde_json::Value = serde_json::from_str(&cluster.ok(&[
        "get",
        "validatingwebhookconfiguration",
        "alfred-webhook",
        "--show-managed-fields",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(
        validating["metadata"]["ownerReferences"],
        serde_json::json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "name": "alfred-webhook", "uid": role_uid}])
    );
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&ca).unwrap());
    for hook in validating["webhooks"].as_array().unwrap() {
        assert_eq!(hook["clientConfig"]["caBundle"], ca_bundle.as_str());
    }
    assert_eq!(validating["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(
        validating["metadata"]["managedFields"][0]["manager"],
        "alfred-webhook"
    );
    let out = cluster.apply(&isvc("late"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("annotation alfred.ome.io/cooldown-minutes=\"30m\" is invalid"),
        "{}",
        stderr(&out)
    );

    // A deleted configuration is registered again.
    cluster.ok(&["delete", "validatingwebhookconfiguration", "alfred-webhook"]);
    wait_for(
        Duration::from_secs(20),
        "the configuration to come back",
        || configurations(&cluster).lines().count() == 2,
    );
    let metrics = cluster.probe(probes, "/metrics").1;
    assert!(
        metrics.contains("alfred_webhook_registration_failures_total 0\n"),
        "{metrics}"
    );
}
