//! `kubectl alfred version`: the plugin's version and, when a cluster is reachable, what Alfred
//! finds there: OME's API group, whether InferenceReplica is served (execute mode and the
//! rollout commands need it), the webhook's configurations, whether the caller may patch
//! InferenceServices (what `migrate` sends), and whether the guard on those writes holds.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;

use crate::store::cluster::read_guard;
use crate::{GlobalArgs, live, render};
use alfred::execute::guard;

/// The longest the cluster is waited on.
const CLUSTER_WAIT: Duration = Duration::from_secs(5);
/// The suffix of the webhook names Alfred's configurations register.
const WEBHOOK_SUFFIX: &str = ".alfred.ome.io";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    plugin: &'static str,
    cluster: Cluster,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
enum Cluster {
    /// `-f` reads a file; no cluster is asked.
    NotRead,
    Unreachable {
        error: String,
    },
    Reachable(Found),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Found {
    /// The versions of `ome.io` the API server serves (empty: OME is not installed).
    ome_versions: Vec<String>,
    inference_replica_served: bool,
    /// `Kind/name` of each webhook configuration with Alfred's webhooks, or why it is unknown.
    webhook_configurations: Answer<Vec<String>>,
    may_patch_inference_services: Answer<bool>,
    /// Whether the migration guard is installed as shipped (`migrate` sends only then).
    migration_guard: Guard,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
enum Guard {
    Holds,
    DoesNotHold { why: String },
}

/// What the cluster answered, or why it could not.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Answer<T> {
    Known(T),
    Unknown(String),
}

pub async fn run(global: &GlobalArgs) -> Result<()> {
    let cluster = match global.file {
        Some(_) => Cluster::NotRead,
        None => match tokio::time::timeout(CLUSTER_WAIT, inspect(global)).await {
            Ok(Ok(found)) => Cluster::Reachable(found),
            Ok(Err(e)) => Cluster::Unreachable {
                error: crate::failure::describe(&e),
            },
            Err(_) => Cluster::Unreachable {
                error: format!("no answer in {} s", CLUSTER_WAIT.as_secs()),
            },
        },
    };
    let report = Report {
        plugin: env!("CARGO_PKG_VERSION"),
        cluster,
    };
    if let Some(text) = render::structured(&report, global.output)? {
        return render::emit(&text);
    }
    render::emit(&text(&report, global)?)
}

async fn inspect(global: &GlobalArgs) -> Result<Found> {
    let client = live::client(global).await?;
    let groups = client.list_api_groups().await?;
    let ome_versions: Vec<String> = groups
        .groups
        .iter()
        .filter(|g| g.name == "ome.io")
        .flat_map(|g| g.versions.iter().map(|v| v.version.clone()))
        .collect();
    let mut inference_replica_served = false;
    for version in &ome_versions {
        let resources = client
            .list_api_group_resources(&format!("ome.io/{version}"))
            .await?;
        inference_replica_served |= resources
            .resources
            .iter()
            .any(|r| r.name == "inferencereplicas");
    }
    Ok(Found {
        ome_versions,
        inference_replica_served,
        webhook_configurations: answer(webhook_configurations(&client).await),
        may_patch_inference_services: answer(may_patch(&client).await),
        migration_guard: match guard::check(&read_guard(&client).await) {
            Ok(()) => Guard::Holds,
            Err(problem) => Guard::DoesNotHold {
                why: problem.to_string(),
            },
        },
    })
}

fn answer<T>(result: Result<T, kube::Error>) -> Answer<T> {
    match result {
        Ok(value) => Answer::Known(value),
        Err(kube::Error::Api(status)) => Answer::Unknown(status.message),
        Err(e) => Answer::Unknown(e.to_string()),
    }
}

async fn webhook_configurations(client: &Client) -> Result<Vec<String>, kube::Error> {
    let mut found = with_alfreds_webhooks::<ValidatingWebhookConfiguration>(client, |c| {
        c.webhooks.iter().flatten().map(|w| &w.name).collect()
    })
    .await?;
    found.extend(
        with_alfreds_webhooks::<MutatingWebhookConfiguration>(client, |c| {
            c.webhooks.iter().flatten().map(|w| &w.name).collect()
        })
        .await?,
    );
    Ok(found)
}

/// `Kind/name` of each configuration of kind `K` that registers one of Alfred's webhooks.
async fn with_alfreds_webhooks<K>(
    client: &Client,
    names: fn(&K) -> Vec<&String>,
) -> Result<Vec<String>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&());
    let list = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(list
        .into_iter()
        .filter(|c| names(c).iter().any(|n| n.ends_with(WEBHOOK_SUFFIX)))
        .map(|c| format!("{kind}/{}", c.meta().name.as_deref().unwrap_or_default()))
        .collect())
}

/// Whether the caller may patch InferenceServices in every namespace (asked of the API server,
/// which knows every authorizer's answer).
async fn may_patch(client: &Client) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some("ome.io".into()),
                resource: Some("inferenceservices".into()),
                verb: Some("patch".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answered = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answered.status.is_some_and(|s| s.allowed))
}

fn text(report: &Report, global: &GlobalArgs) -> Result<String> {
    let mut out = String::new();
    writeln!(out, "kubectl-alfred {}", report.plugin)?;
    let context = global
        .context
        .as_deref()
        .unwrap_or("the kubeconfig's current context");
    match &report.cluster {
        Cluster::NotRead => writeln!(out, "cluster: not read (-f reads a snapshot file)")?,
        Cluster::Unreachable { error } => {
            writeln!(out, "cluster ({context}): not reachable: {error}")?
        }
        Cluster::Reachable(found) => {
            writeln!(out, "cluster ({context}):")?;
            match found.ome_versions.as_slice() {
                [] => writeln!(out, "  OME: not installed (no ome.io API group)")?,
                versions => writeln!(out, "  OME: ome.io {}", versions.join(", "))?,
            }
            writeln!(
                out,
                "  InferenceReplica: {}",
                if found.inference_replica_served {
                    "served (OMENative; execute mode and rollouts can read it)"
                } else {
                    "not served (an OME release before OMENative: moves stay advice)"
                }
            )?;
            match &found.webhook_configurations {
                Answer::Known(c) if c.is_empty() => writeln!(out, "  webhook: none registered")?,
                Answer::Known(c) => writeln!(out, "  webhook: {}", c.join(", "))?,
                Answer::Unknown(why) => writeln!(out, "  webhook: cannot tell ({why})")?,
            }
            match &found.may_patch_inference_services {
                Answer::Known(true) => writeln!(
                    out,
                    "  execute mode: you may patch InferenceServices (migrate can send requests)"
                )?,
                Answer::Known(false) => writeln!(
                    out,
                    "  execute mode: you may not patch InferenceServices (migrate needs manifests/rbac/migrator.yaml)"
                )?,
                Answer::Unknown(why) => writeln!(out, "  execute mode: cannot tell ({why})")?,
            }
            match &found.migration_guard {
                Guard::Holds => writeln!(out, "  migration guard: installed as shipped")?,
                Guard::DoesNotHold { why } => {
                    writeln!(out, "  migration guard: migrate sends nothing: {why}")?
                }
            }
        }
    }
    Ok(out)
}
