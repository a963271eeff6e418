//! Our data must be shaped as the API server stores OME's objects: no fixture, golden file,
//! demo object or e2e object may carry a field OME does not persist.

use std::path::{Path, PathBuf};

mod common;

/// Row fields OME computes but never stores (omenative-reference.md §1.7).
const COMPAT_FIELDS: [&str; 3] = ["readyPodCount", "scheduledPodCount", "nodesOccupied"];

/// Where fixtures, golden files, the demo, examples and e2e objects live.
const DATA_DIRS: [&str; 7] = [
    "manifests",
    "tests",
    "shared/tests",
    "shared/examples",
    "kubectl-alfred/tests",
    "webhook/tests",
    "webhook/examples",
];

/// This file names the fields to look for them.
const SELF: &str = "shared/tests/stored_forms.rs";

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            // Build caches and run directories of the e2e suite are not ours.
            if !name.starts_with('.') && name != "target" {
                files(&path, out);
            }
        } else if ["yaml", "yml", "json", "rs", "py"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

#[test]
fn no_fixture_carries_a_field_ome_does_not_persist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    for dir in DATA_DIRS {
        files(&root.join(dir), &mut all);
    }
    assert!(all.len() > 20, "found only {} files", all.len());
    let mut found = Vec::new();
    for path in all {
        let relative = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .to_string_lossy()
            .to_string();
        if relative == SELF {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for field in COMPAT_FIELDS {
            if text.contains(field) {
                found.push(format!("{relative}: {field}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "fields OME does not persist, in data that must look like a real cluster:\n{}",
        found.join("\n")
    );
}

/// Every way a real API server may hold the same Instances gives the same answers: the plain
/// list with or without the compat fields, and the column-wise form (ColumnarV2).
mod forms {
    use super::common;
    use alfred::api::ComponentKind;
    use alfred::api::columnar::InstanceStatusColumns;
    use alfred::api::replica::InstanceStatus;
    use alfred::decision::eligibility::{self, Purpose};
    use alfred::model::observation::Unobservable;
    use alfred::rollout::Change;
    use alfred::rollout::report;
    use common::World;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const CONFIG: &str = "migration: {apiVersion: v1}\n";
    const PHASES: [&str; 5] = ["Ready", "Ready", "Updating", "Failed", "Creating"];
    const REVISIONS: [&str; 3] = ["r1", "r2", ""];

    /// One Instance as generated: its row's fields and whether its pod is ready.
    #[derive(Clone, Debug)]
    struct Gen {
        phase: usize,
        running: usize,
        target: usize,
        pods: i32,
        serving: i32,
        available: i32,
        admitted: bool,
        ordinal_one: bool,
        surging: bool,
        pod_ready: bool,
        node: usize,
        /// Write zero counts and false flags explicitly (a writer without omitempty).
        explicit_zeros: bool,
    }

    fn instance() -> impl Strategy<Value = Gen> {
        (
            (0..5usize, 0..3usize, 0..3usize, 0..3i32, 0..3i32, 0..3i32),
            (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
            (0..3usize, any::<bool>()),
        )
            .prop_map(
                |((phase, running, target, pods, serving, available), flags, (node, zeros))| Gen {
                    phase,
                    running,
                    target,
                    pods,
                    serving,
                    available,
                    admitted: flags.0,
                    ordinal_one: flags.1,
                    surging: flags.2,
                    pod_ready: flags.3,
                    node,
                    explicit_zeros: zeros,
                },
            )
    }

    /// A steady Instance: Ready on r1, one serving pod, admitted.
    fn steady() -> Gen {
        Gen {
            phase: 0,
            running: 0,
            target: 2,
            pods: 1,
            serving: 1,
            available: 1,
            admitted: true,
            ordinal_one: false,
            surging: false,
            pod_ready: true,
            node: 0,
            explicit_zeros: false,
        }
    }

    fn row(index: usize, g: &Gen) -> Value {
        let mut row = json!({"index": index, "phase": PHASES[g.phase], "incarnation": 1});
        let mut put = |key: &str, value: Value, zero: bool| {
            if !zero || g.explicit_zeros {
                row[key] = value;
            }
        };
        put(
            "runningRevision",
            json!(REVISIONS[g.running]),
            g.running == 2,
        );
        put("targetRevision", json!(REVISIONS[g.target]), g.target == 2);
        put("podCount", json!(g.pods), g.pods == 0);
        put("servingPodCount", json!(g.serving), g.serving == 0);
        put("availablePodCount", json!(g.available), g.available == 0);
        put("admitted", json!(g.admitted), !g.admitted);
        put(
            "activeOrdinal",
            json!(i32::from(g.ordinal_one)),
            !g.ordinal_one,
        );
        if g.surging {
            row["operation"] = json!({"id": format!("op-{index}"), "type": "Update",
                "step": "Surge", "targetRevision": "r2"});
            row["readySince"] = json!("2026-09-28T09:00:00Z");
        }
        row
    }

    /// A cluster with one OMENative workload `team/x` whose Instances are `gens`, and a filler
    /// that leaves its pool fragmented. `form` writes the rows as the API server would hold
    /// them: 0 the list with compat fields, 1 the list, 2 ColumnarV2.
    fn world(gens: &[Gen], steady_counts: bool, form: u8) -> World {
        let nodes = ["n1", "n2", "n3"];
        let placements: Vec<(&str, i64)> = gens.iter().map(|g| (nodes[g.node], 1)).collect();
        let mut w = World::new()
            .node("n1", 8)
            .node("n2", 8)
            .node("n3", 8)
            .omenative("team", "fill", &[("n1", 5), ("n2", 3)])
            .omenative("team", "x", &placements);
        for (i, g) in gens.iter().enumerate() {
            let status = if g.pod_ready { "True" } else { "False" };
            w = w.edit("Pod", &format!("x-engine-{i}-default-0"), |p| {
                p["status"]["conditions"] = json!([{"type": "Ready", "status": status},
                    {"type": "ContainersReady", "status": status}]);
            });
        }
        let rows: Vec<Value> = gens.iter().enumerate().map(|(i, g)| row(i, g)).collect();
        w.edit("InferenceReplica", "x-engine", |ir| {
            let status = &mut ir["status"];
            if !steady_counts {
                status["readyReplicas"] = json!(0);
                status["updateRevision"] = json!("r2");
            }
            match form {
                0 => {
                    let with_compat: Vec<Value> = rows
                        .iter()
                        .map(|r| {
                            let mut r = r.clone();
                            // What OME computes but never stores; nothing may read it.
                            r["readyPodCount"] = json!(7);
                            r["scheduledPodCount"] = json!(7);
                            r["nodesOccupied"] = json!(["elsewhere"]);
                            r
                        })
                        .collect();
                    status["instanceStatuses"] = json!(with_compat);
                }
                1 => status["instanceStatuses"] = json!(rows),
                _ => {
                    let typed: Vec<InstanceStatus> = rows
                        .iter()
                        .map(|r| serde_json::from_value(r.clone()).unwrap())
                        .collect();
                    status["instanceStatusEncoding"] = json!("ColumnarV2");
                    status["instanceStatusColumns"] =
                        serde_json::to_value(InstanceStatusColumns::encode(&typed)).unwrap();
                    status.as_object_mut().unwrap().remove("instanceStatuses");
                }
            }
        })
    }

    /// What the commands show: recommend's rows with their reasons, explain's checks for each
    /// Instance of team/x, and rollout plan (of the rollout under way and of an image change).
    fn answers(w: &World) -> String {
        w.with_ctx(CONFIG, |ctx| {
            let decision = alfred::decision::decide(ctx);
            let rows: Vec<Value> = decision
                .recommendations
                .iter()
                .map(|r| json!({"row": r.row, "detail": r.detail}))
                .collect();
            let x = ctx.cluster.workload("team/x").unwrap();
            let c = &ctx.cluster.components[x.components[0]];
            let checks: Vec<String> = c
                .instances
                .iter()
                .map(|&i| {
                    format!(
                        "{:?}",
                        eligibility::all_checks(ctx, i, Purpose::Defragmentation)
                    )
                })
                .collect();
            let plans: Vec<Value> = [None, Some(Change::ImagesOnly)]
                .into_iter()
                .map(|change| {
                    match report::report(ctx, "team/x", Some(ComponentKind::Engine), change) {
                        Ok(r) => serde_json::to_value(r).unwrap(),
                        Err(e) => json!(e.to_string()),
                    }
                })
                .collect();
            serde_json::to_string_pretty(
                &json!({"pools": format!("{:?}", decision.pools), "rows": rows,
                        "checks": checks, "plans": plans}),
            )
            .unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn the_three_stored_forms_give_the_same_answers(
            // Half steady, so movable Instances and planned moves are compared too.
            gens in prop::collection::vec(prop_oneof![Just(steady()), instance()], 1..6),
            steady_counts in any::<bool>(),
        ) {
            let dense = answers(&world(&gens, steady_counts, 1));
            prop_assert_eq!(&answers(&world(&gens, steady_counts, 0)), &dense, "with compat fields");
            prop_assert_eq!(&answers(&world(&gens, steady_counts, 2)), &dense, "ColumnarV2");
        }

        /// A payload that breaks a rule of the form is an invalid observation of the
        /// component, never a guess and never a panic.
        #[test]
        fn a_malformed_columnar_payload_is_an_invalid_observation(
            n in 1..5usize,
            breaker in 0..10usize,
        ) {
            let gens = vec![steady(); n];
            let last = n - 1;
            let w = world(&gens, true, 2).edit("InferenceReplica", "x-engine", |ir| {
                let columns = &mut ir["status"]["instanceStatusColumns"];
                match breaker {
                    0 => columns["members"] = json!(format!("{last},0")),
                    1 => columns["members"] = json!(""),
                    2 => columns["phases"][0]["indexes"] = json!(format!("0-{}", last + 1)),
                    3 => {
                        columns["phases"] = json!([{"value": "Failed", "indexes": "0"},
                            {"value": "Ready", "indexes": format!("0-{last}")}])
                    }
                    4 => columns["phases"] = json!([]),
                    5 => columns["admitted"] = json!("007"),
                    6 => columns["entries"] = json!([{"index": last + 3}]),
                    7 => columns["rowOrder"] = json!([0, 0]),
                    8 => ir["status"]["instanceStatusEncoding"] = json!("ColumnarV9"),
                    _ => ir["status"]["instanceStatuses"] = json!([{"index": 0, "phase": "Ready"}]),
                }
            });
            w.with_ctx(CONFIG, |ctx| {
                let decision = alfred::decision::decide(ctx);
                let x = ctx.cluster.workload("team/x").unwrap();
                let c = &ctx.cluster.components[x.components[0]];
                prop_assert!(
                    matches!(c.unobservable, Some(Unobservable::RowsUnreadable { .. })),
                    "{:?}", c.unobservable
                );
                // No Instance is guessed from the pods' labels.
                prop_assert!(c.instances.is_empty());
                prop_assert!(decision
                    .recommendations
                    .iter()
                    .filter(|r| r.row.workload == "team/x")
                    .all(|r| r.row.advisory_reason.is_some()));
                let e = report::report(ctx, "team/x", Some(ComponentKind::Engine), None)
                    .unwrap_err()
                    .to_string();
                prop_assert!(e.contains("OMENativeObservationInvalid") && e.contains("status."), "{}", e);
                Ok(())
            })?;
        }
    }
}
