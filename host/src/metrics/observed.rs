//! What the host runs, as metrics and readiness see it: [`Observed`], the
//! live list of informers, plugins and controllers, and the [`Readiness`]
//! report `/readyz` renders from it. Changing one entry costs the same with
//! 10 plugins as with 10 000.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::informer::{Registration, SharedIndexInformer};
use crate::plugin::{PluginInfo, PluginStats};

/// One informer the host runs.
#[derive(Clone)]
pub struct InformerEntry {
    pub name: String,
    /// The source's description, e.g. `manifests examples/manifests`.
    pub source: String,
    pub informer: SharedIndexInformer,
}

/// The state of one configured plugin.
#[derive(Clone)]
pub enum PluginState {
    /// Loaded and registered with its informer.
    Running { registration: Registration, stats: Arc<PluginStats>, info: Box<PluginInfo> },
    /// Could not be loaded or registered; the rest of the host runs on.
    Failed { error: String },
}

/// One configured plugin.
#[derive(Clone)]
pub struct PluginEntry {
    pub name: String,
    pub informer: String,
    pub state: PluginState,
}

/// One running controller (`[[controller]]`).
#[derive(Clone)]
pub struct ControllerEntry {
    pub name: String,
    /// Its primary informer.
    pub informer: String,
    pub reconciles: Arc<crate::controller::runner::ReconcileStats>,
    /// Its write guard, whose counters are its writes'.
    pub guard: Arc<crate::controller::WriteGuard>,
    /// Reads its workqueue's metrics.
    pub queue: Arc<dyn Fn() -> crate::workqueue::QueueMetricsSnapshot + Send + Sync>,
}

/// What the controller of `Plugin` resources reports of this replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginResourcesSnapshot {
    pub identity: String,
    /// Its informers (Plugins, TenantPolicies, Namespaces) synced.
    pub synced: bool,
    /// `Plugin`s in the cluster (or its namespace).
    pub plugins: usize,
    /// Those this replica runs.
    pub loaded: usize,
    /// Lease counters, when replicas share the plugins.
    pub leases: Option<crate::coordination::CoordinatorStats>,
}

/// Reads a [`PluginResourcesSnapshot`].
pub type PluginResourcesProbe = Arc<dyn Fn() -> PluginResourcesSnapshot + Send + Sync>;

/// The registry names of the plugins a tenant's `Plugin` resources run:
/// their sync is reported in their status, not on `/readyz` (a tenant
/// whose watch never lists must not keep the host unready).
pub type TenantPluginsProbe = Arc<dyn Fn() -> std::collections::HashSet<String> + Send + Sync>;

/// Reads the wasm runtime's instance counts (resident, idle, reclaimed).
pub type InstancesProbe = Arc<dyn Fn() -> crate::plugin::InstanceCounts + Send + Sync>;

#[derive(Default)]
struct Inner {
    plugin_resources: Option<PluginResourcesProbe>,
    tenant_plugins: Option<TenantPluginsProbe>,
    instances: Option<InstancesProbe>,
    controllers: Vec<ControllerEntry>,
    informers: Vec<InformerEntry>,
    plugins: PluginList,
}

/// The plugins in the order they were first set, indexed by name: setting,
/// replacing or removing one costs the same with 10 plugins as with 10 000.
#[derive(Default)]
struct PluginList {
    /// By the sequence number of their first `set`.
    entries: BTreeMap<u64, PluginEntry>,
    by_name: HashMap<String, u64>,
    next: u64,
}

impl PluginList {
    fn set(&mut self, entry: PluginEntry) {
        match self.by_name.get(&entry.name) {
            Some(seq) => {
                self.entries.insert(*seq, entry);
            }
            None => {
                let seq = self.next;
                self.next += 1;
                self.by_name.insert(entry.name.clone(), seq);
                self.entries.insert(seq, entry);
            }
        }
    }
    fn remove(&mut self, name: &str) {
        if let Some(seq) = self.by_name.remove(name) {
            self.entries.remove(&seq);
        }
    }
    fn retain(&mut self, mut keep: impl FnMut(&PluginEntry) -> bool) {
        let by_name = &mut self.by_name;
        self.entries.retain(|_, e| {
            let k = keep(e);
            if !k {
                by_name.remove(&e.name);
            }
            k
        });
    }
    fn iter(&self) -> impl Iterator<Item = &PluginEntry> {
        self.entries.values()
    }
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What metrics and readiness look at. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Observed {
    inner: Arc<RwLock<Inner>>,
}

impl Observed {
    pub fn new() -> Self {
        Self::default()
    }

    /// The probe given to [`Observed::set_plugin_resources`], if any.
    pub(super) fn plugin_resources_probe(&self) -> Option<PluginResourcesProbe> {
        self.inner.read().plugin_resources.clone()
    }

    /// The probe given to [`Observed::set_instances`], if any.
    pub(super) fn instances_probe(&self) -> Option<InstancesProbe> {
        self.inner.read().instances.clone()
    }
    /// Reports the controller of `Plugin` resources on `/readyz` and
    /// `/metrics`.
    pub fn set_plugin_resources(&self, probe: PluginResourcesProbe) {
        self.inner.write().plugin_resources = Some(probe);
    }
    /// Tells readiness which plugins are tenants' `Plugin` resources.
    pub fn set_tenant_plugins(&self, probe: TenantPluginsProbe) {
        self.inner.write().tenant_plugins = Some(probe);
    }
    /// Reports the handlers' instances (idle reclaim) on `/metrics`.
    pub fn set_instances(&self, probe: InstancesProbe) {
        self.inner.write().instances = Some(probe);
    }
    pub fn add_informer(&self, entry: InformerEntry) {
        self.inner.write().informers.push(entry);
    }
    /// Adds a plugin, replacing one of the same name.
    pub fn set_plugin(&self, entry: PluginEntry) {
        self.inner.write().plugins.set(entry);
    }
    pub fn remove_plugin(&self, name: &str) {
        self.inner.write().plugins.remove(name);
    }
    /// Adds a running controller, replacing one of the same name.
    pub fn set_controller(&self, entry: ControllerEntry) {
        let mut inner = self.inner.write();
        inner.controllers.retain(|c| c.name != entry.name);
        inner.controllers.push(entry);
    }
    pub fn remove_controller(&self, name: &str) {
        self.inner.write().controllers.retain(|c| c.name != name);
    }
    pub fn controllers(&self) -> Vec<ControllerEntry> {
        self.inner.read().controllers.clone()
    }
    pub fn informers(&self) -> Vec<InformerEntry> {
        self.inner.read().informers.clone()
    }
    pub fn plugins(&self) -> Vec<PluginEntry> {
        self.inner.read().plugins.iter().cloned().collect()
    }
    /// The plugin named `name`, if listed.
    pub fn plugin(&self, name: &str) -> Option<PluginEntry> {
        let inner = self.inner.read();
        inner.plugins.by_name.get(name).and_then(|seq| inner.plugins.entries.get(seq)).cloned()
    }
    /// Keeps the plugins for which `keep` is true.
    pub fn retain_plugins(&self, keep: impl FnMut(&PluginEntry) -> bool) {
        self.inner.write().plugins.retain(keep);
    }
    /// How many plugins are listed (running or failed).
    pub fn plugin_count(&self) -> usize {
        self.inner.read().plugins.len()
    }

    /// Readiness: every informer synced and every registration synced.
    /// Plugins that failed to load do not hold readiness back (they are
    /// listed, and `plugin_up` is 0 for them).
    pub fn readiness(&self) -> Readiness {
        let inner = self.inner.read();
        let mut r = Readiness { ready: true, checks: Vec::new() };
        for i in &inner.informers {
            let synced = i.informer.has_synced();
            r.ready &= synced;
            let detail = if synced {
                format!("synced, {} objects", i.informer.indexer().len())
            } else if i.informer.is_stopped() {
                "stopped".to_string()
            } else {
                match i.informer.reflector_stats().last_error() {
                    Some(e) => format!("not synced: {e}"),
                    None => "not synced".to_string(),
                }
            };
            r.checks.push(Check { ok: synced, what: format!("informer {}", i.name), detail });
        }
        if let Some(probe) = &inner.plugin_resources {
            let s = probe();
            r.ready &= s.synced;
            let owns = match &s.leases {
                Some(l) => format!(" (owns {} through Leases; {} live replicas)", l.owned, l.replicas),
                None => String::new(),
            };
            let state = if s.synced { "synced" } else { "not synced" };
            r.checks.push(Check {
                ok: s.synced,
                what: "plugin resources".into(),
                detail: format!("{state}, replica {} runs {} of {} Plugins{owns}", s.identity, s.loaded, s.plugins),
            });
        }
        let tenants = inner.tenant_plugins.as_ref().map(|probe| probe()).unwrap_or_default();
        for p in inner.plugins.iter() {
            match &p.state {
                PluginState::Running { registration, .. } => {
                    let synced = registration.has_synced();
                    let tenant = tenants.contains(&p.name);
                    r.ready &= synced || tenant;
                    let mut detail = if synced {
                        "synced".to_string()
                    } else {
                        format!("not synced, {} pending", registration.pending())
                    };
                    if tenant && !synced {
                        detail.push_str(" (a Plugin resource: in its status, not counted for readiness)");
                    }
                    r.checks.push(Check { ok: synced || tenant, what: format!("plugin {}", p.name), detail });
                }
                PluginState::Failed { error } => {
                    r.checks.push(Check {
                        ok: true,
                        what: format!("plugin {}", p.name),
                        detail: format!("failed to load (not counted for readiness): {error}"),
                    });
                }
            }
        }
        r
    }
}

/// One line of a readiness report.
#[derive(Debug, Clone)]
pub struct Check {
    pub ok: bool,
    pub what: String,
    pub detail: String,
}

/// The answer of `/readyz`.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<Check>,
}

impl Readiness {
    /// Kubernetes-style text: `[+]informer x synced` / `[-]plugin y not synced`,
    /// one line per check (line breaks in a name or an error are written `\n`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for c in &self.checks {
            let sign = if c.ok { '+' } else { '-' };
            let _ = writeln!(s, "[{sign}]{}: {}", one_line(&c.what), one_line(&c.detail));
        }
        s.push_str(if self.ready { "readyz check passed\n" } else { "readyz check failed\n" });
        s
    }
}

/// `s` with line breaks escaped, so that it cannot start a line of its own.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\n', '\r']) { s.replace('\n', "\\n").replace('\r', "\\r").into() } else { s.into() }
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("Observed")
            .field("informers", &inner.informers.iter().map(|i| &i.name).collect::<Vec<_>>())
            .field("plugins", &inner.plugins.iter().map(|p| &p.name).collect::<Vec<_>>())
            .finish()
    }
}
