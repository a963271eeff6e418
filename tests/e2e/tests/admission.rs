//! Admission through a real kube-apiserver: `kubectl apply` of valid and invalid objects, each
//! refusal and warning reaching the user as written, defaults on InferenceReplicas from the
//! runtime and OME's ConfigMap, and re-applying changing nothing.

use std::time::Duration;

use alfred_e2e::{Cluster, shipped_hooks, stderr, stdout, wait_for};

const DENIED: &str =
    "admission webhook \"inferenceservices.validate.alfred.ome.io\" denied the request: ";

fn isvc(name: &str, annotations: &str, engine: &str) -> String {
    format!(
        r#"{{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {{"name": "{name}", "namespace": "prod", "annotations": {annotations}}},
            "spec": {{"deploymentMode": "OMENative", "engine": {engine}}}}}"#
    )
}

fn replica(name: &str, parent: &str) -> String {
    format!(
        r#"{{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {{"name": "{name}", "namespace": "prod"}},
            "spec": {{"component": "engine", "parentRef": {{"name": "{parent}"}}, "replicas": 2,
                      "runners": [{{"name": "default"}}],
                      "lifecycle": {{"updateStrategy": {{"type": "InPlaceIfPossible"}}}}}}}}"#
    )
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn admission_through_the_api_server() {
    let mut cluster = Cluster::up("admission");
    cluster.ok(&["create", "namespace", "prod"]);
    cluster.ok(&["create", "namespace", "ome"]);
    cluster.start_webhook(&["--defaults-refresh-interval", "1s"], &shipped_hooks());

    // The API server picks up a new webhook configuration within a moment.
    let bad_cooldown = isvc(
        "chat",
        r#"{"alfred.ome.io/cooldown-minutes": "30m"}"#,
        r#"{"minReplicas": 2}"#,
    );
    wait_for(Duration::from_secs(20), "the webhook to be called", || {
        let out = cluster.apply(&bad_cooldown);
        !out.status.success() && stderr(&out).contains("alfred.ome.io")
    });
    let out = cluster.apply(&bad_cooldown);
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "Error from server (Forbidden): error when creating \"STDIN\": {DENIED}annotation alfred.ome.io/cooldown-minutes=\"30m\" is invalid: use a whole number of minutes, 0 or more (0 means no cooldown)"
        )
    );
    let out = cluster.apply(&isvc(
        "chat",
        r#"{"alfred.ome.io/priority": "1.5"}"#,
        r#"{"minReplicas": 2}"#,
    ));
    assert!(
        stderr(&out).contains(&format!(
            "{DENIED}annotation alfred.ome.io/priority=\"1.5\" is invalid"
        )),
        "{}",
        stderr(&out)
    );
    let out = cluster.apply(&isvc(
        "chat",
        r#"{"ome.io/revision-history-limit": "0"}"#,
        r#"{"minReplicas": 2}"#,
    ));
    assert!(!out.status.success(), "a zero history limit is refused");
    assert!(stderr(&out).contains(DENIED), "{}", stderr(&out));

    // Admitted, with OME's warning shown by kubectl.
    let out = cluster.apply(&isvc(
        "chat",
        "{}",
        r#"{"minReplicas": 2, "deploymentStrategy": {"type": "Recreate"}}"#,
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(
            "Warning: engine.deploymentStrategy is set but deploymentMode is \"OMENative\""
        ),
        "{}",
        stderr(&out)
    );
    // Re-applying the same object changes nothing.
    let again = cluster.apply(&isvc(
        "chat",
        "{}",
        r#"{"minReplicas": 2, "deploymentStrategy": {"type": "Recreate"}}"#,
    ));
    assert!(stdout(&again).contains("inferenceservice.ome.io/chat unchanged"));

    // A runtime may carry zero budgets (a zero on one side gets through, as the spec says).
    let runtime = r#"{"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime",
        "metadata": {"name": "vllm", "namespace": "prod"},
        "spec": {"engineConfig": {"lifecycle": {"updateStrategy":
            {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 0}}}}}}"#;
    let out = cluster.apply(runtime);
    assert!(out.status.success(), "{}", stderr(&out));

    // Defaults: OME's ConfigMap, then a replica of an InferenceService without a runtime gets
    // the operator default; one whose InferenceService names the runtime gets the runtime's.
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../manifests/webhook/inferenceservice-config.example.yaml"
    ))
    .unwrap();
    assert!(cluster.apply(&config).status.success());
    let strategy = |name: &str| {
        cluster.ok(&[
            "get",
            "inferencereplica",
            "-n",
            "prod",
            name,
            "-o",
            "jsonpath={.spec.lifecycle.updateStrategy}",
        ])
    };
    // The webhook re-reads the ConfigMap every second; until then it writes no default.
    wait_for(Duration::from_secs(20), "the operator defaults", || {
        let _ = cluster.kubectl(&[
            "delete",
            "inferencereplica",
            "-n",
            "prod",
            "chat-engine",
            "--ignore-not-found",
        ]);
        assert!(
            cluster
                .apply(&replica("chat-engine", "chat"))
                .status
                .success()
        );
        strategy("chat-engine").contains("25%")
    });
    // The spec's example, exactly as users see it.
    assert_eq!(
        strategy("chat-engine"),
        r#"{"rollingUpdate":{"maxUnavailable":"25%"},"type":"InPlaceIfPossible"}"#
    );
    let out = cluster.apply(&replica("chat-engine", "chat"));
    assert!(
        stdout(&out).contains("unchanged"),
        "re-applying changes nothing: {}",
        stdout(&out)
    );

    let with_runtime = isvc("search", "{}", r#"{"minReplicas": 2}"#)
        .replace(r#""spec": {"#, r#""spec": {"runtime": {"name": "vllm"}, "#);
    assert!(cluster.apply(&with_runtime).status.success());
    assert!(
        cluster
            .apply(&replica("search-engine", "search"))
            .status
            .success()
    );
    // The runtime's budgets are kept field by field; its type yields to the replica's own.
    assert_eq!(
        strategy("search-engine"),
        r#"{"rollingUpdate":{"maxSurge":0,"maxUnavailable":2},"type":"InPlaceIfPossible"}"#
    );

    // Deletes pass.
    cluster.ok(&["delete", "inferenceservice", "-n", "prod", "chat"]);
    let log = cluster.log("webhook.log");
    assert!(
        log.contains("\"outcome\":\"denied\""),
        "refusals are logged with their uid"
    );
    assert!(log.contains("\"outcome\":\"patched\""));
    // The webhook's own reads (watches of runtimes and OME's defaults) name it in the audit log.
    let calls = cluster.calls_since(0, &format!("alfred-webhook/{}", env!("CARGO_PKG_VERSION")));
    for (kind, verb) in [("servingruntimes", "watch"), ("configmaps", "watch")] {
        assert!(
            calls.iter().any(|(v, uri)| v == verb && uri.contains(kind)),
            "a {verb} of {kind}: {calls:#?}"
        );
    }
}
