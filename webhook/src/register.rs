//! Self-registration: the webhook writes its own Validating- and MutatingWebhookConfiguration
//! once it can answer, so a failed or unfinished install never leaves a fail-closed
//! configuration pointing at nothing. They are applied server-side (field manager
//! `alfred-webhook`) from the manifest the chart or kustomize mounts, with the serving CA
//! filled in and the webhook's ClusterRole as owner (the garbage collector deletes them with
//! the install), and re-applied every interval (a rotated CA, a deleted configuration).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde::Deserialize as _;
use serde_json::Value;

use crate::metrics::{Event, Metrics};

/// The field manager of what the webhook writes.
pub const MANAGER: &str = "alfred-webhook";

/// The longest one apply of the configurations may take.
const APPLY_DEADLINE: Duration = Duration::from_secs(30);

const KINDS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// Where the configurations come from and what is filled into them.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The configurations' manifest (YAML, one or more documents).
    pub manifest: PathBuf,
    /// The serving CA (PEM), written into every webhook whose `clientConfig.caBundle` is empty.
    pub ca_bundle: Option<PathBuf>,
    /// The ClusterRole that owns the configurations.
    pub owner: Option<String>,
    pub interval: Duration,
}

/// Why the configurations were not applied (the attempt is retried).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("document {document}: not YAML: {error}")]
    NotYaml {
        document: usize,
        error: serde_yaml_ng::Error,
    },
    #[error(
        "document {document}: {api_version} {kind} is not a webhook configuration (admissionregistration.k8s.io/v1 {})",
        KINDS.join(" or ")
    )]
    NotWebhookConfiguration {
        document: usize,
        api_version: Value,
        kind: String,
    },
    #[error("document {document}: {kind} has no metadata.name")]
    NoName { document: usize, kind: String },
    #[error("{kind} {name}: no webhooks")]
    NoWebhooks { kind: String, name: String },
    #[error("{kind} {name}: a webhook has no caBundle and no CA file is given (--ca-bundle-file)")]
    NoCaBundle { kind: String, name: String },
    #[error("no webhook configuration in the manifest")]
    Empty,
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    /// The manifest named, around what is wrong inside it.
    #[error("{}: {error}", path.display())]
    InManifest {
        path: PathBuf,
        error: Box<RegistrationError>,
    },
    #[error("cannot read the owner ClusterRole {name}: {error}")]
    Owner { name: String, error: kube::Error },
    #[error("cannot apply {kind} {name}: {error}")]
    Apply {
        kind: String,
        name: String,
        error: kube::Error,
    },
    #[error("the API server did not answer within {APPLY_DEADLINE:?}")]
    Timeout,
}

/// The configurations of `manifest` ready to apply: each a webhook configuration of
/// `admissionregistration.k8s.io/v1` with a name, every empty caBundle set to `ca` (PEM) and
/// `owner` (apiVersion, kind, name, uid) as the only owner.
pub fn prepare(
    manifest: &str,
    ca: Option<&[u8]>,
    owner: Option<&Value>,
) -> Result<Vec<Value>, RegistrationError> {
    let mut objects = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(manifest).enumerate() {
        let mut object =
            Value::deserialize(document).map_err(|error| RegistrationError::NotYaml {
                document: i + 1,
                error,
            })?;
        if object.is_null() {
            continue;
        }
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        if object["apiVersion"] != "admissionregistration.k8s.io/v1"
            || !KINDS.contains(&kind.as_str())
        {
            return Err(RegistrationError::NotWebhookConfiguration {
                document: i + 1,
                api_version: object["apiVersion"].clone(),
                kind,
            });
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return Err(RegistrationError::NoName {
                document: i + 1,
                kind,
            });
        }
        let Some(webhooks) = object["webhooks"].as_array_mut() else {
            return Err(RegistrationError::NoWebhooks { kind, name });
        };
        for hook in webhooks {
            let client = &mut hook["clientConfig"];
            if client["caBundle"].as_str().unwrap_or_default().is_empty() {
                let ca = ca.ok_or_else(|| RegistrationError::NoCaBundle {
                    kind: kind.clone(),
                    name: name.clone(),
                })?;
                client["caBundle"] = base64::engine::general_purpose::STANDARD.encode(ca).into();
            }
        }
        if let Some(owner) = owner {
            object["metadata"]["ownerReferences"] = Value::Array(vec![owner.clone()]);
        }
        objects.push(object);
    }
    if objects.is_empty() {
        return Err(RegistrationError::Empty);
    }
    Ok(objects)
}

impl Registration {
    /// Applies the configurations once `ready` holds, then every interval until the process
    /// ends. A failed apply is logged and retried (backoff up to the interval); what is
    /// registered stays.
    pub async fn run(self, client: Client, ready: impl Fn() -> bool, metrics: Arc<Metrics>) {
        while !ready() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut retry = Duration::from_secs(1);
        loop {
            // A stalled API server ends the attempt, which is then retried.
            let applied = tokio::time::timeout(APPLY_DEADLINE, self.apply(&client))
                .await
                .unwrap_or(Err(RegistrationError::Timeout));
            match applied {
                Ok(names) => {
                    metrics.event(Event::Registered);
                    tracing::debug!(configurations = ?names, "webhook configurations applied");
                    retry = Duration::from_secs(1);
                    tokio::time::sleep(self.interval).await;
                }
                Err(e) => {
                    metrics.event(Event::RegistrationFailed);
                    tracing::warn!(error = %e, retry_in = ?retry, "registering the webhook configurations failed");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(self.interval);
                }
            }
        }
    }

    async fn apply(&self, client: &Client) -> Result<Vec<String>, RegistrationError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|error| RegistrationError::Read {
                path: path.clone(),
                error,
            })
        };
        let manifest = String::from_utf8(read(&self.manifest)?)
            .map_err(|_| RegistrationError::NotUtf8(self.manifest.clone()))?;
        let ca = self.ca_bundle.as_ref().map(read).transpose()?;
        let owner = match &self.owner {
            None => None,
            Some(name) => {
                let role = Api::<ClusterRole>::all(client.clone())
                    .get(name)
                    .await
                    .map_err(|error| RegistrationError::Owner {
                        name: name.clone(),
                        error,
                    })?;
                Some(serde_json::json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "name": name, "uid": role.metadata.uid,
                }))
            }
        };
        let objects = prepare(&manifest, ca.as_deref(), owner.as_ref()).map_err(|e| {
            RegistrationError::InManifest {
                path: self.manifest.clone(),
                error: Box::new(e),
            }
        })?;
        let mut names = Vec::new();
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
            let api = Api::<DynamicObject>::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
            api.patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|error| RegistrationError::Apply {
                kind: kind.clone(),
                name: name.to_string(),
                error,
            })?;
            names.push(format!("{kind}/{name}"));
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: alfred-webhook}
webhooks:
  - name: a.validate.alfred.ome.io
    clientConfig: {service: {name: alfred-webhook, namespace: alfred-system, path: /validate}}
  - name: b.validate.alfred.ome.io
    clientConfig: {url: https://127.0.0.1:1/validate, caBundle: Zm9v}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: alfred-webhook}
webhooks:
  - name: a.mutate.alfred.ome.io
    clientConfig: {service: {name: alfred-webhook, namespace: alfred-system, path: /mutate}}
";

    #[test]
    fn empty_ca_bundles_are_filled_and_the_owner_set() {
        let owner = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "name": "alfred-webhook", "uid": "u1"});
        let objects = prepare(MANIFEST, Some(b"PEM"), Some(&owner)).unwrap();
        assert_eq!(objects.len(), 2);
        let hooks = &objects[0]["webhooks"];
        assert_eq!(
            hooks[0]["clientConfig"]["caBundle"], "UEVN",
            "base64 of the CA file"
        );
        assert_eq!(
            hooks[1]["clientConfig"]["caBundle"], "Zm9v",
            "a given bundle stays"
        );
        assert_eq!(
            objects[1]["metadata"]["ownerReferences"],
            serde_json::json!([owner])
        );
    }

    #[test]
    fn what_cannot_be_registered_is_said() {
        let error = |manifest: &str, ca: Option<&[u8]>| {
            prepare(manifest, ca, None).unwrap_err().to_string()
        };
        assert_eq!(
            error(MANIFEST, None),
            "ValidatingWebhookConfiguration alfred-webhook: a webhook has no caBundle and no CA file is given (--ca-bundle-file)"
        );
        assert_eq!(
            error(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
                None
            ),
            "document 1: \"v1\" ConfigMap is not a webhook configuration (admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration or MutatingWebhookConfiguration)"
        );
        assert_eq!(
            error(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {}\n",
                None
            ),
            "document 1: MutatingWebhookConfiguration has no metadata.name"
        );
        assert_eq!(error("", None), "no webhook configuration in the manifest");
        assert!(error("a: [", None).starts_with("document 1: not YAML: "));
    }
}
