//! Every default of alfredConfig and every validation rule (alfred-reference.md §1).

use std::collections::BTreeMap;

use alfred::config::{
    Aggressiveness, Config, ConfigError, EarlyTick, LabelValue, OperatingMode, TriggerMatcher,
};
use k8s_openapi::jiff::SignedDuration;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text)
}

fn invalid(text: &str) -> String {
    match parse(text) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted: {text}"),
    }
}

#[test]
fn every_default() {
    let c = parse("schemaVersion: 1\n").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.mode, OperatingMode::RecommendOnly);
    assert_eq!(c.decision_loop_interval, SignedDuration::from_mins(5));
    assert_eq!(c.observation_loop_interval, SignedDuration::from_secs(30));
    assert_eq!(
        c.early_tick_on,
        vec![
            EarlyTick::NodeConditionChange,
            EarlyTick::NodeMaintenanceChange
        ]
    );
    let d = &c.defragmentation;
    assert!(d.enabled);
    assert_eq!(d.fragmentation_threshold, 0.25);
    assert_eq!(d.aggressiveness, Aggressiveness::Balanced);
    assert_eq!(d.size_ladder, vec![1, 2, 4, 8]);
    assert_eq!(d.demand_blend_lambda, 0.3);
    assert_eq!(
        d.size_prior,
        BTreeMap::from([(1, 0.1), (2, 0.1), (4, 0.2), (8, 0.6)])
    );
    assert_eq!(d.pending_urgency_tau_minutes, 30);
    assert!(
        !d.follow_plan,
        "following the consolidation plan is an extension, off"
    );
    let h = &c.node_health;
    assert!(h.enabled);
    assert_eq!(h.aggressiveness, Aggressiveness::Balanced);
    assert_eq!(h.trigger_conditions, vec!["GpuUnhealthy"]);
    assert!(!h.signal_only);
    assert_eq!(h.health_cooldown_floor_minutes, 5);
    assert_eq!(h.node_suspicion_window_minutes, 30);
    assert!(h.maintenance_triggers.is_empty());
    assert!(c.default_movable);
    assert_eq!(c.recent_placement_cooldown_minutes, 10);
    assert_eq!(c.per_workload_cooldown_minutes, 30);
    assert_eq!(c.per_node_cooldown_minutes, 10);
    assert!(!c.raw_deployment_migration_enabled);
    assert!(c.omenative_migration_enabled);
    assert!(c.lws_recommendations_enabled);
    assert!(c.recommendations_config_map_enabled);
    assert_eq!(c.recommendations_config_map_name, "alfred-recommendations");
    assert_eq!(c.max_in_flight_migrations, 3);
    assert_eq!(c.max_migrations_per_hour, 10);
    assert_eq!(c.emergency_pending_age_minutes, 10);
    assert!(c.maintenance_windows.is_empty());
    assert!(c.spot_policy.avoid_as_target);
    assert!(c.spot_policy.prefer_as_source);
    assert_eq!(
        c.spot_policy.preemptible_labels,
        vec![
            "node.kubernetes.io/preemptible",
            "cloud.google.com/gke-preemptible"
        ]
    );
    assert!(c.allow_cross_tenant_optimization);
    assert_eq!(c.log_level, "info");
    assert!(c.structured_logging);
    assert!(c.scheduling_profiles.is_empty());
    assert_eq!(c.migration.api_version, None);
    assert_eq!(
        c.migration.acknowledgement_timeout,
        SignedDuration::from_mins(2)
    );
    assert_eq!(c.migration.failure_backoff, SignedDuration::from_mins(5));
    assert!(!c.migration_api_available());
}

#[test]
fn zero_means_default_for_integers_and_durations_but_not_numbers_or_bools() {
    let c = parse(
        "schemaVersion: 1\nperWorkloadCooldownMinutes: 0\ndecisionLoopInterval: 0s\n\
         defaultMovable: false\npolicies:\n  defragmentation:\n    fragmentationThreshold: 0\n\
         \x20   scoring: {demandBlendLambda: 0, sizeLadder: [], sizePrior: {}}\n",
    )
    .unwrap();
    assert_eq!(c.per_workload_cooldown_minutes, 30);
    assert_eq!(c.decision_loop_interval, SignedDuration::from_mins(5));
    assert!(!c.default_movable);
    assert_eq!(c.defragmentation.fragmentation_threshold, 0.0);
    assert_eq!(c.defragmentation.demand_blend_lambda, 0.0);
    assert_eq!(c.defragmentation.size_ladder, vec![1, 2, 4, 8]);
}

#[test]
fn following_the_consolidation_plan_is_a_boolean() {
    let c = parse("schemaVersion: 1\npolicies: {defragmentation: {followPlan: true}}\n").unwrap();
    assert!(c.defragmentation.follow_plan);
    let e = parse("schemaVersion: 1\npolicies: {defragmentation: {followPlan: sometimes}}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("followPlan"), "{e}");
}

#[test]
fn lists_empty_versus_absent() {
    let c =
        parse("schemaVersion: 1\nearlyTickOn: []\nspotPolicy: {preemptibleLabels: []}\n").unwrap();
    assert!(c.early_tick_on.is_empty());
    assert!(c.spot_policy.preemptible_labels.is_empty());
    let c = parse(
        "schemaVersion: 1\nearlyTickOn: null\npolicies: {nodeHealth: {triggerConditions: []}}\n",
    )
    .unwrap();
    assert_eq!(c.early_tick_on.len(), 2);
    assert_eq!(c.node_health.trigger_conditions, vec!["GpuUnhealthy"]);
}

#[test]
fn a_full_document_resolves() {
    let c = parse(
        r#"
schemaVersion: 1
mode: execute
decisionLoopInterval: 1m30s
policies:
  defragmentation:
    aggressiveness: aggressive
    scoring:
      sizeLadder: [1, 2, 4, 8, 16]
      sizePrior: {"1": 0.2, "8": 0.3, "16": 0.5}
  nodeHealth:
    triggerConditions: [GpuUnhealthy, example.com/XidErrors]
    maintenance:
      triggers:
        - {name: os-patching, label: {key: maintenance.example.com/state, value: patching}}
        - {name: swap, taint: {key: maintenance.example.com/hardware-swap, effect: NoSchedule}}
        - {name: drain-me, condition: {type: example.com/Drain, status: "True"}}
maintenanceWindows:
  - {days: [Sat, Sun], start: "01:00", end: "05:00"}
scheduling:
  profiles:
    ome-scheduler: {backend: kube-scheduler, schedulerVersion: v1.35.0, configurationID: ome-v1, gangScheduling: true}
    binpack:
      backend: kube-scheduler
      schedulerVersion: v1.34.4
      configurationID: gpu-binpack
      scoringStrategy: MostAllocated
      scoringResources: [{name: nvidia.com/gpu, weight: 5}, {name: cpu}]
migration: {apiVersion: v1, acknowledgementTimeout: 90s}
"#,
    )
    .unwrap();
    assert_eq!(c.mode, OperatingMode::Execute);
    assert!(c.migration_api_available());
    assert_eq!(c.decision_loop_interval, SignedDuration::from_secs(90));
    assert_eq!(c.defragmentation.aggressiveness.cost_weight(), 0.5);
    assert_eq!(c.defragmentation.size_prior[&16], 0.5);
    assert_eq!(c.node_health.maintenance_triggers.len(), 3);
    assert_eq!(
        c.node_health.maintenance_triggers[0].matcher,
        TriggerMatcher::Label {
            key: "maintenance.example.com/state".into(),
            value: LabelValue::Exactly("patching".into())
        }
    );
    assert_eq!(
        c.maintenance_windows[0]
            .days
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![5, 6]
    );
    assert_eq!(
        (
            c.maintenance_windows[0].start_minute,
            c.maintenance_windows[0].end_minute
        ),
        (60, 300)
    );
    assert!(c.scheduling_profiles["ome-scheduler"].gang_scheduling);
    // kube-scheduler's default resources unless listed; a weight defaults to 1.
    assert_eq!(
        c.scheduling_profiles["ome-scheduler"].scoring_resources,
        vec![("cpu".to_string(), 1), ("memory".to_string(), 1)]
    );
    assert_eq!(
        c.scheduling_profiles["binpack"].scoring_resources,
        vec![("nvidia.com/gpu".to_string(), 5), ("cpu".to_string(), 1)]
    );
    assert_eq!(
        c.migration.acknowledgement_timeout,
        SignedDuration::from_secs(90)
    );
}

#[test]
fn size_prior_is_normalised() {
    let c = parse("schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"1\": 0.5, \"8\": 0.505}}}}\n").unwrap();
    let sum: f64 = c.defragmentation.size_prior.values().sum();
    assert!((sum - 1.0).abs() < 1e-12);
}

#[test]
fn parse_errors() {
    assert!(invalid("schemaVersion: 1\nbogus: 1\n").starts_with("parse config.yaml: "));
    assert!(
        invalid("schemaVersion: 1\npolicies: {defragmentation: {enabeld: true}}\n")
            .contains("enabeld")
    );
    assert!(invalid("schemaVersion: 1\nschemaVersion: 1\n").starts_with("parse config.yaml: "));
    assert!(
        invalid("schemaVersion: 1\ndefaultMovable: maybe\n").starts_with("parse config.yaml: ")
    );
    assert!(
        invalid("schemaVersion: 1\nmaxInFlightMigrations: three\n")
            .starts_with("parse config.yaml: ")
    );
    assert!(invalid("- a\n").starts_with("parse config.yaml: "));
}

#[test]
fn every_validation_rule() {
    let cases: &[(&str, &str)] = &[
        ("mode: execute\n", "schemaVersion is required and must be 1"),
        (
            "schemaVersion: 2\n",
            "unsupported schemaVersion 2 (supported: 1)",
        ),
        (
            "schemaVersion: 1\nmode: fast\n",
            "mode must be one of recommend-only, execute, got \"fast\"",
        ),
        (
            "schemaVersion: 1\ndecisionLoopInterval: 500ms\n",
            "decisionLoopInterval must be >= 1s, got 500ms",
        ),
        (
            "schemaVersion: 1\ndecisionLoopInterval: -5m\n",
            "decisionLoopInterval must be >= 1s, got -5m",
        ),
        (
            "schemaVersion: 1\nobservationLoopInterval: soon\n",
            "observationLoopInterval: invalid duration \"soon\"",
        ),
        (
            "schemaVersion: 1\nearlyTickOn: [NodeAdded]\n",
            "earlyTickOn entries must be NodeConditionChange or NodeMaintenanceChange, got \"NodeAdded\"",
        ),
        (
            "schemaVersion: 1\nearlyTickOn: [NodeConditionChange, NodeConditionChange]\n",
            "earlyTickOn lists NodeConditionChange twice",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {fragmentationThreshold: 1.5}}\n",
            "policies.defragmentation.fragmentationThreshold must be in [0, 1], got 1.5",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {aggressiveness: wild}}\n",
            "policies.defragmentation.aggressiveness must be one of conservative, balanced, aggressive, got \"wild\"",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizeLadder: [1, 0]}}}\n",
            "policies.defragmentation.scoring.sizeLadder[1] must be a positive number of GPUs, got 0",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizeLadder: [1, 4, 2]}}}\n",
            "sizeLadder must be strictly ascending without duplicates, got 2 after 4",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizeLadder: [1, 2, 2]}}}\n",
            "sizeLadder must be strictly ascending without duplicates, got 2 after 2",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {demandBlendLambda: -0.1}}}\n",
            "policies.defragmentation.scoring.demandBlendLambda must be in [0, 1], got -0.1",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"08\": 1}}}}\n",
            "sizePrior keys must be positive whole numbers written plainly (like \"8\"), got \"08\"",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"+8\": 1}}}}\n",
            "got \"+8\"",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"8x\": 1}}}}\n",
            "got \"8x\"",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"0\": 1}}}}\n",
            "got \"0\"",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"16\": 1}}}}\n",
            "sizePrior key \"16\" is not a size in sizeLadder [1, 2, 4, 8]",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"8\": -1, \"4\": 2}}}}\n",
            "sizePrior[\"8\"] must be >= 0, got -1",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {sizePrior: {\"8\": 0.5}}}}\n",
            "sizePrior weights must sum to 1 (within 0.01), got 0.5",
        ),
        (
            "schemaVersion: 1\npolicies: {defragmentation: {scoring: {pendingUrgencyTauMinutes: -1}}}\n",
            "policies.defragmentation.scoring.pendingUrgencyTauMinutes must be > 0 (0 means the default 30), got -1",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {aggressiveness: x}}\n",
            "policies.nodeHealth.aggressiveness must be one of conservative, balanced, aggressive, got \"x\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {triggerConditions: [\"Gpu Unhealthy\"]}}\n",
            "policies.nodeHealth.triggerConditions[0] must be a condition type (a Kubernetes qualified name), got \"Gpu Unhealthy\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {triggerConditions: [A, A]}}\n",
            "policies.nodeHealth.triggerConditions lists \"A\" twice",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {healthCooldownFloorMinutes: -5}}\n",
            "policies.nodeHealth.healthCooldownFloorMinutes must be > 0 (0 means the default 5), got -5",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {nodeSuspicionWindowMinutes: -1}}\n",
            "policies.nodeHealth.nodeSuspicionWindowMinutes must be > 0 (0 means the default 30), got -1",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: \" x\", label: {key: a}}]}}}\n",
            "policies.nodeHealth.maintenance.triggers[0].name must be non-empty without leading or trailing spaces, got \" x\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{label: {key: a}}]}}}\n",
            "triggers[0].name must be non-empty",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x}]}}}\n",
            "policies.nodeHealth.maintenance.triggers[0] must set exactly one of condition, label or taint, got 0",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, label: {key: a}, taint: {key: b}}]}}}\n",
            "must set exactly one of condition, label or taint, got 2",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, label: {key: a}}, {name: x, label: {key: b}}]}}}\n",
            "policies.nodeHealth.maintenance.triggers[1].name \"x\" is already used by another trigger; names must be unique",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, label: {key: a}}, {name: y, label: {key: a}}]}}}\n",
            "policies.nodeHealth.maintenance.triggers[1] matches exactly what trigger \"x\" matches; remove one of them",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, condition: {type: Drain, status: yes}}]}}}\n",
            "triggers[0].condition.status must be one of True, False, Unknown, got \"yes\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, condition: {status: \"True\"}}]}}}\n",
            "triggers[0].condition.type must be a Kubernetes qualified name, got \"\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, label: {key: \"a b\"}}]}}}\n",
            "triggers[0].label.key must be a Kubernetes qualified name, got \"a b\"",
        ),
        (
            "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: x, taint: {key: t, effect: Evict}}]}}}\n",
            "triggers[0].taint.effect must be one of NoSchedule, PreferNoSchedule, NoExecute, got \"Evict\"",
        ),
        (
            "schemaVersion: 1\nrecentPlacementCooldownMinutes: -1\n",
            "recentPlacementCooldownMinutes must be > 0 (0 means the default 10), got -1",
        ),
        (
            "schemaVersion: 1\nperWorkloadCooldownMinutes: -1\n",
            "perWorkloadCooldownMinutes must be > 0 (0 means the default 30), got -1",
        ),
        (
            "schemaVersion: 1\nperNodeCooldownMinutes: -1\n",
            "perNodeCooldownMinutes must be > 0 (0 means the default 10), got -1",
        ),
        (
            "schemaVersion: 1\nrecommendationsConfigMapName: Bad_Name\n",
            "recommendationsConfigMapName must be a DNS-1123 subdomain, got \"Bad_Name\"",
        ),
        (
            "schemaVersion: 1\nmaxInFlightMigrations: -3\n",
            "maxInFlightMigrations must be > 0 (0 means the default 3), got -3",
        ),
        (
            "schemaVersion: 1\nmaxMigrationsPerHour: -1\n",
            "maxMigrationsPerHour must be > 0 (0 means the default 10), got -1",
        ),
        (
            "schemaVersion: 1\nemergencyPendingAgeMinutes: -1\n",
            "emergencyPendingAgeMinutes must be > 0 (0 means the default 10), got -1",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [], start: \"01:00\", end: \"02:00\"}]\n",
            "maintenanceWindows[0].days must list at least one of Mon..Sun",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [Sunday], start: \"01:00\", end: \"02:00\"}]\n",
            "maintenanceWindows[0].days must be among Mon, Tue, Wed, Thu, Fri, Sat, Sun, got \"Sunday\"",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [Sat], start: \"1:00\", end: \"02:00\"}]\n",
            "maintenanceWindows[0].start must be a UTC time HH:MM (like \"01:00\"), got \"1:00\"",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [Sat], start: \"01:00\", end: \"24:00\"}]\n",
            "maintenanceWindows[0].end must be a UTC time HH:MM",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [Sat], start: \"23:00\", end: \"01:00\"}]\n",
            "maintenanceWindows[0]: start must come before end (a window cannot cross midnight; split it in two), got 23:00 to 01:00",
        ),
        (
            "schemaVersion: 1\nmaintenanceWindows: [{days: [Sat], start: \"01:00\", end: \"01:00\"}]\n",
            "start must come before end",
        ),
        (
            "schemaVersion: 1\nspotPolicy: {preemptibleLabels: [\"not a label\"]}\n",
            "spotPolicy.preemptibleLabels[0] must be a label key (a Kubernetes qualified name), got \"not a label\"",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {Bad_Name: {backend: b, schedulerVersion: v, configurationID: c}}}\n",
            "scheduling.profiles key \"Bad_Name\" must be a DNS-1123 subdomain (a scheduler name)",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {schedulerVersion: v, configurationID: c}}}\n",
            "scheduling.profiles[\"ome\"].backend is required, non-blank, without surrounding spaces, got \"\"",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {backend: b, schedulerVersion: \" v\", configurationID: c}}}\n",
            "scheduling.profiles[\"ome\"].schedulerVersion is required, non-blank, without surrounding spaces, got \" v\"",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {backend: b, schedulerVersion: v, configurationID: \"  \"}}}\n",
            "scheduling.profiles[\"ome\"].configurationID is required",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {backend: b, schedulerVersion: v, configurationID: c, scoringResources: []}}}\n",
            "scheduling.profiles[\"ome\"].scoringResources must name at least one resource (leave it out for cpu and memory)",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {backend: b, schedulerVersion: v, configurationID: c, scoringResources: [{name: cpu}, {name: cpu, weight: 2}]}}}\n",
            "scheduling.profiles[\"ome\"].scoringResources[1].name \"cpu\" is listed twice",
        ),
        (
            "schemaVersion: 1\nscheduling: {profiles: {ome: {backend: b, schedulerVersion: v, configurationID: c, scoringResources: [{name: cpu, weight: 0}]}}}\n",
            "scheduling.profiles[\"ome\"].scoringResources[0].weight must be 1 to 100, got 0",
        ),
        (
            "schemaVersion: 1\nmigration: {apiVersion: v2}\n",
            "migration.apiVersion must be empty or \"v1\", got \"v2\"",
        ),
        (
            "schemaVersion: 1\nmigration: {acknowledgementTimeout: 2h}\n",
            "migration.acknowledgementTimeout must be <= 1h0m0s, got 2h",
        ),
        (
            "schemaVersion: 1\nmigration: {failureBackoff: -1m}\n",
            "migration.failureBackoff must be > 0s, got -1m",
        ),
    ];
    for (text, want) in cases {
        let got = invalid(text);
        assert!(
            got.contains(want),
            "for {text:?}\n want: {want}\n  got: {got}"
        );
    }
}

#[test]
fn the_first_violation_wins() {
    let got = invalid(
        "schemaVersion: 1\nmode: fast\npolicies: {defragmentation: {fragmentationThreshold: 2}}\n",
    );
    assert!(got.starts_with("mode must be"), "{got}");
}

proptest::proptest! {
    #[test]
    fn arbitrary_documents_never_panic(text in "(schemaVersion: [0-9]\n|mode: [a-z-]{0,8}\n|maintenanceWindows: \\[\\{days: \\[Sat\\], start: \"[0-9:]{0,5}\", end: \"[0-9:]{0,5}\"\\}\\]\n|decisionLoopInterval: [0-9.hms-]{0,6}\n|policies: \\{defragmentation: \\{scoring: \\{sizePrior: \\{\"[0-9+x]{0,3}\": [0-9.-]{1,4}\\}\\}\\}\\}\n){0,6}") {
        let _ = Config::parse(&text);
    }
}

/// A minutes key beyond what a window can mean is refused where the config is read, before
/// any command converts it to a duration (it used to pass and then panic).
#[test]
fn minute_keys_are_bounded() {
    for key in [
        "recentPlacementCooldownMinutes: 9223372036854775807",
        "perWorkloadCooldownMinutes: 9223372036854775807",
        "perNodeCooldownMinutes: 5256001",
        "emergencyPendingAgeMinutes: 9223372036854775807",
        "policies: {nodeHealth: {nodeSuspicionWindowMinutes: 9223372036854775807}}",
        "policies: {nodeHealth: {healthCooldownFloorMinutes: 9223372036854775807}}",
        "policies: {defragmentation: {scoring: {pendingUrgencyTauMinutes: 9223372036854775807}}}",
    ] {
        let e = alfred::config::Config::parse(&format!("schemaVersion: 1\n{key}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("must be at most 5256000 (ten years)"),
            "{key}: {e}"
        );
    }
    let c = alfred::config::Config::parse("schemaVersion: 1\nperNodeCooldownMinutes: 5256000\n");
    assert_eq!(c.unwrap().per_node_cooldown_minutes, 5_256_000);
}

#[test]
fn every_key_of_omes_newest_alfred_loads() {
    let c = parse(include_str!("data/config/ome-newest.yaml")).unwrap();
    let triggers = &c.node_health.maintenance_triggers;
    assert_eq!(triggers.len(), 4);
    assert_eq!(
        triggers[1].matcher,
        TriggerMatcher::Label {
            key: "maintenance.example.com/start-at".into(),
            value: LabelValue::StartTime
        }
    );
    let cordoned: Vec<&str> = triggers
        .iter()
        .filter(|t| t.cordon)
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(cordoned, ["patching-start-time"]);
    assert_eq!(c.early_tick_on, vec![EarlyTick::NodeConditionChange]);
    // What the plugin reads but does not act on is named once each, with the reason.
    let unused: Vec<&[&str]> = c.unused.iter().map(|u| u.keys.as_slice()).collect();
    assert_eq!(
        unused,
        [
            &[
                "omenativeCapabilityLeaseName",
                "omenativeCapabilityLeaseNamespace",
                "omenativeCapabilityMaxStaleness"
            ][..],
            &["tpuSliceMigrationEnabled", "tpuSlicePartitions"][..]
        ]
    );
    assert!(c.unused.iter().all(|u| !u.reason.is_empty()));
    // TPU slice migration off (OME's default) is nothing to report.
    let off = parse("schemaVersion: 1\ntpuSliceMigrationEnabled: false\n").unwrap();
    assert!(off.unused.is_empty());
}

#[test]
fn newer_keys_are_checked_as_omes_alfred_checks_them() {
    let trigger = |body: &str| {
        format!(
            "schemaVersion: 1\npolicies: {{nodeHealth: {{maintenance: {{triggers: [{{name: t, {body}}}]}}}}}}\n"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            trigger("label: {key: example.com/at, value: '1', valueIsStartTime: true}"),
            "policies.nodeHealth.maintenance.triggers[0].label cannot set both value and valueIsStartTime",
        ),
        (
            trigger("label: {key: example.com/at}, cordon: yes-please"),
            "parse config.yaml: ",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {idLabel: example.com/part}\n".into(),
            "tpuSlicePartitions.idLabel must contain exactly one %s",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {idLabel: \"example.com/%s-%s\"}\n".into(),
            "tpuSlicePartitions.idLabel must contain exactly one %s",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {stateLabel: \"example.com/%d-%s\"}\n".into(),
            "tpuSlicePartitions.stateLabel must contain exactly one %s",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {idLabel: \"bad key %s\"}\n".into(),
            "tpuSlicePartitions.idLabel does not form a label key",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {topologyLabel: \"bad key\"}\n".into(),
            "tpuSlicePartitions.topologyLabel must be a label key",
        ),
        (
            "schemaVersion: 1\ntpuSlicePartitions: {healthyState: \"not ok\"}\n".into(),
            "tpuSlicePartitions.healthyState must be a non-empty label value",
        ),
        (
            "schemaVersion: 1\nomenativeCapabilityLeaseName: \"\"\n".into(),
            "omenativeCapabilityLeaseName must be a non-empty DNS-1123 subdomain",
        ),
        (
            "schemaVersion: 1\nomenativeCapabilityLeaseNamespace: Not_A_Namespace\n".into(),
            "omenativeCapabilityLeaseNamespace must be a non-empty namespace name",
        ),
        (
            "schemaVersion: 1\nomenativeCapabilityMaxStaleness: 0s\n".into(),
            "omenativeCapabilityMaxStaleness must be >= 30s, got 0s",
        ),
        (
            "schemaVersion: 1\nomenativeCapabilityMaxStaleness: 29s\n".into(),
            "omenativeCapabilityMaxStaleness must be >= 30s, got 29s",
        ),
    ];
    for (text, want) in cases {
        let got = invalid(&text);
        assert!(got.starts_with(want), "{text}: got {got:?}, want {want:?}");
    }
    let custom = parse(
        "schemaVersion: 1\ntpuSliceMigrationEnabled: true\ntpuSlicePartitions: {topologyLabel: example.com/topo, idLabel: \"example.com/part-%s\", stateLabel: \"example.com/part-%s-st\", healthyState: OK}\n",
    );
    assert!(custom.is_ok(), "{custom:?}");
}

#[test]
fn a_misspelt_key_names_the_closest_known_one() {
    let got = invalid(
        "schemaVersion: 1\npolicies: {nodeHealth: {maintenance: {triggers: [{name: t, label: {key: a.io/b, valueIsStartTme: true}}]}}}\n",
    );
    assert!(
        got.contains("policies.nodeHealth.maintenance.triggers[0].label.valueIsStartTme: unknown field `valueIsStartTme`")
            && got.ends_with("did you mean `valueIsStartTime`?"),
        "{got}"
    );
    assert!(
        invalid("schemaVersion: 1\nmaxInflightMigrations: 3\n")
            .ends_with("did you mean `maxInFlightMigrations`?")
    );
    // Nothing near: no guess.
    assert!(!invalid("schemaVersion: 1\nbogus: 1\n").contains("did you mean"));
}
