//! The controller of `Plugin` resources: it watches them (and the
//! `TenantPolicy` resources and namespaces that decide what they may have)
//! with the host's own informers, and makes the registry run what they say.
//!
//! This module owns that loop: a `Plugin` created is loaded, one whose
//! component digest changed is hot-swapped (the registry's zero-loss swap),
//! one whose settings changed is loaded again, one deleted or no longer
//! allowed is unloaded; and each gets a status saying so. It owns the
//! informers of the watched resources it starts for plugins (one per
//! namespace and watch, shared, stopped when the last user goes). It does
//! not decide what a plugin may have ([`super::policy`]) or how a component
//! is read ([`super::component`]).
//!
//! Files: `loading` (loading, swapping and preparing what a `Plugin`
//! runs), `watches` (the shared informers of the watched resources),
//! `reports` (what a status says, and writing it).

mod loading;
mod reports;
mod watches;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::cluster::ClusterWriter;
use crate::cluster::kube_writer::KubeWriter;
use crate::controller::ControllerRunner;
use crate::coordination::Coordinator;
use crate::informer::{FnHandler, InformerOptions, NAMESPACE_INDEX, Notification, ObjectRef, SharedIndexInformer};
use crate::metrics::PluginResourcesSnapshot;
use crate::oci::OciPuller;
use crate::plugin::{Limits, LogSink};
use crate::registry::{PluginRegistry, WasmSource};
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::workqueue::{RateLimitingQueue, default_controller_rate_limiter};

use super::component::{self, Fetched};
use super::crd::{GROUP, Plugin, TenantPolicy, VERSION};
use super::policy::{self, Effective, Refusal};
use watches::settings_key;

/// Workers reconciling `Plugin`s, each on a different namespace.
const WORKERS: usize = 4;
/// When a key whose namespace another worker is on is looked at again.
const NAMESPACE_BUSY_RETRY: Duration = Duration::from_millis(200);

/// How the controller runs.
#[derive(Clone)]
pub struct PluginResourcesOptions {
    /// Watch `Plugin`s of this namespace only; `None`: every namespace.
    pub namespace: Option<String>,
    /// This replica's name, written to each status it owns.
    pub identity: String,
    /// Limits of a plugin that neither it nor its policy sets.
    pub defaults: Limits,
    /// A component larger than this is refused.
    pub max_component_bytes: usize,
    /// Every `Plugin` is reconciled again this often (status counters,
    /// components that changed under the same reference).
    pub resync: Duration,
    /// Where the plugins' log lines go; `None`: the host's log.
    pub log_sink: Option<LogSink>,
    /// Pulls `spec.component.oci`; `None`: OCI components are refused.
    pub oci: Option<Arc<OciPuller>>,
    /// The client controllers' writes go through: one without kube's
    /// default retries (see `Sources::kube_write_client`), so one guest
    /// write is one request, and a 429 reaches the guest as `RateLimited`
    /// rather than being sent again up to 15 times. `None`: the client
    /// given to `start`.
    pub write_client: Option<Client>,
}

impl Default for PluginResourcesOptions {
    fn default() -> Self {
        PluginResourcesOptions {
            namespace: None,
            identity: "informer-host".into(),
            defaults: Limits::default(),
            max_component_bytes: 32 << 20,
            resync: Duration::from_secs(30),
            log_sink: None,
            oci: None,
            write_client: None,
        }
    }
}

/// A loaded plugin, as this controller loaded it.
struct Loaded {
    /// Its name in the registry (a handler) or its runner's (a controller).
    registry_name: String,
    /// The settings it was loaded with; others mean a new load.
    settings: String,
    digest: String,
    /// The informers it uses: `watch`'s, then a controller's watches'.
    watches: Vec<String>,
    /// A controller's running workers and handlers; `None` for a handler.
    runner: Option<ControllerRunner>,
}

struct Watch {
    users: usize,
    stop: CancellationToken,
}

/// The running controller. Dropping it does not stop it: cancel the token
/// given to [`PluginResources::start`].
pub struct PluginResources {
    client: Client,
    registry: PluginRegistry,
    options: PluginResourcesOptions,
    /// Sends the writes of every controller this replica runs (one, so
    /// discovery is shared).
    writer: Arc<dyn ClusterWriter>,
    plugins: SharedIndexInformer,
    policies: SharedIndexInformer,
    namespaces: SharedIndexInformer,
    queue: Arc<RateLimitingQueue<String>>,
    loaded: Mutex<HashMap<String, Loaded>>,
    watches: Mutex<HashMap<String, Watch>>,
    /// Namespaces a worker is reconciling a key of.
    busy_namespaces: Mutex<HashSet<String>>,
    /// Plugins loaded but not settled (synced, nothing pending): the
    /// generation and how many times in a row it was found so.
    unsettled: Mutex<HashMap<String, (Option<i64>, u32)>>,
    /// The write bucket each namespace's controllers share, and its rate
    /// (one per tenant namespace that ran a controller: a few hundred bytes).
    tenant_buckets: Mutex<HashMap<String, (u32, Arc<crate::workqueue::TokenBucket>)>>,
    /// Which plugins this replica owns, when replicas share them.
    coordinator: Mutex<Option<Coordinator>>,
    stop: CancellationToken,
    /// Cancelled once the loop has unloaded everything and handed its
    /// leases over.
    finished: CancellationToken,
}

impl PluginResources {
    /// Starts the informers and the reconcile loop; returns at once. This
    /// replica runs every plugin.
    pub fn start(
        client: Client,
        registry: PluginRegistry,
        options: PluginResourcesOptions,
        stop: CancellationToken,
    ) -> Arc<PluginResources> {
        Self::start_coordinated(client, registry, options, None, stop)
    }

    /// Like [`PluginResources::start`], but this replica runs only the
    /// plugins `coordinator` says it owns (its Leases): it loads a plugin
    /// when it gains it and unloads it the moment it loses it. The
    /// coordinator is handed over with the rest at
    /// [`PluginResources::shutdown`]; give it a token of its own, not
    /// `stop`, so its leases are released only after the plugins stopped.
    pub fn start_coordinated(
        client: Client,
        registry: PluginRegistry,
        options: PluginResourcesOptions,
        coordinator: Option<Coordinator>,
        stop: CancellationToken,
    ) -> Arc<PluginResources> {
        let informer = |kind: &str, plural: &str, api_version: &str, namespace: Option<&str>, name: &str| {
            let mut opts = KubeSourceOptions::default();
            if let Some(ns) = namespace {
                opts = opts.namespace(ns);
            }
            let resource = KubeResource::new(api_version, kind).with_plural(plural);
            SharedIndexInformer::new(
                KubeSource::new(client.clone(), &resource, opts),
                // The resync check runs at the Plugins' resync: without it
                // (a zero default) no handler's resync would ever fire, and
                // status counters would never be refreshed.
                InformerOptions { name: name.into(), default_resync_period: options.resync, ..Default::default() },
            )
        };
        let gv = format!("{GROUP}/{VERSION}");
        let this = Arc::new(PluginResources {
            plugins: informer("Plugin", "plugins", &gv, options.namespace.as_deref(), "plugin-resources"),
            policies: informer("TenantPolicy", "tenantpolicies", &gv, None, "tenant-policies"),
            namespaces: informer("Namespace", "namespaces", "v1", None, "namespaces"),
            writer: Arc::new(
                KubeWriter::new(options.write_client.clone().unwrap_or_else(|| client.clone()))
                    .with_reporting_instance(options.identity.clone()),
            ),
            client,
            registry,
            options,
            queue: Arc::new(RateLimitingQueue::new(default_controller_rate_limiter())),
            loaded: Mutex::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
            busy_namespaces: Mutex::new(HashSet::new()),
            unsettled: Mutex::new(HashMap::new()),
            tenant_buckets: Mutex::new(HashMap::new()),
            coordinator: Mutex::new(None),
            stop,
            finished: CancellationToken::new(),
        });
        if let Some(c) = coordinator {
            // A plugin handed over keeps its lease until it stopped here:
            // a controller's in-flight reconcile finishes first.
            c.confirm_stops();
            tokio::spawn(this.clone().follow_ownership(c.owned()));
            *this.coordinator.lock() = Some(c);
        }
        this.clone().register_handlers();
        for informer in [&this.plugins, &this.policies, &this.namespaces] {
            let (informer, stop) = (informer.clone(), this.stop.child_token());
            let span = info_span!("informer", name = %informer.name());
            tokio::spawn(async move { informer.run(stop).await }.instrument(span));
        }
        tokio::spawn(this.clone().run());
        this
    }

    /// The `Plugin`s loaded now, by `namespace/name`, with their registry
    /// names.
    pub fn loaded(&self) -> BTreeMap<String, String> {
        self.loaded.lock().iter().map(|(k, l)| (k.clone(), l.registry_name.clone())).collect()
    }

    /// The registry names of the plugins loaded now.
    pub fn registry_names(&self) -> std::collections::HashSet<String> {
        self.loaded.lock().values().map(|l| l.registry_name.clone()).collect()
    }

    /// Reconciles of the controller Plugin `key` (`namespace/name`) that
    /// succeeded so far; `None` when it is not a controller running here.
    pub fn reconciles(&self, key: &str) -> Option<u64> {
        let loaded = self.loaded.lock();
        let runner = loaded.get(key)?.runner.as_ref()?;
        Some(runner.stats().succeeded.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// What `/readyz` and `/metrics` report of this replica.
    pub fn snapshot(&self) -> PluginResourcesSnapshot {
        PluginResourcesSnapshot {
            identity: self.options.identity.clone(),
            synced: self.has_synced(),
            plugins: self.plugins.store().len(),
            loaded: self.loaded.lock().len(),
            leases: self.coordinator.lock().as_ref().map(Coordinator::stats),
        }
    }

    /// Stops: every plugin is unloaded, then (with a coordinator) the
    /// leases are handed over at once. Returns when both are done.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.finished.cancelled().await;
    }

    /// Stops as a crashed replica would: the plugins stop here, the leases
    /// are not released and move to other replicas only once they expire.
    pub async fn abandon(&self) {
        drop(self.coordinator.lock().take());
        self.shutdown().await;
    }

    /// Whether this replica runs `key` (always, without a coordinator).
    fn owns(&self, key: &str) -> bool {
        self.coordinator.lock().as_ref().is_none_or(|c| c.is_owned(key))
    }

    /// Tells the coordinator which plugins there are.
    fn share_plugins(&self) {
        if let Some(c) = &*self.coordinator.lock() {
            c.set_plugins(self.plugins.store().list_keys());
        }
    }

    /// Unloads a plugin the moment this replica loses it (not through the
    /// queue, where it could wait behind a compilation), tells the
    /// coordinator it stopped (a hand-over releases the lease only then),
    /// and reconciles those it gained. Lost plugins stop concurrently: one
    /// tenant's slow reconcile does not hold back another's hand-over.
    async fn follow_ownership(
        self: Arc<Self>,
        mut owned: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    ) {
        let mut before = std::collections::BTreeSet::new();
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                changed = owned.changed() => if changed.is_err() { return },
            }
            let now = owned.borrow_and_update().clone();
            // Handed over before this loop saw it owned (the channel keeps
            // only the latest set): its stop is confirmed all the same.
            let waiting = self.coordinator.lock().as_ref().map(Coordinator::handing_over).unwrap_or_default();
            let lost: std::collections::BTreeSet<String> = {
                let loaded = self.loaded.lock();
                before.iter().chain(loaded.keys()).chain(&waiting).filter(|k| !now.contains(*k)).cloned().collect()
            };
            let stops = lost.iter().map(|key| {
                let this = &self;
                async move {
                    if this.loaded.lock().contains_key(key) {
                        tracing::info!(key = %key, "lost to another replica: unloading");
                        this.unload(key).await;
                    }
                    if let Some(c) = &*this.coordinator.lock() {
                        c.stopped(key);
                    }
                }
            });
            futures::future::join_all(stops).await;
            let loaded: Vec<String> = self.loaded.lock().keys().cloned().collect();
            now.iter().filter(|k| !loaded.contains(k)).for_each(|k| self.queue.add(k.clone()));
            before = now;
        }
    }

    /// Whether the informers of plugins, policies and namespaces synced.
    pub fn has_synced(&self) -> bool {
        self.plugins.has_synced() && self.policies.has_synced() && self.namespaces.has_synced()
    }

    fn register_handlers(self: Arc<Self>) {
        let resync = self.options.resync;
        let weak = Arc::downgrade(&self);
        let on_plugin = FnHandler(move |n: &Notification| {
            let Some(this) = weak.upgrade() else { return Ok(()) };
            match n {
                // Status writes (ours) change neither generation nor
                // labels: not a reason to reconcile, or every status write
                // would be followed by another.
                Notification::Update { old, new } if !wants_reconcile(old, new) => {}
                Notification::Update { .. } => this.queue.add(n.key().to_string()),
                // The set of plugins changed: the replicas share the new one.
                Notification::Add { .. } => {
                    this.share_plugins();
                    this.queue.add(n.key().to_string());
                }
                // A Plugin gone may make room under its tenant's cap, on
                // whichever replica runs the next in line.
                Notification::Delete(_) => {
                    this.share_plugins();
                    this.queue.add(n.key().to_string());
                    let namespace = n.key().split_once('/').map_or("", |(ns, _)| ns);
                    if let Ok(others) = this.plugins.store().by_index(NAMESPACE_INDEX, namespace) {
                        others.iter().for_each(|o| this.queue.add(o.key().to_string()));
                    }
                }
            }
            Ok(())
        });
        let registered = self.plugins.add_event_handler_with_resync_period(on_plugin, resync);
        let everything = |this: &Arc<Self>| {
            let weak = Arc::downgrade(this);
            FnHandler(move |_: &Notification| {
                if let Some(this) = weak.upgrade() {
                    this.plugins.store().list_keys().into_iter().for_each(|k| this.queue.add(k));
                }
                Ok(())
            })
        };
        let policies = self.policies.add_event_handler(everything(&self));
        let namespaces = self.namespaces.add_event_handler(everything(&self));
        for r in [registered.err(), policies.err(), namespaces.err()].into_iter().flatten() {
            tracing::error!("plugin resources: cannot register a handler: {r}");
        }
    }

    async fn run(self: Arc<Self>) {
        // client-go's WaitForCacheSync: a plugin judged before the policies
        // are known would be refused for no reason.
        while !self.has_synced() {
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        tracing::info!("plugin resources: informers synced, reconciling");
        let workers: Vec<_> = (0..WORKERS).map(|_| tokio::spawn(self.clone().worker())).collect();
        for w in workers {
            let _ = w.await;
        }
        self.queue.shutdown();
        let keys: Vec<String> = self.loaded.lock().keys().cloned().collect();
        for key in keys {
            self.unload(&key).await;
        }
        // Only now, with nothing delivering here, may others take them.
        let coordinator = self.coordinator.lock().take();
        if let Some(c) = coordinator {
            c.shutdown().await;
        }
        self.finished.cancel();
    }

    /// Reconciles keys until `stop`. The workers take one namespace's keys
    /// one at a time (a tenant's plugins load in order, and its
    /// `maxPlugins` is counted without a race), and different namespaces'
    /// keys side by side: a tenant whose component takes its whole `init`
    /// budget, or whose controller drains slowly, holds back only itself.
    async fn worker(self: Arc<Self>) {
        loop {
            let key = tokio::select! {
                _ = self.stop.cancelled() => break,
                k = self.queue.get() => match k { Some(k) => k, None => break },
            };
            let namespace = key.split_once('/').map_or("", |(ns, _)| ns).to_string();
            if !self.busy_namespaces.lock().insert(namespace.clone()) {
                // Another worker is on this namespace: come back to it,
                // leaving this worker to the other tenants.
                self.queue.add_after(key.clone(), NAMESPACE_BUSY_RETRY);
                self.queue.done(&key);
                continue;
            }
            let span = info_span!("plugin_resource", key = %key);
            let next = self.reconcile(&key).instrument(span).await;
            self.busy_namespaces.lock().remove(&namespace);
            match next {
                Next::Done => self.queue.forget(&key),
                Next::Retry => self.queue.add_rate_limited(key.clone()),
                Next::After(d) => {
                    self.queue.forget(&key);
                    self.queue.add_after(key.clone(), d)
                }
            }
            self.queue.done(&key);
        }
    }

    async fn reconcile(&self, key: &str) -> Next {
        let Some(obj) = self.plugins.store().get(key) else {
            self.unload(key).await;
            return Next::Done;
        };
        if !self.owns(key) {
            // Another replica runs it and writes its status.
            self.unload(key).await;
            return Next::Done;
        }
        let plugin: Plugin = match obj.parse() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("cannot read Plugin {key}: {e}");
                self.unload(key).await;
                return Next::Done;
            }
        };
        let namespace = plugin.namespace().unwrap_or_default();
        let policies: Vec<TenantPolicy> = self.policies.store().list().iter().filter_map(|o| o.parse().ok()).collect();
        let labels: Option<BTreeMap<String, String>> = self
            .namespaces
            .store()
            .get(&namespace)
            .map(|ns| ns.labels().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let admitted = policy::policy_for(&namespace, labels.as_ref(), &policies)
            .and_then(|p| policy::admit(&plugin.spec, &namespace, p, &self.options.defaults));
        let effective = match admitted {
            Ok(e) => e,
            Err(refusal) => {
                self.unload(key).await;
                self.write_status(&plugin, self.refused(&plugin, &refusal)).await;
                return Next::Done;
            }
        };
        if let Some(refusal) = self.beyond_max_plugins(key, &namespace, &effective) {
            // Whichever replica runs it: a Plugin past the cap stops.
            self.unload(key).await;
            self.write_status(&plugin, self.refused(&plugin, &refusal)).await;
            return Next::Done;
        }
        if let Some(refusal) = self.tenant_full(key, &namespace, &effective) {
            // A deletion in the namespace requeues it.
            self.write_status(&plugin, self.failed(key, &plugin, &refusal)).await;
            return Next::Retry;
        }
        let fetched = match component::fetch(
            &self.client,
            self.options.oci.as_deref(),
            &namespace,
            &plugin.spec.component,
            self.options.max_component_bytes,
        )
        .await
        {
            Ok(f) => f,
            Err(refusal) => {
                // A version already running keeps serving; the failure is
                // a degradation, retried with backoff.
                self.write_status(&plugin, self.failed(key, &plugin, &refusal)).await;
                return Next::Retry;
            }
        };
        match self.apply(key, &plugin, &effective, fetched).await {
            Ok(name) => {
                let report = self.running(&plugin, &name);
                // Synced and an empty queue are observed, not notified: look
                // again soon until both hold (then at the resync).
                let settled = report.synced.status == "True" && report.counters.as_ref().is_none_or(|c| c.pending == 0);
                self.write_status(&plugin, report).await;
                if settled {
                    self.unsettled.lock().remove(key);
                    Next::Done
                } else {
                    Next::After(self.next_settle_poll(key, plugin.metadata.generation))
                }
            }
            // Ownership moved while it loaded: the owner writes its status.
            Err(_) if !self.owns(key) => {
                self.unload(key).await;
                Next::Done
            }
            Err((refusal, retry)) => {
                self.write_status(&plugin, self.failed(key, &plugin, &refusal)).await;
                if retry { Next::Retry } else { Next::Done }
            }
        }
    }

    /// Makes the registry run `plugin` as `effective` with `fetched`:
    /// load, swap or load again. Returns the registry name.
    async fn apply(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        fetched: Fetched,
    ) -> Result<String, (Refusal, bool)> {
        let namespace = plugin.namespace().unwrap_or_default();
        let settings = settings_key(&namespace, &plugin.spec.watch, effective);
        let current =
            self.loaded.lock().get(key).map(|l| (l.registry_name.clone(), l.settings.clone(), l.digest.clone()));
        match current {
            Some((name, s, d)) if s == settings && d == fetched.digest => Ok(name),
            Some((name, s, _)) if s == settings && effective.controller.is_some() => {
                self.swap_controller(key, plugin, effective, fetched).await.map(|()| name)
            }
            Some((name, s, _)) if s == settings => {
                let registry = self.registry.clone();
                let (n, bytes) = (name.clone(), fetched.bytes);
                let swapped = tokio::task::spawn_blocking(move || registry.swap(&n, WasmSource::Bytes(bytes))).await;
                match swapped {
                    Ok(Ok(_)) => {
                        tracing::info!(digest = %fetched.digest, "swapped to a new version");
                        if let Some(l) = self.loaded.lock().get_mut(key) {
                            l.digest = fetched.digest;
                        }
                        Ok(name)
                    }
                    Ok(Err(e)) => Err((Refusal { reason: "SwapFailed", message: e.to_string() }, false)),
                    Err(e) => Err((Refusal { reason: "SwapFailed", message: e.to_string() }, true)),
                }
            }
            other => {
                if other.is_some() {
                    tracing::info!("settings changed: loading again");
                    self.unload(key).await;
                }
                self.load(key, plugin, effective, settings, fetched).await
            }
        }
    }

    /// When to look again at a plugin that has not settled: after 1 s, then
    /// twice as long each time, up to the resync. A Plugin that never
    /// settles (a watch that never lists, a controller whose queue is never
    /// empty) must not be fetched and its status written every second for
    /// ever. A new generation starts again at 1 s.
    fn next_settle_poll(&self, key: &str, generation: Option<i64>) -> Duration {
        let mut unsettled = self.unsettled.lock();
        let (seen, n) = unsettled.entry(key.to_string()).or_insert((generation, 0));
        if *seen != generation {
            (*seen, *n) = (generation, 0);
        }
        let delay = Duration::from_secs(1u64 << (*n).min(16));
        *n = n.saturating_add(1);
        delay.min(self.options.resync.max(Duration::from_secs(1)))
    }

    async fn unload(&self, key: &str) {
        self.unsettled.lock().remove(key);
        let Some(l) = self.loaded.lock().remove(key) else { return };
        match l.runner {
            // Drains: a reconcile under way finishes, so no write of it
            // can follow this replica handing the plugin over.
            Some(runner) => runner.stop().await,
            None => {
                if let Err(e) = self.registry.unload(&l.registry_name) {
                    tracing::warn!(plugin = %l.registry_name, "unloading: {e}");
                }
            }
        }
        tracing::info!(plugin = %l.registry_name, "unloaded");
        for watch in &l.watches {
            self.release_watch(watch);
        }
        // A plugin refused because its tenant was full may fit now.
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        for k in self.plugins.store().list_keys() {
            if k.split_once('/').is_some_and(|(ns, _)| ns == namespace) && !self.loaded.lock().contains_key(&k) {
                self.queue.add(k);
            }
        }
    }
}

enum Next {
    Done,
    Retry,
    After(Duration),
}

/// Whether an update of a `Plugin` is one to act on: a resync (same
/// object), a new generation (its spec) or new labels; not a status write.
fn wants_reconcile(old: &ObjectRef, new: &ObjectRef) -> bool {
    let generation = |o: &ObjectRef| o.pointer_value("/metadata/generation");
    old.resource_version() == new.resource_version()
        || generation(old) != generation(new)
        || old.labels().ne(new.labels())
        || old.pointer_value("/metadata/deletionTimestamp") != new.pointer_value("/metadata/deletionTimestamp")
}

/// The registry's name of a `Plugin`: a DNS label, unique per namespace
/// and name (128 bits of a hash of both: a tenant cannot search out a name
/// whose registry name is another tenant's plugin's, as it could with 32),
/// readable (the name's start).
pub fn registry_name(namespace: &str, name: &str) -> String {
    let hash = hex::encode(Sha256::digest(format!("{namespace}/{name}")));
    let base: String = name.chars().map(|c| if c == '.' { '-' } else { c }).take(30).collect();
    format!("{}-{}", base.trim_end_matches('-'), &hash[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_are_dns_labels_unique_per_namespace() {
        let a = registry_name("team-a", "recorder");
        let b = registry_name("team-b", "recorder");
        assert_ne!(a, b);
        assert!(a.starts_with("recorder-"));
        let long = registry_name("ns", &format!("{}.example", "x".repeat(240)));
        // Names alike in their first 30 characters differ by the hash.
        let (c, d) = (
            registry_name("ns", &format!("{}-a", "x".repeat(30))),
            registry_name("ns", &format!("{}-b", "x".repeat(30))),
        );
        assert_ne!(c, d);
        assert_eq!(long.len(), 63);
        for n in [&a, &b, &long] {
            crate::names::check("plugin", n).unwrap();
        }
    }
}
