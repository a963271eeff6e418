//! BaseModel and ClusterBaseModel: OME's own kinds, of which Alfred reads only where a
//! model lives. The CRDs generated from these are minimal copies for tests and the demo.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::schema;

/// The fields both model kinds share.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ModelFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<ModelStorage>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ModelStorage {
    /// For example `hf://org/model`, `oci://...`, or `pvc://<claim>/<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Nodes the model agent downloads to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub node_selector: BTreeMap<String, String>,
}

impl ModelStorage {
    /// The claim name when the model is served from a PersistentVolumeClaim (`pvc://claim/path`).
    pub fn pvc_claim(&self) -> Option<&str> {
        let rest = self.storage_uri.as_deref()?.strip_prefix("pvc://")?;
        let claim = rest.split('/').next().unwrap_or_default();
        (!claim.is_empty()).then_some(claim)
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "BaseModel",
    plural = "basemodels",
    namespaced
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BaseModelSpec {
    #[serde(flatten)]
    pub fields: ModelFields,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ome.io",
    version = "v1beta1",
    kind = "ClusterBaseModel",
    plural = "clusterbasemodels"
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterBaseModelSpec {
    #[serde(flatten)]
    pub fields: ModelFields,
}

/// Characters of a model label's name after `models.ome.io/` (a label name holds at most 63).
const LABEL_NAME_MAX: usize = 49;
const CLUSTER_PART: &str = "clusterbasemodel.";
const NAMESPACED_PART: &str = "basemodel.";
/// A namespace that does not fit keeps this many characters (its hash).
const NAMESPACE_SHARE: usize = 8;

/// The node label OME's model agent sets to `Ready` where a ClusterBaseModel is present, with
/// a long name shortened by OME's rule ([`truncate`]).
pub fn cluster_model_label(name: &str) -> String {
    let max = LABEL_NAME_MAX - CLUSTER_PART.len();
    format!("models.ome.io/{CLUSTER_PART}{}", truncate(name, max))
}

/// The node label OME's model agent sets to `Ready` where a namespaced BaseModel is present:
/// `models.ome.io/<namespace>.basemodel.<name>`. When both do not fit, a long namespace keeps
/// 8 characters (its hash) and the name the rest, each shortened by [`truncate`].
pub fn namespaced_model_label(namespace: &str, name: &str) -> String {
    let available = LABEL_NAME_MAX - NAMESPACED_PART.len() - 1;
    let (namespace, name) = if namespace.len() + name.len() <= available {
        (namespace.to_string(), name.to_string())
    } else {
        let share = namespace.len().min(NAMESPACE_SHARE);
        (
            truncate(namespace, share),
            truncate(name, available - share),
        )
    };
    format!("models.ome.io/{namespace}.{NAMESPACED_PART}{name}")
}

/// OME's shortening of a name to `max` characters: a name that does not fit becomes
/// `<first 8 hex of sha256(name)>-<its last max - 9 characters>`, or the hash alone (cut to
/// `max`) when no suffix fits.
pub fn truncate(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    match max.checked_sub(9).filter(|&n| n > 0) {
        Some(keep) => {
            // Characters, not bytes: a label holds ASCII, but a name must never panic here.
            let chars: Vec<char> = name.chars().collect();
            let suffix: String = chars[chars.len().saturating_sub(keep)..].iter().collect();
            format!("{hash}-{suffix}")
        }
        None => hash.chars().take(max).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_whole() {
        assert_eq!(
            cluster_model_label("llama-3-1-70b-instruct"),
            "models.ome.io/clusterbasemodel.llama-3-1-70b-instruct"
        );
        assert_eq!(
            namespaced_model_label("support", "support-bot-ft"),
            "models.ome.io/support.basemodel.support-bot-ft"
        );
    }

    #[test]
    fn a_39_character_cluster_model_keeps_its_hash_and_last_23_characters() {
        let name = "meta-llama-3-1-405b-instruct-fp8-dynamic";
        let name = &name[..39];
        let label = cluster_model_label(name);
        let short = label
            .strip_prefix("models.ome.io/clusterbasemodel.")
            .unwrap();
        assert_eq!(short.len(), 32);
        let digest = sha2::Sha256::digest(name.as_bytes());
        let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        assert_eq!(short, format!("{hash}-{}", &name[39 - 23..]));
        assert!(label.len() - "models.ome.io/".len() <= 49);
    }

    #[test]
    fn a_long_namespace_becomes_its_hash_and_the_name_takes_the_rest() {
        let namespace = "inference-platform-prod";
        let name = "customer-support-assistant-v2";
        let label = namespaced_model_label(namespace, name);
        let rest = label.strip_prefix("models.ome.io/").unwrap();
        let (ns, model) = rest.split_once(".basemodel.").unwrap();
        let digest = sha2::Sha256::digest(namespace.as_bytes());
        let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        assert_eq!(ns, hash);
        assert_eq!(model, name, "30 characters fit in the 30 left");
        assert!(rest.len() <= 49);
        // A short namespace stays whole and the name is cut to fit beside it.
        let label = namespaced_model_label("ml", &"x".repeat(40));
        let rest = label.strip_prefix("models.ome.io/ml.basemodel.").unwrap();
        assert_eq!(rest.len(), 36);
        assert!(rest.ends_with(&"x".repeat(27)));
    }

    #[test]
    fn no_room_for_a_suffix_leaves_the_hash_cut_to_fit() {
        assert_eq!(truncate("abcdefghijk", 8).len(), 8);
        assert_eq!(truncate("abcdefghijk", 9).len(), 8, "the hash alone");
        assert_eq!(truncate("abcdefghijk", 5).len(), 5);
    }
}
