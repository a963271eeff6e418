//! Kubernetes resource quantities (`8`, `500m`, `64Gi`, `1e3`) as numbers.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::core::{Node, Pod};

/// The quantity's value, or None when it is not a valid quantity.
pub fn value(q: &Quantity) -> Option<f64> {
    parse(&q.0)
}

/// The value of a quantity string.
pub fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() {
        return None;
    }
    let base: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let v = base * scale;
    v.is_finite().then_some(v)
}

/// A whole count such as GPUs: the value rounded up (Kubernetes requires integers here).
pub fn count(q: &Quantity) -> Option<i64> {
    value(q).map(|v| v.ceil() as i64)
}

/// The most GPUs of one resource a node or pod may hold: no real machine has more, and counts
/// past it are what overflows sums and drawings.
pub const MAX_GPUS: i64 = 4096;

/// A GPU count as Kubernetes admits extended resources: a whole number from 0 to
/// [`MAX_GPUS`], in the quantity grammar (`8`, `1e1`, `+2`).
pub fn gpu_count(text: &str) -> Result<i64, GpuCountError> {
    let v = parse(text).ok_or_else(|| GpuCountError::NotAQuantity(text.to_string()))?;
    if v < 0.0 || v.fract() != 0.0 {
        Err(GpuCountError::NotWhole(text.to_string()))
    } else if v > MAX_GPUS as f64 {
        Err(GpuCountError::TooMany(text.to_string()))
    } else {
        Ok(v as i64)
    }
}

/// Why a GPU count is refused; each names the value as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuCountError {
    #[error("{0:?} is not a quantity (write a count such as \"8\")")]
    NotAQuantity(String),
    #[error("{0:?} is not a whole number of GPUs, 0 or more")]
    NotWhole(String),
    #[error("{0:?} GPUs is more than any machine has (at most {MAX_GPUS})")]
    TooMany(String),
}

/// True for resource names that are GPUs: `nvidia.com/gpu`, `amd.com/gpu`, `nvidia.com/mig-*`,
/// and `gpu.intel.com/*` except memory resources.
pub fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name == "amd.com/gpu"
        || name.starts_with("nvidia.com/mig-")
        || (name.starts_with("gpu.intel.com/") && !name.contains("memory"))
}

/// The first GPU quantity of a node that is not a count a machine can have, as (field path,
/// why): checked when a snapshot is read, so nothing later guesses or overflows.
pub fn node_gpu_problem(node: &Node) -> Option<(String, GpuCountError)> {
    [
        ("capacity", &node.status.capacity),
        ("allocatable", &node.status.allocatable),
    ]
    .into_iter()
    .flat_map(|(field, map)| map.iter().map(move |(name, q)| (field, name, q)))
    .filter(|(_, name, _)| is_gpu_resource(name))
    .find_map(|(field, name, q)| {
        let why = gpu_count(&q.0).err()?;
        Some((format!("status.{field}[{name:?}]"), why))
    })
}

/// The first GPU request or limit of a pod that is not a count a machine can have.
pub fn pod_gpu_problem(pod: &Pod) -> Option<(String, GpuCountError)> {
    let lists = [
        ("containers", &pod.spec.containers),
        ("initContainers", &pod.spec.init_containers),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            for (field, map) in [
                ("limits", &c.resources.limits),
                ("requests", &c.resources.requests),
            ] {
                for (name, q) in map.iter().filter(|(name, _)| is_gpu_resource(name)) {
                    if let Err(why) = gpu_count(&q.0) {
                        return Some((
                            format!("spec.{list}[{i}].resources.{field}[{name:?}]"),
                            why,
                        ));
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse("8"), Some(8.0));
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("1Gi"), Some(1073741824.0));
        assert_eq!(parse("2k"), Some(2000.0));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("8x"), None);
        assert_eq!(count(&Quantity("2".into())), Some(2));
    }

    #[test]
    fn gpu_counts_are_whole_and_bounded() {
        assert_eq!(gpu_count("8"), Ok(8));
        assert_eq!(gpu_count("1e1"), Ok(10));
        assert_eq!(gpu_count("0"), Ok(0));
        for bad in [
            "eight", "0x10", "", "-8", "1.5", "1e30", "1e9", "８", "500m",
        ] {
            assert!(gpu_count(bad).is_err(), "{bad:?}");
        }
    }
}
