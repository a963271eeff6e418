//! A synthetic cluster as `kubectl get -o json` prints it, for the benchmarks: 8-GPU nodes in
//! two pools, single-pod OMENative Instances of 1/2/4/8 GPUs (four per InferenceService) with
//! realistic metadata, steady InferenceReplicas, and some pods pending.

use serde_json::json;

/// `pods` pods, of which `pending` (spread evenly) wait unbound.
pub fn generate(nodes: usize, pods: usize, pending_count: usize) -> String {
    let mut items = Vec::with_capacity(nodes + pods);
    items.push(json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
        "metadata": {"name": "llama-3-1-70b-instruct"},
        "spec": {"storage": {"storageUri": "hf://meta-llama/Llama-3.1-70B-Instruct", "path": "/raid/models/llama"}}}));
    for i in 0..nodes {
        let product = if i % 2 == 0 {
            "NVIDIA-H100-80GB-HBM3"
        } else {
            "NVIDIA-A100-SXM4-80GB"
        };
        items.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("gpu-node-{i:05}"), "uid": format!("uid-node-{i}"),
                "labels": {"kubernetes.io/hostname": format!("gpu-node-{i:05}"), "nvidia.com/gpu.product": product,
                           "nvidia.com/gpu.count": "8", "node.kubernetes.io/instance-type": "p5.48xlarge",
                           "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
                           "models.ome.io/clusterbasemodel.llama-3-1-70b-instruct": "Ready"},
                "creationTimestamp": "2026-09-01T00:00:00Z"},
            "spec": {"providerID": format!("aws:///zone/i-{i:012}")},
            "status": {"capacity": {"cpu": "192", "memory": "2063937288Ki", "nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"cpu": "191", "memory": "2061840136Ki", "nvidia.com/gpu": "8", "pods": "110"},
                       "conditions": [
                           {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": "2026-09-28T10:14:00Z", "lastTransitionTime": "2026-09-01T00:00:00Z"},
                           {"type": "GpuUnhealthy", "status": "False", "lastTransitionTime": "2026-09-01T00:00:00Z"},
                           {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2026-09-01T00:00:00Z"}],
                       "nodeInfo": {"kubeletVersion": "v1.34.1", "containerRuntimeVersion": "containerd://2.0.4",
                                    "osImage": "Ubuntu 24.04", "architecture": "amd64"}}
        }));
    }
    let sizes = [1, 1, 1, 1, 1, 1, 1, 2, 4, 8];
    for i in 0..pods {
        let gpus = sizes[i % sizes.len()];
        let isvc = format!("svc-{}", i / 4);
        let index = i % 4;
        let every = (pods / pending_count.max(1)).max(1);
        let pending = pending_count > 0 && i % every == every - 1 && i / every < pending_count;
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{isvc}-engine-{index}-default-0"), "namespace": format!("ns-{}", (i / 4 * 4) % 50),
                "uid": format!("uid-pod-{i}"), "creationTimestamp": "2026-09-28T08:00:00Z",
                "labels": {"ome.io/inferenceservice": isvc, "component": "engine", "ome.io/managed-by": "OMENative",
                           "ome.io/instance-index": index.to_string(), "ome.io/runner": "default",
                           "ome.io/pod-ordinal": "0", "ome.io/revision-hash": "7b4c2e19"},
                "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                     "name": format!("{isvc}-engine"), "uid": "x", "controller": true}]},
            "spec": {"schedulerName": "default-scheduler", "restartPolicy": "Always",
                     "terminationGracePeriodSeconds": 30,
                     "nodeSelector": {"models.ome.io/clusterbasemodel.llama-3-1-70b-instruct": "Ready"},
                     "containers": [{"name": "ome-container", "image": "docker.io/lmsysorg/sglang:v0.5.3-cu129",
                         "args": ["--model-path", "/mnt/models", "--port", "8080", "--tp", gpus.to_string()],
                         "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                         "resources": {"limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "16", "memory": "256Gi"},
                                       "requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "12", "memory": "200Gi"}},
                         "volumeMounts": [{"name": "models", "mountPath": "/mnt/models", "readOnly": true}]}],
                     "volumes": [{"name": "models", "hostPath": {"path": "/raid/models/llama", "type": "Directory"}}],
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
            "status": {"phase": "Running", "startTime": "2026-09-28T08:01:00Z", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-09-28T08:05:00Z"},
                                      {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-09-28T08:01:00Z"}]}
        });
        if pending {
            pod["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "lastTransitionTime": "2026-09-28T10:00:00Z", "reason": "Unschedulable"}]});
        } else {
            pod["spec"]["nodeName"] = json!(format!("gpu-node-{:05}", (i * 7919) % nodes.max(1)));
        }
        if !pending {
            pod["status"]["containerStatuses"] = json!([{"name": "ome-container", "ready": true, "restartCount": 0,
                "image": "docker.io/lmsysorg/sglang:v0.5.3-cu129", "imageID": "docker.io/lmsysorg/sglang@sha256:4f1c",
                "containerID": format!("containerd://{i:064x}"), "started": true,
                "state": {"running": {"startedAt": "2026-09-28T08:02:00Z"}}}]);
        }
        items.push(pod);
    }
    // One OMENative InferenceService and engine InferenceReplica per four pods.
    for s in 0..pods.div_ceil(4) {
        let (name, namespace) = (format!("svc-{s}"), format!("ns-{}", (s * 4) % 50));
        items.push(json!({
            "apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-isvc-{s}"), "generation": 3,
                         "annotations": {"alfred.ome.io/movable": "true"}},
            "spec": {"deploymentMode": "OMENative", "model": {"name": "llama-3-1-70b-instruct", "kind": "ClusterBaseModel"},
                     "runtime": {"name": "srt-sglang", "kind": "ClusterServingRuntime"},
                     "engine": {"minReplicas": 4, "maxReplicas": 4}}
        }));
        let rows: Vec<_> = (0..4)
            .map(|index| json!({"index": index, "incarnation": 1, "phase": "Ready", "runningRevision": "7b4c2e19",
                                "podCount": 1, "servingPodCount": 1, "availablePodCount": 1, "admitted": true,
                                "readySince": "2026-09-28T08:05:00Z", "activeOrdinal": 0}))
            .collect();
        items.push(json!({
            "apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": format!("{name}-engine"), "namespace": namespace, "uid": format!("uid-ir-{s}"),
                         "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                              "name": name, "uid": format!("uid-isvc-{s}"), "controller": true}]},
            "spec": {"component": "engine", "parentRef": {"name": name}, "replicas": 4, "runners": [{"name": "default"}]},
            "status": {"observedGeneration": 3, "replicas": 4, "readyReplicas": 4, "servingReplicas": 4,
                       "availableReplicas": 4, "updatedReplicas": 4, "updatedReadyReplicas": 4,
                       "currentRevision": "7b4c2e19",
                       "updateRevision": "7b4c2e19", "instanceStatuses": rows}
        }));
    }
    serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .expect("json")
}
