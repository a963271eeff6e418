//! Label and annotation keys of the OME and Alfred contracts.

/// Alfred's per-workload annotations (alfred-reference.md §2).
pub const ALFRED_PREFIX: &str = "alfred.ome.io/";
pub const MOVABLE: &str = "alfred.ome.io/movable";
pub const PRIORITY: &str = "alfred.ome.io/priority";
pub const COOLDOWN_MINUTES: &str = "alfred.ome.io/cooldown-minutes";
pub const SPOT_POLICY: &str = "alfred.ome.io/spot-policy";
pub const TENANT_GROUP: &str = "alfred.ome.io/tenant-group";
pub const OPT_OUT_REASON: &str = "alfred.ome.io/opt-out-reason";
/// On a Node: the maintenance trigger that made Alfred cordon it (never removed by Alfred).
pub const CORDONED_FOR_MAINTENANCE: &str = "alfred.ome.io/cordoned-for-maintenance";
/// A hold (`holdMinutes`): the NoSchedule taint on the node Alfred empties, its value the UID of
/// the waiting pod it is for (which gets the matching toleration), and the node's annotation
/// saying since when.
pub const HELD_FOR: &str = "alfred.ome.io/held-for";
pub const HELD_SINCE: &str = "alfred.ome.io/held-since";

/// OME annotations.
pub const DEPLOYMENT_MODE: &str = "ome.io/deploymentMode";
pub const REVISION_HISTORY_LIMIT: &str = "ome.io/revision-history-limit";
pub const MIGRATION_REQUEST_PREFIX: &str = "ome.io/migration-request-v1-";
pub const ROLLOUT_PAUSED: &str = "ome.io/rollout-paused";

/// Pod labels that join pods to Instances.
pub const LABEL_ISVC: &str = "ome.io/inferenceservice";
pub const LABEL_COMPONENT: &str = "component";
pub const LABEL_MANAGED_BY: &str = "ome.io/managed-by";
/// The value of [`LABEL_MANAGED_BY`] on the pods of an OMENative component.
pub const MANAGED_BY_OMENATIVE: &str = "OMENative";
pub const LABEL_INSTANCE_INDEX: &str = "ome.io/instance-index";
pub const LABEL_RUNNER: &str = "ome.io/runner";
pub const LABEL_POD_ORDINAL: &str = "ome.io/pod-ordinal";
pub const LABEL_REVISION_HASH: &str = "ome.io/revision-hash";

/// Node labels and taints the cluster model reads.
pub const LABEL_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const TAINT_CA_SCALE_DOWN: &str = "ToBeDeletedByClusterAutoscaler";
