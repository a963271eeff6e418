//! Node and Pod lists in the API server's protobuf read as the same model as their JSON. The
//! captures in data/protobuf/ are kube-apiserver v1.34's answers for the objects of
//! tests/e2e/fixtures/every-read-field.yaml, in both encodings (the e2e suite compares the two
//! forms again on a live server).

use alfred::snapshot::{Snapshot, protobuf};

fn capture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/protobuf/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn from_json(name: &str) -> (Snapshot, Option<String>) {
    let mut snapshot = Snapshot::default();
    let text = String::from_utf8(capture(name)).unwrap();
    let token = snapshot.add_json_document(1, &text).unwrap();
    (snapshot, token)
}

fn from_protobuf(name: &str) -> (Snapshot, Option<String>) {
    let mut snapshot = Snapshot::default();
    let token = snapshot.add_protobuf_list(1, &capture(name)).unwrap();
    (snapshot, token)
}

#[test]
fn nodes_read_from_protobuf_as_from_json() {
    let (json, _) = from_json("nodes.json");
    let (pb, _) = from_protobuf("nodes.pb");
    assert_eq!(pb.nodes, json.nodes);
    // What the comparison covers: every field the model keeps is set in the capture.
    let node = &pb.nodes[0];
    assert_eq!(node.metadata.name, "gpu-a-01");
    assert_eq!(
        node.metadata.label("nvidia.com/gpu.product"),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(node.spec.taints.len(), 3);
    assert!(node.spec.taints[1].time_added.is_some());
    assert_eq!(node.spec.taints[2].value.as_deref(), Some("inference"));
    assert_eq!(node.spec.taints[0].value, None, "JSON omits an empty value");
    assert_eq!(
        node.status.allocatable.get("cpu").map(|q| q.0.as_str()),
        Some("191500m")
    );
    let unhealthy = node.condition("GpuUnhealthy").unwrap();
    assert_eq!(
        (unhealthy.status.as_str(), unhealthy.reason.as_str()),
        ("True", "XidError")
    );
    assert!(unhealthy.last_transition_time.is_some());
    assert!(pb.nodes[1].spec.unschedulable);
}

#[test]
fn pods_read_from_protobuf_as_from_json() {
    let (json, _) = from_json("pods.json");
    let (pb, _) = from_protobuf("pods.pb");
    assert_eq!(pb.pods, json.pods);
    let pod = &pb.pods[0];
    let meta = &pod.metadata;
    assert_eq!(
        (meta.namespace.as_str(), meta.name.as_str()),
        ("chat", "llama-engine-0-default-0")
    );
    assert!(!meta.uid.is_empty() && meta.creation_timestamp.is_some());
    assert!(
        meta.deletion_timestamp.is_some(),
        "deleted behind its finalizer"
    );
    assert_eq!(meta.annotations.get("note").map(String::as_str), Some(""));
    assert_eq!(meta.owner_references[0].controller, Some(true));
    let spec = &pod.spec;
    assert_eq!(spec.node_name, "gpu-a-01");
    assert_eq!(spec.priority, Some(1_000_000));
    assert_eq!(pb.pods[1].spec.priority, Some(-5), "a negative int32");
    assert_eq!(spec.overhead.get("cpu").map(|q| q.0.as_str()), Some("250m"));
    assert_eq!(spec.node_selector.len(), 2);
    assert_eq!(spec.init_containers[1].restart_policy, "Always");
    assert_eq!(
        spec.containers[0]
            .resources
            .requests
            .get("nvidia.com/gpu")
            .map(|q| q.0.as_str()),
        Some("8")
    );
    assert_eq!(spec.volumes.len(), 3);
    assert_eq!(
        spec.volumes[0]
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("llama-models")
    );
    assert_eq!(spec.tolerations.len(), 4);
    assert_eq!(spec.tolerations[1].toleration_seconds, Some(300));
    assert_eq!(spec.tolerations[2].key, None, "JSON omits an empty key");
    let affinity = spec.affinity.as_ref().unwrap();
    let node_terms = &affinity
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms;
    assert_eq!(node_terms.len(), 2);
    assert!(node_terms[1].match_fields.is_some());
    assert_eq!(
        node_terms[0].match_expressions.as_ref().unwrap()[1].values,
        None
    );
    let anti = &affinity
        .pod_anti_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()[0];
    assert!(
        anti.namespace_selector
            .as_ref()
            .is_some_and(|s| *s == Default::default()),
        "`namespaceSelector: {{}}` (all namespaces) stays present and empty"
    );
    assert_eq!(spec.topology_spread_constraints[0].min_domains, Some(2));
    assert_eq!(
        spec.topology_spread_constraints[0]
            .node_taints_policy
            .as_deref(),
        Some("Honor")
    );
    assert!(pod.crash_looping() && pod.restarted());
    assert_eq!(pod.phase(), "Running");
    assert!(pod.status.start_time.is_some());
    assert_eq!(pb.pods[1].phase(), "Pending");
}

#[test]
fn a_page_gives_its_continue_token() {
    let (json, json_token) = from_json("pods-limit-1.json");
    let (pb, pb_token) = from_protobuf("pods-limit-1.pb");
    assert_eq!(pb.pods, json.pods);
    assert_eq!(pb.pods.len(), 1);
    assert!(json_token.is_some());
    assert_eq!(pb_token, json_token);
    assert_eq!(from_protobuf("pods.pb").1, None);
}

/// Read in pieces as they arrive, of any sizes, a body gives what it gives read whole.
#[test]
fn a_body_read_in_pieces_reads_as_whole() {
    let (whole, _) = from_protobuf("pods.pb");
    let body = capture("pods.pb");
    for size in [1, 2, 3, 7, 64, 1000, 4096] {
        let mut pieces = Snapshot::default();
        pieces
            .add_protobuf_stream(1, body.chunks(size))
            .unwrap_or_else(|e| panic!("pieces of {size}: {e}"));
        assert_eq!(pieces.pods, whole.pods, "pieces of {size}");
    }
    let cut = Snapshot::default()
        .add_protobuf_stream(1, body[..body.len() - 10].chunks(100))
        .unwrap_err();
    assert!(cut.message.contains("past the end"), "{cut}");
}

#[test]
fn a_failed_request_says_why() {
    let status = protobuf::status(&capture("status-not-found.pb")).unwrap();
    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");
    assert_eq!(status.message, r#"pods "missing" not found"#);
    assert!(
        protobuf::status(&capture("pods.pb")).is_err(),
        "a list is not a Status"
    );
}

/// A body cut anywhere, or with any byte changed, is an error or a smaller model: never a panic.
#[test]
fn damaged_bodies_are_errors_not_panics() {
    let body = capture("pods.pb");
    for end in 0..body.len() {
        let _ = Snapshot::default().add_protobuf_list(1, &body[..end]);
    }
    let cut = Snapshot::default()
        .add_protobuf_list(3, &body[..body.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(
        cut.starts_with("document 3: the API server's protobuf answer cannot be read at byte"),
        "{cut}"
    );
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut damaged = body.clone();
        let at = (state as usize) % damaged.len();
        damaged[at] = (state >> 32) as u8;
        let _ = Snapshot::default().add_protobuf_list(1, &damaged);
    }
    let json = capture("pods.json");
    let not_protobuf = Snapshot::default().add_protobuf_list(1, &json).unwrap_err();
    assert!(not_protobuf.message.contains("k8s\\0"), "{not_protobuf}");
    let status = Snapshot::default()
        .add_protobuf_list(1, &capture("status-not-found.pb"))
        .unwrap_err();
    assert!(
        status.message.contains("not a v1 NodeList or PodList"),
        "{status}"
    );
}
