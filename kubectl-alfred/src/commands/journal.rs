//! `kubectl alfred journal list|show|resolve`: Alfred's dispatch journal, and the removal of a
//! stalled request that can no longer resolve.

use std::io::BufRead;

use alfred::execute::journal::{self, Entry, Journal, Phase};
use alfred::execute::run::Store;
use alfred::migration;
use anyhow::{Result, anyhow, bail};
use clap::Subcommand;

use crate::store::{ClusterStore, PassStore, standing};
use crate::{GlobalArgs, render};

#[derive(Subcommand)]
pub enum JournalCommand {
    /// Every request in the dispatch journal with its phase and reason.
    List,
    /// One request: its entry and the annotation it carries.
    Show { uuid: String },
    /// Remove a stalled request that can no longer resolve, after checking that it cannot and
    /// asking for confirmation; an event records who removed it and why.
    Resolve {
        uuid: String,
        /// Why it is removed (recorded in the event).
        #[arg(long)]
        reason: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

pub async fn run(command: &JournalCommand, global: &GlobalArgs) -> Result<()> {
    let (mut store, s) = standing(global).await?;
    match command {
        JournalCommand::List => {
            if let Some(text) = render::structured(&s.journal, global.output)? {
                return render::emit(&text);
            }
            if s.journal.entries.is_empty() {
                return render::emit("The dispatch journal is empty.\n");
            }
            let lines: Vec<Vec<String>> = s
                .journal
                .entries
                .iter()
                .map(|e| {
                    vec![
                        e.uuid.clone(),
                        e.workload.to_string(),
                        e.component.to_string(),
                        e.instance.to_string(),
                        e.from_node.clone(),
                        render::or_dash(&e.targets.join(",")),
                        e.phase.as_str().into(),
                        render::or_dash(e.reason_str()),
                        e.created_at.to_string(),
                    ]
                })
                .collect();
            let mut text = String::new();
            render::columns(
                &mut text,
                &[
                    "UUID",
                    "WORKLOAD",
                    "COMPONENT",
                    "INSTANCE",
                    "FROM",
                    "TARGETS",
                    "PHASE",
                    "REASON",
                    "CREATED",
                ],
                &lines,
            );
            render::emit(&text)
        }
        JournalCommand::Show { uuid } => {
            let entry = find(&s.journal, uuid)?;
            let text = render::structured(entry, global.output)?
                .unwrap_or(serde_json::to_string_pretty(entry)? + "\n");
            render::emit(&text)
        }
        JournalCommand::Resolve { uuid, reason, yes } => {
            let PassStore::Cluster(store) = &mut store else {
                bail!("resolve writes the live journal; drop -f");
            };
            let entry = find(&s.journal, uuid)?.clone();
            let why = cannot_resolve(store, &entry).await?;
            eprintln!(
                "Request {} for {} instance {} is {} ({}): {why}.",
                entry.uuid,
                entry.workload,
                entry.instance,
                entry.phase.as_str(),
                entry.reason_str()
            );
            if !yes && !confirm("Remove it from the dispatch journal?")? {
                bail!("nothing removed");
            }
            let mut journal = s.journal.clone();
            journal.entries.retain(|e| e.uuid != entry.uuid);
            let doc = store.read_journal().await?;
            let written = store
                .write_journal(&doc.version, &journal.to_json(), &s.breaker.to_json())
                .await?;
            if written.is_none() {
                bail!("the journal changed while resolving; run again");
            }
            let client = &store.client;
            let who = crate::events::whoami(client).await;
            crate::events::record_resolved(client, &entry, &who, reason).await?;
            eprintln!("removed request {} (by {who}: {reason})", entry.uuid);
            Ok(())
        }
    }
}

fn find<'j>(journal: &'j Journal, uuid: &str) -> Result<&'j Entry> {
    journal.find(uuid).ok_or_else(|| {
        anyhow!(
            "no request {uuid} in the dispatch journal; `kubectl alfred journal list` shows them"
        )
    })
}

/// Why the entry can no longer resolve, or an error saying why it still might (the cases of
/// alfred-policies.md "A stalled request can stop Alfred's migrations for good").
async fn cannot_resolve(store: &mut ClusterStore, entry: &Entry) -> Result<String> {
    use journal::EntryReason::*;
    if entry.phase != Phase::Stalled {
        bail!(
            "request {} is {}: only a stalled request can be removed, and this one can still end on its own",
            entry.uuid,
            entry.phase.as_str()
        );
    }
    let reason = entry.reason.ok_or_else(|| {
        anyhow!(
            "request {} is stalled without a reason; the journal entry is malformed",
            entry.uuid
        )
    })?;
    // Which stalls never resolve is the core's rule; this says why, and checks the one that
    // depends on the cluster.
    if !reason.never_resolves() {
        bail!(
            "request {} is stalled with {}, which can still resolve when OME reports its end",
            entry.uuid,
            reason.as_str()
        );
    }
    Ok(match reason {
        OwnerUnavailable | ReplicaUnavailable | ReplicaIdentityChanged => {
            "the object its result would come from is gone or replaced".into()
        }
        MigrationStatusInvalid => "OME reported a status Alfred cannot read".into(),
        AcknowledgementTimeout => {
            let service = store
                .read_service(&entry.workload.namespace, &entry.workload.name, &entry.uuid)
                .await?;
            if service.as_ref().and_then(|s| s.request.as_ref()).is_some() {
                bail!(
                    "request {} is still on InferenceService {}: OME may yet take it; remove the annotation {} first if it must not run",
                    entry.uuid,
                    entry.workload,
                    migration::annotation_key(&entry.uuid)
                );
            }
            "OME never took it and the InferenceService no longer carries it".into()
        }
        _ => "its awaited result can never come".into(),
    })
}

fn confirm(question: &str) -> Result<bool> {
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
