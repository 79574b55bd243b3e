//! The plugin registry: load, unload and hot-swap plugins while informers run.
//!
//! This module owns the mapping from a plugin's name to its running
//! version (by content hash), its informer registration and its swap slot.
//! A swap compiles, instantiates and `init`s the new version off the
//! delivery path; only a version that started successfully replaces the
//! old one, and it does so between two notifications. It may not reach
//! into a plugin's sandbox or an informer's internals.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use crate::informer::{HandlerOptions, InformerError, Registration, SharedIndexInformer};
use crate::plugin::{CacheView, LoadedPlugin, PluginError, PluginRuntime, PluginSpec, SwapSlot, Visibility};

/// How a new version takes over from the old one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSwap {
    /// The new version takes the queue where the old one stopped.
    #[default]
    Continue,
    /// The new version first receives the whole cache as initial-list adds
    /// (its registration's `has_synced` is false until they are handled).
    Replay,
}

/// A plugin as the registry runs it.
#[derive(Clone)]
pub struct PluginDef {
    pub spec: PluginSpec,
    /// The informer (by name) whose notifications it handles.
    pub informer: String,
    pub resync: Duration,
    pub on_swap: OnSwap,
    /// Which objects it receives and its `cache` import may read (a
    /// tenant's namespaces); the host filters, never the guest.
    pub visibility: Option<Visibility>,
    /// Pending notifications beyond this are coalesced by key.
    pub max_pending: Option<usize>,
}

/// What a tenant's plugins may see and use; the registry enforces it on
/// every load and swap, whoever asks (config, SIGHUP, admin API).
#[derive(Clone)]
pub struct TenantPolicy {
    /// The objects its plugins receive and read.
    pub visibility: Visibility,
    pub max_plugins: Option<usize>,
    /// Caps on each of its plugins' limits.
    pub fuel_per_call: Option<u64>,
    pub deadline_per_call: Option<Duration>,
    pub memory_bytes: Option<usize>,
    pub max_pending: Option<usize>,
}

impl TenantPolicy {
    /// Applies the tenant's view and caps to `def` (a cap lowers a larger
    /// or unlimited value).
    fn apply(&self, def: &mut PluginDef) {
        def.visibility = Some(self.visibility.clone());
        let l = &mut def.spec.limits;
        if let Some(cap) = self.fuel_per_call {
            l.fuel_per_call = Some(l.fuel_per_call.map_or(cap, |f| f.min(cap)));
        }
        if let Some(cap) = self.deadline_per_call {
            l.deadline_per_call = l.deadline_per_call.min(cap);
        }
        if let Some(cap) = self.memory_bytes {
            l.memory_bytes = l.memory_bytes.min(cap);
        }
        if let Some(cap) = self.max_pending {
            def.max_pending = Some(def.max_pending.map_or(cap, |p| p.min(cap)));
        }
    }
}

/// Why a registry operation was refused. Messages say what to do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("no informer named {0:?}")]
    UnknownInformer(String),
    #[error("no plugin named {0:?}")]
    UnknownPlugin(String),
    #[error("a plugin named {0:?} is already loaded; swap or unload it first")]
    AlreadyLoaded(String),
    #[error("no tenant named {0:?}")]
    UnknownTenant(String),
    #[error("tenant {tenant:?} already runs its maximum of {max} plugins")]
    TenantFull { tenant: String, max: usize },
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("informer refused the handler: {0}")]
    Informer(String),
    #[error(
        "plugin {0:?} was unloaded or loaded again while the new version was prepared; \
         nothing was swapped, try again"
    )]
    Superseded(String),
    #[error(transparent)]
    InvalidName(#[from] crate::names::InvalidName),
}

impl From<InformerError> for RegistryError {
    fn from(e: InformerError) -> Self {
        RegistryError::Informer(e.to_string())
    }
}

/// Where a new version comes from.
pub enum WasmSource {
    File(PathBuf),
    Bytes(Vec<u8>),
    /// A component the caller already read from `file` (which only names it).
    Read {
        file: PathBuf,
        bytes: Vec<u8>,
    },
}

/// What the admin API and `/readyz` report of a plugin.
#[derive(Debug, Clone, Serialize)]
pub struct PluginStatus {
    pub name: String,
    pub tenant: Option<String>,
    pub informer: String,
    /// Content hash of the version now handling notifications.
    pub version: String,
    /// A version waiting to take over at the next notification.
    pub staged_version: Option<String>,
    pub file: String,
    pub synced: bool,
    pub pending: usize,
    pub delivered: u64,
    pub failed: u64,
    pub crashed: u64,
    /// Notifications merged by key because the pending cap was reached.
    pub coalesced: u64,
    pub restarts: u64,
    pub swaps: u64,
    pub last_error: Option<String>,
}

struct Entry {
    /// Which load of the plugin this is: a swap prepared for one load
    /// never lands in another (whose tenant, view or limits may differ).
    generation: u64,
    def: PluginDef,
    loaded: Arc<LoadedPlugin>,
    registration: Registration,
    slot: SwapSlot,
    swaps: u64,
    last_error: Option<String>,
}

/// Plugins by name, each attached to one informer. Cheap to clone.
#[derive(Clone)]
pub struct PluginRegistry {
    runtime: PluginRuntime,
    informers: Arc<RwLock<HashMap<String, SharedIndexInformer>>>,
    tenants: Arc<RwLock<HashMap<String, TenantPolicy>>>,
    plugins: Arc<Mutex<BTreeMap<String, Entry>>>,
    /// How many plugins each tenant runs (updated with `plugins`, under
    /// its lock), so a tenant's cap is checked without walking every plugin.
    per_tenant: Arc<Mutex<HashMap<String, usize>>>,
    generations: Arc<std::sync::atomic::AtomicU64>,
}

impl PluginRegistry {
    pub fn new(runtime: PluginRuntime) -> Self {
        PluginRegistry {
            runtime,
            informers: Default::default(),
            tenants: Default::default(),
            plugins: Default::default(),
            per_tenant: Default::default(),
            generations: Default::default(),
        }
    }

    /// Defines (or redefines) a tenant; plugins naming it get its policy.
    pub fn set_tenant(&self, name: impl Into<String>, policy: TenantPolicy) {
        self.tenants.write().insert(name.into(), policy);
    }

    /// Applies the policy of the plugin's tenant, if it names one.
    fn with_tenant(&self, mut def: PluginDef) -> Result<PluginDef, RegistryError> {
        let Some(tenant) = def.spec.tenant.clone() else { return Ok(def) };
        let policy =
            self.tenants.read().get(&tenant).cloned().ok_or_else(|| RegistryError::UnknownTenant(tenant.clone()))?;
        policy.apply(&mut def);
        if let Some(max) = policy.max_plugins {
            let running = {
                let plugins = self.plugins.lock();
                let all = self.per_tenant.lock().get(&tenant).copied().unwrap_or(0);
                let itself = plugins.get(&def.spec.name).is_some_and(|e| e.def.spec.tenant.as_deref() == Some(&tenant));
                all - usize::from(itself)
            };
            if running >= max {
                return Err(RegistryError::TenantFull { tenant, max });
            }
        }
        Ok(def)
    }

    pub fn runtime(&self) -> &PluginRuntime {
        &self.runtime
    }

    /// Makes an informer available to plugins under `name`.
    pub fn add_informer(&self, name: impl Into<String>, informer: SharedIndexInformer) {
        self.informers.write().insert(name.into(), informer);
    }

    /// Forgets an informer no plugin uses any more (the caller stops it).
    /// Refused while a plugin still handles its notifications.
    pub fn remove_informer(&self, name: &str) -> Result<(), RegistryError> {
        let plugins = self.plugins.lock();
        if let Some((plugin, _)) = plugins.iter().find(|(_, e)| e.def.informer == name) {
            return Err(RegistryError::Informer(format!("informer {name:?} still serves plugin {plugin:?}")));
        }
        self.informers.write().remove(name);
        Ok(())
    }

    pub fn informer(&self, name: &str) -> Option<SharedIndexInformer> {
        self.informers.read().get(name).cloned()
    }

    pub fn informers(&self) -> Vec<(String, SharedIndexInformer)> {
        self.informers.read().iter().map(|(n, i)| (n.clone(), i.clone())).collect()
    }

    fn cache_view(def: &PluginDef, informer: &SharedIndexInformer) -> CacheView {
        match &def.visibility {
            Some(v) => CacheView::filtered(informer.indexer().clone(), v.clone()),
            None => CacheView::new(informer.indexer().clone()),
        }
    }

    /// Loads a plugin and registers it with its informer. Its name must be
    /// a DNS label ([`crate::names`]).
    pub fn load(&self, def: PluginDef) -> Result<PluginStatus, RegistryError> {
        self.load_with(def, |runtime, spec| runtime.load(spec))
    }

    /// Like [`PluginRegistry::load`] for a component already in memory (an
    /// upload, or a file the caller read itself); `def.spec.wasm` only names it.
    pub fn load_bytes(&self, def: PluginDef, bytes: &[u8]) -> Result<PluginStatus, RegistryError> {
        self.load_with(def, |runtime, spec| runtime.load_bytes(spec, bytes))
    }

    fn load_with(
        &self,
        def: PluginDef,
        load: impl FnOnce(&PluginRuntime, PluginSpec) -> Result<LoadedPlugin, PluginError>,
    ) -> Result<PluginStatus, RegistryError> {
        crate::names::check("plugin", &def.spec.name)?;
        let def = self.with_tenant(def)?;
        let name = def.spec.name.clone();
        if self.plugins.lock().contains_key(&name) {
            return Err(RegistryError::AlreadyLoaded(name));
        }
        let informer =
            self.informer(&def.informer).ok_or_else(|| RegistryError::UnknownInformer(def.informer.clone()))?;
        let loaded = Arc::new(load(&self.runtime, def.spec.clone())?);
        let mut handler = loaded.handler(Some(Self::cache_view(&def, &informer)))?;
        let slot = handler.swap_slot();
        let registration = informer.add_event_handler_with_options(Box::new(handler), handler_options(&def))?;
        let mut plugins = self.plugins.lock();
        if plugins.contains_key(&name) {
            informer.remove_event_handler(&registration)?;
            return Err(RegistryError::AlreadyLoaded(name));
        }
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(tenant) = &def.spec.tenant {
            *self.per_tenant.lock().entry(tenant.clone()).or_insert(0) += 1;
        }
        let entry = Entry { generation, def, loaded, registration, slot, swaps: 0, last_error: None };
        plugins.insert(name.clone(), entry);
        Ok(status(&name, &plugins[&name]))
    }

    /// Replaces a plugin's version. On any failure the old version keeps
    /// serving and the error is returned (and kept as `last_error`).
    ///
    /// The new version is prepared from the definition of the load it
    /// replaces (its tenant, view and limits), off the lock; if the plugin
    /// was unloaded or loaded again meanwhile, nothing is installed and
    /// [`RegistryError::Superseded`] is returned.
    pub fn swap(&self, name: &str, source: WasmSource) -> Result<PluginStatus, RegistryError> {
        let (generation, def, informer) = {
            let plugins = self.plugins.lock();
            let e = plugins.get(name).ok_or_else(|| RegistryError::UnknownPlugin(name.to_string()))?;
            let informer =
                self.informer(&e.def.informer).ok_or_else(|| RegistryError::UnknownInformer(e.def.informer.clone()))?;
            (e.generation, e.def.clone(), informer)
        };
        let mut spec = def.spec.clone();
        let prepared = (|| {
            let loaded = match source {
                WasmSource::File(path) => {
                    spec.wasm = path;
                    self.runtime.load(spec.clone())?
                }
                WasmSource::Bytes(bytes) => {
                    spec.wasm = PathBuf::from("(uploaded component)");
                    self.runtime.load_bytes(spec.clone(), &bytes)?
                }
                WasmSource::Read { file, bytes } => {
                    spec.wasm = file;
                    self.runtime.load_bytes(spec.clone(), &bytes)?
                }
            };
            let handler = loaded.handler(Some(Self::cache_view(&def, &informer)))?;
            Ok::<_, PluginError>((Arc::new(loaded), handler))
        })();
        let mut plugins = self.plugins.lock();
        let e = plugins.get_mut(name).ok_or_else(|| RegistryError::UnknownPlugin(name.to_string()))?;
        if e.generation != generation {
            tracing::warn!(plugin = name, "swap dropped: the plugin was loaded again while it was prepared");
            return Err(RegistryError::Superseded(name.to_string()));
        }
        let (loaded, mut handler) = match prepared {
            Ok(p) => p,
            Err(err) => {
                tracing::warn!(plugin = name, "swap failed, the old version keeps serving: {err}");
                e.last_error = Some(err.to_string());
                return Err(err.into());
            }
        };
        match def.on_swap {
            OnSwap::Continue => e.slot.stage(handler),
            OnSwap::Replay => {
                // The old listener's buffer is dropped; the new one is a late
                // joiner and gets the whole cache as initial-list adds.
                let slot = handler.swap_slot();
                informer.remove_event_handler(&e.registration)?;
                e.registration = informer.add_event_handler_with_options(Box::new(handler), handler_options(&def))?;
                e.slot = slot;
            }
        }
        e.def.spec = spec;
        e.loaded = loaded;
        e.swaps += 1;
        e.last_error = None;
        tracing::info!(plugin = name, version = %e.loaded.info.hash, on_swap = ?def.on_swap, "new version staged");
        Ok(status(name, e))
    }

    /// Stops a plugin's delivery and forgets it.
    pub fn unload(&self, name: &str) -> Result<(), RegistryError> {
        let e = {
            let mut plugins = self.plugins.lock();
            let e = plugins.remove(name).ok_or_else(|| RegistryError::UnknownPlugin(name.to_string()))?;
            if let Some(tenant) = &e.def.spec.tenant {
                let mut per_tenant = self.per_tenant.lock();
                if let Some(n) = per_tenant.get_mut(tenant) {
                    *n -= 1;
                    if *n == 0 {
                        per_tenant.remove(tenant);
                    }
                }
            }
            e
        };
        if let Some(informer) = self.informer(&e.def.informer) {
            informer.remove_event_handler(&e.registration)?;
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<PluginStatus> {
        self.plugins.lock().get(name).map(|e| status(name, e))
    }

    pub fn list(&self) -> Vec<PluginStatus> {
        self.plugins.lock().iter().map(|(n, e)| status(n, e)).collect()
    }

    /// What metrics and readiness follow of one plugin: its informer,
    /// registration and loaded version; one lookup.
    pub fn observe(&self, name: &str) -> Option<(String, Registration, Arc<LoadedPlugin>)> {
        self.plugins.lock().get(name).map(|e| (e.def.informer.clone(), e.registration.clone(), e.loaded.clone()))
    }

    /// [`PluginRegistry::observe`] of every plugin, by name, in one pass
    /// (no [`PluginStatus`] is computed).
    pub fn observe_all(&self) -> Vec<(String, String, Registration, Arc<LoadedPlugin>)> {
        self.plugins
            .lock()
            .iter()
            .map(|(n, e)| (n.clone(), e.def.informer.clone(), e.registration.clone(), e.loaded.clone()))
            .collect()
    }

    /// The registration of a plugin (for metrics and readiness).
    pub fn registration(&self, name: &str) -> Option<Registration> {
        self.plugins.lock().get(name).map(|e| e.registration.clone())
    }

    /// The loaded version of a plugin.
    pub fn loaded(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins.lock().get(name).map(|e| e.loaded.clone())
    }

    /// The swap slot of a plugin (to follow its active version).
    pub fn swap_slot(&self, name: &str) -> Option<SwapSlot> {
        self.plugins.lock().get(name).map(|e| e.slot.clone())
    }
}

fn handler_options(def: &PluginDef) -> HandlerOptions {
    HandlerOptions {
        name: def.spec.name.clone(),
        resync_period: def.resync,
        filter: def.visibility.clone(),
        max_pending: def.max_pending,
        // Tenants are the fairness groups: one tenant's spinning plugins
        // cannot hold the delivery workers another tenant's plugins need.
        group: def.spec.tenant.clone(),
    }
}

fn status(name: &str, e: &Entry) -> PluginStatus {
    let st = e.registration.stats();
    let active = e.slot.active_version();
    let staged = (active != e.loaded.info.hash).then(|| e.loaded.info.hash.clone());
    PluginStatus {
        name: name.to_string(),
        tenant: e.def.spec.tenant.clone(),
        informer: e.def.informer.clone(),
        version: active,
        staged_version: staged,
        file: e.def.spec.wasm.display().to_string(),
        synced: e.registration.has_synced(),
        pending: e.registration.pending(),
        delivered: st.delivered.load(Ordering::Relaxed),
        failed: st.failed.load(Ordering::Relaxed),
        crashed: st.crashed.load(Ordering::Relaxed),
        coalesced: st.coalesced.load(Ordering::Relaxed),
        restarts: e.loaded.stats.restarts.load(Ordering::Relaxed),
        swaps: e.swaps,
        last_error: e.last_error.clone(),
    }
}
