//! `migrate --enable-maintenance-cordon`: each node the pass chose is read again, and cordoned
//! with one merge patch under its resourceVersion when `alfred::execute::cordon` still says so.
//! Failures are reported and never stop the pass; the next pass tries again.

use alfred::config::Config;
use alfred::decision::MaintenanceCordon;
use alfred::execute::cordon::{self, CordonStep};
use alfred::reasons::EventReason;
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::events::{Subject, record};

pub async fn cordon_for_maintenance(
    client: &Client,
    config: &Config,
    cordons: &[MaintenanceCordon],
) {
    for planned in cordons {
        match cordon_one(client, config, planned).await {
            Ok(None) => {}
            Ok(Some(rule)) => eprintln!(
                "cordoned node {} for maintenance trigger {rule:?}; Alfred does not uncordon it",
                planned.node
            ),
            Err(e) => eprintln!(
                "warning: node {} not cordoned: {}; the next pass tries again",
                planned.node,
                crate::failure::describe(&e)
            ),
        }
    }
}

/// The rule the node was cordoned for, or None when the read says not to.
async fn cordon_one(
    client: &Client,
    config: &Config,
    planned: &MaintenanceCordon,
) -> Result<Option<String>> {
    let api = Api::<Node>::all(client.clone());
    let what = format!("node {}", planned.node);
    let (node, resource_version) = crate::live::read_again(&api, &planned.node, &what).await?;
    let now = Timestamp::now();
    let (patch, rule) = match cordon::step(planned, node.as_ref(), &resource_version, config, now) {
        CordonStep::Skip(why) => {
            eprintln!("note: node {} not cordoned: {why}", planned.node);
            return Ok(None);
        }
        CordonStep::Write { patch, rule } => (patch, rule),
    };
    api.patch(
        &planned.node,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .with_context(|| format!("cordoning node {}", planned.node))?;
    let subject = Subject {
        api_version: "v1",
        kind: "Node",
        namespace: "default",
        name: &planned.node,
    };
    let message = cordon::event_message(&planned.node, &rule);
    if let Err(e) = record(
        client,
        &subject,
        false,
        EventReason::NodeCordonedForMaintenance,
        &message,
    )
    .await
    {
        eprintln!("warning: {}", crate::failure::describe(&e));
    }
    Ok(Some(rule))
}
