//! Reading the live cluster: one paged list (500 a page) per kind, fed through the same loader
//! as snapshot files, so a malformed object is reported by name and field path.

use alfred::snapshot::{Snapshot, SnapshotInfo};
use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Deserialize;

use crate::GlobalArgs;

/// Objects per list page.
pub const PAGE_SIZE: u32 = 500;

/// One kind the product reads, where it is listed, and whether a missing CRD is fatal.
struct Kind {
    what: &'static str,
    path: &'static str,
    /// A missing kind (404) is an error for these, a note for the rest.
    required: bool,
    install_hint: &'static str,
}

const KINDS: &[Kind] = &[
    Kind {
        what: "nodes",
        path: "/api/v1/nodes",
        required: true,
        install_hint: "",
    },
    Kind {
        what: "pods",
        path: "/api/v1/pods",
        required: true,
        install_hint: "",
    },
    Kind {
        what: "persistentvolumes",
        path: "/api/v1/persistentvolumes",
        required: true,
        install_hint: "",
    },
    Kind {
        what: "persistentvolumeclaims",
        path: "/api/v1/persistentvolumeclaims",
        required: true,
        install_hint: "",
    },
    Kind {
        what: "inferenceservices.ome.io",
        path: "/apis/ome.io/v1beta1/inferenceservices",
        required: true,
        install_hint: "install OME, or for a test cluster `kubectl apply -f manifests/crds/`",
    },
    Kind {
        what: "inferencereplicas.ome.io",
        path: "/apis/ome.io/v1beta1/inferencereplicas",
        required: true,
        install_hint: "OMENative needs OME v1.3 or later; upgrade OME, or for a test cluster `kubectl apply -f manifests/crds/`",
    },
    Kind {
        what: "servingruntimes.ome.io",
        path: "/apis/ome.io/v1beta1/servingruntimes",
        required: false,
        install_hint: "",
    },
    Kind {
        what: "clusterservingruntimes.ome.io",
        path: "/apis/ome.io/v1beta1/clusterservingruntimes",
        required: false,
        install_hint: "",
    },
    Kind {
        what: "basemodels.ome.io",
        path: "/apis/ome.io/v1beta1/basemodels",
        required: false,
        install_hint: "",
    },
    Kind {
        what: "clusterbasemodels.ome.io",
        path: "/apis/ome.io/v1beta1/clusterbasemodels",
        required: false,
        install_hint: "",
    },
];

pub async fn client(args: &GlobalArgs) -> Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {path}"))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
                .with_context(|| format!("loading kubeconfig {path}"))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig context")?,
        (None, None) => Config::infer().await.context(
            "no cluster configured: set KUBECONFIG or --kubeconfig, or pass -f FILE to read a snapshot",
        )?,
    };
    Client::try_from(config).context("creating the Kubernetes client")
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default)]
    metadata: Option<ListMetaFields>,
}

#[derive(Deserialize)]
struct ListMetaFields {
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
}

/// Reads every kind the product uses. The number of list calls is one per kind per page,
/// whatever the cluster's size beyond the page count.
pub async fn read_snapshot(args: &GlobalArgs) -> Result<Snapshot> {
    let client = client(args).await?;
    let captured_at = Timestamp::now();
    let mut snapshot = Snapshot::default();
    let mut document = 0;
    for kind in KINDS {
        list_pages(&client, kind, None, &mut snapshot, &mut document).await?;
    }
    for name in alfred::snapshot::CONFIG_MAP_NAMES {
        let selector = format!("metadata.name={name}");
        let kind = Kind {
            what: "configmaps",
            path: "/api/v1/configmaps",
            required: true,
            install_hint: "",
        };
        list_pages(
            &client,
            &kind,
            Some(&selector),
            &mut snapshot,
            &mut document,
        )
        .await?;
    }
    snapshot.info = Some(SnapshotInfo {
        captured_at,
        source: args.context.clone(),
    });
    Ok(snapshot)
}

async fn list_pages(
    client: &Client,
    kind: &Kind,
    field_selector: Option<&str>,
    snapshot: &mut Snapshot,
    document: &mut usize,
) -> Result<()> {
    let mut params = ListParams::default().limit(PAGE_SIZE);
    if let Some(selector) = field_selector {
        params = params.fields(selector);
    }
    let mut page = 1;
    loop {
        let request = kube::core::Request::new(kind.path)
            .list(&params)
            .map_err(|e| anyhow!("building the list of {}: {e}", kind.what))?;
        let text = match client.request_text(request).await {
            Ok(text) => text,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                if kind.required {
                    bail!(
                        "the {} API is not installed in this cluster: {}",
                        kind.what,
                        kind.install_hint
                    );
                }
                eprintln!("note: {} is not installed; reading none", kind.what);
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.code == 403 => bail!(
                "not allowed to list {}: {}; grant list on it (see manifests/rbac/)",
                kind.what,
                status.message
            ),
            Err(e) => return Err(e).with_context(|| format!("listing {}", kind.what)),
        };
        *document += 1;
        snapshot
            .add_json_document(*document, &text)
            .map_err(|e| anyhow!("reading {} (page {page}): {e}", kind.what))?;
        let meta: ListMeta = serde_json::from_str(&text)
            .with_context(|| format!("reading the list metadata of {}", kind.what))?;
        match meta
            .metadata
            .and_then(|m| m.continue_)
            .filter(|c| !c.is_empty())
        {
            Some(token) => {
                params = params.continue_token(&token);
                page += 1;
            }
            None => return Ok(()),
        }
    }
}
