//! Events Alfred records (source `alfred`; alfred-reference.md §3.4). Events are best effort:
//! a failure to record one is reported and never stops a pass.

use alfred::execute::events::{WorkloadEvent, event_name};
use alfred::execute::journal::Entry;
use alfred::reasons::EventReason;
use anyhow::{Context as _, Result};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
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
    reason: EventReason,
    message: &str,
) -> Result<()> {
    let now = Time(Timestamp::now());
    let name = event_name(subject.name, reason.as_str(), message);
    let api = Api::<Event>::namespaced(client.clone(), subject.namespace);
    let what = || {
        format!(
            "recording event {reason} on {} {}",
            subject.kind, subject.name
        )
    };
    // The same event again: count it on the existing object, as kubectl's recorder does.
    if let Some(existing) = api.get_opt(&name).await.with_context(what)? {
        let patch = serde_json::json!({
            "count": existing.count.unwrap_or(1) + 1,
            "lastTimestamp": now,
        });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(what)?;
        return Ok(());
    }
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name),
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
    match api.create(&PostParams::default(), &event).await {
        // Another pass recorded it first: theirs counts.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        result => result.map(|_| ()).with_context(what),
    }
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
        EventReason::MigrationRequestResolved,
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

/// What a process recorded lately, so that pass after pass the same event is not written
/// again (Kubernetes' own recorders drop repeats the same way), and each pass writes at most
/// [`EVENTS_PER_PASS`](alfred::execute::events::EVENTS_PER_PASS) of them.
#[derive(Default)]
pub struct Recorder {
    recorded: std::collections::HashMap<(String, String), std::time::Instant>,
}

/// How long an event recorded by this process is not recorded again.
const REPEAT_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

impl Recorder {
    /// Records a pass's events on its InferenceServices; failures are printed.
    pub async fn record_workloads(&mut self, client: &Client, events: Vec<WorkloadEvent>) {
        self.recorded.retain(|_, at| at.elapsed() < REPEAT_AFTER);
        let key = |e: &WorkloadEvent| {
            let name = event_name(&e.name, e.reason.as_str(), &e.message);
            (e.namespace.clone(), name)
        };
        let (now, waiting) =
            alfred::execute::events::to_record(events, |e| self.recorded.contains_key(&key(e)));
        for e in now {
            let subject = Subject {
                api_version: "ome.io/v1beta1",
                kind: "InferenceService",
                namespace: &e.namespace,
                name: &e.name,
            };
            match record(client, &subject, e.warning, e.reason, &e.message).await {
                Ok(()) => {
                    self.recorded.insert(key(&e), std::time::Instant::now());
                }
                Err(err) => eprintln!("warning: {}", crate::failure::describe(&err)),
            }
        }
        if waiting > 0 {
            eprintln!(
                "note: {waiting} event(s) wait for a later pass (at most {} a pass)",
                alfred::execute::events::EVENTS_PER_PASS
            );
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
            eprintln!("warning: {}", crate::failure::describe(&err));
        }
    }
}
