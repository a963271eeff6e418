//! A cluster replayed from a production GPU trace (Alibaba's openb, behind the ATC '23
//! fragmentation paper), as `kubectl get -o json` prints it. Tasks drawn at random (seeded)
//! arrive one after another and never leave until the GPUs they ask for reach LOAD x the
//! cluster's GPUs; each lands on the allowed node with room that the fill's score puts first
//! (`Fill`, ties at random), or stays Pending.
//!
//! Whole-GPU tasks become single-Instance OMENative InferenceServices (steady, rows as OME
//! persists them); GPU-sharing tasks become pods holding one GPU that are not OME's; CPU-only
//! tasks are left out.

use serde_json::{Value, json};

pub struct TraceNode {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: i64,
    pub model: String,
}

pub struct Task {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: i64,
    pub gpu_milli: i64,
    /// Allowed GPU types; empty is any.
    pub gpu_spec: Vec<String>,
    /// Seconds from creation to deletion, when the list has those columns.
    pub lifetime: Option<i64>,
}

impl Task {
    pub fn whole(&self) -> bool {
        self.gpu_milli >= 1000 || self.num_gpu > 1
    }

    /// GPUs the task holds once placed: a sharing task holds one.
    pub fn holds(&self) -> i64 {
        if self.whole() { self.num_gpu } else { 1 }
    }

    /// GPUs it asks for, as the load counts them: what its pod requests.
    fn asks(&self) -> f64 {
        self.holds() as f64
    }
}

/// The columns of a CSV file with a header, by name.
fn rows(text: &str) -> Result<Vec<std::collections::HashMap<String, String>>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty CSV")?.split(',').collect();
    Ok(lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect())
}

fn int(row: &std::collections::HashMap<String, String>, key: &str) -> Result<i64, String> {
    row.get(key)
        .ok_or(format!("no column {key}"))?
        .parse()
        .map_err(|e| format!("column {key}: {e}"))
}

pub fn read_nodes(text: &str) -> Result<Vec<TraceNode>, String> {
    rows(text)?
        .iter()
        .map(|r| {
            Ok(TraceNode {
                name: r.get("sn").cloned().ok_or("no column sn")?,
                cpu_milli: int(r, "cpu_milli")?,
                memory_mib: int(r, "memory_mib")?,
                gpus: int(r, "gpu")?,
                model: r.get("model").cloned().ok_or("no column model")?,
            })
        })
        .collect()
}

/// The GPU tasks of a pod list (CPU-only tasks left out).
pub fn read_tasks(text: &str) -> Result<Vec<Task>, String> {
    let mut tasks = Vec::new();
    for r in rows(text)? {
        let times = (int(&r, "creation_time"), int(&r, "deletion_time"));
        let task = Task {
            name: r.get("name").cloned().unwrap_or_default(),
            cpu_milli: int(&r, "cpu_milli")?,
            memory_mib: int(&r, "memory_mib")?,
            num_gpu: int(&r, "num_gpu")?,
            gpu_milli: int(&r, "gpu_milli")?,
            gpu_spec: r
                .get("gpu_spec")
                .map(|s| {
                    s.split('|')
                        .filter(|t| !t.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            lifetime: match times {
                (Ok(created), Ok(deleted)) => Some(deleted - created),
                _ => None,
            },
        };
        if task.num_gpu > 0 {
            tasks.push(task);
        }
    }
    Ok(tasks)
}

/// splitmix64: a small seeded generator, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub struct Replay {
    pub json: String,
    pub placed_tasks: usize,
    pub pending_tasks: usize,
    pub gpus: i64,
    pub asked: f64,
}

/// How the replay picks a task's node among those with room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fill {
    /// The most free GPUs: spreads, so larger nodes take tasks first
    MostFree,
    /// Every node with room ties, so tasks land where nodes are many: kube-scheduler's
    /// default profile (which scores CPU and memory, not GPUs) when pods ask for GPUs only
    Unscored,
    /// The largest share of the node's GPUs left free once the task is on it, in whole
    /// percent: NodeResourcesFit's LeastAllocated with the GPU among its scoring resources
    LeastAllocated,
    /// The largest share of the node's GPUs free before the task: spreads by share, so an
    /// empty 1-GPU node ties with an empty 8-GPU one and small tasks land where nodes are many
    FreeShare,
}

impl Fill {
    fn score(self, free: i64, gpus: i64, holds: i64) -> i64 {
        match self {
            Fill::MostFree => free,
            Fill::Unscored => 0,
            Fill::LeastAllocated => (free - holds) * 100 / gpus.max(1),
            Fill::FreeShare => free * 100 / gpus.max(1),
        }
    }
}

const MODEL: &str = "trace-model";
const TIME: &str = "2026-09-28T10:00:00Z";

/// Replays tasks onto the nodes until they ask for `load` x the cluster's GPUs. With
/// `cpu_memory` off, pods request their GPUs alone (nodes keep their CPU and memory).
pub fn replay(
    nodes: &[TraceNode],
    tasks: &[Task],
    load: f64,
    seed: u64,
    cpu_memory: bool,
    fill: Fill,
) -> Replay {
    let mut rng = Rng::new(seed);
    let total: i64 = nodes.iter().map(|n| n.gpus).sum();
    let mut free_gpu: Vec<i64> = nodes.iter().map(|n| n.gpus).collect();
    let mut free_cpu: Vec<i64> = nodes.iter().map(|n| n.cpu_milli).collect();
    let mut free_mem: Vec<i64> = nodes.iter().map(|n| n.memory_mib).collect();
    let mut items = cluster_objects(nodes);
    let (mut asked, mut placed_tasks, mut pending_tasks) = (0.0, 0, 0);
    let mut k = 0usize;
    while asked < load * total as f64 && !tasks.is_empty() {
        let task = &tasks[rng.below(tasks.len())];
        asked += task.asks();
        let holds = task.holds();
        let allowed =
            |i: usize| task.gpu_spec.is_empty() || task.gpu_spec.contains(&nodes[i].model);
        let mut best: Vec<usize> = Vec::new();
        let mut most = -1;
        for i in 0..nodes.len() {
            if !allowed(i)
                || free_gpu[i] < holds
                || (cpu_memory && (free_cpu[i] < task.cpu_milli || free_mem[i] < task.memory_mib))
            {
                continue;
            }
            let score = fill.score(free_gpu[i], nodes[i].gpus, holds);
            if score > most {
                most = score;
                best.clear();
            }
            if score == most {
                best.push(i);
            }
        }
        let node = (!best.is_empty()).then(|| best[rng.below(best.len())]);
        if let Some(i) = node {
            free_gpu[i] -= holds;
            free_cpu[i] -= task.cpu_milli;
            free_mem[i] -= task.memory_mib;
            placed_tasks += 1;
        } else {
            pending_tasks += 1;
        }
        items.extend(objects(
            k,
            task,
            node.map(|i| nodes[i].name.as_str()),
            cpu_memory,
        ));
        k += 1;
    }
    let json = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .expect("json");
    Replay {
        json,
        placed_tasks,
        pending_tasks,
        gpus: total,
        asked,
    }
}

/// The model and the nodes: a cluster before any task.
pub fn cluster_objects(nodes: &[TraceNode]) -> Vec<Value> {
    let mut items: Vec<Value> = vec![
        json!({"apiVersion": "ome.io/v1beta1", "kind": "ClusterBaseModel",
        "metadata": {"name": MODEL}, "spec": {"storage": {"storageUri": "hf://trace/model"}}}),
    ];
    for n in nodes {
        items.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "uid": format!("uid-{}", n.name), "creationTimestamp": "2026-09-01T00:00:00Z",
                "labels": {"kubernetes.io/hostname": n.name, "nvidia.com/gpu.product": n.model,
                           "nvidia.com/gpu.count": n.gpus.to_string(),
                           format!("models.ome.io/clusterbasemodel.{MODEL}"): "Ready"}},
            "spec": {},
            "status": {
                "capacity": {"cpu": format!("{}m", n.cpu_milli), "memory": format!("{}Mi", n.memory_mib),
                             "nvidia.com/gpu": n.gpus.to_string(), "pods": "110"},
                "allocatable": {"cpu": format!("{}m", n.cpu_milli), "memory": format!("{}Mi", n.memory_mib),
                                "nvidia.com/gpu": n.gpus.to_string(), "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-09-01T00:00:00Z"},
                               {"type": "GpuUnhealthy", "status": "False", "lastTransitionTime": "2026-09-01T00:00:00Z"}]}
        }));
    }
    items
}

/// A task's objects: an OMENative InferenceService with its InferenceReplica and pod for a
/// whole-GPU task, a plain pod for a sharing one.
pub fn objects(k: usize, task: &Task, node: Option<&str>, cpu_memory: bool) -> Vec<Value> {
    let name = format!("task-{k:05}");
    let holds = task.holds();
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-engine-0-default-0"), "namespace": "trace",
                     "uid": format!("uid-pod-{k}"), "creationTimestamp": TIME, "labels": {}},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "main", "image": "trace/task:1",
            "resources": {"requests": {"cpu": format!("{}m", task.cpu_milli), "memory": format!("{}Mi", task.memory_mib),
                                       "nvidia.com/gpu": holds.to_string()},
                          "limits": {"nvidia.com/gpu": holds.to_string()}}}]},
    });
    if !cpu_memory {
        let requests = &mut pod["spec"]["containers"][0]["resources"]["requests"];
        *requests = json!({"nvidia.com/gpu": holds.to_string()});
    }
    if !task.gpu_spec.is_empty() {
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                          "values": task.gpu_spec}]}]}}});
    }
    match node {
        Some(n) => {
            pod["spec"]["nodeName"] = json!(n);
            pod["status"] = json!({"phase": "Running", "startTime": TIME, "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": TIME},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": TIME},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": TIME}]});
        }
        None => {
            pod["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": TIME}]});
        }
    }
    if !task.whole() || node.is_none() {
        return vec![pod];
    }
    pod["metadata"]["labels"] = json!({"ome.io/inferenceservice": name, "component": "engine",
        "ome.io/managed-by": "OMENative", "ome.io/instance-index": "0", "ome.io/instance-incarnation": "1",
        "ome.io/runner": "default", "ome.io/pod-ordinal": "0", "ome.io/revision-hash": "7b4c2e19"});
    pod["spec"]["nodeSelector"] =
        json!({format!("models.ome.io/clusterbasemodel.{MODEL}"): "Ready"});
    let revision = format!("{name}-engine-7b4c2e19");
    vec![
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "trace", "uid": format!("uid-isvc-{k}"), "generation": 1, "creationTimestamp": TIME},
            "spec": {"deploymentMode": "OMENative", "model": {"name": MODEL, "kind": "ClusterBaseModel"},
                     "engine": {"minReplicas": 1, "maxReplicas": 1}}}),
        json!({"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": format!("{name}-engine"), "namespace": "trace", "uid": format!("uid-ir-{k}"), "generation": 1, "creationTimestamp": TIME,
                "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "name": name,
                                     "uid": format!("uid-isvc-{k}"), "controller": true}]},
            "spec": {"component": "engine", "parentRef": {"name": name}, "replicas": 1, "runners": [{"name": "default"}]},
            "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "servingReplicas": 1,
                "availableReplicas": 1, "updatedReplicas": 1, "updatedReadyReplicas": 1,
                "currentRevision": revision, "updateRevision": revision,
                "instanceStatuses": [{"index": 0, "incarnation": 1, "phase": "Ready", "runningRevision": revision,
                    "podCount": 1, "servingPodCount": 1, "availablePodCount": 1, "admitted": true,
                    "readySince": TIME}]}}),
        pod,
    ]
}

/// The node list as a replay asks for it: with `eight`, that many 8-GPU nodes of the list's
/// commonest 8-GPU type; with `repeat`, the list repeated to that many nodes (its mix of sizes
/// and models on a larger cluster).
pub fn reshape_nodes(
    mut nodes: Vec<TraceNode>,
    eight: Option<usize>,
    repeat: Option<usize>,
) -> Result<Vec<TraceNode>, String> {
    if let Some(n) = eight {
        let shape = commonest_eight_gpu_node(&nodes).ok_or("the node list has no 8-GPU node")?;
        let (cpu, memory, model) = (shape.cpu_milli, shape.memory_mib, shape.model.clone());
        nodes = (0..n)
            .map(|i| TraceNode {
                name: format!("node-{i:05}"),
                cpu_milli: cpu,
                memory_mib: memory,
                gpus: 8,
                model: model.clone(),
            })
            .collect();
    }
    if let Some(n) = repeat {
        let list = std::mem::take(&mut nodes);
        nodes = (0..n)
            .filter_map(|i| {
                let x = list.get(i % list.len().max(1))?;
                Some(TraceNode {
                    name: format!("{}-{}", x.name, i / list.len()),
                    cpu_milli: x.cpu_milli,
                    memory_mib: x.memory_mib,
                    gpus: x.gpus,
                    model: x.model.clone(),
                })
            })
            .collect();
    }
    Ok(nodes)
}

/// Nodes from a mix (`COUNTxGPUSxMODELxCPUS,...`), 8 GiB of memory per CPU, named
/// `node-00000` on in an order that interleaves the kinds (as a fleet bought over years
/// is named), the same for every seed.
pub fn mixed_nodes(mix: &str) -> Result<Vec<TraceNode>, String> {
    let mut kinds = Vec::new();
    for part in mix.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let fields: Vec<&str> = part.split('x').collect();
        let [count, gpus, model, cpus] = fields[..] else {
            return Err(format!(
                "--node-mix: {part:?} is not COUNTxGPUSxMODELxCPUS (e.g. 432x8xG2x192)"
            ));
        };
        let number = |what: &str, text: &str| {
            text.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("--node-mix: {part:?}: {what} {text:?} is not a positive whole number")
            })
        };
        let (count, gpus, cpus) = (
            number("the count", count)?,
            number("the GPUs", gpus)?,
            number("the CPUs", cpus)?,
        );
        if model.is_empty() {
            return Err(format!("--node-mix: {part:?} names no GPU model"));
        }
        kinds.push((count, gpus, model.to_string(), cpus));
    }
    if kinds.is_empty() {
        return Err("--node-mix names no nodes".into());
    }
    let mut shapes: Vec<usize> = kinds
        .iter()
        .enumerate()
        .flat_map(|(k, kind)| std::iter::repeat_n(k, kind.0 as usize))
        .collect();
    let mut rng = Rng::new(1);
    for i in (1..shapes.len()).rev() {
        shapes.swap(i, rng.below(i + 1));
    }
    Ok(shapes
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            let (_, gpus, model, cpus) = &kinds[k];
            TraceNode {
                name: format!("node-{i:05}"),
                cpu_milli: cpus * 1000,
                memory_mib: cpus * 8 * 1024,
                gpus: *gpus,
                model: model.clone(),
            }
        })
        .collect())
}

/// The first node of the commonest 8-GPU model (ties to the first name).
fn commonest_eight_gpu_node(nodes: &[TraceNode]) -> Option<&TraceNode> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for n in nodes.iter().filter(|n| n.gpus == 8) {
        *counts.entry(&n.model).or_default() += 1;
    }
    let model = counts
        .into_iter()
        .max_by_key(|&(m, c)| (c, std::cmp::Reverse(m)))?
        .0;
    nodes.iter().find(|n| n.gpus == 8 && n.model == model)
}

/// The trace's files and the node list's shape, as both replays take them.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// The openb node list (openb_node_list_gpu_node.csv)
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<String>,
    /// Build the nodes from counts instead of a node list: COUNTxGPUSxMODELxCPUS, comma-
    /// separated (e.g. 2494x1xA10x128,432x8xG2x192); each node has 8 GiB of memory per CPU
    #[arg(long, value_name = "MIX", conflicts_with = "nodes")]
    pub node_mix: Option<String>,
    /// An openb task list (openb_pod_list_*.csv)
    #[arg(long, value_name = "FILE")]
    pub pods: Option<String>,
    /// Replace the node list with N 8-GPU nodes of the trace's commonest 8-GPU type
    #[arg(long, value_name = "N")]
    pub eight_gpu_nodes: Option<usize>,
    /// Repeat the node list to N nodes
    #[arg(long, value_name = "N")]
    pub repeat_nodes: Option<usize>,
}

impl TraceArgs {
    /// The node list, reshaped as asked.
    pub fn read_nodes(&self) -> Result<Vec<TraceNode>, String> {
        let nodes = match (&self.node_mix, &self.nodes) {
            (Some(mix), _) => mixed_nodes(mix)?,
            (None, Some(path)) => read_nodes(&read_file(path)?)?,
            (None, None) => return Err("name a node list (--nodes) or a mix (--node-mix)".into()),
        };
        reshape_nodes(nodes, self.eight_gpu_nodes, self.repeat_nodes)
    }

    /// Where the nodes come from, for messages and reports.
    pub fn nodes_source(&self) -> String {
        match (&self.node_mix, &self.nodes) {
            (Some(mix), _) => format!("--node-mix {mix}"),
            (None, path) => path.clone().unwrap_or_default(),
        }
    }

    /// The task list's path.
    pub fn pods(&self) -> Result<&str, String> {
        self.pods
            .as_deref()
            .ok_or_else(|| "name an openb task list (--pods)".into())
    }

    pub fn read_tasks(&self) -> Result<Vec<Task>, String> {
        read_tasks(&read_file(self.pods()?)?)
    }
}

/// A file's text; the error names it.
pub fn read_file(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}
