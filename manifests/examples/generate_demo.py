#!/usr/bin/env python3
"""Writes demo-cluster.yaml: a realistic OME GPU cluster snapshot to learn kubectl-alfred on.

Deterministic; run it again after editing (needs PyYAML):
    python3 manifests/examples/generate_demo.py > manifests/examples/demo-cluster.yaml
"""
import datetime
import json
import os
import sys

import yaml

CAPTURED = "2026-09-28T10:15:00Z"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"

def ago(minutes):
    """The time `minutes` before CAPTURED."""
    t = datetime.datetime(2026, 9, 28, 10, 15, tzinfo=datetime.timezone.utc) - datetime.timedelta(minutes=minutes)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")

objects = [{
    "apiVersion": "alfred.ome.io/v1alpha1",
    "kind": "SnapshotInfo",
    "metadata": {"name": "snapshot"},
    "capturedAt": CAPTURED,
    "source": "demo: two GPU pools, one unhealthy node, one in maintenance, one cordoned, one preemptible",
}]

objects.append({
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "alfred-config", "namespace": "ome-system"},
    "data": {"config.yaml": yaml.safe_dump({
        "schemaVersion": 1,
        "policies": {"nodeHealth": {"maintenance": {"triggers": [
            {"name": "os-patching", "label": {"key": "maintenance.example.com/state", "value": "patching"}},
            {"name": "hardware-swap", "taint": {"key": "maintenance.example.com/hardware-swap", "effect": "NoSchedule"}},
        ]}}},
    }, sort_keys=False)},
})

# ---------------------------------------------------------------- nodes
MODELS_ON = {}  # node -> [model]

def node(name, product, zone, extra_labels=None, taints=None, unschedulable=False,
         conditions=None, models=()):
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": "8",
        "node.kubernetes.io/instance-type": "p5.48xlarge" if product == H100 else "p4de.24xlarge",
        "topology.kubernetes.io/zone": zone,
    }
    for m in models:
        labels[f"models.ome.io/clusterbasemodel.{m}"] = "Ready"
    labels.update(extra_labels or {})
    conds = [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": CAPTURED,
         "lastTransitionTime": ago(60 * 24 * 9), "reason": "KubeletReady", "message": "kubelet is posting ready status"},
        {"type": "GpuUnhealthy", "status": "False", "lastHeartbeatTime": CAPTURED,
         "lastTransitionTime": ago(60 * 24 * 9), "reason": "GpuHealthy", "message": "all GPUs pass DCGM diagnostics"},
    ]
    for c in conditions or []:
        conds = [x for x in conds if x["type"] != c["type"]] + [c]
    spec = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"node-uid-{name}", "labels": labels,
                     "creationTimestamp": ago(60 * 24 * 30)},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "192", "memory": "2063937288Ki", "nvidia.com/gpu": "8", "pods": "110",
                         "ephemeral-storage": "3750000000Ki"},
            "allocatable": {"cpu": "191", "memory": "2061840136Ki", "nvidia.com/gpu": "8", "pods": "110",
                            "ephemeral-storage": "3456000000Ki"},
            "conditions": conds,
        },
    }

LLAMA70 = "llama-3-1-70b-instruct"
QWEN = "qwen3-8b"
MISTRAL = "mistral-7b-instruct"
DEEPSEEK = "deepseek-r1"
h100_models = [LLAMA70, QWEN, MISTRAL, DEEPSEEK]
nodes = []
for i in range(1, 9):
    name = f"h100-{i:02d}"
    kw = {"models": h100_models if i not in (8,) else [QWEN, MISTRAL]}
    if i == 3:
        kw["conditions"] = [{"type": "GpuUnhealthy", "status": "True", "lastHeartbeatTime": CAPTURED,
                             "lastTransitionTime": ago(42), "reason": "XidError79",
                             "message": "GPU 5 has fallen off the bus (Xid 79)"}]
    if i == 5:
        kw["extra_labels"] = {"maintenance.example.com/state": "patching"}
    if i == 7:
        kw["unschedulable"] = True
        kw["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": ago(90)}]
    if i == 6:
        kw["conditions"] = [{"type": "GpuUnhealthy", "status": "False", "lastHeartbeatTime": CAPTURED,
                             "lastTransitionTime": ago(12), "reason": "GpuHealthy",
                             "message": "recovered after a GPU reset"}]
    nodes.append(node(name, H100, "us-east-1a" if i <= 4 else "us-east-1b", **kw))
for i in range(1, 7):
    name = f"a100-{i:02d}"
    kw = {"models": [QWEN, MISTRAL] + ([LLAMA70] if i <= 3 else [])}
    if i == 6:
        kw["extra_labels"] = {"node.kubernetes.io/preemptible": "true"}
    nodes.append(node(name, A100, "us-east-1c", **kw))
# A CPU-only system node: no pool.
cpu = node("cpu-01", H100, "us-east-1a")
del cpu["metadata"]["labels"]["nvidia.com/gpu.product"]
del cpu["metadata"]["labels"]["nvidia.com/gpu.count"]
cpu["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m7i.8xlarge"
for k in ("capacity", "allocatable"):
    del cpu["status"][k]["nvidia.com/gpu"]
cpu["status"]["conditions"] = cpu["status"]["conditions"][:1]
nodes.append(cpu)
objects.extend(nodes)

# ---------------------------------------------------------------- models and runtimes
for m, uri in [(LLAMA70, "hf://meta-llama/Llama-3.1-70B-Instruct"), (QWEN, "hf://Qwen/Qwen3-8B"),
               (MISTRAL, "hf://mistralai/Mistral-7B-Instruct-v0.3"), (DEEPSEEK, "hf://deepseek-ai/DeepSeek-R1")]:
    objects.append({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
                    "metadata": {"name": m}, "spec": {"storage": {"storageUri": uri, "path": f"/raid/models/{m}"}}})
objects.append({"apiVersion": "ome.io/v1beta1", "kind": "BaseModel",
                "metadata": {"name": "support-bot-ft", "namespace": "support"},
                "spec": {"storage": {"storageUri": "pvc://support-models/support-bot-ft"}}})
objects.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "support-models", "namespace": "support"},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-support-models",
                         "resources": {"requests": {"storage": "500Gi"}}},
                "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}})
objects.append({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pv-support-models"},
                "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "500Gi"},
                         "local": {"path": "/raid/support-models"},
                         "claimRef": {"namespace": "support", "name": "support-models"},
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a100-02"]}]}]}}},
                "status": {"phase": "Bound"}})
objects.append({"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
                "metadata": {"name": "srt-sglang"},
                "spec": {"engineConfig": {"lifecycle": {"updateStrategy": {
                    "type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 1}}}}}})
objects.append({"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
                "metadata": {"name": "srt-vllm"},
                "spec": {"engineConfig": {"annotations": {"ome.io/deploymentMode": "OMENative"},
                                          "lifecycle": {"updateStrategy": {"type": "RecreatePod",
                                                                           "rollingUpdate": {"maxUnavailable": 1}}}}}})

# ---------------------------------------------------------------- workloads
REV = {}

def rev_hash(name):
    h = 2166136261
    for ch in name.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return f"{h:08x}"

def container(gpus, image):
    return {"name": "ome-container", "image": image,
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": str(12 * gpus), "memory": f"{120 * gpus}Gi"},
                          "requests": {"nvidia.com/gpu": str(gpus), "cpu": str(10 * gpus), "memory": f"{100 * gpus}Gi"}}}

def pod(ns, name, node_name, gpus, labels, started_min, image, phase="Running", ready=True, extra_spec=None):
    spec = {"nodeName": node_name, "schedulerName": "default-scheduler",
            "containers": [container(gpus, image)],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    spec.update(extra_spec or {})
    status = {"phase": phase, "startTime": ago(started_min)}
    if phase == "Running":
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(started_min)},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ago(started_min - 3)},
            {"type": "ContainersReady", "status": "True" if ready else "False", "lastTransitionTime": ago(started_min - 3)},
        ]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"pod-uid-{ns}-{name}", "labels": labels,
                         "creationTimestamp": ago(started_min)},
            "spec": spec, "status": status}

def isvc(ns, name, model, mode=None, engine=None, annotations=None, runtime="srt-sglang", decoder=None):
    # OME's CRD writes these kinds onto every stored object; the lookups ignore them.
    spec = {"model": {"name": model, "kind": "ClusterBaseModel"},
            "runtime": {"name": runtime, "kind": "ClusterServingRuntime"},
            "engine": engine or {"minReplicas": 1, "maxReplicas": 1}}
    if mode:
        spec["deploymentMode"] = mode
    if decoder:
        spec["decoder"] = decoder
    meta = {"name": name, "namespace": ns, "uid": f"isvc-uid-{ns}-{name}", "generation": 3,
            "creationTimestamp": ago(60 * 24 * 5)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": meta, "spec": spec}

def omenative(ns, name, model, placements, gpus, started_min=300, annotations=None, runtime="srt-sglang",
              lifecycle=None):
    """Single-pod OMENative engine, one Instance per node in placements."""
    engine = {"minReplicas": len(placements), "maxReplicas": len(placements)}
    if lifecycle:
        engine["lifecycle"] = lifecycle
    objects.append(isvc(ns, name, model, "OMENative", engine, annotations, runtime))
    revision = f"{name}-engine-{rev_hash(name)}"
    rows = []
    for index, node_name in enumerate(placements):
        labels = {"ome.io/inferenceservice": name, "component": "engine", "ome.io/managed-by": "OMENative",
                  "ome.io/instance-index": str(index), "ome.io/instance-incarnation": "1",
                  "ome.io/runner": "default", "ome.io/pod-ordinal": "0", "ome.io/revision-hash": rev_hash(name)}
        objects.append(pod(ns, f"{name}-engine-{index}-default-0", node_name, gpus, labels, started_min + index,
                           "docker.io/lmsysorg/sglang:v0.5.3-cu129",
                           extra_spec={"nodeSelector": {f"models.ome.io/clusterbasemodel.{model}": "Ready"}}))
        rows.append({"index": index, "incarnation": 1, "phase": "Ready", "runningRevision": revision,
                     "podCount": 1, "servingPodCount": 1, "availablePodCount": 1,
                     "admitted": True,
                     "readySince": ago(started_min + index - 4), "activeOrdinal": 0})
    n = len(placements)
    objects.append(replica(ns, name, "engine", n, revision, rows))

def replica(ns, name, component, n, revision, rows, runners=None, extra_status=None):
    status = {"observedGeneration": 3, "replicas": n, "readyReplicas": n, "servingReplicas": n,
              "availableReplicas": n, "updatedReplicas": n, "updatedReadyReplicas": n,
              "currentRevision": revision, "updateRevision": revision,
              "labelSelector": f"ome.io/inferenceservice={name},component={component},ome.io/managed-by=OMENative",
              "conditions": [{"type": "Ready", "status": "True", "reason": "AllInstancesReady",
                              "message": f"{n}/{n} Instances Ready", "lastTransitionTime": ago(200)}],
              "instanceStatuses": rows}
    status.update(extra_status or {})
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": f"{name}-{component}", "namespace": ns, "uid": f"irep-uid-{ns}-{name}-{component}",
                         "generation": 3, "annotations": {"ome.io/parent-generation": "3"},
                         "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                              "name": name, "uid": f"isvc-uid-{ns}-{name}",
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"component": component, "parentRef": {"name": name}, "replicas": n,
                     "runners": runners or [{"name": "default"}]},
            "status": status}

def raw(ns, name, model, placements, gpus, runtime="srt-vllm", started_min=600, annotations=None):
    objects.append(isvc(ns, name, model, None, {"minReplicas": len(placements), "maxReplicas": len(placements)},
                        annotations, runtime))
    for i, node_name in enumerate(placements):
        labels = {"serving.ome.io/inferenceservice": name, "ome.io/inferenceservice": name, "component": "engine",
                  "pod-template-hash": "6d9f8b7c5d"}
        objects.append(pod(ns, f"{name}-engine-6d9f8b7c5d-{chr(ord('a') + i)}x{i}q", node_name, gpus, labels,
                           started_min + i, "docker.io/vllm/vllm-openai:v0.11.0"))

# H100 pool: fragmented. Free after placement: 01:2 02:2 03:(unhealthy) 04:3 05:(maint) 06:1 07:(cordoned) 08:2
omenative("chat", "llama-70b-chat", LLAMA70, ["h100-01"], 4)
omenative("chat", "qwen3-8b-chat", QWEN, ["h100-01", "h100-02", "h100-04"], 1)
omenative("chat", "qwen3-8b-batch", QWEN, ["h100-01", "h100-02"], 1,
          annotations={"alfred.ome.io/tenant-group": "chat-team"})
omenative("search", "mistral-rerank", MISTRAL, ["h100-02", "h100-04"], 2,
          annotations={"alfred.ome.io/priority": "0.8"})
omenative("search", "mistral-embed", MISTRAL, ["h100-02"], 1, started_min=6,
          annotations={"alfred.ome.io/cooldown-minutes": "60"})
omenative("research", "deepseek-r1-distill", DEEPSEEK, ["h100-03"], 4,
          annotations={"alfred.ome.io/priority": "0.9"})
omenative("research", "qwen3-8b-eval", QWEN, ["h100-03", "h100-06"], 2)
omenative("research", "llama-70b-eval", LLAMA70, ["h100-05"], 4,
          annotations={"alfred.ome.io/movable": "false", "alfred.ome.io/opt-out-reason": "benchmark in progress"})
omenative("research", "mistral-sft-eval", MISTRAL, ["h100-05"], 2)
omenative("chat", "qwen3-8b-canary", QWEN, ["h100-06", "h100-06"], 2,
          lifecycle={"updateStrategy": {"type": "InPlaceIfPossible", "rollingUpdate": {"partition": 1, "maxUnavailable": 1}}})
omenative("chat", "mistral-chat", MISTRAL, ["h100-06", "h100-08"], 1)
omenative("chat", "qwen3-8b-spot", QWEN, ["h100-08", "h100-08"], 2,
          annotations={"alfred.ome.io/spot-policy": "avoid"})
omenative("chat", "mistral-draft", MISTRAL, ["h100-04"], 1)
raw("legacy", "llama-70b-legacy", LLAMA70, ["h100-07"], 8)
raw("legacy", "mistral-legacy", MISTRAL, ["h100-08"], 1)

# MultiNode (LeaderWorkerSet, deprecated) DeepSeek: leader + worker of 8 GPUs each on a100-01/02
objects.append(isvc("research", "deepseek-r1-lws", DEEPSEEK, None, {
    "minReplicas": 1, "maxReplicas": 1,
    "annotations": {"ome.io/deploymentMode": "MultiNode"},
    "leader": {"runner": container(8, "docker.io/lmsysorg/sglang:v0.5.3-cu129")},
    "worker": {"size": 1, "runner": container(8, "docker.io/lmsysorg/sglang:v0.5.3-cu129")}}))
for role, node_name in [("leader", "a100-01"), ("worker", "a100-02")]:
    labels = {"ome.io/inferenceservice": "deepseek-r1-lws", "component": "engine",
              "leaderworkerset.sigs.k8s.io/group-index": "0", "ome.io/runner": role}
    objects.append(pod("research", f"deepseek-r1-lws-engine-0{'' if role == 'leader' else '-1'}", node_name, 8,
                       labels, 2000, "docker.io/lmsysorg/sglang:v0.5.3-cu129"))

# OMENative leader + worker Instance (multi-pod) of Llama 70B: 4 + 4 GPUs on a100-03 and a100-04
name = "llama-70b-multinode"
objects.append(isvc("chat", name, LLAMA70, "OMENative", {
    "minReplicas": 1, "maxReplicas": 1,
    "leader": {"runner": container(4, "docker.io/lmsysorg/sglang:v0.5.3-cu129")},
    "worker": {"size": 1, "runner": container(4, "docker.io/lmsysorg/sglang:v0.5.3-cu129")}}))
revision = f"{name}-engine-{rev_hash(name)}"
for runner, node_name in [("leader", "a100-03"), ("worker", "a100-04")]:
    labels = {"ome.io/inferenceservice": name, "component": "engine", "ome.io/managed-by": "OMENative",
              "ome.io/instance-index": "0", "ome.io/instance-incarnation": "1", "ome.io/runner": runner,
              "ome.io/pod-ordinal": "0", "ome.io/revision-hash": rev_hash(name),
              "scheduling.x-k8s.io/pod-group": f"{name}-engine-0"}
    objects.append(pod("chat", f"{name}-engine-0-{runner}-0", node_name, 4, labels, 900,
                       "docker.io/lmsysorg/sglang:v0.5.3-cu129"))
objects.append(replica("chat", name, "engine", 1, revision, [
    {"index": 0, "incarnation": 1, "phase": "Ready", "runningRevision": revision, "podCount": 2,
     "servingPodCount": 2, "availablePodCount": 2, "admitted": True, "readySince": ago(880)}],
    runners=[{"name": "leader"}, {"name": "worker", "size": 1}]))

# A100 pool: the rest
omenative("support", "support-bot", QWEN, ["a100-02"], 2)
omenative("support", "support-bot-ft", QWEN, ["a100-03"], 2)
omenative("chat", "qwen3-8b-a100", QWEN, ["a100-04", "a100-05"], 2)
omenative("chat", "mistral-a100", MISTRAL, ["a100-05", "a100-06"], 1,
          annotations={"alfred.ome.io/spot-policy": "migrate"})
raw("support", "mistral-support-legacy", MISTRAL, ["a100-06"], 2)
raw("search", "qwen3-embed-legacy", QWEN, ["a100-04"], 1)

# The support-bot-ft model lives on a ReadWriteOnce claim.
for o in objects:
    if o["kind"] == "InferenceService" and o["metadata"]["name"] == "support-bot-ft":
        o["spec"]["model"] = {"name": "support-bot-ft", "kind": "BaseModel"}

# Rollouts under way (no extra pods, so the pools are unchanged).
def find(kind, ns, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
                and o["metadata"].get("namespace") == ns)

def start_rollout(ns, name, lifecycle, new_image):
    """Give the engine a new revision; returns (isvc, replica, old revision, new revision)."""
    isvc_obj = find("InferenceService", ns, name)
    isvc_obj["spec"]["engine"]["lifecycle"] = lifecycle
    isvc_obj["metadata"]["generation"] = 4
    ir = find("InferenceReplica", ns, f"{name}-engine")
    old = ir["status"]["currentRevision"]
    new_hash = rev_hash(name + "-" + new_image)
    new = f"{name}-engine-{new_hash}"
    ir["status"]["updateRevision"] = new
    ir["status"]["updatedReplicas"] = 0
    ir["status"]["updatedReadyReplicas"] = 0
    return isvc_obj, ir, old, new, new_hash

# qwen3-8b-canary: maxSurge 0 under SurgeThenDrain; its new revision cannot start.
_, ir, old, new, _ = start_rollout("chat", "qwen3-8b-canary",
                                   {"updateStrategy": {"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 0}}},
                                   "sglang:v0.5.4")
ir["status"]["rolloutHold"] = {"gate": "Budget", "reason": "per-Component surge budget 0 exhausted (would become 1)",
                               "target": new, "since": ago(42)}
ir["status"]["conditions"][0] = {"type": "Ready", "status": "Unknown", "reason": "RolloutInProgress",
                                 "message": f"Rolling out {new} (0/2 Instances on target)", "lastTransitionTime": ago(42)}

# qwen3-8b-a100: RecreatePod, one at a time, partition 1: Instance 1 is on the new image, Instance 0
# stays on the prior revision.
_, ir, old, new, new_hash = start_rollout("chat", "qwen3-8b-a100",
                                          {"updateStrategy": {"type": "RecreatePod",
                                                              "rollingUpdate": {"maxUnavailable": 1, "partition": 1}}},
                                          "sglang:v0.5.4")
row = ir["status"]["instanceStatuses"][1]
row.update({"incarnation": 2, "runningRevision": new, "readySince": ago(20)})
ir["status"]["updatedReplicas"] = 1
ir["status"]["updatedReadyReplicas"] = 1
ir["status"]["conditions"][0] = {"type": "Ready", "status": "True", "reason": "Staged",
                                 "message": f"Staged at partition 1: 1/2 Instances on {new}, 1 held on the prior revision",
                                 "lastTransitionTime": ago(20)}
p1 = find("Pod", "chat", "qwen3-8b-a100-engine-1-default-0")
p1["metadata"]["labels"].update({"ome.io/revision-hash": new_hash, "ome.io/instance-incarnation": "2"})
p1["spec"]["containers"][0]["image"] = "docker.io/lmsysorg/sglang:v0.5.4-cu129"

# mistral-chat: Instance 1's container crash-loops. OME repairs it (recreates it) within
# maxUnavailable, which SurgeThenDrain leaves unset here: `rollout status` lists the repair.
p1 = find("Pod", "chat", "mistral-chat-engine-1-default-0")
for c in p1["status"]["conditions"]:
    if c["type"] in ("Ready", "ContainersReady"):
        c.update({"status": "False", "lastTransitionTime": ago(9)})
p1["status"]["containerStatuses"] = [{
    "name": "ome-container", "image": "docker.io/lmsysorg/sglang:v0.5.3-cu129", "imageID": "", "ready": False,
    "restartCount": 6, "started": False,
    "state": {"waiting": {"reason": "CrashLoopBackOff",
                          "message": "back-off 5m0s restarting failed container=ome-container pod=mistral-chat-engine-1-default-0"}}}]
ir = find("InferenceReplica", "chat", "mistral-chat-engine")
ir["status"]["instanceStatuses"][1].update({"servingPodCount": 0, "availablePodCount": 0})
ir["status"].update({"readyReplicas": 1, "servingReplicas": 1, "availableReplicas": 1, "updatedReadyReplicas": 1})
ir["status"]["conditions"][0] = {"type": "Ready", "status": "False", "reason": "ReplicaCountMismatch",
                                 "message": "1/2 Instances serving, need 2 (no rollout in flight)",
                                 "lastTransitionTime": ago(9)}

# qwen3-8b-chat's rows are stored as ColumnarV2, the compact form OME may use for large components
# (omenative-reference.md §1.7a): the same Instances, column-wise.
def index_set(indexes):
    """`0-3,5,9-12`: ascending terms, ranges for runs."""
    indexes, terms, i = sorted(indexes), [], 0
    while i < len(indexes):
        j = i
        while j + 1 < len(indexes) and indexes[j + 1] == indexes[j] + 1:
            j += 1
        terms.append(str(indexes[i]) if i == j else f"{indexes[i]}-{indexes[j]}")
        i = j + 1
    return ",".join(terms)

def to_columnar(status):
    rows = status.pop("instanceStatuses")
    def groups(key):
        by_value = {}
        for r in rows:
            if r.get(key):  # zero counts and empty revisions are not listed
                by_value.setdefault(r[key], []).append(r["index"])
        return [{"value": v, "indexes": index_set(ix)} for v, ix in sorted(by_value.items())]
    columns = {"members": index_set(r["index"] for r in rows)}
    for column, key in [("phases", "phase"), ("runningRevisions", "runningRevision"),
                        ("targetRevisions", "targetRevision"), ("incarnations", "incarnation"),
                        ("podCounts", "podCount"), ("servingPodCounts", "servingPodCount"),
                        ("availablePodCounts", "availablePodCount")]:
        if groups(key):
            columns[column] = groups(key)
    for column, test in [("admitted", lambda r: r.get("admitted")), ("activeOrdinalOne", lambda r: r.get("activeOrdinal") == 1)]:
        members = [r["index"] for r in rows if test(r)]
        if members:
            columns[column] = index_set(members)
    entries = [{"index": r["index"], **{k: r[k] for k in ("conditions", "readySince", "operation", "lastFailure") if k in r}}
               for r in rows]
    columns["entries"] = [e for e in entries if len(e) > 1]
    status["instanceStatusEncoding"] = "ColumnarV2"
    status["instanceStatusColumns"] = columns

to_columnar(find("InferenceReplica", "chat", "qwen3-8b-chat-engine")["status"])

# qwen3-8b-a100's revision history: 12 older revisions, the current one and the new target.
def controller_revision(ns, replica_name, name, number):
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"ome.io/inferenceservice": replica_name.rsplit("-", 1)[0], "component": "engine"},
                         "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                              "name": replica_name, "uid": f"irep-uid-{ns}-{replica_name}",
                                              "controller": True}]},
            "revision": number, "data": {"note": "pod template omitted in the demo"}}

for number in range(1, 13):
    objects.append(controller_revision("chat", "qwen3-8b-a100-engine",
                                       f"qwen3-8b-a100-engine-{rev_hash(f'qwen3-8b-a100-{number}')}", number))
objects.append(controller_revision("chat", "qwen3-8b-a100-engine", old, 13))
objects.append(controller_revision("chat", "qwen3-8b-a100-engine", new, 14))

# OME's operator defaults, as the ome-resources chart sets them.
objects.append({
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "inferenceservice-config", "namespace": "ome"},
    "data": {
        "deploy": json.dumps({"defaultDeploymentMode": "RawDeployment", "updateStrategy": {
            c: {"type": "SurgeThenDrain", "maxSurge": "25%", "maxUnavailable": "25%"}
            for c in ["engine", "decoder", "router"]}}),
        "lifecycle": json.dumps({"revisionHistoryLimit": 10}),
    },
})

# Pending GPU pods of different ages
def pending(ns, name, gpus, minutes, isvc_name, node_selector=None):
    labels = {"ome.io/inferenceservice": isvc_name, "component": "engine", "ome.io/managed-by": "OMENative",
              "ome.io/instance-index": "0", "ome.io/runner": "default", "ome.io/pod-ordinal": "0"}
    spec = {"schedulerName": "default-scheduler", "containers": [container(gpus, "docker.io/lmsysorg/sglang:v0.5.3-cu129")]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"pod-uid-{ns}-{name}", "labels": labels,
                         "creationTimestamp": ago(minutes)},
            "spec": spec,
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": ago(minutes),
                 "message": f"0/15 nodes are available: 15 Insufficient nvidia.com/gpu."}]}}

objects.append(isvc("chat", "llama-70b-fp16", LLAMA70, "OMENative", {"minReplicas": 1, "maxReplicas": 1}))
objects.append(pending("chat", "llama-70b-fp16-engine-0-default-0", 8, 25, "llama-70b-fp16",
                       {"nvidia.com/gpu.product": H100}))
objects.append(isvc("research", "deepseek-r1-full", DEEPSEEK, "OMENative", {"minReplicas": 1, "maxReplicas": 1}))
objects.append(pending("research", "deepseek-r1-full-engine-0-default-0", 4, 3, "deepseek-r1-full",
                       {"nvidia.com/gpu.product": H100}))
objects.append(isvc("support", "qwen3-8b-support-2", QWEN, "OMENative", {"minReplicas": 1, "maxReplicas": 1}))
objects.append(pending("support", "qwen3-8b-support-2-engine-0-default-0", 8, 14, "qwen3-8b-support-2",
                       {"nvidia.com/gpu.product": A100}))

# A non-GPU system pod on the CPU node, and an object kind Alfred does not read.
objects.append({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "coredns-5d78c9869d-x2x9q", "namespace": "kube-system", "uid": "pod-uid-coredns",
                             "labels": {"k8s-app": "kube-dns"}, "creationTimestamp": ago(60 * 24 * 30)},
                "spec": {"nodeName": "cpu-01", "containers": [{"name": "coredns", "image": "registry.k8s.io/coredns/coredns:v1.11.3",
                                                               "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}}}]},
                "status": {"phase": "Running", "startTime": ago(60 * 24 * 30)}})
objects.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llama-70b-chat", "namespace": "chat"},
                "spec": {"ports": [{"port": 8080}]}})

# The guard on migrate's writes, installed as kube-apiserver returned it after
# `kubectl apply -f manifests/rbac/migration-guard.yaml` (captured for the tests).
_guard = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../shared/tests/data/guard/installed.json")
with open(_guard) as f:
    objects.extend(json.load(f)["items"])

sys.stdout.write("# A demo OME cluster snapshot for kubectl-alfred (generated by generate_demo.py).\n")
sys.stdout.write("# Try: kubectl alfred pools -f manifests/examples/demo-cluster.yaml\n")
yaml.safe_dump_all(objects, sys.stdout, sort_keys=False, default_flow_style=False, width=120)
