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

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::cluster::ClusterWriter;
use crate::cluster::kube_writer::KubeWriter;
use crate::controller::ControllerRunner;
use crate::coordination::Coordinator;
use crate::informer::{FnHandler, InformerOptions, Notification, ObjectRef, SharedIndexInformer};
use crate::metrics::PluginResourcesSnapshot;
use crate::oci::OciPuller;
use crate::plugin::{Limits, LogSink, OnTrap, PluginSpec as RuntimeSpec};
use crate::registry::{PluginDef, PluginRegistry, TenantPolicy as RegistryTenant, WasmSource};
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::workqueue::{RateLimitingQueue, default_controller_rate_limiter};

use super::component::{self, Fetched};
use super::crd::{GROUP, Plugin, PluginCounters, TenantPolicy, VERSION, WatchSpec};
use super::policy::{self, ControllerSettings, Effective, Refusal};
use super::reconcilers::{self, Assembly};
use super::status::{self, Observed, Report};

/// How the controller runs.
#[derive(Debug, Clone)]
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
            writer: Arc::new(KubeWriter::new(client.clone()).with_reporting_instance(options.identity.clone())),
            client,
            registry,
            options,
            queue: Arc::new(RateLimitingQueue::new(default_controller_rate_limiter())),
            loaded: Mutex::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
            coordinator: Mutex::new(None),
            stop,
            finished: CancellationToken::new(),
        });
        if let Some(c) = coordinator {
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
    /// queue, where it could wait behind a compilation), and reconciles
    /// those it gained.
    async fn follow_ownership(
        self: Arc<Self>,
        mut owned: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    ) {
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                changed = owned.changed() => if changed.is_err() { return },
            }
            let now = owned.borrow_and_update().clone();
            let lost: Vec<String> = self.loaded.lock().keys().filter(|k| !now.contains(*k)).cloned().collect();
            for key in lost {
                tracing::info!(key = %key, "lost to another replica: unloading");
                self.unload(&key).await;
            }
            let loaded: Vec<String> = self.loaded.lock().keys().cloned().collect();
            now.into_iter().filter(|k| !loaded.contains(k)).for_each(|k| self.queue.add(k));
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
                _ => {
                    this.share_plugins();
                    this.queue.add(n.key().to_string());
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
        loop {
            let key = tokio::select! {
                _ = self.stop.cancelled() => break,
                k = self.queue.get() => match k { Some(k) => k, None => break },
            };
            let span = info_span!("plugin_resource", key = %key);
            let next = self.reconcile(&key).instrument(span).await;
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
                if settled { Next::Done } else { Next::After(Duration::from_secs(1)) }
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

    async fn load(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        settings: String,
        fetched: Fetched,
    ) -> Result<String, (Refusal, bool)> {
        let namespace = plugin.namespace().unwrap_or_default();
        let name = registry_name(&namespace, &plugin.name_any());
        if let Some(max) = effective.max_plugins {
            let running =
                self.loaded.lock().keys().filter(|k| k.split_once('/').is_some_and(|(ns, _)| ns == namespace)).count();
            if running >= max {
                let message = format!(
                    "tenant {namespace:?} already runs {running} plugin(s), the most TenantPolicy {:?} allows",
                    effective.policy
                );
                // A deletion in the namespace requeues it.
                return Err((Refusal { reason: "TenantFull", message }, true));
            }
        }
        if let Some(c) = &effective.controller {
            return self.load_controller(key, plugin, effective, c, settings, fetched).await;
        }
        let watch = self.acquire_watch(&namespace, &plugin.spec.watch);
        let ns = namespace.clone();
        self.registry.set_tenant(
            namespace.clone(),
            RegistryTenant {
                visibility: Arc::new(move |o: &crate::informer::Object| o.namespace() == Some(ns.as_str())),
                max_plugins: effective.max_plugins,
                fuel_per_call: None,
                deadline_per_call: None,
                memory_bytes: None,
                max_pending: None,
            },
        );
        let mut spec = RuntimeSpec::new(name.clone(), PathBuf::from(&fetched.origin));
        spec.tenant = Some(namespace.clone());
        spec.config_json = effective.config_json.clone();
        spec.limits = effective.limits.clone();
        spec.grants = effective.grants.clone();
        spec.on_trap = OnTrap::Continue;
        spec.log_sink = self.options.log_sink.clone();
        let def = PluginDef {
            spec,
            informer: watch.clone(),
            resync: effective.resync,
            on_swap: effective.on_swap,
            visibility: None,
            max_pending: effective.max_pending,
        };
        let registry = self.registry.clone();
        let bytes = fetched.bytes;
        let loaded = tokio::task::spawn_blocking(move || registry.load_bytes(def, &bytes)).await;
        match loaded {
            Ok(Ok(_)) => {
                tracing::info!(plugin = %name, digest = %fetched.digest, "loaded");
                let l = Loaded {
                    registry_name: name.clone(),
                    settings,
                    digest: fetched.digest,
                    watches: vec![watch],
                    runner: None,
                };
                self.loaded.lock().insert(key.to_string(), l);
                Ok(name)
            }
            Ok(Err(e)) => {
                self.release_watch(&watch);
                let full = matches!(e, crate::registry::RegistryError::TenantFull { .. });
                let reason = if full { "TenantFull" } else { "LoadFailed" };
                // A full tenant may have room later (a deletion requeues
                // the namespace); a component that fails to load does not
                // change until its spec does.
                Err((Refusal { reason, message: e.to_string() }, full))
            }
            Err(e) => {
                self.release_watch(&watch);
                Err((Refusal { reason: "LoadFailed", message: e.to_string() }, true))
            }
        }
    }

    /// Starts a controller: the informers of its watch and watches (shared
    /// with the namespace's other plugins), then its runner.
    async fn load_controller(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        controller: &ControllerSettings,
        settings: String,
        fetched: Fetched,
    ) -> Result<String, (Refusal, bool)> {
        let namespace = plugin.namespace().unwrap_or_default();
        let name = registry_name(&namespace, &plugin.name_any());
        let mut watches = vec![self.acquire_watch(&namespace, &plugin.spec.watch)];
        for w in &controller.watches {
            let spec = WatchSpec {
                api_version: w.api_version.clone(),
                kind: w.kind.clone(),
                label_selector: w.label_selector.clone(),
                field_selector: None,
            };
            watches.push(self.acquire_watch(&namespace, &spec));
        }
        let digest = fetched.digest.clone();
        let prepared = self.prepare_controller(&name, plugin, effective, controller, &watches, fetched).await;
        match prepared {
            Ok(mut runner) => {
                runner.run();
                tracing::info!(plugin = %name, %digest, workers = controller.max_concurrent_reconciles, "controller loaded");
                let l = Loaded { registry_name: name.clone(), settings, digest, watches, runner: Some(runner) };
                self.loaded.lock().insert(key.to_string(), l);
                Ok(name)
            }
            Err(refusal) => {
                watches.iter().for_each(|w| self.release_watch(w));
                Err((refusal, false))
            }
        }
    }

    /// Loads a controller's new component and lets it take over from the
    /// running one (the runner's zero-loss hand-over).
    async fn swap_controller(
        &self,
        key: &str,
        plugin: &Plugin,
        effective: &Effective,
        fetched: Fetched,
    ) -> Result<(), (Refusal, bool)> {
        let controller = effective.controller.as_ref().expect("swap_controller is for controllers");
        let Some((name, watches)) = self.loaded.lock().get(key).map(|l| (l.registry_name.clone(), l.watches.clone()))
        else {
            return Err((Refusal { reason: "SwapFailed", message: "not running".into() }, true));
        };
        let digest = fetched.digest.clone();
        let mut next = self
            .prepare_controller(&name, plugin, effective, controller, &watches, fetched)
            .await
            .map_err(|r| (Refusal { reason: "SwapFailed", message: r.message }, false))?;
        let old = self.loaded.lock().get_mut(key).and_then(|l| l.runner.take());
        if let Some(old) = old {
            next.take_over(old).await;
        } else {
            next.run();
        }
        tracing::info!(plugin = %name, %digest, "swapped to a new version");
        if let Some(l) = self.loaded.lock().get_mut(key) {
            l.digest = digest;
            l.runner = Some(next);
        }
        Ok(())
    }

    async fn prepare_controller(
        &self,
        name: &str,
        plugin: &Plugin,
        effective: &Effective,
        controller: &ControllerSettings,
        watches: &[String],
        fetched: Fetched,
    ) -> Result<ControllerRunner, Refusal> {
        let not_loaded = |message: String| Refusal { reason: "LoadFailed", message };
        let informers = watches
            .iter()
            .map(|w| self.registry.informer(w).ok_or_else(|| not_loaded(format!("informer {w} is gone"))))
            .collect::<Result<Vec<_>, _>>()?;
        let (runtime, writer) = (self.registry.runtime().clone(), self.writer.clone());
        let (name, namespace) = (name.to_string(), plugin.namespace().unwrap_or_default());
        let (kind, effective, controller) = (plugin.spec.watch.kind.clone(), effective.clone(), controller.clone());
        let Fetched { bytes, origin, .. } = fetched;
        let log_sink = self.options.log_sink.clone();
        let handle = tokio::runtime::Handle::current();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = handle.enter();
            let _span = span.enter();
            let assembly = Assembly {
                name: &name,
                namespace: &namespace,
                primary_kind: &kind,
                effective: &effective,
                settings: &controller,
                informers,
                log_sink,
                origin: &origin,
            };
            reconcilers::prepare(&runtime, writer, assembly, &bytes)
        })
        .await
        .map_err(|e| not_loaded(e.to_string()))?
        .map_err(|e| not_loaded(e.to_string()))
    }

    async fn unload(&self, key: &str) {
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

    /// The informer of `watch` in `namespace`, started when first needed.
    fn acquire_watch(&self, namespace: &str, watch: &WatchSpec) -> String {
        let name = watch_name(namespace, watch);
        let mut watches = self.watches.lock();
        if let Some(w) = watches.get_mut(&name) {
            w.users += 1;
            return name;
        }
        let mut opts = KubeSourceOptions::default().namespace(namespace);
        opts.label_selector = watch.label_selector.clone();
        opts.field_selector = watch.field_selector.clone();
        let source =
            KubeSource::discovered(self.client.clone(), &KubeResource::new(&watch.api_version, &watch.kind), opts);
        let informer = SharedIndexInformer::new(
            source,
            InformerOptions { name: name.clone(), default_resync_period: Duration::from_secs(1), ..Default::default() },
        );
        self.registry.add_informer(name.clone(), informer.clone());
        let stop = self.stop.child_token();
        let span = info_span!("informer", name = %name);
        tracing::info!(informer = %name, "watching {} {} in {namespace}", watch.api_version, watch.kind);
        tokio::spawn({
            let stop = stop.clone();
            async move { informer.run(stop).await }.instrument(span)
        });
        watches.insert(name.clone(), Watch { users: 1, stop });
        name
    }

    fn release_watch(&self, name: &str) {
        let mut watches = self.watches.lock();
        let Some(w) = watches.get_mut(name) else { return };
        w.users -= 1;
        if w.users == 0 {
            if let Err(e) = self.registry.remove_informer(name) {
                tracing::warn!(informer = %name, "not stopped: {e}");
                return;
            }
            w.stop.cancel();
            watches.remove(name);
        }
    }

    fn loaded_name(&self, key: &str) -> Option<String> {
        self.loaded.lock().get(key).map(|l| l.registry_name.clone())
    }

    /// A failure to fetch, load or swap: a version already running keeps
    /// serving (the plugin is degraded); otherwise it is not ready.
    fn failed(&self, key: &str, plugin: &Plugin, refusal: &Refusal) -> Report {
        match self.loaded_name(key) {
            Some(name) => {
                let mut r = self.running(plugin, &name);
                r.degraded = Observed::yes(refusal.reason, refusal.message.clone());
                r
            }
            None => self.refused(plugin, refusal),
        }
    }

    fn refused(&self, plugin: &Plugin, refusal: &Refusal) -> Report {
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::no(refusal.reason, refusal.message.clone()),
            synced: Observed::no("NotLoaded", "the plugin is not loaded"),
            degraded: Observed::no("NotLoaded", ""),
            digest: None,
            replica: Some(self.options.identity.clone()),
            counters: None,
        }
    }

    fn running(&self, plugin: &Plugin, name: &str) -> Report {
        let digest = {
            let loaded = self.loaded.lock();
            let l = loaded.values().find(|l| l.registry_name == name);
            if let Some(runner) = l.and_then(|l| l.runner.as_ref()) {
                return self.running_controller(plugin, runner, l.map(|l| l.digest.as_str()));
            }
            l.map(|l| l.digest.clone())
        };
        let st = self.registry.get(name);
        let (synced, degraded, counters) = match &st {
            Some(s) => (
                if s.synced {
                    Observed::yes("Synced", "every cached object was delivered")
                } else {
                    Observed::no("Syncing", format!("{} notifications pending", s.pending))
                },
                match (&s.last_error, s.crashed) {
                    (Some(e), n) if n > 0 => Observed::yes("HandlerCrashed", format!("{n} crashes; last: {e}")),
                    _ => Observed::no("Healthy", ""),
                },
                Some(PluginCounters {
                    delivered: s.delivered,
                    failed: s.failed,
                    crashed: s.crashed,
                    pending: s.pending as u64,
                    swaps: s.swaps,
                    writes: None,
                    refused_writes: None,
                }),
            ),
            None => (Observed::unknown("NotLoaded", ""), Observed::no("NotLoaded", ""), None),
        };
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::yes("Loaded", format!("running {}", digest.as_deref().unwrap_or("?"))),
            synced,
            degraded,
            digest,
            replica: Some(self.options.identity.clone()),
            counters,
        }
    }

    /// The report of a running controller: synced once its handlers
    /// delivered their informers' caches; its reconciles and writes as
    /// counters.
    fn running_controller(&self, plugin: &Plugin, runner: &ControllerRunner, digest: Option<&str>) -> Report {
        let (stats, writes) = (runner.stats(), &runner.guard().stats);
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let (failed, trapped) = (n(&stats.failed), n(&stats.trapped));
        Report {
            generation: plugin.metadata.generation,
            ready: Observed::yes("Loaded", format!("running {}", digest.unwrap_or("?"))),
            synced: if runner.has_synced() {
                Observed::yes("Synced", "every cached object was queued for a reconcile")
            } else {
                Observed::no("Syncing", "the informers' caches are still being queued")
            },
            degraded: if trapped > 0 {
                Observed::yes("ReconcileTrapped", format!("{trapped} reconciles trapped; {failed} failed"))
            } else {
                Observed::no("Healthy", "")
            },
            digest: digest.map(String::from),
            replica: Some(self.options.identity.clone()),
            counters: Some(PluginCounters {
                delivered: n(&stats.succeeded),
                failed,
                crashed: trapped,
                pending: runner.queue().len() as u64,
                swaps: 0,
                writes: Some(n(&writes.succeeded)),
                refused_writes: Some(n(&writes.refused)),
            }),
        }
    }

    async fn write_status(&self, plugin: &Plugin, report: Report) {
        // A replica stopping (its plugins going to others) writes no more:
        // a load that failed because its informers stopped is not news, and
        // would overwrite the status of the replica that runs it now.
        if self.stop.is_cancelled() {
            return;
        }
        let new = status::build(plugin.status.as_ref(), &report);
        if !status::changed(plugin.status.as_ref(), &new) {
            return;
        }
        let namespace = plugin.namespace().unwrap_or_default();
        let api: Api<Plugin> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = status::write(&api, &plugin.name_any(), &new).await {
            // The next reconcile (resync, or a change) writes it again.
            tracing::warn!("cannot write the status of Plugin {namespace}/{}: {e}", plugin.name_any());
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
/// and name (a hash of both), readable (the name's start).
pub fn registry_name(namespace: &str, name: &str) -> String {
    let hash = hex::encode(Sha256::digest(format!("{namespace}/{name}")));
    let base: String = name.chars().map(|c| if c == '.' { '-' } else { c }).take(50).collect();
    format!("{}-{}", base.trim_end_matches('-'), &hash[..8])
}

/// The informer name of one watch in one namespace.
fn watch_name(namespace: &str, w: &WatchSpec) -> String {
    let text = format!(
        "{namespace}\0{}\0{}\0{}\0{}",
        w.api_version,
        w.kind,
        w.label_selector.as_deref().unwrap_or(""),
        w.field_selector.as_deref().unwrap_or("")
    );
    format!("w-{}", &hex::encode(Sha256::digest(text))[..12])
}

/// Everything but the component that a running plugin was loaded with.
fn settings_key(namespace: &str, watch: &WatchSpec, e: &Effective) -> String {
    format!(
        "{}|{:?}|{:?}|{:?}|{:?}|{:?}|{}",
        watch_name(namespace, watch),
        e.limits,
        e.grants,
        e.resync,
        e.on_swap,
        e.max_pending,
        e.config_json
    )
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
        for n in [&a, &b, &long] {
            crate::names::check("plugin", n).unwrap();
        }
    }
}
