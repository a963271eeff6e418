//! Resource accounting as NodeResourcesFit sees it: each node's allocatable and the requests of
//! the pods bound to it, in milli-units, over every resource a node offers or a pod asks for.

use std::collections::HashMap;

use crate::api::core::PodSpec;
use crate::kubernetes::quantity::is_gpu_resource;
use crate::model::cluster::Cluster;
use crate::model::requests::{milli, non_zero_requests, pod_requests};

/// Allocatable and requested per node, kept once per pass and copied per simulation.
#[derive(Clone, Debug)]
pub struct Ledger {
    /// Resource name -> column.
    columns: HashMap<String, usize>,
    names: Vec<String>,
    /// Per node: allocatable per column (0 when the node does not offer it).
    allocatable: Vec<Vec<i64>>,
    requested: Vec<Vec<i64>>,
    /// Pods bound per node, and how many the node takes (its `pods` allocatable).
    pods: Vec<i64>,
    pod_limit: Vec<i64>,
    /// Per node: cpu and memory requested as kube-scheduler's scores count them
    /// (`NonZeroRequested`).
    non_zero: Vec<[i64; 2]>,
}

/// A pod's requests as the ledger charges them: by column, and its non-zero cpu and memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Request {
    pub amounts: Vec<(usize, i64)>,
    pub non_zero: [i64; 2],
}

impl Request {
    /// The amount of one column (0 when not asked for).
    pub fn of(&self, column: usize) -> i64 {
        self.amounts
            .iter()
            .find(|(c, _)| *c == column)
            .map_or(0, |(_, a)| *a)
    }
}

impl Ledger {
    pub fn new(cluster: &Cluster<'_>) -> Ledger {
        Ledger::with_requests(cluster).0
    }

    /// The ledger and every pod's requests (each pod's read once).
    pub fn with_requests(cluster: &Cluster<'_>) -> (Ledger, Vec<Request>) {
        let mut ledger = Ledger {
            columns: HashMap::new(),
            names: Vec::new(),
            allocatable: vec![Vec::new(); cluster.nodes.len()],
            requested: vec![Vec::new(); cluster.nodes.len()],
            pods: vec![0; cluster.nodes.len()],
            // A node that states no pod limit (only hand-written snapshots) takes any number.
            pod_limit: vec![i64::MAX; cluster.nodes.len()],
            non_zero: vec![[0; 2]; cluster.nodes.len()],
        };
        for (n, node) in cluster.nodes.iter().enumerate() {
            for (name, q) in node.node.allocatable().iter() {
                if name == "pods" {
                    ledger.pod_limit[n] = milli(q) / 1000;
                } else {
                    let c = ledger.column(name);
                    ledger.allocatable[n][c] = milli(q);
                }
            }
        }
        let requests: Vec<Request> = cluster
            .pods
            .iter()
            .map(|p| ledger.charged(&p.requests, p.non_zero))
            .collect();
        for (p, request) in cluster.pods.iter().zip(&requests) {
            if let Some(n) = p.host.filter(|_| !p.terminal) {
                ledger.add(n, request);
            }
        }
        (ledger, requests)
    }

    fn column(&mut self, name: &str) -> usize {
        if let Some(&c) = self.columns.get(name) {
            return c;
        }
        let c = self.names.len();
        self.columns.insert(name.to_string(), c);
        self.names.push(name.to_string());
        for row in self.allocatable.iter_mut().chain(self.requested.iter_mut()) {
            row.resize(c + 1, 0);
        }
        c
    }

    /// A pod's requests by column; resources no node offers get a column too.
    pub fn requests_of(&mut self, spec: &PodSpec) -> Request {
        self.charged(&pod_requests(spec), non_zero_requests(spec))
    }

    fn charged(&mut self, amounts: &[(&str, i64)], non_zero: [i64; 2]) -> Request {
        Request {
            amounts: amounts
                .iter()
                .map(|&(name, amount)| (self.column(name), amount))
                .collect(),
            non_zero,
        }
    }

    pub fn name(&self, column: usize) -> &str {
        &self.names[column]
    }

    pub fn gpus_in(&self, request: &Request) -> i64 {
        request
            .amounts
            .iter()
            .filter(|(c, _)| is_gpu_resource(&self.names[*c]))
            .map(|(_, v)| v)
            .sum()
    }

    /// GPUs not requested on a node, of every GPU resource it offers.
    pub fn free_gpus(&self, node: usize) -> i64 {
        (0..self.names.len())
            .filter(|&c| is_gpu_resource(&self.names[c]))
            .map(|c| {
                let (allocatable, requested) = self.usage(node, c);
                allocatable - requested
            })
            .sum()
    }

    /// (allocatable, requested) of a resource on a node, in milli-units.
    pub fn usage(&self, node: usize, column: usize) -> (i64, i64) {
        (
            self.allocatable[node].get(column).copied().unwrap_or(0),
            self.requested[node].get(column).copied().unwrap_or(0),
        )
    }

    pub fn column_of(&self, name: &str) -> Option<usize> {
        self.columns.get(name).copied()
    }

    /// (pods bound, pods the node takes).
    pub fn pods_on(&self, node: usize) -> (i64, i64) {
        (self.pods[node], self.pod_limit[node])
    }

    /// cpu and memory requested on a node as the scores count them (`NonZeroRequested`).
    pub fn non_zero_on(&self, node: usize) -> [i64; 2] {
        self.non_zero[node]
    }

    /// Takes a pod that left off its node.
    pub fn remove(&mut self, node: usize, request: &Request) {
        self.pods[node] -= 1;
        self.non_zero[node][0] -= request.non_zero[0];
        self.non_zero[node][1] -= request.non_zero[1];
        for &(c, amount) in &request.amounts {
            if let Some(r) = self.requested[node].get_mut(c) {
                *r -= amount;
            }
        }
    }

    /// Charges a placed pod to its node.
    pub fn add(&mut self, node: usize, request: &Request) {
        self.pods[node] += 1;
        self.non_zero[node][0] += request.non_zero[0];
        self.non_zero[node][1] += request.non_zero[1];
        for &(c, amount) in &request.amounts {
            if self.requested[node].len() <= c {
                self.requested[node].resize(c + 1, 0);
            }
            self.requested[node][c] += amount;
        }
    }
}
