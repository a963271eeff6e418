//! Events Alfred records (source `alfred`; alfred-reference.md §3.4). Events are best effort:
//! a failure to record one is reported and never stops a pass.

use alfred::decision::{Outcome, Row};
use alfred::execute::journal::Entry;
use anyhow::{Context as _, Result};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// The object an event is about.
pub struct Subject<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

pub async fn record(
    client: &Client,
    subject: &Subject<'_>,
    warning: bool,
    reason: &str,
    message: &str,
) -> Result<()> {
    let now = Time(Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", subject.name)),
            namespace: Some(subject.namespace.to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(subject.api_version.to_string()),
            kind: Some(subject.kind.to_string()),
            namespace: (subject.kind != "Node").then(|| subject.namespace.to_string()),
            name: Some(subject.name.to_string()),
            ..Default::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
        source: Some(EventSource {
            component: Some("alfred".into()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    Api::<Event>::namespaced(client.clone(), subject.namespace)
        .create(&PostParams::default(), &event)
        .await
        .with_context(|| {
            format!(
                "recording event {reason} on {} {}",
                subject.kind, subject.name
            )
        })?;
    Ok(())
}

/// The user the API server knows the caller as, for the record of a manual action.
pub async fn whoami(client: &Client) -> String {
    let review = SelfSubjectReview::default();
    match Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(r) => r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_else(|| "an unknown user".into()),
        Err(_) => "an unknown user".into(),
    }
}

/// The event of `journal resolve`, on the InferenceService the request was for.
pub async fn record_resolved(client: &Client, entry: &Entry, who: &str, why: &str) -> Result<()> {
    record(
        client,
        &Subject {
            api_version: "ome.io/v1beta1",
            kind: "InferenceService",
            namespace: &entry.workload.namespace,
            name: &entry.workload.name,
        },
        true,
        "MigrationRequestResolved",
        &format!(
            "migration request uuid={} for {}/{} instance {} removed from the dispatch journal by {who} ({} {}): {why}",
            entry.uuid,
            entry.workload,
            entry.component,
            entry.instance,
            entry.phase.as_str(),
            entry.reason_str()
        ),
    )
    .await
}

/// The event of a dispatch row (alfred-reference.md §3.4), or `None` for rows without one.
pub fn dispatch_event(row: &Row) -> Option<(bool, &'static str, String)> {
    let (warning, reason) = match row.outcome {
        Outcome::Withheld => (false, "RecommendationWithheld"),
        Outcome::Submitted => (false, "MigrationSubmitted"),
        Outcome::Acknowledged => (false, "MigrationAcknowledged"),
        Outcome::Completed => (false, "MigrationCompleted"),
        Outcome::Failed => (true, "MigrationFailed"),
        Outcome::Stalled => (true, "MigrationStalled"),
        Outcome::Advisory | Outcome::Rejected => return None,
    };
    let message = format!(
        "{} migration request uuid={} for {}/{} instance {}: {} ({})",
        row.policy.as_str(),
        row.request_uuid.as_deref().unwrap_or_default(),
        row.workload,
        row.component,
        row.instance,
        row.dispatch_status.as_deref().unwrap_or_default(),
        row.dispatch_reason.as_deref().unwrap_or_default()
    );
    Some((warning, reason, message))
}

/// Records the pass's dispatch events on their InferenceServices; failures are printed.
pub async fn record_dispatch(client: &Client, rows: &[Row]) {
    for row in rows {
        let Some((warning, reason, message)) = dispatch_event(row) else {
            continue;
        };
        let Some((namespace, name)) = row.workload.split_once('/') else {
            continue;
        };
        let subject = Subject {
            api_version: "ome.io/v1beta1",
            kind: "InferenceService",
            namespace,
            name,
        };
        if let Err(e) = record(client, &subject, warning, reason, &message).await {
            eprintln!("warning: {e:#}");
        }
    }
}

/// Records node events (namespace `default`, as the reference does); failures are printed.
pub async fn record_nodes(client: &Client, events: &[alfred::decision::record::NodeEvent]) {
    for e in events {
        let subject = Subject {
            api_version: "v1",
            kind: "Node",
            namespace: "default",
            name: &e.node,
        };
        if let Err(err) = record(client, &subject, e.warning, e.reason, &e.message).await {
            eprintln!("warning: {err:#}");
        }
    }
}
