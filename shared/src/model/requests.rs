//! What a pod asks of a node, as Kubernetes computes it from its containers: the effective
//! request per resource (app containers plus sidecars, or the peak of the init sequence, plus
//! the pod overhead), its GPUs, and the cpu and memory kube-scheduler's scores count.

use crate::api::core::{Container, PodSpec};
use crate::kubernetes::quantity::{self, is_gpu_resource};

/// GPUs a pod holds, as Kubernetes computes a pod's effective request per resource: the larger
/// of (app containers + sidecar init containers) and the peak of the init sequence, summed over
/// GPU resources. A container's limit counts, else its request.
pub fn pod_gpus(spec: &PodSpec) -> i64 {
    let mut resources: Vec<&str> = Vec::new();
    for c in spec.containers.iter().chain(&spec.init_containers) {
        for map in [&c.resources.limits, &c.resources.requests] {
            resources.extend(map.keys().filter(|n| is_gpu_resource(n)));
        }
    }
    resources.sort_unstable();
    resources.dedup();
    resources
        .into_iter()
        .map(|resource| effective_request(spec, |c| container_amount(c, resource)))
        .sum()
}

/// A pod's effective request of one resource, as Kubernetes computes it from each container's
/// `amount`: the app containers plus the sidecars (init containers with `restartPolicy:
/// Always`), or the peak of the init sequence (each init container beside the sidecars started
/// before it) when that is larger.
pub fn effective_request(spec: &PodSpec, amount: impl Fn(&Container) -> i64) -> i64 {
    let app: i64 = spec.containers.iter().map(&amount).sum();
    let (mut sidecars, mut init_peak) = (0i64, 0i64);
    for c in &spec.init_containers {
        if c.restart_policy == "Always" {
            sidecars += amount(c);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars + amount(c));
        }
    }
    (app + sidecars).max(init_peak)
}

fn container_amount(c: &Container, resource: &str) -> i64 {
    let r = &c.resources;
    r.limits
        .get(resource)
        .or_else(|| r.requests.get(resource))
        .and_then(quantity::count)
        .unwrap_or(0)
}

/// What a container missing a cpu or memory request counts as in kube-scheduler's scores:
/// 100m and 200 MiB (`DefaultMilliCPURequest`, `DefaultMemoryRequest`), in milli-units.
const NON_ZERO_DEFAULTS: [(&str, i64); 2] = [("cpu", 100), ("memory", 200 * 1024 * 1024 * 1000)];

/// A pod's cpu and memory as kube-scheduler's NodeResourcesFit score counts them: each
/// container that states no request for one counts its default, plus the pod overhead.
pub fn non_zero_requests(spec: &PodSpec) -> [i64; 2] {
    NON_ZERO_DEFAULTS.map(|(resource, default)| {
        let stated = |c: &Container| {
            c.resources.requests.get(resource).is_some()
                || c.resources.limits.get(resource).is_some()
        };
        let overhead = spec.overhead.get(resource).map_or(0, milli);
        effective_request(spec, |c| {
            if stated(c) {
                container_request(c, resource)
            } else {
                default
            }
        }) + overhead
    })
}

/// A quantity in milli-units, rounded up as Kubernetes rounds requests.
pub(crate) fn milli(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> i64 {
    quantity::value(q).map_or(0, |v| (v * 1000.0).ceil() as i64)
}

/// A container's request for a resource: its request, else its limit (the API server copies a
/// limit into a missing request).
fn container_request(c: &Container, resource: &str) -> i64 {
    c.resources
        .requests
        .get(resource)
        .or_else(|| c.resources.limits.get(resource))
        .map_or(0, milli)
}

/// A pod's effective requests as Kubernetes computes them: app containers plus sidecars, or the
/// peak of the init sequence when that is larger, plus the pod overhead; milli-units by name.
pub fn pod_requests(spec: &PodSpec) -> Vec<(&str, i64)> {
    // A pod names a handful of resources: a linear dedup beats sorting them.
    let mut names: Vec<&str> = Vec::new();
    for c in spec.containers.iter().chain(&spec.init_containers) {
        for name in c.resources.requests.keys().chain(c.resources.limits.keys()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    for name in spec.overhead.keys() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|r| {
            let overhead = spec.overhead.get(r).map_or(0, milli);
            (
                r,
                effective_request(spec, |c| container_request(c, r)) + overhead,
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}
