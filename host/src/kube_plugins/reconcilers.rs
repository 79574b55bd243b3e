//! `Plugin` resources that are controllers (`spec.controller`): how one is
//! put together. Its caches are named as the plugin asked (`store`), its
//! writes are checked by a guard confined to the plugin's own namespace and
//! to the write rules its `TenantPolicy` allowed, and are sent to the API
//! server by the replica's [`KubeWriter`].
//!
//! This module owns that assembly only. Which informers exist, and when a
//! controller starts, is swapped or stops, is [`super::controller`]'s.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::ClusterWriter;
use crate::controller::{
    ControllerError, ControllerOptions, ControllerRunner, GuardConfig, Mapping, NamespaceScope, Secondary, WriteGuard,
};
use crate::informer::{Object, SharedIndexInformer};
use crate::plugin::{LogSink, PluginRuntime, PluginSpec as RuntimeSpec};

use super::crd::MappedBy;
use super::policy::{ControllerSettings, Effective};

/// How long one write may take, waiting for its token included.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one controller is made of, besides its component.
pub(super) struct Assembly<'a> {
    /// Its registry-unique name: log label, metrics label, field manager.
    pub name: &'a str,
    /// Its namespace: its tenant, and the only one it may write in.
    pub namespace: &'a str,
    /// `kind` of the primary objects (owner references name it).
    pub primary_kind: &'a str,
    pub effective: &'a Effective,
    pub settings: &'a ControllerSettings,
    /// The informer of `watch`, then one per `settings.watches`, in order.
    pub informers: Vec<SharedIndexInformer>,
    /// Where the plugin's log lines go.
    pub log_sink: Option<LogSink>,
    /// Where the component came from, for messages.
    pub origin: &'a str,
    /// The write bucket the tenant's controllers share, if its policy
    /// sets a rate for them.
    pub tenant_bucket: Option<Arc<crate::workqueue::TokenBucket>>,
}

/// Loads the controller in `bytes` and registers its handlers; its workers
/// are not started ([`ControllerRunner::run`], or `take_over` for a swap).
/// Compiles: call it on a blocking thread inside the runtime.
pub(super) fn prepare(
    runtime: &PluginRuntime,
    writer: Arc<dyn ClusterWriter>,
    a: Assembly<'_>,
    bytes: &[u8],
) -> Result<ControllerRunner, ControllerError> {
    let s = a.settings;
    let mut spec = RuntimeSpec::new(a.name, PathBuf::from(a.origin));
    spec.tenant = Some(a.namespace.to_string());
    spec.config_json = a.effective.config_json.clone();
    spec.limits = a.effective.limits.clone();
    spec.grants = a.effective.grants.clone();
    spec.log_sink = a.log_sink;

    let stores = std::iter::once(s.store.clone()).chain(s.watches.iter().map(|w| w.store.clone()));
    let informers: HashMap<String, SharedIndexInformer> = stores.zip(a.informers).collect();
    let options = ControllerOptions {
        secondaries: s
            .watches
            .iter()
            .map(|w| Secondary {
                informer: w.store.clone(),
                mapping: match w.mapped_by {
                    MappedBy::Owner => Mapping::Owner,
                    MappedBy::Label => Mapping::Label(w.label.clone().unwrap_or_default()),
                    MappedBy::Map => Mapping::Plugin,
                },
            })
            .collect(),
        max_concurrent_reconciles: s.max_concurrent_reconciles,
        max_pending: a.effective.max_pending,
        // The Plugin's `resync` (none when absent), not the shared
        // informers' check period.
        resync: Some(a.effective.resync),
        ..ControllerOptions::new(s.store.clone(), a.primary_kind)
    };
    let guard = GuardConfig {
        tenant: Some(a.namespace.to_string()),
        rules: s.rules.clone(),
        scope: Some(NamespaceScope { namespaces: vec![a.namespace.to_string()], cluster_scoped: false }),
        qps: f64::from(s.qps),
        // client-go's 5/10: a burst of twice the rate.
        burst: 2 * s.qps as usize,
        timeout: WRITE_TIMEOUT,
        dry_run: s.dry_run,
        impersonate: s.impersonate.clone(),
        ..GuardConfig::new(a.name)
    };
    // The informers are the namespace's already; the filter keeps a
    // cluster-scoped watch from showing the plugin other tenants' objects.
    let namespace = a.namespace.to_string();
    let visibility: crate::plugin::Visibility = Arc::new(move |o: &Object| o.namespace() == Some(namespace.as_str()));
    ControllerRunner::prepare_bytes(
        runtime,
        spec,
        bytes,
        &informers,
        Arc::new(match (a.tenant_bucket, s.tenant_qps) {
            (Some(bucket), Some(qps)) => WriteGuard::new(guard, writer).with_tenant_bucket(bucket, f64::from(qps)),
            _ => WriteGuard::new(guard, writer),
        }),
        options,
        Some(visibility),
    )
}
