//! The mix as the API server sends it. The test fixtures are written for people: pretty-printed
//! and holding only what a rule reads. The API server sends compact JSON with much more in it:
//! who asked (`userInfo`), the request's `options`, the stored object's server fields
//! (`uid`, `resourceVersion`, `managedFields`), the `last-applied-configuration` that
//! `kubectl apply` and GitOps tools write, and a real workload's container spec. The verdicts
//! do not change (the generator checks that before it starts); the bytes to read do.

use serde_json::{Map, Value, json};

/// Who writes each kind: people (through kubectl or a GitOps tool) write InferenceServices and
/// runtimes, OME's controller writes InferenceReplicas.
fn writer(kind: &str) -> (&'static str, &'static str, bool) {
    match kind {
        "InferenceReplica" => (
            "system:serviceaccount:ome:ome-controller-manager",
            "manager",
            false,
        ),
        _ => (
            "system:serviceaccount:argocd:argocd-application-controller",
            "argocd-controller",
            true,
        ),
    }
}

/// Rewrites a fixture review as the API server would send it.
pub fn as_apiserver_sends(fixture: &[u8]) -> Result<Vec<u8>, String> {
    let mut review: Value = serde_json::from_slice(fixture).map_err(|e| e.to_string())?;
    let request = review
        .get_mut("request")
        .and_then(Value::as_object_mut)
        .ok_or("a review without a request")?;
    let kind = request["kind"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (user, manager, applied) = writer(&kind);
    let create = request["operation"] == "CREATE";
    request.insert("requestKind".into(), request["kind"].clone());
    request.insert("requestResource".into(), request["resource"].clone());
    request.insert(
        "userInfo".into(),
        json!({
            "username": user,
            "uid": "5c1f0a0e-8a41-4c55-9a8e-3f2d7b1e9c20",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ome", "system:authenticated"],
            "extra": {
                "authentication.kubernetes.io/credential-id": ["JTI=0f6c2c8e-2b8e-4d55-a1d0-6f5f3d2f8a11"],
                "authentication.kubernetes.io/node-name": ["gpu-pool-a-17"],
                "authentication.kubernetes.io/node-uid": ["0b9d8f2e-1c55-4f0c-9d7e-2a8c1b3e4f50"],
                "authentication.kubernetes.io/pod-name": ["ome-controller-manager-7d9f8c6b5-x2x7q"],
                "authentication.kubernetes.io/pod-uid": ["8e2f1d3c-4b5a-4c6d-8e7f-9a0b1c2d3e4f"]
            }
        }),
    );
    request.insert("dryRun".into(), Value::Bool(false));
    request.insert(
        "options".into(),
        json!({
            "kind": if create { "CreateOptions" } else { "UpdateOptions" },
            "apiVersion": "meta.k8s.io/v1",
            "fieldManager": manager,
            "fieldValidation": "Strict"
        }),
    );
    for key in ["object", "oldObject"] {
        if let Some(object) = request.get_mut(key).filter(|o| o.is_object()) {
            stored(object, &kind, manager, applied);
        }
    }
    serde_json::to_vec(&review).map_err(|e| e.to_string())
}

/// The object as stored: a real container spec on each InferenceService component, then the
/// server's metadata.
fn stored(object: &mut Value, kind: &str, manager: &str, applied: bool) {
    if kind == "InferenceService" {
        for component in ["engine", "decoder"] {
            if let Some(c) = object["spec"]
                .get_mut(component)
                .and_then(Value::as_object_mut)
            {
                c.entry("minReplicas").or_insert(json!(2));
                c.entry("maxReplicas").or_insert(json!(4));
                c.insert("runner".into(), runner());
            }
        }
    }
    let fields = fields_v1(&object["spec"]);
    let last_applied = serde_json::to_string(&*object).unwrap_or_default();
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if applied {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(annotations) = annotations {
            annotations.insert(
                "kubectl.kubernetes.io/last-applied-configuration".into(),
                Value::String(last_applied + "\n"),
            );
        }
    }
    if let Some(labels) = metadata
        .entry("labels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        labels.insert("app.kubernetes.io/instance".into(), json!("chat"));
        labels.insert("app.kubernetes.io/part-of".into(), json!("llm-serving"));
    }
    metadata.insert("uid".into(), json!("3b0e8f5c-6a2d-4e1f-9b7c-8d5e4f3a2b1c"));
    metadata.insert("resourceVersion".into(), json!("48213377"));
    metadata.insert("generation".into(), json!(7));
    metadata.insert("creationTimestamp".into(), json!("2026-11-02T09:14:27Z"));
    metadata.insert(
        "managedFields".into(),
        json!([{
            "manager": manager,
            "operation": "Update",
            "apiVersion": "ome.io/v1beta1",
            "time": "2026-11-29T17:40:03Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}, "f:labels": {".": {}}}, "f:spec": fields}
        }]),
    );
}

/// A serving container as a real InferenceService carries it.
fn runner() -> Value {
    json!({
        "name": "ome-container",
        "image": "docker.io/lmsysorg/sglang:v0.4.6.post1-cu124",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--host=0.0.0.0", "--port=8080", "--model-path=/mnt/models", "--tp-size=8",
                 "--enable-metrics", "--mem-fraction-static=0.9", "--log-requests"],
        "env": [
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "NCCL_IB_DISABLE", "value": "0"},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8"},
            "requests": {"cpu": "64", "memory": "1200Gi", "nvidia.com/gpu": "8"}
        },
        "readinessProbe": {"httpGet": {"path": "/health_generate", "port": 8080},
                           "initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 30},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "model", "mountPath": "/mnt/models", "readOnly": true}]
    })
}

/// The `fieldsV1` set of a value: every key of every object, as `f:<key>`.
fn fields_v1(value: &Value) -> Value {
    let mut set = Map::new();
    if let Some(object) = value.as_object() {
        set.insert(".".into(), json!({}));
        for (key, v) in object {
            set.insert(format!("f:{key}"), fields_v1(v));
        }
    }
    Value::Object(set)
}
