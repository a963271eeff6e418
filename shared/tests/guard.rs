//! The guard on `migrate`'s writes: execute mode sends only while the ValidatingAdmissionPolicy
//! and its binding are installed as shipped, and otherwise says which part is not.

mod common;

use alfred::execute::dispatch;
use alfred::execute::guard::{Fetched, GuardProblem, GuardRead, check};
use alfred::reasons::DispatchReason;
use common::{World, installed_guard};
use serde_json::{Value, json};

const EXEC: &str = "mode: execute\nmigration: {apiVersion: v1}\n";

/// The guard as kube-apiserver returned it, with `edit` applied to the policy and the binding.
fn installed(edit: impl FnOnce(&mut Value, &mut Value)) -> GuardRead {
    let [mut policy, mut binding]: [Value; 2] = installed_guard().try_into().unwrap();
    edit(&mut policy, &mut binding);
    GuardRead {
        policy: Fetched::Found(policy),
        binding: Fetched::Found(binding),
    }
}

fn altered(edit: impl FnOnce(&mut Value, &mut Value)) -> String {
    match check(&installed(edit)) {
        Err(GuardProblem::Altered { kind, at }) => format!("{kind} at spec{at}"),
        other => panic!("not reported as altered: {other:?}"),
    }
}

#[test]
fn the_guard_as_the_api_server_returns_it_holds() {
    // kube-apiserver adds defaults (matchPolicy, empty selectors, scope "*") and metadata.
    assert_eq!(check(&installed(|_, _| {})), Ok(()));
}

#[test]
fn an_altered_guard_names_what_changed() {
    assert_eq!(
        altered(|p, _| {
            p["spec"]["validations"].as_array_mut().unwrap().pop();
        }),
        "ValidatingAdmissionPolicy at spec.validations"
    );
    assert_eq!(
        altered(|p, _| p["spec"]["validations"][0]["expression"] = json!("true")),
        "ValidatingAdmissionPolicy at spec.validations[0].expression"
    );
    assert_eq!(
        altered(|p, _| p["spec"]["failurePolicy"] = json!("Ignore")),
        "ValidatingAdmissionPolicy at spec.failurePolicy"
    );
    assert_eq!(
        altered(|p, _| p["spec"]["matchConstraints"]["objectSelector"] =
            json!({"matchLabels": {"exempt": "no"}})),
        "ValidatingAdmissionPolicy at spec.matchConstraints.objectSelector"
    );
    assert_eq!(
        altered(|_, b| b["spec"]["validationActions"] = json!(["Warn"])),
        "ValidatingAdmissionPolicyBinding at spec.validationActions[0]"
    );
    assert_eq!(
        altered(
            |_, b| b["spec"]["matchResources"] = json!({"namespaceSelector":
            {"matchLabels": {"team": "a"}}})
        ),
        "ValidatingAdmissionPolicyBinding at spec.matchResources"
    );
    assert_eq!(
        altered(|_, b| b["spec"]["policyName"] = json!("another")),
        "ValidatingAdmissionPolicyBinding at spec.policyName"
    );
}

#[test]
fn a_missing_or_unreadable_part_is_named() {
    let [policy, binding]: [Value; 2] = installed_guard().try_into().unwrap();
    let read = |policy, binding| check(&GuardRead { policy, binding }).unwrap_err();
    use Fetched::*;
    assert_eq!(read(NotRead, NotRead), GuardProblem::NotRead);
    assert_eq!(
        read(Missing, Missing).to_string(),
        "the migration guard (ValidatingAdmissionPolicy alfred-migration-writes and its binding) \
         is not installed; apply manifests/rbac/migration-guard.yaml"
    );
    assert_eq!(read(Missing, Found(binding)), GuardProblem::PolicyMissing);
    assert_eq!(
        read(Found(policy.clone()), Missing).to_string(),
        "the ValidatingAdmissionPolicyBinding alfred-migration-writes is not installed, so the \
         policy binds nobody; apply manifests/rbac/migration-guard.yaml"
    );
    assert_eq!(
        read(Found(policy), Unreadable("forbidden".into())).to_string(),
        "the ValidatingAdmissionPolicyBinding alfred-migration-writes cannot be read: forbidden; \
         grant get on it (manifests/rbac/migrator.yaml)"
    );
}

#[test]
fn execute_mode_withholds_every_request_while_the_guard_does_not_hold() {
    let w = World::new()
        .node("n1", 8)
        .node("n2", 8)
        .omenative("team", "a", &[("n1", 2)])
        .unhealthy("n1");
    let withheld = |w: &World| {
        w.with_ctx(EXEC, |ctx| {
            dispatch::plan(ctx, None, None)
                .withheld
                .map(|w| (w.reason, w.detail))
        })
    };
    assert_eq!(withheld(&w), None, "installed as shipped");
    let mut without_binding = w.clone();
    without_binding
        .items
        .retain(|i| i["kind"] != "ValidatingAdmissionPolicyBinding");
    assert_eq!(
        withheld(&without_binding),
        Some((
            DispatchReason::GuardUnavailable,
            GuardProblem::BindingMissing.to_string()
        ))
    );
    let warn_only = w.edit(
        "ValidatingAdmissionPolicyBinding",
        "alfred-migration-writes",
        |b| b["spec"]["validationActions"] = json!(["Warn"]),
    );
    assert_eq!(
        withheld(&warn_only).map(|w| w.0),
        Some(DispatchReason::GuardUnavailable)
    );
}

#[test]
fn the_chart_and_the_caretaker_ship_the_same_guard() {
    assert_eq!(
        include_str!("../../manifests/helm/alfred-webhook/files/migration-guard.yaml"),
        alfred::execute::guard::SHIPPED,
        "manifests/helm/alfred-webhook/files/migration-guard.yaml must be \
         manifests/rbac/migration-guard.yaml, byte for byte"
    );
    assert_eq!(
        include_str!("../../manifests/caretaker/migration-guard.yaml"),
        alfred::execute::guard::SHIPPED,
        "manifests/caretaker/migration-guard.yaml must be manifests/rbac/migration-guard.yaml, \
         byte for byte"
    );
}
