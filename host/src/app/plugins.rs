//! The config's plugins as the program runs them: through the
//! [`PluginRegistry`] (made with the wasm runtime on first use), with their
//! tenant's visibility and limits.
//!
//! This module owns loading: a load (compile, type-check, instantiate,
//! `init`) runs on a blocking thread, at most [`load_parallelism`] at a
//! time, and the plugin counts as *loading* meanwhile, which keeps
//! readiness back ([`Plugins::readiness`]). At start-up every plugin of the
//! config is loaded concurrently, after health is served and the informers
//! run ([`Plugins::load_config_plugins`]): a slow `init` (it may take ten
//! times a call's deadline before the runtime stops it) delays only its
//! own plugin. A plugin that fails to load is logged with its name, config
//! line and cause, shown as failed in `/readyz` and `plugin_up`, and the
//! rest keep running.
//!
//! It also keeps what metrics and `/readyz` see ([`Observed`]) in step with
//! the registry ([`Plugins::sync_observed`]), whatever changed it (the
//! config, SIGHUP, a watched file, the admin API).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{Mutex as AsyncMutex, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::config::{Config, InformerConfig, PluginConfig, TenantConfig};
use crate::informer::SharedIndexInformer;
use crate::metrics::{Check, Observed, PluginEntry, PluginState, Readiness};
use crate::plugin::{LoadedPlugin, PluginError, PluginRuntime, RuntimeConfig};
use crate::registry::{PluginDef, PluginRegistry};

use super::controllers::Controllers;
use super::format::{describe_load, fmt_duration};
use super::totals::Totals;
use super::watch::FileWatch;

/// At least this many plugin loads run at once (more on a machine with
/// more cores): a load that spins in `init` holds one until its deadline.
const MIN_LOAD_PARALLELISM: usize = 4;

/// How many plugin loads run at once: the number of cores, at least
/// [`MIN_LOAD_PARALLELISM`].
fn load_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).max(MIN_LOAD_PARALLELISM)
}

/// One plugin of the config, as the program manages it.
pub(super) struct Managed {
    /// Its config as last applied.
    pub(super) cfg: PluginConfig,
    pub(super) tenant: Option<TenantConfig>,
    /// Content hash of its wasm file when it was last loaded or swapped in
    /// from the config's file (`None`: not running).
    pub(super) file_hash: Option<String>,
    /// The last content of the file a watch tried (so an unchanged file is
    /// not tried again).
    pub(super) tried_hash: Option<String>,
    /// The watch on its wasm file (`watch = true`).
    pub(super) watch: Option<FileWatch>,
}

/// The config's plugins, by name.
pub(super) type ManagedMap = BTreeMap<String, Managed>;

/// A load in progress.
struct Loading {
    since: Instant,
}

pub(super) struct Plugins {
    pub(super) observed: Observed,
    /// The config the host started with: informers, `[host]` and `[admin]`
    /// are not reloaded, and its file is the one SIGHUP re-reads.
    pub(super) started: Config,
    pub(super) informers: Vec<(InformerConfig, SharedIndexInformer)>,
    registry: parking_lot::Mutex<Option<PluginRegistry>>,
    /// The plugins of the config, by name; locked for the whole of the
    /// start-up loads, a load, a swap from a file change, or a reload, so
    /// they happen one at a time.
    pub(super) managed: Arc<AsyncMutex<ManagedMap>>,
    totals: parking_lot::Mutex<HashMap<String, Totals>>,
    /// Plugins whose load (compile, instantiate, `init`) is under way.
    loading: parking_lot::Mutex<BTreeMap<String, Loading>>,
    /// Bounds how many loads run at once.
    permits: Semaphore,
    /// Cancelled once every plugin of the config was loaded or failed.
    config_loaded: CancellationToken,
    /// The config's controllers (counted by [`Plugins::readiness`]).
    pub(super) controllers: Arc<Controllers>,
}

/// The first 12 hex digits of a content hash.
pub(super) fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

pub(super) fn file_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Runs `f` on a blocking thread.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| format!("the loading task failed: {e}"))
}

/// The wasm runtime for `config`, with its compile cache.
pub(super) fn new_runtime(config: &Config) -> Result<PluginRuntime, PluginError> {
    let cache_dir = config.host.cache_dir.clone().or_else(default_cache_dir);
    PluginRuntime::new(RuntimeConfig {
        cache_dir,
        cache_max_bytes: config.host.cache_max_size.unwrap_or(crate::plugin::DEFAULT_COMPILE_CACHE_BYTES),
    })
}

/// `$XDG_CACHE_HOME/informer-host` or `~/.cache/informer-host`.
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("informer-host"))
}

impl Plugins {
    pub(super) fn new(
        observed: Observed,
        started: Config,
        informers: Vec<(InformerConfig, SharedIndexInformer)>,
    ) -> Self {
        Plugins {
            observed,
            started,
            informers,
            registry: parking_lot::Mutex::new(None),
            managed: Arc::new(AsyncMutex::new(BTreeMap::new())),
            totals: parking_lot::Mutex::new(HashMap::new()),
            loading: parking_lot::Mutex::new(BTreeMap::new()),
            permits: Semaphore::new(load_parallelism()),
            config_loaded: CancellationToken::new(),
            controllers: Arc::new(Controllers::default()),
        }
    }

    /// The registry, made (with the wasm runtime) on first use.
    /// The informers by name (what controllers are started with).
    pub(super) fn informers_by_name(&self) -> HashMap<String, SharedIndexInformer> {
        self.informers.iter().map(|(c, i)| (c.name.clone(), i.clone())).collect()
    }

    pub(super) fn registry(&self) -> Result<PluginRegistry, PluginError> {
        let mut slot = self.registry.lock();
        if let Some(r) = &*slot {
            return Ok(r.clone());
        }
        let registry = PluginRegistry::new(new_runtime(&self.started)?);
        let runtime = registry.runtime().clone();
        self.observed.set_instances(Arc::new(move || runtime.instances()));
        for (cfg, informer) in &self.informers {
            registry.add_informer(cfg.name.clone(), informer.clone());
        }
        for t in &self.started.tenants {
            registry.set_tenant(t.name.clone(), t.policy());
        }
        *slot = Some(registry.clone());
        Ok(registry)
    }

    /// The registry if it was made.
    pub(super) fn registry_if_made(&self) -> Option<PluginRegistry> {
        self.registry.lock().clone()
    }

    /// True when the registry runs a plugin of that name.
    pub(super) fn is_running(&self, name: &str) -> bool {
        self.registry_if_made().is_some_and(|r| r.get(name).is_some())
    }

    pub(super) fn at(&self, p: &PluginConfig) -> String {
        self.started.at(p.location)
    }

    /// What the registry runs for `p`.
    pub(super) fn def(&self, p: &PluginConfig, tenant: Option<&TenantConfig>) -> Result<PluginDef, String> {
        let Some((icfg, _)) = self.informers.iter().find(|(c, _)| c.name == p.informer) else {
            return Err(format!("informer {:?} is not running (informer changes need a restart)", p.informer));
        };
        Ok(PluginDef {
            spec: p.spec(),
            informer: p.informer.clone(),
            resync: p.resync.unwrap_or(icfg.resync),
            on_swap: p.on_swap,
            visibility: tenant.map(TenantConfig::visibility),
            max_pending: p.max_pending,
        })
    }

    /// Loads and registers one plugin, on a blocking thread once one of
    /// the load permits is free.
    async fn load(&self, p: &PluginConfig, tenant: Option<&TenantConfig>) -> Result<Arc<LoadedPlugin>, String> {
        let registry = self.registry().map_err(|e| format!("cannot start the wasm runtime: {e}"))?;
        let def = self.def(p, tenant)?;
        // Never closed, so this waits for a permit and gets one.
        let _permit = self.permits.acquire().await.map_err(|e| e.to_string())?;
        let reg = registry.clone();
        blocking(move || reg.load(def)).await?.map_err(|e| e.to_string())?;
        registry.loaded(&p.name).ok_or_else(|| "it was unloaded while loading".to_string())
    }

    /// Counts `name` as loading (from now, unless it already is).
    fn begin_loading(&self, name: &str) {
        self.loading.lock().entry(name.to_string()).or_insert_with(|| Loading { since: Instant::now() });
    }

    /// Loads `p`, shown as loading meanwhile, logs the outcome and records
    /// it in what metrics see. Its content hash when it runs.
    async fn load_reported(&self, p: &PluginConfig, tenant: Option<&TenantConfig>) -> Option<String> {
        self.begin_loading(&p.name);
        let span = info_span!("plugin", name = %p.name);
        let hash = match self.load(p, tenant).instrument(span.clone()).await {
            Ok(loaded) => {
                span.in_scope(|| tracing::info!("{}", describe_load(&loaded.info)));
                // This plugin only: a full sync walks every plugin, which
                // made start-up quadratic.
                self.sync_observed_one(&p.name);
                Some(loaded.info.hash.clone())
            }
            Err(error) => {
                tracing::error!(plugin = %p.name, "{}: {error}; the other plugins keep running", self.at(p));
                self.observed.set_plugin(PluginEntry {
                    name: p.name.clone(),
                    informer: p.informer.clone(),
                    state: PluginState::Failed { error },
                });
                None
            }
        };
        // Only now that metrics see it (running or failed): readiness never
        // misses it in between.
        self.loading.lock().remove(&p.name);
        hash
    }

    /// Records the outcome of loading `p` in `managed` and starts watching
    /// its file if asked to. True when it runs.
    fn record(
        self: &Arc<Self>,
        p: &PluginConfig,
        tenant: Option<&TenantConfig>,
        hash: Option<String>,
        managed: &mut ManagedMap,
    ) -> bool {
        let ok = hash.is_some();
        // Keep a watch that already runs on the same file.
        let old_watch = managed.remove(&p.name).and_then(|m| m.watch.filter(|_| m.cfg.wasm == p.wasm));
        let watch = if p.watch { old_watch.or_else(|| self.watch(p)) } else { None };
        managed.insert(
            p.name.clone(),
            Managed { cfg: p.clone(), tenant: tenant.cloned(), tried_hash: hash.clone(), file_hash: hash, watch },
        );
        ok
    }

    /// Loads `p`, logs the outcome, records it in `managed` and in what
    /// metrics see, and starts watching its file if asked to. True when it runs.
    pub(super) async fn start_plugin(
        self: &Arc<Self>,
        p: &PluginConfig,
        tenant: Option<&TenantConfig>,
        managed: &mut ManagedMap,
    ) -> bool {
        let hash = self.load_reported(p, tenant).await;
        self.record(p, tenant, hash, managed)
    }

    /// Counts every plugin of `config` as loading, so that readiness waits
    /// for them from the start.
    pub(super) fn expect_config_plugins(&self, config: &Config) {
        for p in &config.plugins {
            self.begin_loading(&p.name);
        }
    }

    /// Starts loading every plugin of `config` in the background and
    /// returns at once. Until each has loaded or failed it counts as
    /// loading; `managed` stays locked until all have, so a reload or a
    /// file change waits for them. Loads of different wasm files run
    /// concurrently (at most [`load_parallelism`] at a time); of the
    /// plugins of one file, the first loads alone (compiling it), then
    /// the others load concurrently, taking the compiled component from
    /// memory.
    pub(super) fn load_config_plugins(self: &Arc<Self>, config: &Config) {
        self.expect_config_plugins(config);
        let plugins: Vec<(PluginConfig, Option<TenantConfig>)> =
            config.plugins.iter().map(|p| (p.clone(), config.tenant_of(p).cloned())).collect();
        let managed = self.managed.clone().try_lock_owned();
        let this = self.clone();
        let task = async move {
            let mut managed = match managed {
                Ok(m) => m,
                Err(_) => this.managed.clone().lock_owned().await,
            };
            if !plugins.is_empty() {
                tracing::info!("loading {} plugin(s), at most {} at a time", plugins.len(), load_parallelism());
            }
            // By wasm file (indexed: a search per plugin made this quadratic).
            let mut chains: Vec<Vec<(usize, &PluginConfig, Option<&TenantConfig>)>> = Vec::new();
            let mut by_file: HashMap<&std::path::Path, usize> = HashMap::new();
            for (i, (p, tenant)) in plugins.iter().enumerate() {
                match by_file.get(p.wasm.as_path()) {
                    Some(&c) => chains[c].push((i, p, tenant.as_ref())),
                    None => {
                        by_file.insert(p.wasm.as_path(), chains.len());
                        chains.push(vec![(i, p, tenant.as_ref())]);
                    }
                }
            }
            // The first plugin of a file compiles it; the others of that
            // file then take the compiled component from memory, all of
            // them concurrently (as many at once as there are permits).
            let outcomes = futures::future::join_all(chains.into_iter().map(|chain| {
                let this = &this;
                async move {
                    let mut rest = chain.into_iter();
                    let mut out = Vec::new();
                    if let Some((i, p, tenant)) = rest.next() {
                        out.push((i, this.load_reported(p, tenant).await));
                    }
                    let others = futures::future::join_all(
                        rest.map(|(i, p, tenant)| async move { (i, this.load_reported(p, tenant).await) }),
                    )
                    .await;
                    out.extend(others);
                    out
                }
            }))
            .await;
            let mut hashes: Vec<Option<String>> = vec![None; plugins.len()];
            for (i, hash) in outcomes.into_iter().flatten() {
                hashes[i] = hash;
            }
            for ((p, tenant), hash) in plugins.iter().zip(hashes) {
                this.record(p, tenant.as_ref(), hash, &mut managed);
            }
            drop(managed);
            this.sync_observed();
            this.config_loaded.cancel();
        };
        tokio::spawn(task);
    }

    /// Resolves once every plugin of the config has loaded or failed.
    pub(super) async fn config_loaded(&self) {
        self.config_loaded.cancelled().await
    }

    /// True once every plugin of the config has loaded or failed.
    pub(super) fn config_loaded_now(&self) -> bool {
        self.config_loaded.is_cancelled()
    }

    /// Unloads a plugin (if it runs) and forgets what metrics saw of it.
    pub(super) fn stop_plugin(&self, name: &str) {
        if let Some(registry) = self.registry_if_made()
            && registry.get(name).is_some()
            && let Err(e) = registry.unload(name)
        {
            tracing::warn!(plugin = name, "unloading: {e}");
        }
        self.observed.remove_plugin(name);
        self.totals.lock().remove(name);
    }

    /// Brings what metrics and readiness see in step with the registry:
    /// every plugin it runs (whatever loaded or swapped it) with its current
    /// registration and version; plugins it no longer runs are dropped,
    /// plugins that failed to load stay listed as failed.
    pub(super) fn sync_observed(&self) {
        let Some(registry) = self.registry_if_made() else { return };
        let mut totals = self.totals.lock();
        let mut live = HashSet::new();
        for (name, informer, registration, loaded) in registry.observe_all() {
            self.set_running(&mut totals, &name, informer, registration, &loaded);
            live.insert(name);
        }
        self.observed.retain_plugins(|e| !matches!(e.state, PluginState::Running { .. }) || live.contains(&e.name));
        totals.retain(|name, _| live.contains(name));
    }

    /// [`Plugins::sync_observed`] for one plugin: what metrics see of
    /// `name` follows the registry, at a cost that does not grow with the
    /// number of plugins.
    pub(super) fn sync_observed_one(&self, name: &str) {
        let Some(registry) = self.registry_if_made() else { return };
        let mut totals = self.totals.lock();
        match registry.observe(name) {
            Some((informer, registration, loaded)) => {
                self.set_running(&mut totals, name, informer, registration, &loaded)
            }
            None => {
                totals.remove(name);
                if self.observed.plugin(name).is_some_and(|e| matches!(e.state, PluginState::Running { .. })) {
                    self.observed.remove_plugin(name);
                }
            }
        }
    }

    fn set_running(
        &self,
        totals: &mut HashMap<String, Totals>,
        name: &str,
        informer: String,
        registration: crate::informer::Registration,
        loaded: &LoadedPlugin,
    ) {
        let stats = match totals.get_mut(name) {
            Some(t) => t.observe(&loaded.stats),
            None => totals
                .entry(name.to_string())
                .or_insert_with(|| Totals::new(loaded.stats.clone()))
                .observe(&loaded.stats),
        };
        self.observed.set_plugin(PluginEntry {
            name: name.to_string(),
            informer,
            state: PluginState::Running { registration, stats, info: Box::new(loaded.info.clone()) },
        });
    }

    /// What `/readyz` answers: [`Observed::readiness`] (every informer and
    /// every running plugin synced), every plugin still loading as not
    /// ready, with how long it has been loading, and every controller
    /// starting or not synced as not ready.
    pub(super) fn readiness(&self) -> Readiness {
        // Loads first: a load ends by showing its plugin to metrics, then
        // leaving this list, so no plugin slips between the two reads.
        let loading: Vec<(String, Duration)> =
            self.loading.lock().iter().map(|(name, l)| (name.clone(), l.since.elapsed())).collect();
        self.sync_observed();
        let mut r = self.observed.readiness();
        if !loading.is_empty() {
            // What metrics saw of an earlier version (e.g. failed) is stale.
            let stale: HashSet<String> = loading.iter().map(|(name, _)| format!("plugin {name}")).collect();
            r.checks.retain(|c| !stale.contains(&c.what));
        }
        for (name, took) in &loading {
            let what = format!("plugin {name}");
            let detail = format!("loading for {} (compiling, instantiating and running init)", fmt_duration(*took));
            r.checks.push(Check { ok: false, what, detail });
        }
        if !loading.is_empty() {
            r.ready = false;
        }
        self.controllers.add_checks(&mut r);
        r
    }
}
