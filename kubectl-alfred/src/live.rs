//! Reading the live cluster: one list per kind, nodes and pods in protobuf, fed through the same
//! loader as snapshot files, so a malformed object is reported by name and field path.

use alfred::snapshot::{Snapshot, SnapshotError, SnapshotInfo, protobuf};
use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Client, Config};
use serde::Deserialize;

use crate::GlobalArgs;
use crate::failure;
use crate::progress::Progress;

/// Objects per list page.
pub const PAGE_SIZE: u32 = 500;

/// One kind the product reads and where it is listed. A missing kind (404: its CRD is not
/// installed) is an error for the required kinds; the others are recorded in the snapshot as
/// unserved, which the commands note once.
pub struct Kind {
    pub what: &'static str,
    /// Its kind as objects name it (`Node`), which a List's items do not carry.
    pub name: &'static str,
    pub path: &'static str,
    pub required: bool,
    /// Asked for in protobuf, which the API server encodes about twice as fast as JSON: the
    /// large core kinds, which the model reads in protobuf too.
    protobuf: bool,
}

const fn kind(what: &'static str, name: &'static str, path: &'static str, required: bool) -> Kind {
    Kind {
        what,
        name,
        path,
        required,
        protobuf: false,
    }
}

const fn in_protobuf(kind: Kind) -> Kind {
    Kind {
        protobuf: true,
        ..kind
    }
}

pub const INSTALL_HINT: &str = "is OME installed, and is this the right cluster (--context)? kubectl-alfred reads OME's objects; OME's own CRDs come with OME";

pub const KINDS: &[Kind] = &[
    in_protobuf(kind("nodes", "Node", "/api/v1/nodes", true)),
    in_protobuf(kind("pods", "Pod", "/api/v1/pods", true)),
    kind(
        "controllerrevisions.apps",
        "ControllerRevision",
        "/apis/apps/v1/controllerrevisions",
        true,
    ),
    kind(
        "persistentvolumes",
        "PersistentVolume",
        "/api/v1/persistentvolumes",
        true,
    ),
    kind(
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        "/api/v1/persistentvolumeclaims",
        true,
    ),
    kind(
        "inferenceservices.ome.io",
        "InferenceService",
        "/apis/ome.io/v1beta1/inferenceservices",
        true,
    ),
    // OME releases before OMENative do not serve it.
    kind(
        alfred::snapshot::INFERENCE_REPLICAS,
        "InferenceReplica",
        "/apis/ome.io/v1beta1/inferencereplicas",
        false,
    ),
    kind(
        "servingruntimes.ome.io",
        "ServingRuntime",
        "/apis/ome.io/v1beta1/servingruntimes",
        false,
    ),
    kind(
        "clusterservingruntimes.ome.io",
        "ClusterServingRuntime",
        "/apis/ome.io/v1beta1/clusterservingruntimes",
        false,
    ),
    kind(
        "basemodels.ome.io",
        "BaseModel",
        "/apis/ome.io/v1beta1/basemodels",
        false,
    ),
    kind(
        "clusterbasemodels.ome.io",
        "ClusterBaseModel",
        "/apis/ome.io/v1beta1/clusterbasemodels",
        false,
    ),
];

pub const CONFIG_MAPS: Kind = kind("configmaps", "ConfigMap", "/api/v1/configmaps", true);

/// `--request-timeout`: how long one request may take; None waits without limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<std::time::Duration>);

impl Default for RequestTimeout {
    fn default() -> Self {
        RequestTimeout(Some(std::time::Duration::from_secs(30)))
    }
}

impl RequestTimeout {
    /// kubectl's forms: a duration with its unit (`30s`, `2m`), whole seconds (`45`), or `0`
    /// for no limit.
    pub fn parse(text: &str) -> Result<RequestTimeout, String> {
        let seconds = text.parse::<u64>().map(std::time::Duration::from_secs);
        let duration = match seconds {
            Ok(d) => d,
            Err(_) => alfred::kubernetes::duration::parse_go_duration(text)
                .map_err(|e| e.to_string())?
                .try_into()
                .map_err(|_| {
                    format!("{text:?} is negative; give a length such as 30s, or 0 for no limit")
                })?,
        };
        Ok(RequestTimeout((!duration.is_zero()).then_some(duration)))
    }

    /// Runs one request, answer and all, within the limit; past it, the sentence says what
    /// and how long. The request's own answer is left to the caller.
    pub async fn within<T>(
        self,
        action: &str,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, failure::CallFailed> {
        match self.0 {
            Some(limit) => tokio::time::timeout(limit, request)
                .await
                .map_err(|_| failure::timed_out(action, limit)),
            None => Ok(request.await),
        }
    }
}

pub async fn client(args: &GlobalArgs) -> Result<Client> {
    Client::try_from(config(args).await?).context("creating the Kubernetes client")
}

/// How to reach the API server: `--kubeconfig`/`--context`, else `KUBECONFIG` or
/// `~/.kube/config`, else the pod's service account (in the cluster).
pub async fn config(args: &GlobalArgs) -> Result<Config> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match (&args.kubeconfig, &args.context) {
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
    // A stalled connection ends the request instead of hanging the command.
    let limit = args.request_timeout.0;
    config.connect_timeout = limit;
    config.read_timeout = limit;
    config.write_timeout = limit;
    failure::remember_server(&config.cluster_url.to_string(), limit);
    // Named in the API server's audit log and metrics.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("kubectl-alfred/", env!("CARGO_PKG_VERSION"))),
    ));
    Ok(config)
}

/// Reads every kind the product uses: one list per kind per page, whatever the cluster's size
/// beyond the page count. The kinds are fetched concurrently and read in a fixed order.
pub async fn read_snapshot(args: &GlobalArgs) -> Result<Snapshot> {
    let client = client(args).await?;
    let limit = args.request_timeout;
    let captured_at = Timestamp::now();
    let mut requests: Vec<(&'static Kind, Option<String>)> =
        KINDS.iter().map(|k| (k, None)).collect();
    for name in alfred::snapshot::CONFIG_MAP_NAMES {
        requests.push((&CONFIG_MAPS, Some(format!("metadata.name={name}"))));
    }
    let shown = Progress::start("reading the cluster", requests.len());
    let fetches: Vec<_> = requests
        .into_iter()
        .map(|(kind, selector)| {
            let client = client.clone();
            let progress = shown.progress();
            tokio::spawn(async move {
                let pages = list_pages(&client, limit, kind, selector.as_deref(), &progress).await;
                progress.list_done();
                (kind, pages)
            })
        })
        .collect();
    let discovery = {
        let client = client.clone();
        tokio::spawn(async move {
            let found = async { Ok(pod_group_resources(&client).await) };
            limit
                .within("discovering API groups", found)
                .await
                .ok()?
                .ok()?
        })
    };
    let mut snapshot = Snapshot::default();
    let mut unserved = Vec::new();
    for fetch in fetches {
        let (kind, part) = fetch.await.context("a list request stopped")?;
        match part? {
            Some(part) => snapshot.append(part),
            None => unserved.push(kind.what.to_string()),
        }
    }
    drop(shown);
    snapshot.info = Some(SnapshotInfo {
        captured_at,
        source: args.context.clone(),
        pod_group_resources: discovery.await.ok().flatten(),
        unserved,
    });
    Ok(snapshot)
}

/// The nodes alone, as `read_snapshot` reads them (what `migrate --watch` observes between
/// passes for `earlyTickOn`).
pub async fn read_nodes(
    client: &Client,
    args: &GlobalArgs,
) -> Result<Vec<std::sync::Arc<alfred::api::core::Node>>> {
    let shown = Progress::start("reading the nodes", 1);
    let part = list_pages(
        client,
        args.request_timeout,
        &KINDS[0],
        None,
        &shown.progress(),
    )
    .await?;
    Ok(part.map(|s| s.nodes).unwrap_or_default())
}

/// The `podgroups` resources the cluster serves, from one aggregated discovery request
/// (allowed to every authenticated user); None when the server cannot say.
pub async fn pod_group_resources(client: &Client) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct List {
        kind: String,
        #[serde(default)]
        items: Vec<Group>,
    }
    #[derive(Deserialize)]
    struct Group {
        metadata: GroupMeta,
        #[serde(default)]
        versions: Vec<Version>,
    }
    #[derive(Deserialize)]
    struct GroupMeta {
        name: String,
    }
    #[derive(Deserialize)]
    struct Version {
        #[serde(default)]
        resources: Vec<Resource>,
    }
    #[derive(Deserialize)]
    struct Resource {
        resource: String,
    }
    let request = http::Request::get("/apis")
        .header(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .body(Vec::new())
        .ok()?;
    let text = client.request_text(request).await.ok()?;
    let list: List = serde_json::from_str(&text).ok()?;
    if list.kind != "APIGroupDiscoveryList" {
        return None;
    }
    let mut found: Vec<String> = list
        .items
        .iter()
        .filter(|g| {
            g.versions
                .iter()
                .any(|v| v.resources.iter().any(|r| r.resource == "podgroups"))
        })
        .map(|g| format!("podgroups.{}", g.metadata.name))
        .collect();
    found.sort();
    Some(found)
}

/// Every page of one list, each read into the model as it arrives; None when the cluster does
/// not serve an optional kind. Lists come from the API server's watch cache
/// (`resourceVersion=0`): no read of etcd, and at most as old as the cache, well within the 30 s
/// a pass's observation may be (alfred-reference.md, ObservationStale).
async fn list_pages(
    client: &Client,
    limit: RequestTimeout,
    kind: &Kind,
    field_selector: Option<&str>,
    progress: &Progress,
) -> Result<Option<Snapshot>> {
    let mut params = ListParams::default();
    if let Some(selector) = field_selector {
        params = params.fields(selector);
    }
    let mut part = Snapshot::default();
    for page in 1.. {
        let request = list_request(kind, &params)?;
        let listing = format!("listing {}", kind.what);
        let read = match limit
            .within(&listing, read_page(client, request, page))
            .await?
        {
            Ok(read) => read,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                if kind.required {
                    bail!(
                        "the {} API is not installed in this cluster: {INSTALL_HINT}",
                        kind.what
                    );
                }
                return Ok(None);
            }
            Err(e) => return Err(failure::call_failed(&listing, &e).into()),
        };
        let (objects, token) =
            read.map_err(|e| anyhow!("reading {} (page {page}): {e}", kind.what))?;
        part.append(objects);
        progress.page();
        match token {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(Some(part))
}

/// A list request: the first from the watch cache (`resourceVersion=0`), whose answer is the
/// whole list (the cache does not page); `limit` pages it only where the API server reads etcd
/// instead (watch cache off), and later pages follow the continue token.
fn list_request(kind: &Kind, params: &ListParams) -> Result<http::Request<Vec<u8>>> {
    let first = params.continue_token.is_none();
    let params = match first {
        true => params.clone().at("0"),
        false => params.clone().limit(PAGE_SIZE),
    };
    let mut request = kube::core::Request::new(kind.path)
        .list(&params)
        .map_err(|e| anyhow!("building the list of {}: {e}", kind.what))?;
    if first {
        // kube leaves resourceVersion=0 out when a limit is given, so the limit is added here.
        let uri = format!("{}&limit={PAGE_SIZE}", request.uri());
        *request.uri_mut() = uri
            .parse()
            .map_err(|e| anyhow!("building the list of {}: {e}", kind.what))?;
    }
    if kind.protobuf {
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(PROTOBUF_OR_JSON),
        );
    }
    Ok(request)
}

/// What a page reader on a worker thread gave.
fn finished(
    joined: Result<Result<(Snapshot, Option<String>), SnapshotError>, tokio::task::JoinError>,
) -> PageRead {
    match joined {
        Ok(read) => read.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the reader stopped: {e}")),
    }
}

const PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";

/// A page's objects and its continue token, or why the page cannot be read.
type PageRead = Result<(Snapshot, Option<String>), String>;

/// Sends one list request and reads its answer into the model, in whichever encoding the API
/// server chose: protobuf is read piece by piece while it arrives, JSON once whole. Both are
/// read on a worker thread, so this one goes on driving the other requests. A failure's Status
/// becomes `kube::Error::Api`, as kube's own calls report it.
async fn read_page(
    client: &Client,
    request: http::Request<Vec<u8>>,
    page: usize,
) -> Result<PageRead, kube::Error> {
    use http_body_util::BodyExt as _;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let code = response.status();
    let is_protobuf = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with(protobuf::MEDIA_TYPE));
    let mut body = response.into_body();
    if code.is_success() && is_protobuf {
        let (pieces, mut arriving) = tokio::sync::mpsc::channel(64);
        let reader = tokio::task::spawn_blocking(move || {
            let mut objects = Snapshot::default();
            let pieces = std::iter::from_fn(|| arriving.blocking_recv());
            let token = objects.add_protobuf_stream(page, pieces)?;
            Ok((objects, token))
        });
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data()
                && pieces.send(data).await.is_err()
            {
                break; // the reader stopped at an error, which it returns
            }
        }
        drop(pieces);
        return Ok(finished(reader.await));
    }
    let body = Vec::from(body.collect().await?.to_bytes());
    if code.is_success() {
        let text = String::from_utf8(body).map_err(kube::Error::FromUtf8)?;
        let reader = tokio::task::spawn_blocking(move || {
            let mut objects = Snapshot::default();
            let token = objects.add_json_document(page, &text)?;
            Ok((objects, token))
        });
        return Ok(finished(reader.await));
    }
    Err(failed(code, is_protobuf, &body))
}

/// The Status of a failed request, in either encoding; its text when it holds none.
fn failed(code: http::StatusCode, is_protobuf: bool, body: &[u8]) -> kube::Error {
    let status = match is_protobuf {
        true => protobuf::status(body)
            .ok()
            .map(|s| Status::failure(&s.message, &s.reason).with_code(code.as_u16())),
        false => serde_json::from_slice::<Status>(body).ok(),
    };
    let status = status.unwrap_or_else(|| {
        Status::failure(String::from_utf8_lossy(body).trim(), "").with_code(code.as_u16())
    });
    kube::Error::Api(status.boxed())
}

/// An object read again before a write: in the core's types (None when it is gone), with the
/// resourceVersion the write must carry.
pub async fn read_again<K, T>(
    api: &kube::Api<K>,
    name: &str,
    what: &str,
) -> Result<(Option<T>, String)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    T: serde::de::DeserializeOwned,
{
    let live = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {what}"))?;
    let version = live
        .as_ref()
        .and_then(|o| o.meta().resource_version.clone())
        .unwrap_or_default();
    let object = live
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
        .transpose()
        .with_context(|| format!("reading the {what} the API server returned"))?;
    Ok((object, version))
}

#[cfg(test)]
mod tests {
    use super::RequestTimeout;
    use std::time::Duration;

    #[test]
    fn request_timeouts_read_as_kubectl_reads_them() {
        let secs = |s| RequestTimeout(Some(Duration::from_secs(s)));
        assert_eq!(RequestTimeout::parse("30s"), Ok(secs(30)));
        assert_eq!(RequestTimeout::parse("2m"), Ok(secs(120)));
        assert_eq!(RequestTimeout::parse("45"), Ok(secs(45)));
        assert_eq!(RequestTimeout::parse("0"), Ok(RequestTimeout(None)));
        assert_eq!(RequestTimeout::parse("0s"), Ok(RequestTimeout(None)));
        assert!(
            RequestTimeout::parse("soon")
                .unwrap_err()
                .contains("invalid duration")
        );
        assert!(
            RequestTimeout::parse("-5s")
                .unwrap_err()
                .contains("negative")
        );
    }
}
