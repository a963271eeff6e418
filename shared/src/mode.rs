//! Deployment-mode resolution per component (omenative-reference.md §1.2).

use crate::api::component::{ComponentKind, ComponentSpec};
use crate::api::isvc::{InferenceServiceSpec, SpecDeploymentMode};
use crate::api::keys::DEPLOYMENT_MODE;
use crate::api::runtime::RuntimeFields;

crate::named! {
    #[derive(PartialOrd, Ord)]
    pub enum DeploymentMode {
        OmeNative = "OMENative",
        RawDeployment,
        /// LeaderWorkerSet-backed; deprecated.
        MultiNode,
        VirtualDeployment,
    }
}

/// Where a component's mode came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeSource {
    ComponentAnnotation,
    RuntimeAnnotation,
    SpecDeploymentMode,
    LeaderWorker,
    Fallback,
}

/// The mode of one component as OME resolves it: (1) the component's `ome.io/deploymentMode`
/// annotation (the InferenceService's, then the runtime's; unknown values are skipped), (2)
/// `spec.deploymentMode`, (3) `leader`/`worker` on engine or decoder, (4) RawDeployment.
///
/// Alfred reads the InferenceService alone (`runtime: None`), so a component that is OMENative
/// only through its runtime counts as RawDeployment there.
pub fn resolve(
    spec: &InferenceServiceSpec,
    kind: ComponentKind,
    runtime: Option<&RuntimeFields>,
) -> (DeploymentMode, ModeSource) {
    let annotated = |c: Option<&ComponentSpec>| {
        c.and_then(|c| c.annotations.get(DEPLOYMENT_MODE))
            .and_then(|v| DeploymentMode::parse(v))
    };
    if let Some(mode) = annotated(spec.component(kind)) {
        return (mode, ModeSource::ComponentAnnotation);
    }
    if let Some(mode) = annotated(runtime.and_then(|r| r.component(kind))) {
        return (mode, ModeSource::RuntimeAnnotation);
    }
    match spec.deployment_mode {
        Some(SpecDeploymentMode::OmeNative) => {
            return (DeploymentMode::OmeNative, ModeSource::SpecDeploymentMode);
        }
        Some(SpecDeploymentMode::RawDeployment) => {
            return (
                DeploymentMode::RawDeployment,
                ModeSource::SpecDeploymentMode,
            );
        }
        None => {}
    }
    let multi_pod = kind != ComponentKind::Router
        && spec
            .component(kind)
            .is_some_and(ComponentSpec::is_multi_pod);
    if multi_pod {
        return (DeploymentMode::OmeNative, ModeSource::LeaderWorker);
    }
    (DeploymentMode::RawDeployment, ModeSource::Fallback)
}

/// The mode Alfred uses: read from the InferenceService only.
pub fn alfred_mode(spec: &InferenceServiceSpec, kind: ComponentKind) -> DeploymentMode {
    resolve(spec, kind, None).0
}
