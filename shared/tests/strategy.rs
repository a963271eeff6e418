//! Update strategy resolution, budgets and revision retention (omenative-update-strategies.md).

use alfred::api::component::ComponentKind;
use alfred::api::lifecycle::{UpdateStrategy, UpdateStrategyType};
use alfred::rollout::strategy::{
    BudgetArm, ComponentDefaults, OperatorDefaults, PercentError, Source, parse_percent, resolve,
    retain_revisions, revision_history_limit, scale_budget,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::SignedDuration;
use serde_json::json;

fn strategy(value: serde_json::Value) -> UpdateStrategy {
    serde_json::from_value(value).unwrap()
}

fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.into())
}

#[test]
fn the_spec_example_resolves_to_the_projected_strategy() {
    let isvc = strategy(json!({"type": "InPlaceIfPossible"}));
    let r = resolve(
        ComponentKind::Engine,
        Some(&isvc),
        None,
        &OperatorDefaults::chart(),
    );
    assert_eq!(
        serde_json::to_value(r.projected()).unwrap().to_string(),
        r#"{"rollingUpdate":{"maxUnavailable":"25%"},"type":"InPlaceIfPossible"}"#
    );
    assert_eq!(r.type_.source, Source::InferenceService);
    assert_eq!(
        r.max_unavailable.as_ref().unwrap().source,
        Source::OperatorDefault
    );
    assert_eq!(
        r.max_surge, None,
        "the operator default fills only the budget the type reads"
    );
    assert_eq!(r.arm(), BudgetArm::Unavailability);
}

/// Every combination of the four sources, for the type and both budgets: each field comes from
/// the first source that sets it, and the operator's budgets only fill the arm the type reads.
#[test]
fn the_defaults_chain_in_every_combination() {
    let isvc = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}));
    let isvc_type_only = strategy(json!({"type": "InPlaceOnly"}));
    let runtime = strategy(
        json!({"type": "InPlaceIfPossible", "rollingUpdate": {"maxUnavailable": 2, "maxSurge": 3}}),
    );
    let operator_recreate = OperatorDefaults {
        update_strategy: [(
            ComponentKind::Engine,
            ComponentDefaults {
                type_: Some(UpdateStrategyType::RecreatePod),
                max_surge: Some(pct("10%")),
                max_unavailable: Some(pct("20%")),
            },
        )]
        .into(),
        revision_history_limit: None,
        stuck_pod_grace_period: None,
    };
    let none = OperatorDefaults::default();
    let chart = OperatorDefaults::chart();
    type Want = (
        UpdateStrategyType,
        Source,
        Option<(IntOrString, Source)>,
        Option<(IntOrString, Source)>,
    );
    let cases: Vec<(
        Option<&UpdateStrategy>,
        Option<&UpdateStrategy>,
        &OperatorDefaults,
        Want,
    )> = vec![
        // Nothing anywhere: SurgeThenDrain without a cap.
        (
            None,
            None,
            &none,
            (
                UpdateStrategyType::SurgeThenDrain,
                Source::Fallback,
                None,
                None,
            ),
        ),
        // The operator alone: its type, and only the budget that type reads.
        (
            None,
            None,
            &operator_recreate,
            (
                UpdateStrategyType::RecreatePod,
                Source::OperatorDefault,
                None,
                Some((pct("20%"), Source::OperatorDefault)),
            ),
        ),
        // The chart alone: SurgeThenDrain reads maxSurge.
        (
            None,
            None,
            &chart,
            (
                UpdateStrategyType::SurgeThenDrain,
                Source::OperatorDefault,
                Some((pct("25%"), Source::OperatorDefault)),
                None,
            ),
        ),
        // The runtime alone.
        (
            None,
            Some(&runtime),
            &none,
            (
                UpdateStrategyType::InPlaceIfPossible,
                Source::Runtime,
                Some((IntOrString::Int(3), Source::Runtime)),
                Some((IntOrString::Int(2), Source::Runtime)),
            ),
        ),
        // The runtime over the operator: the operator fills nothing the runtime set.
        (
            None,
            Some(&runtime),
            &operator_recreate,
            (
                UpdateStrategyType::InPlaceIfPossible,
                Source::Runtime,
                Some((IntOrString::Int(3), Source::Runtime)),
                Some((IntOrString::Int(2), Source::Runtime)),
            ),
        ),
        // The InferenceService alone.
        (
            Some(&isvc),
            None,
            &none,
            (
                UpdateStrategyType::RecreatePod,
                Source::InferenceService,
                None,
                Some((IntOrString::Int(1), Source::InferenceService)),
            ),
        ),
        // The InferenceService over the operator.
        (
            Some(&isvc),
            None,
            &operator_recreate,
            (
                UpdateStrategyType::RecreatePod,
                Source::InferenceService,
                None,
                Some((IntOrString::Int(1), Source::InferenceService)),
            ),
        ),
        // The InferenceService over the runtime: a type-only component keeps the runtime's budgets.
        (
            Some(&isvc_type_only),
            Some(&runtime),
            &none,
            (
                UpdateStrategyType::InPlaceOnly,
                Source::InferenceService,
                Some((IntOrString::Int(3), Source::Runtime)),
                Some((IntOrString::Int(2), Source::Runtime)),
            ),
        ),
        (
            Some(&isvc),
            Some(&runtime),
            &operator_recreate,
            (
                UpdateStrategyType::RecreatePod,
                Source::InferenceService,
                Some((IntOrString::Int(3), Source::Runtime)),
                Some((IntOrString::Int(1), Source::InferenceService)),
            ),
        ),
        // A type-only InferenceService with the operator: its budget fills the arm.
        (
            Some(&isvc_type_only),
            None,
            &operator_recreate,
            (
                UpdateStrategyType::InPlaceOnly,
                Source::InferenceService,
                None,
                Some((pct("20%"), Source::OperatorDefault)),
            ),
        ),
    ];
    for (i, (isvc, runtime, operator, want)) in cases.into_iter().enumerate() {
        let r = resolve(ComponentKind::Engine, isvc, runtime, operator);
        let got: Want = (
            r.type_.value,
            r.type_.source,
            r.max_surge.map(|s| (s.value, s.source)),
            r.max_unavailable.map(|s| (s.value, s.source)),
        );
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn operator_defaults_are_per_component() {
    let mut defaults = OperatorDefaults::chart();
    defaults.update_strategy.remove(&ComponentKind::Router);
    let r = resolve(ComponentKind::Router, None, None, &defaults);
    assert_eq!(
        (r.type_.value, r.type_.source),
        (UpdateStrategyType::SurgeThenDrain, Source::Fallback)
    );
    assert_eq!(r.max_surge, None);
}

#[test]
fn partition_and_in_place_settings_merge_field_by_field() {
    let isvc = strategy(
        json!({"rollingUpdate": {"partition": 1}, "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}}),
    );
    let runtime = strategy(
        json!({"inPlaceUpdateStrategy": {"markNotReadyDuringLifecycle": false, "gracePeriodSeconds": 30}}),
    );
    let r = resolve(
        ComponentKind::Decoder,
        Some(&isvc),
        Some(&runtime),
        &OperatorDefaults::default(),
    );
    assert_eq!(
        r.partition.as_ref().map(|p| (p.value, p.source)),
        Some((1, Source::InferenceService))
    );
    assert_eq!(
        r.grace_period_seconds.as_ref().map(|g| (g.value, g.source)),
        Some((5, Source::InferenceService))
    );
    assert_eq!(
        r.mark_not_ready_during_lifecycle
            .as_ref()
            .map(|m| (m.value, m.source)),
        Some((false, Source::Runtime))
    );
    // The type is OME's fallback: resolved, but never projected onto the object.
    assert_eq!(r.type_.source, Source::Fallback);
    assert_eq!(
        serde_json::to_value(r.projected()).unwrap(),
        json!({"rollingUpdate": {"partition": 1},
               "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5, "markNotReadyDuringLifecycle": false}})
    );
}

#[test]
fn the_budget_table() {
    // (budget, [budget for 0..=10 Instances])
    let table: [(&str, [u32; 11]); 6] = [
        ("0%", [0; 11]),
        ("1%", [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
        ("25%", [0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3]),
        ("50%", [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]),
        ("99%", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
        ("100%", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    ];
    for (budget, want) in table {
        for (n, w) in want.iter().enumerate() {
            assert_eq!(
                scale_budget(Some(&pct(budget)), n as u32),
                Ok(Some(*w)),
                "{budget} of {n}"
            );
        }
    }
    for n in 0..=10 {
        assert_eq!(scale_budget(Some(&IntOrString::Int(0)), n), Ok(Some(0)));
        assert_eq!(
            scale_budget(Some(&IntOrString::Int(3)), n),
            Ok(Some(3)),
            "an integer may exceed the Instances"
        );
        assert_eq!(
            scale_budget(Some(&IntOrString::Int(-2)), n),
            Ok(Some(0)),
            "a negative integer counts as 0"
        );
        assert_eq!(scale_budget(None, n), Ok(None), "unset is no cap");
    }
    // A runtime or the operator defaults may hold a percent the webhook would refuse: OME's
    // planner clamps it to 0..=100 rather than failing.
    assert_eq!(scale_budget(Some(&pct("120%")), 4), Ok(Some(4)));
    assert_eq!(scale_budget(Some(&pct("-5%")), 4), Ok(Some(0)));
    assert_eq!(
        scale_budget(Some(&pct("abc")), 4),
        Err(PercentError::NotPercent)
    );
}

#[test]
fn percent_strings_read_as_go_reads_them() {
    assert_eq!(parse_percent("25%"), Ok(25));
    assert_eq!(parse_percent("+5%"), Ok(5));
    assert_eq!(parse_percent("007%"), Ok(7));
    assert_eq!(parse_percent("-1%"), Err(PercentError::OutOfRange));
    assert_eq!(parse_percent("101%"), Err(PercentError::OutOfRange));
    assert_eq!(parse_percent("%"), Err(PercentError::Malformed));
    assert_eq!(parse_percent("2.5%"), Err(PercentError::Malformed));
    assert_eq!(parse_percent(" 5%"), Err(PercentError::Malformed));
    assert_eq!(parse_percent("25"), Err(PercentError::NotPercent));
    assert_eq!(
        parse_percent("99999999999999999999%"),
        Err(PercentError::Malformed)
    );
}

#[test]
fn the_strategy_reads_one_budget() {
    let defaults = OperatorDefaults::default();
    let s = strategy(
        json!({"type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}),
    );
    let r = resolve(ComponentKind::Engine, Some(&s), None, &defaults);
    assert_eq!(
        r.budget(4),
        Ok(Some(2)),
        "maxSurge; the zero maxUnavailable is inert"
    );
    let s = strategy(json!({"type": "RecreatePod", "rollingUpdate": {"maxSurge": "50%"}}));
    let r = resolve(ComponentKind::Engine, Some(&s), None, &defaults);
    assert_eq!(
        r.budget(4),
        Ok(None),
        "RecreatePod reads maxUnavailable, which nothing sets"
    );
}

#[test]
fn revision_history_limit_annotation_then_operator_then_all() {
    let chart = OperatorDefaults::chart();
    let none = OperatorDefaults::default();
    assert_eq!(revision_history_limit(Some("3"), &chart), Some(3));
    assert_eq!(revision_history_limit(None, &chart), Some(10));
    assert_eq!(
        revision_history_limit(Some("0"), &chart),
        Some(10),
        "not positive: unset"
    );
    assert_eq!(
        revision_history_limit(Some("x"), &none),
        None,
        "malformed: unset; keep all"
    );
    assert_eq!(revision_history_limit(None, &none), None);
}

#[test]
fn retention_keeps_live_revisions_and_the_newest_others() {
    let revisions = [
        ("r1", 1),
        ("r2", 2),
        ("r3", 3),
        ("r4", 4),
        ("r5", 5),
        ("r6", 6),
    ];
    // r2 is still run by an Instance; r6 is the update target.
    let (kept, pruned) = retain_revisions(&revisions, &["r2", "r6"], Some(2));
    assert_eq!(kept, ["r2", "r4", "r5", "r6"]);
    assert_eq!(pruned, ["r1", "r3"]);
    let (kept, pruned) = retain_revisions(&revisions, &["r6"], None);
    assert_eq!(kept.len(), 6);
    assert!(pruned.is_empty());
    let (_, pruned) = retain_revisions(&revisions, &["r6"], Some(0));
    assert_eq!(pruned, ["r1", "r2", "r3", "r4", "r5"]);
}

#[test]
fn operator_defaults_from_the_config_map() {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "inferenceservice-config", "namespace": "ome"},
        "data": {
            "deploy": r#"{"defaultDeploymentMode": "RawDeployment",
                          "updateStrategy": {"engine": {"type": "InPlaceIfPossible", "maxUnavailable": 1}}}"#,
            "lifecycle": r#"{"revisionHistoryLimit": 4, "stuckPodGracePeriod": "1m30s"}"#,
            "ingress": "{}"
        }
    }))
    .unwrap();
    let d = OperatorDefaults::from_config_map(&cm).unwrap();
    assert_eq!(d.revision_history_limit, Some(4));
    assert_eq!(d.stuck_pod_grace(), SignedDuration::from_secs(90));
    assert_eq!(
        OperatorDefaults::default().stuck_pod_grace(),
        SignedDuration::from_secs(60),
        "the chart's 60s when the ConfigMap names none"
    );
    let bad_grace: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "inferenceservice-config"},
        "data": {"lifecycle": r#"{"stuckPodGracePeriod": "soon"}"#}
    }))
    .unwrap();
    assert_eq!(
        OperatorDefaults::from_config_map(&bad_grace)
            .unwrap_err()
            .to_string(),
        r#"inferenceservice-config key lifecycle: stuckPodGracePeriod "soon" is not a positive duration such as 60s"#
    );
    let r = resolve(ComponentKind::Engine, None, None, &d);
    assert_eq!(r.type_.value, UpdateStrategyType::InPlaceIfPossible);
    assert_eq!(r.max_unavailable.unwrap().value, IntOrString::Int(1));

    let zero: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "inferenceservice-config"},
        "data": {"deploy": r#"{"updateStrategy": {"router": {"maxSurge": "0%"}}}"#}
    }))
    .unwrap();
    let e = OperatorDefaults::from_config_map(&zero).unwrap_err();
    assert!(
        e.to_string()
            .contains("updateStrategy.router.maxSurge resolves to 0"),
        "{e}"
    );

    // OME's manager starts with a percent over 100 (it resolves above 0); the planner clamps it.
    let over: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "inferenceservice-config"},
        "data": {"deploy": r#"{"updateStrategy": {"engine": {"maxSurge": "150%"}}}"#}
    }))
    .unwrap();
    let d = OperatorDefaults::from_config_map(&over).unwrap();
    let r = resolve(ComponentKind::Engine, None, None, &d);
    assert_eq!(r.budget(3), Ok(Some(3)), "150% of 3 clamps to all 3");

    let broken: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "inferenceservice-config"},
        "data": {"deploy": r#"{"updateStrategy": {"engine": {"type": "Rolling"}}}"#}
    }))
    .unwrap();
    let e = OperatorDefaults::from_config_map(&broken).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("inferenceservice-config key deploy: unknown variant `Rolling`"),
        "{e}"
    );
}

proptest::proptest! {
    /// A scaled budget never exceeds the Instances for a percent, and never rounds a non-zero
    /// percent of at least one Instance down to zero.
    #[test]
    fn percent_budgets_stay_within_the_instances(percent in 0u32..=100, instances in 0u32..500) {
        let b = scale_budget(Some(&pct(&format!("{percent}%"))), instances).unwrap().unwrap();
        proptest::prop_assert!(b <= instances);
        proptest::prop_assert_eq!(b == 0, percent == 0 || instances == 0);
    }
}
