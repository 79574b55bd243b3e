//! Opening the source (a [`ListerWatcher`]) of each configured informer:
//! a watched manifests directory, or a Kubernetes API server through one
//! shared client.

use std::sync::Arc;

use crate::config::{InformerConfig, SourceConfig};
use crate::informer::ListerWatcher;
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::source::manifests::{ManifestFilter, ManifestsSource};

use super::KubeOptions;

/// Opens the sources informer configs name; `kube` sources share one client.
pub struct Sources {
    kube: KubeOptions,
    client: Option<::kube::Client>,
}

impl Sources {
    pub fn new(kube: KubeOptions) -> Self {
        Sources { kube, client: None }
    }

    /// Opens the source of one informer.
    pub async fn open(&mut self, cfg: &InformerConfig) -> Result<Arc<dyn ListerWatcher>, String> {
        match &cfg.source {
            SourceConfig::Manifests(m) => {
                let mut filter = ManifestFilter {
                    api_version: m.api_version.clone(),
                    kind: m.kind.clone(),
                    namespace: m.namespace.clone(),
                    label_selector: None,
                };
                if let Some(sel) = &m.label_selector {
                    filter = filter.labels(sel).map_err(|e| e.to_string())?;
                }
                // Reads the directory now and starts watching it.
                let src = ManifestsSource::open(&m.dir, filter).map_err(|e| e.to_string())?;
                Ok(Arc::new(src))
            }
            SourceConfig::Kube(k) => {
                let client = match &self.client {
                    Some(c) => c.clone(),
                    None => {
                        let config =
                            KubeSource::infer_config(self.kube.kubeconfig.as_deref(), self.kube.context.as_deref())
                                .await
                                .map_err(|e| e.to_string())?;
                        let client = ::kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))?;
                        self.client.insert(client).clone()
                    }
                };
                let mut resource = KubeResource {
                    group: k.group.clone(),
                    version: k.version.clone(),
                    kind: k.kind.clone(),
                    plural: None,
                };
                if let Some(p) = &k.plural {
                    resource = resource.with_plural(p.clone());
                }
                let options = KubeSourceOptions {
                    namespace: k.namespace.clone(),
                    label_selector: k.label_selector.clone(),
                    field_selector: k.field_selector.clone(),
                    ..KubeSourceOptions::default()
                };
                Ok(Arc::new(KubeSource::new(client, &resource, options)))
            }
        }
    }
}
