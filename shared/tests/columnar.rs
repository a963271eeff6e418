//! ColumnarV2 (omenative-reference.md §1.7a): the columns decode into the rows DenseV1 lists,
//! and every rule of the form, broken, is an error naming the field.

use alfred::api::InferenceReplicaStatus;
use alfred::api::columnar::{InstanceStatusColumns, MAX_ROWS, parse_index_set};
use alfred::api::replica::{InstancePhase, InstanceStatus, OperationType};
use serde_json::{Value, json};

/// The reference's example: 4 Instances Ready on one revision, Instance 2 surging.
fn example() -> Value {
    json!({
        "members": "0-3",
        "phases": [{"value": "Ready", "indexes": "0-1,3"}, {"value": "Updating", "indexes": "2"}],
        "runningRevisions": [{"value": "chat-engine-7b4c2e19", "indexes": "0-3"}],
        "incarnations": [{"value": 1, "indexes": "0-3"}],
        "podCounts": [{"value": 1, "indexes": "0-3"}],
        "servingPodCounts": [{"value": 1, "indexes": "0-3"}],
        "availablePodCounts": [{"value": 1, "indexes": "0-3"}],
        "admitted": "0-3",
        "entries": [{"index": 2, "operation": {"id": "op-2", "type": "Update", "step": "Surge"}}]
    })
}

fn status(columns: Value) -> InferenceReplicaStatus {
    serde_json::from_value(json!({
        "instanceStatusEncoding": "ColumnarV2",
        "instanceStatusColumns": columns,
    }))
    .unwrap()
}

fn rows(columns: Value) -> Result<Vec<InstanceStatus>, String> {
    status(columns)
        .rows()
        .map(|r| r.into_owned())
        .map_err(|e| e.to_string())
}

#[test]
fn the_reference_example_decodes_into_its_rows() {
    let rows = rows(example()).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    for r in &rows {
        assert_eq!(r.running_revision.as_deref(), Some("chat-engine-7b4c2e19"));
        assert_eq!(
            (r.incarnation, r.pod_count, r.serving_pod_count),
            (Some(1), Some(1), Some(1))
        );
        assert_eq!(r.admitted, Some(true));
        assert_eq!(r.target_revision, None, "members not listed have \"\"");
        assert_eq!(
            r.active_ordinal, None,
            "activeOrdinal 0 is left out as DenseV1 does"
        );
    }
    assert_eq!(rows[2].phase, Some(InstancePhase::Updating));
    assert_eq!(rows[3].phase, Some(InstancePhase::Ready));
    let op = rows[2].operation.as_ref().unwrap();
    assert_eq!(
        (op.type_, op.step.as_deref()),
        (OperationType::Update, Some("Surge"))
    );
    assert!(rows[0].operation.is_none());
}

#[test]
fn encoding_then_decoding_gives_the_rows_back() {
    let mut rows = rows(example()).unwrap();
    rows[1].active_ordinal = Some(1);
    rows[3].admitted = None;
    rows[0].target_revision = Some("chat-engine-00000001".into());
    rows.swap(0, 3); // a stored order other than ascending
    let columns = serde_json::to_value(InstanceStatusColumns::encode(&rows)).unwrap();
    assert!(columns.get("rowOrder").is_some());
    let decoded = self::rows(columns).unwrap();
    assert_eq!(decoded, rows);
}

#[test]
fn dense_rows_are_read_as_stored() {
    let s: InferenceReplicaStatus = serde_json::from_value(json!({
        "instanceStatuses": [{"index": 0, "phase": "Ready"}]
    }))
    .unwrap();
    assert_eq!(s.rows().unwrap().len(), 1);
    let s: InferenceReplicaStatus = serde_json::from_value(json!({
        "instanceStatusEncoding": "DenseV1", "instanceStatuses": [{"index": 4, "phase": "Ready"}]
    }))
    .unwrap();
    assert_eq!(s.rows().unwrap()[0].index, 4);
}

#[test]
fn index_sets_follow_the_grammar() {
    assert_eq!(
        parse_index_set("0-3,5,9-12", MAX_ROWS).unwrap(),
        [(0, 3), (5, 5), (9, 12)]
    );
    assert_eq!(parse_index_set("7", MAX_ROWS).unwrap(), [(7, 7)]);
    for bad in [
        "",
        "0-3,4",
        "3,1",
        "0-0",
        "07",
        "1,1",
        "a",
        "-1",
        "1-",
        "0-3,2-5",
        "1,,2",
        " 1",
        "2147483648",
    ] {
        assert!(
            parse_index_set(bad, MAX_ROWS).is_err(),
            "{bad:?} must be refused"
        );
    }
    // Bounded before expanding: a range of four billion is refused at once.
    let e = parse_index_set("0-2147483646", MAX_ROWS)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 10000"), "{e}");
}

/// Each rule of §1.7a broken in turn: an error naming the field, never a panic.
#[test]
fn every_broken_rule_is_an_error_naming_the_field() {
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = example();
        edit(&mut v);
        v
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "bad members",
            with(&|v| v["members"] = json!("3,1")),
            "members",
        ),
        (
            "empty members",
            with(&|v| v["members"] = json!("")),
            "members",
        ),
        (
            "group names a non-member",
            with(&|v| v["podCounts"][0]["indexes"] = json!("0-4")),
            "podCounts[0].indexes",
        ),
        (
            "member in two groups",
            with(&|v| v["phases"][1]["indexes"] = json!("1-2")),
            "phases[1].indexes",
        ),
        (
            "member in no phase group",
            with(&|v| v["phases"][1]["indexes"] = json!("3")),
            "phases",
        ),
        (
            "unknown phase",
            with(&|v| v["phases"][1]["value"] = json!("Surging")),
            "phases[1].value",
        ),
        (
            "values out of order",
            with(&|v| {
                v["phases"] = json!([{"value": "Updating", "indexes": "2"},
                                     {"value": "Ready", "indexes": "0-1,3"}])
            }),
            "phases[1].value",
        ),
        (
            "empty revision value",
            with(&|v| v["runningRevisions"][0]["value"] = json!("")),
            "runningRevisions[0].value",
        ),
        (
            "zero count value",
            with(&|v| v["servingPodCounts"][0]["value"] = json!(0)),
            "servingPodCounts[0].value",
        ),
        (
            "admitted non-member",
            with(&|v| v["admitted"] = json!("0-5")),
            "admitted",
        ),
        (
            "entries out of order",
            with(&|v| v["entries"] = json!([{"index": 2}, {"index": 1}])),
            "entries[1].index",
        ),
        (
            "entry for a non-member",
            with(&|v| v["entries"] = json!([{"index": 9}])),
            "entries[0].index",
        ),
        (
            "rowOrder not a permutation",
            with(&|v| v["rowOrder"] = json!([0, 1, 2, 2])),
            "rowOrder",
        ),
        (
            "wrong type",
            with(&|v| v["podCounts"] = json!("1")),
            "podCounts",
        ),
        (
            "missing members",
            with(&|v| {
                v.as_object_mut().unwrap().remove("members");
            }),
            "instanceStatusColumns",
        ),
    ];
    for (what, columns, field) in cases {
        let e = rows(columns).expect_err(what);
        assert!(
            e.starts_with(&format!("status.instanceStatusColumns.{field}"))
                || (field == "instanceStatusColumns"
                    && e.starts_with("status.instanceStatusColumns")),
            "{what}: {e}"
        );
    }
}

#[test]
fn the_encoding_and_the_two_forms_must_agree() {
    let read = |v: Value| {
        serde_json::from_value::<InferenceReplicaStatus>(v)
            .unwrap()
            .rows()
            .map(|r| r.len())
            .map_err(|e| e.to_string())
    };
    let e =
        read(json!({"instanceStatusEncoding": "ColumnarV3", "instanceStatusColumns": example()}));
    assert!(
        e.unwrap_err()
            .starts_with("status.instanceStatusEncoding: unknown encoding")
    );
    let e = read(
        json!({"instanceStatusEncoding": "ColumnarV2", "instanceStatusColumns": example(),
                        "instanceStatuses": [{"index": 0}]}),
    );
    assert!(e.unwrap_err().contains("mutually exclusive"));
    let e = read(json!({"instanceStatusEncoding": "ColumnarV2"}));
    assert!(
        e.unwrap_err()
            .starts_with("status.instanceStatusColumns: is missing")
    );
    let e = read(json!({"instanceStatusColumns": example()}));
    assert!(
        e.unwrap_err()
            .contains("instanceStatusEncoding is not ColumnarV2")
    );
}
