//! The defaulting hook under a burst of creates as OME makes them: 2,000 InferenceReplicas of
//! 200 InferenceServices from 8 writers at once. The webhook runs as its ServiceAccount with
//! the shipped RBAC; its API calls are counted in the audit log. What admission costs is read
//! from the API server's own histograms and printed (README figures), never asserted: the
//! machine is shared.

use std::time::Duration;

use alfred_e2e::{Cluster, histogram_quantile, shipped_hooks, stderr, wait_for};

const SERVICES: usize = 200;
const REPLICAS_EACH: usize = 10;
const WRITERS: usize = 8;

fn isvc(namespace: &str, i: usize) -> serde_json::Value {
    serde_json::json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": format!("svc-{i}"), "namespace": namespace},
        "spec": {"deploymentMode": "OMENative", "runtime": {"name": "vllm"},
                 "engine": {"minReplicas": 1}}})
}

/// Creates `objects` with `WRITERS` concurrent `kubectl create`, each its share as one List.
fn create_concurrently(cluster: &Cluster, objects: Vec<serde_json::Value>) {
    let mut shares = vec![Vec::new(); WRITERS];
    for (i, object) in objects.into_iter().enumerate() {
        shares[i % WRITERS].push(object);
    }
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || {
                let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": share});
                let out = cluster.kubectl_with(&["create", "-f", "-"], &list.to_string());
                assert!(out.status.success(), "creating: {}", stderr(&out));
            });
        }
    });
}

/// One namespace's InferenceServices, then their InferenceReplicas as OME's controller
/// creates them (owned by their InferenceService, without a strategy of their own).
fn burst(cluster: &Cluster, namespace: &str) {
    create_concurrently(cluster, (0..SERVICES).map(|i| isvc(namespace, i)).collect());
    let services: serde_json::Value = serde_json::from_str(&cluster.ok(&[
        "get",
        "inferenceservices",
        "-n",
        namespace,
        "-o",
        "json",
    ]))
    .unwrap();
    let mut replicas = Vec::new();
    for service in services["items"].as_array().unwrap() {
        let name = service["metadata"]["name"].as_str().unwrap();
        for r in 0..REPLICAS_EACH {
            replicas.push(
                serde_json::json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                "metadata": {"name": format!("{name}-engine-{r}"), "namespace": namespace,
                    "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                        "name": name, "uid": service["metadata"]["uid"],
                        "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"component": "engine", "parentRef": {"name": name}, "replicas": 1,
                         "runners": [{"name": "default"}]}}),
            );
        }
    }
    create_concurrently(cluster, replicas);
}

#[test]
#[ignore = "needs the local control plane: make e2e"]
fn a_burst_of_creates_is_answered_from_the_watches() {
    let mut cluster = Cluster::up("admission-load");
    for namespace in ["prod", "bare"] {
        cluster.ok(&["create", "namespace", namespace]);
    }
    let identity = cluster.webhook_identity();
    for namespace in ["prod", "bare"] {
        let runtime = serde_json::json!({"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime",
            "metadata": {"name": "vllm", "namespace": namespace},
            "spec": {"engineConfig": {"lifecycle": {"updateStrategy":
                {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 0}}}}}});
        assert!(cluster.apply(&runtime.to_string()).status.success());
    }

    // Without webhooks: what a create costs the API server alone.
    let bare_start = cluster.metrics();
    burst(&cluster, "bare");
    let bare_end = cluster.metrics();

    let (_, probes) = cluster.start_webhook_as(&identity, &[], &shipped_hooks());
    // Registered and answering: a replica of an InferenceService that does not exist is
    // admitted with the webhook's warning.
    wait_for(Duration::from_secs(20), "the mutating hook", || {
        let out = cluster.apply(
            r#"{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                "metadata": {"name": "probe", "namespace": "prod"},
                "spec": {"component": "engine", "parentRef": {"name": "none"},
                         "runners": [{"name": "default"}]}}"#,
        );
        stderr(&out).contains("alfred-webhook wrote no update-strategy defaults")
    });

    let agent = format!("alfred-webhook/{}", env!("CARGO_PKG_VERSION"));
    let mark = cluster.audit_mark();
    let (start, inside_start) = (cluster.metrics(), cluster.probe(probes, "/metrics").1);
    burst(&cluster, "prod");
    let (end, inside_end) = (cluster.metrics(), cluster.probe(probes, "/metrics").1);
    let calls = cluster.calls_since(mark, &agent);

    // Every replica got the runtime's strategy.
    let strategies = cluster.ok(&[
        "get",
        "inferencereplicas",
        "-n",
        "prod",
        "-o",
        "jsonpath={range .items[*]}{.spec.lifecycle.updateStrategy}{\"\\n\"}{end}",
    ]);
    let from_runtime =
        r#"{"rollingUpdate":{"maxSurge":0,"maxUnavailable":2},"type":"RecreatePod"}"#;
    assert_eq!(
        strategies.lines().filter(|l| *l == from_runtime).count(),
        SERVICES * REPLICAS_EACH,
        "{strategies}"
    );
    // Answered from the watches: no read per review. A GET is allowed only for an
    // InferenceService the watch had not delivered yet when its first replica came.
    let gets = calls.iter().filter(|(verb, _)| verb == "get").count();
    assert!(gets <= 5, "{gets} reads for 2,000 creates: {calls:#?}");
    assert!(calls.len() <= 10, "{calls:#?}");
    assert!(
        inside_end.contains("alfred_webhook_watch_failures_total 0\n"),
        "{inside_end}"
    );
    eprintln!("the webhook's API calls during 2,000 creates: {calls:?}");

    let ms = |text: (&str, &str), name: &str, labels: &[&str], q: f64| {
        histogram_quantile(text.0, text.1, name, labels, q)
            .map_or("-".to_string(), |s| format!("{:.1} ms", s * 1e3))
    };
    let request = "apiserver_request_duration_seconds";
    let hook = "apiserver_admission_webhook_admission_duration_seconds";
    let create_replica = [r#"verb="POST""#, r#"resource="inferencereplicas""#];
    let inside = "alfred_webhook_review_duration_seconds";
    for (what, scrapes, name, labels) in [
        (
            "inside the webhook, mutate",
            (&inside_start, &inside_end),
            inside,
            &[r#"hook="mutate""#][..],
        ),
        (
            "inside the webhook, validate",
            (&inside_start, &inside_end),
            inside,
            &[r#"hook="validate""#][..],
        ),
        (
            "InferenceReplica create, no webhooks",
            (&bare_start, &bare_end),
            request,
            &create_replica[..],
        ),
        (
            "InferenceReplica create, with webhooks",
            (&start, &end),
            request,
            &create_replica[..],
        ),
        (
            "mutating hook (InferenceReplica)",
            (&start, &end),
            hook,
            &[r#"name="inferencereplicas.mutate.alfred.ome.io""#][..],
        ),
        (
            "validating hook (InferenceReplica)",
            (&start, &end),
            hook,
            &[r#"name="inferencereplicas.validate.alfred.ome.io""#][..],
        ),
        (
            "validating hook (InferenceService)",
            (&start, &end),
            hook,
            &[r#"name="inferenceservices.validate.alfred.ome.io""#][..],
        ),
    ] {
        let scrapes = (scrapes.0.as_str(), scrapes.1.as_str());
        eprintln!(
            "{what}: p50 {}, p99 {}",
            ms(scrapes, name, labels, 0.5),
            ms(scrapes, name, labels, 0.99)
        );
    }
}
