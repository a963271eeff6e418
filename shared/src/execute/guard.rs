//! The guard on what `migrate` may write (`manifests/rbac/migration-guard.yaml`): a
//! ValidatingAdmissionPolicy and its binding that bound alfred-migrator to adding one migration
//! request. `migrate` sends only while both are installed as shipped (GuardUnavailable
//! otherwise); this says whether what the cluster holds is that.

use std::sync::LazyLock;

use serde_json::Value;

pub use crate::snapshot::{Fetched, GuardRead, MIGRATION_GUARD as NAME};

/// The guard as shipped: the policy, then its binding.
pub const SHIPPED: &str = include_str!("../../../manifests/rbac/migration-guard.yaml");

/// Why the guard does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardProblem {
    #[error(
        "the migration guard was not read (a snapshot file holds neither ValidatingAdmissionPolicy {NAME} nor its binding); requests are sent only where it is installed"
    )]
    NotRead,
    #[error(
        "the migration guard (ValidatingAdmissionPolicy {NAME} and its binding) is not installed; apply manifests/rbac/migration-guard.yaml"
    )]
    NotInstalled,
    #[error(
        "the ValidatingAdmissionPolicy {NAME} is not installed, so its binding checks nothing; apply manifests/rbac/migration-guard.yaml"
    )]
    PolicyMissing,
    #[error(
        "the ValidatingAdmissionPolicyBinding {NAME} is not installed, so the policy binds nobody; apply manifests/rbac/migration-guard.yaml"
    )]
    BindingMissing,
    #[error(
        "the {kind} {NAME} cannot be read: {error}; grant get on it (manifests/rbac/migrator.yaml)"
    )]
    Unreadable { kind: &'static str, error: String },
    #[error(
        "the {kind} {NAME} is not as shipped (at spec{at}); apply manifests/rbac/migration-guard.yaml again"
    )]
    Altered { kind: &'static str, at: String },
}

const POLICY: &str = "ValidatingAdmissionPolicy";
const BINDING: &str = "ValidatingAdmissionPolicyBinding";

/// Ok when both objects are installed as shipped: each shipped field holds the shipped value,
/// and what the API server holds beyond them is only its defaults (empty selectors and lists,
/// `matchPolicy: Equivalent`, `scope: "*"`).
pub fn check(read: &GuardRead) -> Result<(), GuardProblem> {
    use Fetched::*;
    let (policy, binding) = match (&read.policy, &read.binding) {
        (NotRead, NotRead) => return Err(GuardProblem::NotRead),
        (Unreadable(e), _) => return Err(unreadable(POLICY, e)),
        (_, Unreadable(e)) => return Err(unreadable(BINDING, e)),
        (Missing | NotRead, Found(_)) => return Err(GuardProblem::PolicyMissing),
        (Missing | NotRead, _) => return Err(GuardProblem::NotInstalled),
        (Found(_), Missing | NotRead) => return Err(GuardProblem::BindingMissing),
        (Found(p), Found(b)) => (p, b),
    };
    let [shipped_policy, shipped_binding] = &*SHIPPED_OBJECTS;
    for (kind, shipped, live) in [
        (POLICY, shipped_policy, policy),
        (BINDING, shipped_binding, binding),
    ] {
        if let Some(at) = first_difference(&shipped["spec"], &live["spec"], "") {
            return Err(GuardProblem::Altered { kind, at });
        }
    }
    Ok(())
}

fn unreadable(kind: &'static str, error: &str) -> GuardProblem {
    GuardProblem::Unreadable {
        kind,
        error: error.to_string(),
    }
}

/// The shipped policy and binding as JSON, parsed once.
static SHIPPED_OBJECTS: LazyLock<[Value; 2]> = LazyLock::new(|| {
    let mut docs = Vec::new();
    crate::input::for_each_document(
        SHIPPED,
        |_, json| {
            docs.push(serde_json::from_str(json).expect("the shipped guard is JSON"));
            Ok(())
        },
        |_, e| e,
    )
    .expect("the shipped guard is YAML");
    docs.try_into().expect("the shipped guard is two objects")
});

/// None when `live` holds everything `shipped` does, and beyond it only defaults; else the
/// first path that differs.
fn first_difference(shipped: &Value, live: &Value, at: &str) -> Option<String> {
    match (shipped, live) {
        (Value::Object(s), Value::Object(l)) => {
            for (key, value) in s {
                let live = l.get(key).unwrap_or(&Value::Null);
                if let Some(path) = first_difference(value, live, &format!("{at}.{key}")) {
                    return Some(path);
                }
            }
            l.iter()
                .find(|(key, value)| !s.contains_key(*key) && !is_default(key, value))
                .map(|(key, _)| format!("{at}.{key}"))
        }
        (Value::Array(s), Value::Array(l)) if s.len() == l.len() => s
            .iter()
            .zip(l)
            .enumerate()
            .find_map(|(i, (s, l))| first_difference(s, l, &format!("{at}[{i}]"))),
        (s, l) if s == l => None,
        _ => Some(at.to_string()),
    }
}

/// What the API server adds to the shipped objects by itself (an object of such defaults, the
/// binding's `matchResources`, too).
fn is_default(key: &str, value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(o) => o.iter().all(|(k, v)| is_default(k, v)),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => matches!(
            (key, s.as_str()),
            ("matchPolicy", "Equivalent") | ("scope", "*")
        ),
        _ => false,
    }
}
