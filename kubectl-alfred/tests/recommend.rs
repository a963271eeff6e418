//! `kubectl alfred recommend|explain|drain` on the demo snapshot, as users run them, with the
//! JSON documents checked against golden files (`UPDATE_GOLDEN=1` rewrites them after a
//! reviewed change).

use std::process::Command;

const DEMO: &str = "manifests/examples/demo-cluster.yaml";
const V1: &str = "manifests/examples/alfred-config-migration-v1.yaml";
const NOW: &str = "2026-09-28T10:15:00Z";

fn alfred(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-alfred"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run kubectl-alfred");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn golden(name: &str, actual: &str) {
    let path = format!("{}/../tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}; run with UPDATE_GOLDEN=1 to create it"));
    assert!(
        expected == actual,
        "{name} differs from the golden file; if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff"
    );
}

#[test]
fn the_demo_passes_match_their_golden_files() {
    for (name, extra) in [
        ("recommend-demo.json", vec![]),
        ("recommend-demo-migration-v1.json", vec!["--config", V1]),
        ("recommend-demo-plan.json", vec!["--config", V1, "--plan"]),
        ("drain-demo.json", vec!["--config", V1]),
    ] {
        let mut args = if name.starts_with("drain") {
            vec!["drain", "h100-03", "h100-05"]
        } else {
            vec!["recommend"]
        };
        args.extend(["-f", DEMO, "--now", NOW, "-o", "json"]);
        args.extend(extra);
        let (code, out, err) = alfred(&args);
        // h100-05 keeps an Instance that opted out: the drain report, then exit 1.
        let expected = if name.starts_with("drain") { 1 } else { 0 };
        assert_eq!(code, Some(expected), "{name}: {err}");
        golden(name, &out);
    }
}

#[test]
fn the_table_explains_the_advice() {
    let (code, out, err) = alfred(&["recommend", "-f", DEMO]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "NVIDIA-H100-80GB-HBM3   0.000   0.545",
        "rows 1-2: must leave h100-03, but cannot move: migration.apiVersion is not v1",
        "row 37: cannot move: the model is on volume claim support/support-models (ReadWriteOnce)",
        "h100-05   Clear",
        "Scheduler: 20 GPUs of 3 pod(s) wait, placed by default-scheduler, whose profile spreads them; had a GPU-packing profile (MostAllocated, GPUs weighed 3x) placed today's GPU pods in the order they were created, 8 would wait: 12 fewer (60%), with no move.",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    let (_, v1, _) = alfred(&["recommend", "-f", DEMO, "--config", V1]);
    assert!(v1.contains("row 1: h100-03 is Unhealthy: move it to h100-04. Alfred runs recommend-only, so the move is advice."), "{v1}");
    // -n shows one namespace's rows; the pools and nodes stay whole.
    let (_, support, _) = alfred(&["recommend", "-f", DEMO, "-n", "support", "-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&support).unwrap();
    let rows = doc["recommendations"].as_array().unwrap();
    assert!(
        !rows.is_empty()
            && rows
                .iter()
                .all(|r| r["workload"].as_str().unwrap().starts_with("support/"))
    );
}

#[test]
fn explain_and_drain_answer_and_refuse_clearly() {
    let (code, out, err) = alfred(&["explain", "research/llama-70b-eval/engine/0", "-f", DEMO]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("movable               FAIL      OMENativeStateIneligible: opted out"),
        "{out}"
    );
    let (code, _, err) = alfred(&["explain", "research", "-f", DEMO]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("names no Instance: use NAMESPACE/NAME[/COMPONENT[/INSTANCE]]"),
        "{err}"
    );
    let (code, _, err) = alfred(&["explain", "chat/nope", "-f", DEMO]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no InferenceService chat/nope"), "{err}");
    // A node that cannot be emptied: the plan, then exit 1.
    let (code, out, err) = alfred(&["drain", "h100-05", "-f", DEMO]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("h100-05: cannot be emptied: 1 of its 2 OME Instances stay"),
        "{out}"
    );
    assert!(err.contains("not every node can be emptied"), "{err}");
    // The same exit code whatever the format; the report is on stdout.
    for format in ["json", "yaml"] {
        let (code, out, _) = alfred(&["drain", "h100-05", "-f", DEMO, "-o", format]);
        assert_eq!(code, Some(1), "-o {format}");
        assert!(out.contains("complete") && out.contains("h100-05"), "{out}");
    }
    let (code, out, _) = alfred(&["drain", "h100-03", "-f", DEMO]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("h100-03: empties of OME Instances (2 to move)"),
        "{out}"
    );
    let (code, _, err) = alfred(&["drain", "nope-1", "-f", DEMO]);
    assert_eq!(code, Some(1));
    assert!(err.contains("node nope-1 is not in the cluster"), "{err}");
    let (code, _, err) = alfred(&["recommend", "--record", "-f", DEMO]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--record writes the live cluster's recommendations ConfigMap; drop -f"),
        "{err}"
    );
}

/// A small cluster where one move frees a node for a waiting 8-GPU pod.
fn consolidation_cluster() -> String {
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{nvidia.com/gpu.product: H100, models.ome.io/clusterbasemodel.m: Ready}}}}\nstatus: {{allocatable: {{nvidia.com/gpu: '8'}}, conditions: [{{type: Ready, status: 'True'}}]}}\n"
        )
    };
    let instance = |name: &str, node: &str, gpus: u32| {
        format!(
            "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {{name: {name}, namespace: team}}\nspec: {{deploymentMode: OMENative, model: {{name: m, kind: ClusterBaseModel}}, engine: {{minReplicas: 1}}}}\n---\n\
             apiVersion: ome.io/v1beta1\nkind: InferenceReplica\nmetadata: {{name: {name}-engine, namespace: team}}\nspec: {{component: engine, parentRef: {{name: {name}}}, replicas: 1, runners: [{{name: default}}]}}\nstatus: {{replicas: 1, readyReplicas: 1, servingReplicas: 1, availableReplicas: 1, updatedReplicas: 1, updatedReadyReplicas: 1, currentRevision: r1, updateRevision: r1, instanceStatuses: [{{index: 0, phase: Ready, runningRevision: r1, podCount: 1, servingPodCount: 1, availablePodCount: 1, admitted: true}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-engine-0-default-0, namespace: team, labels: {{ome.io/inferenceservice: {name}, component: engine, ome.io/instance-index: '0'}}}}\nspec: {{nodeName: {node}, containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '{gpus}'}}}}}}]}}\nstatus: {{phase: Running, conditions: [{{type: Ready, status: 'True'}}]}}\n"
        )
    };
    [
        "apiVersion: ome.io/v1beta1\nkind: ClusterBaseModel\nmetadata: {name: m}\nspec: {storage: {storageUri: 'hf://org/m'}}\n".to_string(),
        node("a"),
        node("b"),
        instance("small", "a", 1),
        instance("big", "b", 7),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: waiting, namespace: team}\nspec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: '8'}}}]}\nstatus: {phase: Pending, conditions: [{type: PodScheduled, status: 'False'}]}\n".to_string(),
    ]
    .join("---\n")
}

#[test]
fn the_plan_shows_its_moves_and_the_trade() {
    let path = format!("{}/consolidation.yaml", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(&path, consolidation_cluster()).unwrap();
    let (code, out, err) = alfred(&["recommend", "--plan", "-f", &path, "--config", V1]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "Consolidation plan: 1 move(s) make 8 more of the 8 pending GPUs placeable (0 -> 8); whole free nodes 0 -> 1",
        "1      team/small   engine      0          1      a      b    a",
        "1       8           ██████████████████████████████   1",
        // Packed, the 7-GPU and the 1-GPU Instance would have shared a node from the start.
        "  Scheduler: 8 GPUs of 1 pod(s) wait, placed by default-scheduler, whose profile spreads them; had a GPU-packing profile (MostAllocated, GPUs weighed 3x) placed today's GPU pods in the order they were created, 0 would wait: 8 fewer (100%), with no move.",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    let (code, json, _) = alfred(&[
        "recommend",
        "--plan",
        "-f",
        &path,
        "--config",
        V1,
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["plan"]["curve"][1]["pendingGpus"], 8);
    assert_eq!(doc["plan"]["steps"][0]["to"][0], "b");
    assert_eq!(doc["schedulerCost"]["avoidedGpus"], 8);
    // A budget of no move keeps the cluster as it is; without --plan it is a usage error.
    let (_, json, _) = alfred(&[
        "recommend",
        "--plan",
        "--max-moves",
        "0",
        "-f",
        &path,
        "--config",
        V1,
        "-o",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["plan"]["steps"].as_array().unwrap().len(), 0);
    let (code, _, _) = alfred(&["recommend", "--max-moves", "1", "-f", &path]);
    assert_eq!(code, Some(2));
}

/// One malformed InferenceReplica row (an operation without the `type` OME's CRD requires, as
/// an older controller or a hand edit can leave it) costs its own component: the snapshot is
/// read, the note names the object and field, that component gets one component-wide row,
/// `explain` says why, and every other workload is decided as before.
#[test]
fn a_malformed_replica_costs_its_component_not_the_snapshot() {
    let demo =
        std::fs::read_to_string(format!("{}/../{DEMO}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let ir = demo
        .find("  name: qwen3-8b-eval-engine\n  namespace: research")
        .unwrap();
    let row = ir
        + demo[ir..]
            .find("  - index: 0\n    incarnation: 1\n")
            .unwrap();
    let broken = format!(
        "{}  - index: 0\n    operation: {{id: op-7, step: Surge}}\n{}",
        &demo[..row],
        &demo[row + "  - index: 0\n".len()..]
    );
    let path = std::env::temp_dir().join(format!("alfred-malformed-{}.yaml", std::process::id()));
    std::fs::write(&path, broken).unwrap();
    let file = path.to_str().unwrap();
    let rows = |source: &str| -> (Vec<serde_json::Value>, String) {
        let (code, out, err) = alfred(&["recommend", "-f", source, "--now", NOW, "-o", "json"]);
        assert_eq!(code, Some(0), "{err}");
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        (doc["recommendations"].as_array().unwrap().clone(), err)
    };
    let (before, _) = rows(DEMO);
    let (after, err) = rows(file);
    assert!(
        err.contains("InferenceReplica research/qwen3-8b-eval-engine cannot be read (field status.instanceStatuses[0].operation: missing field `type`)"),
        "{err}"
    );
    let eval = |r: &&serde_json::Value| r["workload"] == "research/qwen3-8b-eval";
    // Which rows the others get (the simulation budget may fall on other rows of them).
    let others = |rows: &[serde_json::Value]| -> Vec<String> {
        let key = [
            "policy",
            "workload",
            "component",
            "instance",
            "fromNode",
            "reason",
        ];
        rows.iter()
            .filter(|r| !eval(r))
            .map(|r| key.map(|k| r[k].to_string()).join("|"))
            .collect()
    };
    assert_eq!(
        others(&after),
        others(&before),
        "every other workload is decided as before"
    );
    let eval_rows: Vec<&serde_json::Value> = after.iter().filter(eval).collect();
    assert_eq!(eval_rows.len(), 1, "{eval_rows:#?}");
    assert_eq!(eval_rows[0]["instance"], -1);
    assert_eq!(
        eval_rows[0]["advisoryReason"],
        "OMENativeObservationInvalid"
    );
    assert_eq!(eval_rows[0]["fromNode"], "h100-03");
    assert!(eval_rows[0].get("hintTargets").is_none());

    let (code, out, err) = alfred(&[
        "explain",
        "research/qwen3-8b-eval",
        "-f",
        file,
        "--now",
        NOW,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("no Instance can be resolved: InferenceReplica qwen3-8b-eval-engine cannot be read: field status.instanceStatuses[0].operation: missing field `type`"),
        "{out}"
    );
    std::fs::remove_file(&path).ok();
}
