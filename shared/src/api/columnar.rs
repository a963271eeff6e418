//! ColumnarV2, the compact form OME may store a large component's Instance rows in
//! (omenative-reference.md §1.7a): `status.instanceStatusEncoding: ColumnarV2` and
//! `status.instanceStatusColumns` instead of the plain list `status.instanceStatuses` (DenseV1).
//! [`InferenceReplicaStatus::rows`] is the one place rows are read, whichever form holds them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::replica::{
    Condition, InferenceReplicaStatus, InstanceOperation, InstancePhase, InstanceStatus,
    LastFailure,
};
use super::schema;

/// The encoding value of the columnar form.
pub const COLUMNAR_V2: &str = "ColumnarV2";
/// The plain list; an absent encoding means the same.
pub const DENSE_V1: &str = "DenseV1";
/// Rows a reader expands at most (OME's own tools refuse more).
pub const MAX_ROWS: usize = 10_000;

/// `status.instanceStatusColumns`. Index sets are strings such as `0-3,5,9-12`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatusColumns {
    /// The Instance indexes that have a row.
    #[schemars(schema_with = "schema::index_set")]
    pub members: String,
    /// The stored order of the rows (a permutation of the members); absent: ascending index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_order: Option<Vec<i32>>,
    /// Every member in exactly one group; the values are phase names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Group<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running_revisions: Vec<Group<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_revisions: Vec<Group<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incarnations: Vec<Group<i64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_counts: Vec<Group<i32>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serving_pod_counts: Vec<Group<i32>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub available_pod_counts: Vec<Group<i32>>,
    /// The admitted members; the others are not admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::index_set")]
    pub admitted: Option<String>,
    /// The members whose activeOrdinal is 1; the others have 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::index_set")]
    pub active_ordinal_one: Option<String>,
    /// The rare per-row records, ascending by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
}

/// The members sharing one value of a column.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Group<T> {
    pub value: T,
    #[schemars(schema_with = "schema::index_set")]
    pub indexes: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub index: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub ready_since: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<InstanceOperation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
}

/// Why the stored rows cannot be read: the field (under `status.`) and what is wrong with it.
/// For Alfred an invalid observation of the component (`OMENativeObservationInvalid`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("status.{field}: {message}")]
pub struct RowsError {
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> RowsError {
    RowsError {
        field: field.into(),
        message: message.into(),
    }
}

impl InferenceReplicaStatus {
    /// The Instance rows, whichever form stores them: the list as it is, or the columns decoded
    /// into the same rows (zero counts, empty revisions and false flags absent, as the list
    /// omits them). A payload that breaks a rule of the form is an error, never a guess.
    pub fn rows(&self) -> Result<Cow<'_, [InstanceStatus]>, RowsError> {
        let encoding = self.instance_status_encoding.as_deref().unwrap_or_default();
        match (encoding, &self.instance_status_columns) {
            ("" | DENSE_V1, None) => {
                check_dense(&self.instance_statuses)?;
                Ok(Cow::Borrowed(&self.instance_statuses))
            }
            ("" | DENSE_V1, Some(_)) => Err(invalid(
                "instanceStatusColumns",
                format!("is set but instanceStatusEncoding is not {COLUMNAR_V2}"),
            )),
            (COLUMNAR_V2, _) if !self.instance_statuses.is_empty() => Err(invalid(
                "instanceStatuses",
                "is set beside instanceStatusColumns; the two forms are mutually exclusive",
            )),
            (COLUMNAR_V2, None) => Err(invalid(
                "instanceStatusColumns",
                format!("is missing although instanceStatusEncoding is {COLUMNAR_V2}"),
            )),
            (COLUMNAR_V2, Some(value)) => {
                let columns: InstanceStatusColumns = serde_path_to_error::deserialize(value)
                    .map_err(|e| {
                        let path = e.path().to_string();
                        let field = match path.as_str() {
                            "." => "instanceStatusColumns".to_string(),
                            p => format!("instanceStatusColumns.{p}"),
                        };
                        invalid(field, e.into_inner().to_string())
                    })?;
                columns.decode().map(Cow::Owned)
            }
            (other, _) => Err(invalid(
                "instanceStatusEncoding",
                format!("unknown encoding {other:?} (known: {DENSE_V1}, {COLUMNAR_V2})"),
            )),
        }
    }
}

/// The rules the columnar form keeps by construction, checked on the plain list: at most
/// [`MAX_ROWS`] rows, each index non-negative and held by one row, no negative count, and an
/// activeOrdinal of 0 or 1.
fn check_dense(rows: &[InstanceStatus]) -> Result<(), RowsError> {
    if rows.len() > MAX_ROWS {
        return Err(invalid(
            "instanceStatuses",
            format!(
                "holds {} rows, more than the {MAX_ROWS} a reader takes",
                rows.len()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let field = |name: &str| format!("instanceStatuses[{i}].{name}");
        if row.index < 0 {
            return Err(invalid(
                field("index"),
                format!("is {}; an Instance index is not negative", row.index),
            ));
        }
        if !seen.insert(row.index) {
            return Err(invalid(
                field("index"),
                format!(
                    "{} is held by an earlier row too; each Instance has one row",
                    row.index
                ),
            ));
        }
        let counts = [
            ("incarnation", row.incarnation),
            ("podCount", row.pod_count.map(i64::from)),
            ("servingPodCount", row.serving_pod_count.map(i64::from)),
            ("availablePodCount", row.available_pod_count.map(i64::from)),
        ];
        if let Some((name, Some(n))) = counts.into_iter().find(|(_, n)| n.is_some_and(|n| n < 0)) {
            return Err(invalid(
                field(name),
                format!("is {n}; a count is not negative"),
            ));
        }
        if let Some(n) = row.active_ordinal.filter(|n| !matches!(n, 0 | 1)) {
            return Err(invalid(
                field("activeOrdinal"),
                format!("is {n}; it is 0 or 1"),
            ));
        }
    }
    Ok(())
}

/// Parses an index set (`0-3,5,9-12`) into its inclusive ranges: each term a decimal index
/// without leading zeros or `first-last` with first < last, terms strictly ascending, disjoint
/// and not adjacent. More than `limit` indexes in all is an error (checked before expanding).
pub fn parse_index_set(text: &str, limit: usize) -> Result<Vec<(i32, i32)>, IndexSetError> {
    fn index(term: &str) -> Result<i32, IndexSetError> {
        let digits = !term.is_empty() && term.bytes().all(|b| b.is_ascii_digit());
        if !digits || (term.len() > 1 && term.starts_with('0')) {
            return Err(IndexSetError::NotAnIndex(term.to_string()));
        }
        term.parse::<i32>()
            .map_err(|_| IndexSetError::TooLarge(term.to_string()))
    }
    if text.is_empty() {
        return Err(IndexSetError::Empty);
    }
    let mut ranges: Vec<(i32, i32)> = Vec::new();
    let mut count = 0usize;
    for term in text.split(',') {
        let (first, last) = match term.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(a)?, index(b)?);
                if a >= b {
                    return Err(IndexSetError::Descending(term.to_string()));
                }
                (a, b)
            }
            None => {
                let i = index(term)?;
                (i, i)
            }
        };
        if let Some(&(_, prev)) = ranges.last()
            && i64::from(first) <= i64::from(prev) + 1
        {
            return Err(IndexSetError::OutOfOrder {
                term: term.to_string(),
                prev,
            });
        }
        count += (last - first) as usize + 1;
        if count > limit {
            return Err(IndexSetError::TooMany { limit });
        }
        ranges.push((first, last));
    }
    Ok(ranges)
}

/// Why an index set is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexSetError {
    #[error("an index set may not be empty")]
    Empty,
    #[error("{0:?} is not an index (a decimal number without leading zeros)")]
    NotAnIndex(String),
    #[error("{0:?} is larger than an Instance index can be")]
    TooLarge(String),
    #[error("range {0:?} must run from a lower to a higher index")]
    Descending(String),
    #[error("{term:?} follows index {prev}: terms must be ascending, disjoint and not adjacent")]
    OutOfOrder { term: String, prev: i32 },
    #[error("names more than {limit} Instances")]
    TooMany { limit: usize },
}

fn expand(ranges: &[(i32, i32)]) -> impl Iterator<Item = i32> + '_ {
    ranges.iter().flat_map(|&(a, b)| a..=b)
}

/// The members of a columnar payload: each index and its row's position (ascending).
struct Members {
    position: BTreeMap<i32, usize>,
}

impl Members {
    /// The row positions an index set names, each checked to be a member.
    fn positions(&self, field: &str, text: &str) -> Result<Vec<usize>, RowsError> {
        let field = format!("instanceStatusColumns.{field}");
        let ranges = parse_index_set(text, MAX_ROWS).map_err(|m| invalid(&field, m.to_string()))?;
        expand(&ranges)
            .map(|i| {
                self.position.get(&i).copied().ok_or_else(|| {
                    invalid(&field, format!("names Instance {i}, which is not a member"))
                })
            })
            .collect()
    }

    fn position_of(&self, field: &str, index: i32) -> Result<usize, RowsError> {
        self.position.get(&index).copied().ok_or_else(|| {
            invalid(
                format!("instanceStatusColumns.{field}"),
                format!("names Instance {index}, which is not a member"),
            )
        })
    }

    /// Sets one column's values on the rows and returns which rows its groups named. Values
    /// must be `valid` and listed in ascending order, and no member may be in two groups.
    fn column<T: PartialOrd + Clone + std::fmt::Debug>(
        &self,
        name: &str,
        groups: &[Group<T>],
        rows: &mut [InstanceStatus],
        valid: impl Fn(&T) -> bool,
        set: impl Fn(&mut InstanceStatus, T),
    ) -> Result<Vec<bool>, RowsError> {
        let mut seen = vec![false; rows.len()];
        for (g, group) in groups.iter().enumerate() {
            let field = format!("{name}[{g}]");
            if !valid(&group.value) {
                return Err(invalid(
                    format!("instanceStatusColumns.{field}.value"),
                    format!("{:?} is not a value this column stores", group.value),
                ));
            }
            if g > 0 && groups[g - 1].value >= group.value {
                return Err(invalid(
                    format!("instanceStatusColumns.{field}.value"),
                    "group values must be listed in ascending order, each once",
                ));
            }
            for p in self.positions(&format!("{field}.indexes"), &group.indexes)? {
                if std::mem::replace(&mut seen[p], true) {
                    return Err(invalid(
                        format!("instanceStatusColumns.{field}.indexes"),
                        format!(
                            "Instance {} is already in another group of {name}",
                            rows[p].index
                        ),
                    ));
                }
                set(&mut rows[p], group.value.clone());
            }
        }
        Ok(seen)
    }
}

impl InstanceStatusColumns {
    /// The rows, in stored order.
    pub fn decode(&self) -> Result<Vec<InstanceStatus>, RowsError> {
        let ranges = parse_index_set(&self.members, MAX_ROWS)
            .map_err(|m| invalid("instanceStatusColumns.members", m.to_string()))?;
        let members = Members {
            position: expand(&ranges).enumerate().map(|(p, i)| (i, p)).collect(),
        };
        let mut rows: Vec<InstanceStatus> = members
            .position
            .keys()
            .map(|&index| InstanceStatus {
                index,
                ..InstanceStatus::default()
            })
            .collect();
        let in_phase = members.column(
            "phases",
            &self.phases,
            &mut rows,
            |v| phase(v).is_some(),
            |r, v| r.phase = phase(&v),
        )?;
        if let Some(p) = in_phase.iter().position(|seen| !seen) {
            return Err(invalid(
                "instanceStatusColumns.phases",
                format!("Instance {} is in no phase group", rows[p].index),
            ));
        }
        let non_empty = |v: &String| !v.is_empty();
        members.column(
            "runningRevisions",
            &self.running_revisions,
            &mut rows,
            non_empty,
            |r, v| r.running_revision = Some(v),
        )?;
        members.column(
            "targetRevisions",
            &self.target_revisions,
            &mut rows,
            non_empty,
            |r, v| r.target_revision = Some(v),
        )?;
        members.column(
            "incarnations",
            &self.incarnations,
            &mut rows,
            |v| *v > 0,
            |r, v| r.incarnation = Some(v),
        )?;
        members.column(
            "podCounts",
            &self.pod_counts,
            &mut rows,
            |v| *v > 0,
            |r, v| r.pod_count = Some(v),
        )?;
        members.column(
            "servingPodCounts",
            &self.serving_pod_counts,
            &mut rows,
            |v| *v > 0,
            |r, v| r.serving_pod_count = Some(v),
        )?;
        members.column(
            "availablePodCounts",
            &self.available_pod_counts,
            &mut rows,
            |v| *v > 0,
            |r, v| r.available_pod_count = Some(v),
        )?;
        if let Some(set) = &self.admitted {
            for p in members.positions("admitted", set)? {
                rows[p].admitted = Some(true);
            }
        }
        if let Some(set) = &self.active_ordinal_one {
            for p in members.positions("activeOrdinalOne", set)? {
                rows[p].active_ordinal = Some(1);
            }
        }
        for (e, entry) in self.entries.iter().enumerate() {
            let field = format!("entries[{e}].index");
            if e > 0 && self.entries[e - 1].index >= entry.index {
                return Err(invalid(
                    format!("instanceStatusColumns.{field}"),
                    "entries must be ascending by index, each Instance at most once",
                ));
            }
            let row = &mut rows[members.position_of(&field, entry.index)?];
            row.conditions = entry.conditions.clone();
            row.ready_since = entry.ready_since.clone();
            row.operation = entry.operation.clone();
            row.last_failure = entry.last_failure.clone();
        }
        let Some(order) = &self.row_order else {
            return Ok(rows);
        };
        let not_a_permutation = || {
            invalid(
                "instanceStatusColumns.rowOrder",
                "must list every member exactly once",
            )
        };
        if order.len() != rows.len() {
            return Err(not_a_permutation());
        }
        let mut slots: Vec<Option<InstanceStatus>> = rows.into_iter().map(Some).collect();
        order
            .iter()
            .map(|i| {
                let p = members.position.get(i).ok_or_else(not_a_permutation)?;
                slots[*p].take().ok_or_else(not_a_permutation)
            })
            .collect()
    }

    /// The columnar form of rows (the reverse of [`Self::decode`]), as OME would store them:
    /// for tests and fixtures that must hold both forms of the same Instances.
    pub fn encode(rows: &[InstanceStatus]) -> InstanceStatusColumns {
        fn set(mut indexes: Vec<i32>) -> String {
            indexes.sort_unstable();
            let mut terms: Vec<String> = Vec::new();
            let mut i = 0;
            while i < indexes.len() {
                let mut j = i;
                while j + 1 < indexes.len() && indexes[j + 1] == indexes[j] + 1 {
                    j += 1;
                }
                terms.push(if i == j {
                    indexes[i].to_string()
                } else {
                    format!("{}-{}", indexes[i], indexes[j])
                });
                i = j + 1;
            }
            terms.join(",")
        }
        fn groups<T: Ord + Clone>(
            rows: &[InstanceStatus],
            value: impl Fn(&InstanceStatus) -> Option<T>,
        ) -> Vec<Group<T>> {
            let mut by_value: BTreeMap<T, Vec<i32>> = BTreeMap::new();
            for r in rows {
                if let Some(v) = value(r) {
                    by_value.entry(v).or_default().push(r.index);
                }
            }
            by_value
                .into_iter()
                .map(|(value, indexes)| Group {
                    value,
                    indexes: set(indexes),
                })
                .collect()
        }
        let positive = |v: Option<i32>| v.filter(|v| *v > 0);
        let non_empty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        let flagged = |keep: &dyn Fn(&InstanceStatus) -> bool| {
            let indexes: Vec<i32> = rows.iter().filter(|r| keep(r)).map(|r| r.index).collect();
            (!indexes.is_empty()).then(|| set(indexes))
        };
        let ascending = rows.windows(2).all(|w| w[0].index < w[1].index);
        let mut entries: Vec<Entry> = rows
            .iter()
            .filter(|r| {
                !r.conditions.is_empty()
                    || r.ready_since.is_some()
                    || r.operation.is_some()
                    || r.last_failure.is_some()
            })
            .map(|r| Entry {
                index: r.index,
                conditions: r.conditions.clone(),
                ready_since: r.ready_since.clone(),
                operation: r.operation.clone(),
                last_failure: r.last_failure.clone(),
            })
            .collect();
        entries.sort_by_key(|e| e.index);
        InstanceStatusColumns {
            members: set(rows.iter().map(|r| r.index).collect()),
            row_order: (!ascending).then(|| rows.iter().map(|r| r.index).collect()),
            phases: groups(rows, |r| r.phase.map(phase_name)),
            running_revisions: groups(rows, |r| non_empty(&r.running_revision)),
            target_revisions: groups(rows, |r| non_empty(&r.target_revision)),
            incarnations: groups(rows, |r| r.incarnation.filter(|v| *v > 0)),
            pod_counts: groups(rows, |r| positive(r.pod_count)),
            serving_pod_counts: groups(rows, |r| positive(r.serving_pod_count)),
            available_pod_counts: groups(rows, |r| positive(r.available_pod_count)),
            admitted: flagged(&|r| r.admitted == Some(true)),
            active_ordinal_one: flagged(&|r| r.active_ordinal == Some(1)),
            entries,
        }
    }
}

fn phase(name: &str) -> Option<InstancePhase> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

fn phase_name(phase: InstancePhase) -> String {
    serde_json::to_value(phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
