//! Opening the source (a [`ListerWatcher`]) of each configured informer:
//! a view of the embedded cluster of a manifests directory (one per
//! directory, shared by every informer of it), or a Kubernetes API server
//! through one shared client. The writer of a directory's embedded cluster
//! is here too ([`Sources::writer_for`]), for the controllers acting on it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cluster::ClusterWriter;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config::{InformerConfig, SourceConfig};
use crate::informer::ListerWatcher;
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::source::manifests::ManifestFilter;

use super::KubeOptions;

/// Opens the sources informer configs name; `kube` sources share one client.
pub struct Sources {
    kube: KubeOptions,
    client: Option<::kube::Client>,
    /// The same cluster and credentials without kube's transparent retries,
    /// for controllers' writes (see [`Sources::kube_write_client`]).
    write_client: Option<::kube::Client>,
    /// The embedded cluster of each manifests directory, by canonical path.
    embedded: HashMap<PathBuf, Arc<EmbeddedCluster>>,
}

impl Sources {
    pub fn new(kube: KubeOptions) -> Self {
        Sources { kube, client: None, write_client: None, embedded: HashMap::new() }
    }

    /// The embedded cluster of a manifests directory, opened (read and
    /// watched) the first time it is asked for.
    pub fn embedded(&mut self, dir: &Path) -> Result<Arc<EmbeddedCluster>, String> {
        let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if let Some(c) = self.embedded.get(&canonical) {
            return Ok(c.clone());
        }
        // Reads the directory now and starts watching it.
        let cluster = EmbeddedCluster::open(dir).map_err(|e| e.to_string())?;
        self.embedded.insert(canonical, cluster.clone());
        Ok(cluster)
    }

    /// The writer of the embedded cluster of `dir`, when an informer of
    /// that directory was opened (or it was opened with
    /// [`Sources::embedded`]).
    pub fn writer_for(&self, dir: &Path) -> Option<Arc<dyn ClusterWriter>> {
        let canonical = std::fs::canonicalize(dir).ok()?;
        self.embedded.get(&canonical).map(EmbeddedCluster::writer)
    }

    /// The Kubernetes client `kube` sources share, once one was opened.
    pub fn kube_client(&self) -> Option<::kube::Client> {
        self.client.clone()
    }

    /// A client of the same cluster for controllers' writes, once one was
    /// opened: without kube's default retries, which send a POST or PATCH
    /// again after a `503` or `504` although the server may have carried it
    /// out (a JSON patch `add` would add twice; client-go retries only when
    /// the server says `Retry-After`). The controller's workqueue retries,
    /// with its backoff and the server's `Retry-After`.
    pub fn kube_write_client(&self) -> Option<::kube::Client> {
        self.write_client.clone()
    }

    /// The shared Kubernetes client, made from the kubeconfig (or the
    /// in-cluster config) the first time it is asked for.
    pub async fn client(&mut self) -> Result<::kube::Client, String> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let config = KubeSource::infer_config(self.kube.kubeconfig.as_deref(), self.kube.context.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        let mut write_config = config.clone();
        write_config.default_retry = false;
        let client = ::kube::Client::try_from(config).map_err(|e| format!("Kubernetes client: {e}"))?;
        let writes = ::kube::Client::try_from(write_config).map_err(|e| format!("Kubernetes client: {e}"))?;
        self.write_client = Some(writes);
        Ok(self.client.insert(client).clone())
    }

    /// Every embedded cluster opened so far, by canonical directory.
    pub fn embedded_clusters(&self) -> &HashMap<PathBuf, Arc<EmbeddedCluster>> {
        &self.embedded
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
                let cluster = self.embedded(&m.dir)?;
                Ok(Arc::new(cluster.view(filter)))
            }
            SourceConfig::Kube(k) => {
                let client = self.client().await?;
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
                    watch_list: k.watch_list,
                    ..KubeSourceOptions::default()
                };
                Ok(Arc::new(KubeSource::discovered(client, &resource, options)))
            }
        }
    }
}
