//! The program: turns a [`Config`] into running informers and plugins.
//!
//! This module owns the wiring of the host proper: it opens each
//! informer's source, loads each plugin through the [`PluginRegistry`]
//! (a plugin that fails to load is reported and marked failed; the rest
//! keep running), with its tenant's visibility and limits, registers the
//! handlers with their resync periods, serves metrics and health and, when
//! `[admin]` is configured, the admin API on its own listener, writes the
//! start-up lines a person reads, and shuts down in order on
//! SIGINT/SIGTERM: informers stop, in-flight calls get a grace period, the
//! process exits 0. While it runs, SIGHUP re-reads the config and applies
//! the difference to the plugins, and a plugin with `watch = true` is
//! swapped when its wasm file changes. It also implements `check`, which
//! loads every plugin without starting anything, and sets up logging.
//!
//! What metrics and `/readyz` see ([`Observed`]) is brought in step with
//! the registry after every change the program makes and before every
//! scrape, so plugins swapped, loaded or unloaded through the admin API
//! are reported too. A plugin's runtime counters (fuel, calls, restarts,
//! traps) are summed across its versions, so they never go backwards.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use notify::Watcher as _;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::admin::AdminServer;
use crate::admin_api::{self, AdminConfig};
use crate::config::{
    Config, DEFAULT_SHUTDOWN_GRACE, InformerConfig, LogFormat, PluginConfig, SourceConfig, TenantConfig,
};
use crate::informer::{IndexFunc, InformerOptions, ListerWatcher, ObjectRef, SharedIndexInformer};
use crate::metrics::{InformerEntry, Observed, PluginEntry, PluginState};
use crate::plugin::{LoadedPlugin, PluginError, PluginInfo, PluginRuntime, PluginStats, RuntimeConfig};
use crate::registry::{PluginDef, PluginRegistry, WasmSource};
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::source::manifests::{ManifestFilter, ManifestsSource};

/// How long a watched wasm file must stay unchanged before it is swapped
/// in (editors and `cargo build` write and rename in several steps).
pub const WATCH_DEBOUNCE: Duration = Duration::from_millis(200);

/// Settings from the command line that override or complete the config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides `[host] metrics_addr`.
    pub metrics_addr: Option<SocketAddr>,
    pub kube: KubeOptions,
    /// Overrides `[host] shutdown_grace`.
    pub shutdown_grace: Option<Duration>,
}

/// How `kube` sources reach the API server.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    /// A kubeconfig file (default: `KUBECONFIG`, `~/.kube/config`, or in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig (default: its current context).
    pub context: Option<String>,
}

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{at}: informer {name:?}: cannot open its {source_kind} source: {message}")]
    Source { at: String, name: String, source_kind: &'static str, message: String },
    #[error("{at}: informer {name:?}: {message}")]
    Informer { at: String, name: String, message: String },
    #[error("cannot start the wasm runtime: {0}")]
    Runtime(PluginError),
    #[error("cannot serve metrics on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
    #[error("cannot serve the admin API on {addr} ([admin] addr): {message}")]
    BindAdmin { addr: SocketAddr, message: String },
}

/// Sets up `tracing`: `RUST_LOG` (default `info`), text or JSON, to stderr.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let result = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
    // A subscriber already set (tests) is fine.
    drop(result);
}

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

/// A label-key index: objects by the value of one label.
fn label_index(key: String) -> IndexFunc {
    Arc::new(move |o: &ObjectRef| o.label(&key).map(|v| vec![v.to_string()]).unwrap_or_default())
}

struct RunningInformer {
    name: String,
    task: tokio::task::JoinHandle<()>,
}

/// A started host. [`App::shutdown`] stops it in order.
pub struct App {
    /// What metrics and readiness report.
    pub observed: Observed,
    /// Where `/metrics`, `/healthz`, `/readyz` are served, if anywhere.
    pub admin_addr: Option<SocketAddr>,
    /// Where the admin API (`/v1/plugins`) is served, if `[admin]` is configured.
    pub api_addr: Option<SocketAddr>,
    stop: CancellationToken,
    admin_stop: CancellationToken,
    servers: Vec<AdminServer>,
    informers: Vec<RunningInformer>,
    /// The plugins; holds the registry and with it the runtime, whose epoch
    /// ticker enforces every call's deadline while the host lives.
    plugins: Arc<Plugins>,
    /// SIGHUP, listened for from the start so it never kills the process.
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
    grace: Duration,
}

impl App {
    /// Opens every source, loads every plugin, starts the admin server and
    /// the informers. Returns once everything is started (not synced).
    pub async fn start(config: &Config, opts: &RunOptions) -> Result<App, AppError> {
        let stop = CancellationToken::new();
        let observed = Observed::new();
        let grace = opts.shutdown_grace.or(config.host.shutdown_grace).unwrap_or(DEFAULT_SHUTDOWN_GRACE);
        #[cfg(unix)]
        let hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot listen for SIGHUP (config reloads are off): {e}");
                None
            }
        };

        // Informers, not yet running: handlers registered before `run`
        // receive the initial list as initial-list adds.
        let mut informers: Vec<(InformerConfig, SharedIndexInformer)> = Vec::new();
        let mut sources = Sources::new(opts.kube.clone());
        for cfg in &config.informers {
            let at = config.at(cfg.location);
            let lw = sources.open(cfg).await.map_err(|message| AppError::Source {
                at: at.clone(),
                name: cfg.name.clone(),
                source_kind: cfg.source.kind(),
                message,
            })?;
            let description = lw.describe();
            let informer = SharedIndexInformer::from_arc(
                lw,
                InformerOptions {
                    name: cfg.name.clone(),
                    default_resync_period: cfg.resync,
                    ..InformerOptions::default()
                },
            );
            if !cfg.indexers.is_empty() {
                let map: HashMap<String, IndexFunc> =
                    cfg.indexers.iter().map(|k| (k.clone(), label_index(k.clone()))).collect();
                informer.add_indexers(map).map_err(|e| AppError::Informer {
                    at,
                    name: cfg.name.clone(),
                    message: format!("cannot add indexers: {e}"),
                })?;
            }
            observed.add_informer(InformerEntry {
                name: cfg.name.clone(),
                source: description.clone(),
                informer: informer.clone(),
            });
            info_span!("informer", name = %cfg.name).in_scope(|| tracing::info!("source: {description}"));
            informers.push((cfg.clone(), informer));
        }

        // Plugins, through the registry (made now if anything needs it,
        // else on the first SIGHUP that adds a plugin).
        let plugins = Arc::new(Plugins {
            observed: observed.clone(),
            started: config.clone(),
            informers: informers.clone(),
            registry: parking_lot::Mutex::new(None),
            managed: tokio::sync::Mutex::new(BTreeMap::new()),
            totals: parking_lot::Mutex::new(HashMap::new()),
        });
        if !config.plugins.is_empty() || config.admin.is_some() {
            plugins.registry().map_err(AppError::Runtime)?;
        }
        {
            let mut managed = plugins.managed.lock().await;
            for p in &config.plugins {
                plugins.start_plugin(p, config.tenant_of(p), &mut managed).await;
            }
        }

        // Metrics and health.
        let metrics_addr = opts.metrics_addr.or(config.host.metrics_addr);
        let admin_stop = CancellationToken::new();
        let mut servers = Vec::new();
        let admin_addr = match metrics_addr {
            Some(addr) => {
                let refresh: crate::admin::Refresh = {
                    let plugins = Arc::downgrade(&plugins);
                    Arc::new(move || {
                        if let Some(p) = plugins.upgrade() {
                            p.sync_observed();
                        }
                    })
                };
                let router = crate::admin::router_with(observed.clone(), Some(refresh));
                let server = AdminServer::serve(addr, router, admin_stop.clone())
                    .await
                    .map_err(|e| AppError::Bind { addr, message: e.to_string() })?;
                let a = server.local_addr;
                tracing::info!("serving http://{a}/metrics, http://{a}/healthz and http://{a}/readyz");
                servers.push(server);
                Some(a)
            }
            None => None,
        };

        // The admin API, on its own listener: it needs a token, the
        // metrics and health endpoints do not.
        let api_addr = match &config.admin {
            Some(admin) => {
                let registry = plugins.registry().map_err(AppError::Runtime)?;
                let router = admin_api::router(
                    registry,
                    AdminConfig { token: admin.token.expose().to_string(), max_upload: admin.max_upload },
                );
                let server = AdminServer::serve(admin.addr, router, admin_stop.clone())
                    .await
                    .map_err(|e| AppError::BindAdmin { addr: admin.addr, message: e.to_string() })?;
                let a = server.local_addr;
                tracing::info!(
                    "admin API on http://{a}/v1/plugins (bearer token from {}, uploads up to {})",
                    admin.token_source,
                    fmt_size(admin.max_upload as u64)
                );
                servers.push(server);
                Some(a)
            }
            None => None,
        };

        // Run.
        let started = Instant::now();
        let mut running = Vec::new();
        for (cfg, informer) in informers {
            let span = info_span!("informer", name = %cfg.name);
            let task = tokio::spawn({
                let informer = informer.clone();
                let stop = stop.child_token();
                async move { informer.run(stop).await }.instrument(span.clone())
            });
            tokio::spawn(report_synced(informer, started, stop.clone()).instrument(span));
            running.push(RunningInformer { name: cfg.name.clone(), task });
        }
        tokio::spawn(report_ready(plugins.clone(), started, stop.clone()));

        Ok(App {
            observed,
            admin_addr,
            api_addr,
            stop,
            admin_stop,
            servers,
            informers: running,
            plugins,
            #[cfg(unix)]
            hup,
            grace,
        })
    }

    /// A token that, when cancelled, makes [`App::wait`] return.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Re-reads the config file and applies the difference to the plugins
    /// (what SIGHUP does).
    pub async fn reload(&self) {
        self.plugins.reload().await;
    }

    /// Waits for SIGINT or SIGTERM (or the stop token), then shuts down.
    /// SIGHUP meanwhile re-reads the config (one reload at a time).
    pub async fn run_until_signal(mut self) {
        let stop = self.stop.clone();
        #[cfg(unix)]
        let mut hup = self.hup.take();
        #[cfg(not(unix))]
        let mut hup = None::<()>;
        let shutdown = shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                sig = &mut shutdown => {
                    tracing::info!("received {sig}, shutting down (again to exit at once)");
                    tokio::spawn(async {
                        let sig = shutdown_signal().await;
                        tracing::warn!("received {sig} again, exiting at once");
                        std::process::exit(130);
                    });
                    break;
                }
                _ = hangup(&mut hup) => {
                    tracing::info!("received SIGHUP, re-reading {}", self.plugins.started.file.display());
                    let plugins = self.plugins.clone();
                    tokio::spawn(async move { plugins.reload().await });
                }
                _ = stop.cancelled() => break,
            }
        }
        self.shutdown().await;
    }

    /// Stops the informers, lets in-flight calls finish within the grace
    /// period, and stops the admin server.
    pub async fn shutdown(self) {
        let App { stop, admin_stop, servers, informers, grace, plugins, .. } = self;
        tracing::info!(
            "stopping {} informer(s); in-flight calls have {} to finish",
            informers.len(),
            humantime::format_duration(grace)
        );
        stop.cancel();
        // No more swaps from file changes (unless a reload holds the
        // plugins: shutdown does not wait for it).
        if let Ok(mut managed) = plugins.managed.try_lock() {
            for m in managed.values_mut() {
                m.watch = None;
            }
        }
        let t = Instant::now();
        let mut tasks: Vec<(String, tokio::task::JoinHandle<()>)> =
            informers.into_iter().map(|i| (i.name, i.task)).collect();
        let all = futures::future::join_all(tasks.iter_mut().map(|(_, task)| task));
        match tokio::time::timeout(grace, all).await {
            Ok(_) => tracing::info!("all informers stopped in {}", fmt_duration(t.elapsed())),
            Err(_) => {
                let stuck: Vec<&str> =
                    tasks.iter().filter(|(_, task)| !task.is_finished()).map(|(n, _)| n.as_str()).collect();
                tracing::warn!(
                    "grace period of {} elapsed with calls still running in informer(s) {}; exiting anyway",
                    humantime::format_duration(grace),
                    stuck.join(", ")
                );
            }
        }
        admin_stop.cancel();
        for s in servers {
            s.join().await;
        }
    }
}

/// Resolves on the next SIGHUP; never without a SIGHUP listener.
#[cfg(unix)]
async fn hangup(hup: &mut Option<tokio::signal::unix::Signal>) {
    if let Some(s) = hup {
        if s.recv().await.is_some() {
            return;
        }
        *hup = None;
    }
    std::future::pending::<()>().await
}

#[cfg(not(unix))]
async fn hangup(_: &mut Option<()>) {
    std::future::pending::<()>().await
}

// ---------------------------------------------------------------------------
// Plugins: the registry, what metrics see of it, watched files, reloads.

/// One plugin of the config, as the program manages it.
struct Managed {
    /// Its config as last applied.
    cfg: PluginConfig,
    tenant: Option<TenantConfig>,
    /// Content hash of its wasm file when it was last loaded or swapped in
    /// from the config's file (`None`: not running).
    file_hash: Option<String>,
    /// The last content of the file a watch tried (so an unchanged file is
    /// not tried again).
    tried_hash: Option<String>,
    /// The watch on its wasm file (`watch = true`).
    watch: Option<FileWatch>,
}

/// A running watch on a wasm file; dropping it stops it.
struct FileWatch {
    _watcher: notify::RecommendedWatcher,
    stop: CancellationToken,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A plugin's runtime counters summed over its versions: each version has
/// its own [`PluginStats`], and a counter must not go back at a swap.
struct Totals {
    current: Arc<PluginStats>,
    retired: Vec<u64>,
}

fn stat_values(s: &PluginStats) -> Vec<u64> {
    // Every field, without `..`: a new counter must be added here too.
    let PluginStats {
        restarts,
        fuel_consumed,
        call_nanos,
        calls,
        call_buckets,
        json_calls,
        traps_fuel,
        traps_deadline,
        traps_memory,
        traps_other,
    } = s;
    [restarts, fuel_consumed, call_nanos, calls, json_calls, traps_fuel, traps_deadline, traps_memory, traps_other]
        .into_iter()
        .chain(call_buckets)
        .map(|a| a.load(Ordering::Relaxed))
        .collect()
}

impl Totals {
    /// The sums, with `now` as the current version.
    fn observe(&mut self, now: &Arc<PluginStats>) -> Arc<PluginStats> {
        if !Arc::ptr_eq(&self.current, now) {
            let old = stat_values(&self.current);
            self.retired.resize(old.len(), 0);
            for (r, v) in self.retired.iter_mut().zip(old) {
                *r += v;
            }
            self.current = now.clone();
        }
        let mut v = stat_values(now);
        for (v, r) in v.iter_mut().zip(&self.retired) {
            *v += r;
        }
        let mut v = v.into_iter().map(AtomicU64::new);
        let mut next = || v.next().expect("stat_values yields every field");
        let (restarts, fuel_consumed, call_nanos, calls, json_calls) = (next(), next(), next(), next(), next());
        let (traps_fuel, traps_deadline, traps_memory, traps_other) = (next(), next(), next(), next());
        let call_buckets = std::array::from_fn(|_| next());
        Arc::new(PluginStats {
            restarts,
            fuel_consumed,
            call_nanos,
            calls,
            call_buckets,
            json_calls,
            traps_fuel,
            traps_deadline,
            traps_memory,
            traps_other,
        })
    }
}

/// What one reload did.
#[derive(Default)]
struct ReloadSummary {
    added: usize,
    removed: usize,
    swapped: usize,
    reloaded: usize,
    unchanged: usize,
    failed: usize,
}

struct Plugins {
    observed: Observed,
    /// The config the host started with: informers, `[host]` and `[admin]`
    /// are not reloaded, and its file is the one SIGHUP re-reads.
    started: Config,
    informers: Vec<(InformerConfig, SharedIndexInformer)>,
    registry: parking_lot::Mutex<Option<PluginRegistry>>,
    /// The plugins of the config, by name; locked for the whole of a load,
    /// a swap from a file change, or a reload, so they happen one at a time.
    managed: tokio::sync::Mutex<BTreeMap<String, Managed>>,
    totals: parking_lot::Mutex<HashMap<String, Totals>>,
}

/// The first 12 hex digits of a content hash.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

fn file_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| format!("the loading task failed: {e}"))
}

impl Plugins {
    /// The registry, made (with the wasm runtime) on first use.
    fn registry(&self) -> Result<PluginRegistry, PluginError> {
        let mut slot = self.registry.lock();
        if let Some(r) = &*slot {
            return Ok(r.clone());
        }
        let cache_dir = self.started.host.cache_dir.clone().or_else(default_cache_dir);
        let registry = PluginRegistry::new(PluginRuntime::new(RuntimeConfig { cache_dir })?);
        for (cfg, informer) in &self.informers {
            registry.add_informer(cfg.name.clone(), informer.clone());
        }
        for t in &self.started.tenants {
            registry.set_tenant(t.name.clone(), t.policy());
        }
        *slot = Some(registry.clone());
        Ok(registry)
    }

    fn at(&self, p: &PluginConfig) -> String {
        self.started.at(p.location)
    }

    /// What the registry runs for `p`.
    fn def(&self, p: &PluginConfig, tenant: Option<&TenantConfig>) -> Result<PluginDef, String> {
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

    /// Loads and registers one plugin.
    async fn load(&self, p: &PluginConfig, tenant: Option<&TenantConfig>) -> Result<Arc<LoadedPlugin>, String> {
        let registry = self.registry().map_err(|e| format!("cannot start the wasm runtime: {e}"))?;
        let def = self.def(p, tenant)?;
        let reg = registry.clone();
        blocking(move || reg.load(def)).await?.map_err(|e| e.to_string())?;
        registry.loaded(&p.name).ok_or_else(|| "it was unloaded while loading".to_string())
    }

    /// Loads `p`, logs the outcome, records it in `managed` and in what
    /// metrics see, and starts watching its file if asked to. True when it runs.
    async fn start_plugin(
        self: &Arc<Self>,
        p: &PluginConfig,
        tenant: Option<&TenantConfig>,
        managed: &mut BTreeMap<String, Managed>,
    ) -> bool {
        let span = info_span!("plugin", name = %p.name);
        let loaded = self.load(p, tenant).instrument(span.clone()).await;
        let hash = match loaded {
            Ok(loaded) => {
                span.in_scope(|| tracing::info!("{}", describe_load(&loaded.info)));
                self.sync_observed();
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

    /// Unloads a plugin (if it runs) and forgets what metrics saw of it.
    fn stop_plugin(&self, name: &str) {
        if let Some(registry) = self.registry.lock().clone()
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
    fn sync_observed(&self) {
        let Some(registry) = self.registry.lock().clone() else { return };
        let mut totals = self.totals.lock();
        let mut live = HashSet::new();
        for status in registry.list() {
            let (Some(registration), Some(loaded)) =
                (registry.registration(&status.name), registry.loaded(&status.name))
            else {
                continue;
            };
            let stats = totals
                .entry(status.name.clone())
                .or_insert_with(|| Totals { current: loaded.stats.clone(), retired: Vec::new() })
                .observe(&loaded.stats);
            self.observed.set_plugin(PluginEntry {
                name: status.name.clone(),
                informer: status.informer.clone(),
                state: PluginState::Running { registration, stats, info: Box::new(loaded.info.clone()) },
            });
            live.insert(status.name);
        }
        for e in self.observed.plugins() {
            if matches!(e.state, PluginState::Running { .. }) && !live.contains(&e.name) {
                self.observed.remove_plugin(&e.name);
            }
        }
        totals.retain(|name, _| live.contains(name));
    }

    /// Starts watching `p`'s wasm file; logs and returns `None` if it cannot.
    fn watch(self: &Arc<Self>, p: &PluginConfig) -> Option<FileWatch> {
        let span = info_span!("plugin", name = %p.name);
        let dir = match p.wasm.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = notify::RecommendedWatcher::new(
            move |ev: notify::Result<notify::Event>| {
                let _ = tx.send(ev);
            },
            notify::Config::default(),
        )
        .and_then(|mut w| w.watch(&dir, notify::RecursiveMode::NonRecursive).map(|()| w));
        let watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                span.in_scope(|| {
                    tracing::error!(
                        "{}: cannot watch {} for changes: {e}; it is not swapped when the file changes",
                        self.at(p),
                        p.wasm.display()
                    )
                });
                return None;
            }
        };
        let stop = CancellationToken::new();
        let task = watch_loop(Arc::downgrade(self), p.name.clone(), p.wasm.clone(), rx, stop.clone());
        tokio::spawn(task.instrument(span.clone()));
        span.in_scope(|| tracing::info!("watching {} for changes", tidy_path(&p.wasm).display()));
        Some(FileWatch { _watcher: watcher, stop })
    }

    /// A watched wasm file changed (and then stayed unchanged for
    /// [`WATCH_DEBOUNCE`]): swap the plugin to it, or load it if it did not
    /// run. On failure the old version keeps serving.
    async fn file_changed(self: &Arc<Self>, name: &str, path: &Path) {
        let mut managed = self.managed.lock().await;
        let Some(m) = managed.get_mut(name) else { return };
        if !m.cfg.watch || m.cfg.wasm != path {
            return;
        }
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            // Removed, or being replaced: the next event tells.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!("{} changed but cannot be read: {e}", path.display());
                return;
            }
        };
        let hash = file_hash(&bytes);
        if m.tried_hash.as_deref() == Some(hash.as_str()) {
            return;
        }
        m.tried_hash = Some(hash.clone());
        let file = tidy_path(path).display().to_string();
        let registry = self.registry.lock().clone();
        let Some(registry) = registry.filter(|r| r.get(name).is_some()) else {
            // It did not run (it failed to load, or was unloaded): try again.
            tracing::info!("{file} changed; loading the plugin");
            let (cfg, tenant) = (m.cfg.clone(), m.tenant.clone());
            self.start_plugin(&cfg, tenant.as_ref(), &mut managed).await;
            return;
        };
        let from = registry.loaded(name).map(|l| short(&l.info.hash).to_string()).unwrap_or_default();
        let (reg, n, p) = (registry.clone(), name.to_string(), path.to_path_buf());
        match blocking(move || reg.swap(&n, WasmSource::File(p))).await {
            Ok(Ok(_)) => {
                m.file_hash = Some(hash.clone());
                tracing::info!(
                    "swapped to version {} ({file} changed; on_swap = {}; version {from} served until now)",
                    short(&hash),
                    on_swap_name(m.cfg.on_swap)
                );
            }
            Ok(Err(e)) => tracing::error!(
                "{file} changed, but the new version cannot be swapped in; version {from} keeps serving: {e}"
            ),
            Err(e) => tracing::error!("{file} changed, but swapping failed; version {from} keeps serving: {e}"),
        }
        drop(managed);
        self.sync_observed();
    }

    /// Re-reads the config file and applies the difference to the plugins:
    /// added ones are loaded, removed ones unloaded, one whose wasm file
    /// changed is swapped, one whose settings (limits, grants, config,
    /// tenant, ...) changed is unloaded and loaded again. An invalid file
    /// changes nothing. Informers, `[host]` and `[admin]` need a restart.
    async fn reload(self: &Arc<Self>) {
        let file = self.started.file.clone();
        let config = {
            let path = file.clone();
            match blocking(move || Config::load(path)).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("cannot re-read {}: {e}", file.display());
                    return;
                }
            }
        };
        let new = match config {
            Ok(c) => c,
            Err(e) => {
                for line in e.short_lines() {
                    tracing::error!("{line}");
                }
                let n = e.problems.len();
                tracing::error!(
                    "{} has {n} problem{}; nothing was changed, the host keeps running as it was",
                    file.display(),
                    if n == 1 { "" } else { "s" }
                );
                return;
            }
        };
        let old = &self.started;
        let mut informer_changes = Vec::new();
        for i in &new.informers {
            match old.informer(&i.name) {
                None => informer_changes.push(format!("{:?} added", i.name)),
                Some(o) if !o.same_definition(i) => informer_changes.push(format!("{:?} changed", i.name)),
                Some(_) => {}
            }
        }
        for o in &old.informers {
            if new.informer(&o.name).is_none() {
                informer_changes.push(format!("{:?} removed", o.name));
            }
        }
        if !informer_changes.is_empty() {
            tracing::warn!(
                "informer changes need a restart (informer {}); the informers keep running as they are",
                informer_changes.join(", informer ")
            );
        }
        if old.host != new.host {
            tracing::warn!("[host] changes need a restart; they are not applied");
        }
        if old.admin != new.admin {
            tracing::warn!("[admin] changes need a restart; the admin API keeps its settings");
        }

        if let Some(registry) = self.registry.lock().clone() {
            for t in &new.tenants {
                registry.set_tenant(t.name.clone(), t.policy());
            }
        }
        let mut summary = ReloadSummary::default();
        let mut managed = self.managed.lock().await;
        let removed: Vec<String> =
            managed.keys().filter(|n| !new.plugins.iter().any(|p| &p.name == *n)).cloned().collect();
        for name in removed {
            managed.remove(&name);
            self.stop_plugin(&name);
            info_span!("plugin", name = %name).in_scope(|| tracing::info!("removed from the config: unloaded"));
            summary.removed += 1;
        }
        for p in &new.plugins {
            let tenant = new.tenant_of(p);
            let span = info_span!("plugin", name = %p.name);
            let Some(m) = managed.get_mut(&p.name) else {
                span.in_scope(|| tracing::info!("added to the config: loading it"));
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.added += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            };
            let running = self.registry.lock().clone().is_some_and(|r| r.get(&p.name).is_some());
            let mut changed = m.cfg.changed_keys(p);
            let same_tenant = match (&m.tenant, tenant) {
                (None, None) => true,
                (Some(a), Some(b)) => a.same_visibility(b),
                _ => false,
            };
            if !same_tenant && !changed.contains(&"tenant") {
                changed.push("tenant's namespaces");
            }
            if !changed.is_empty() && running {
                span.in_scope(|| {
                    tracing::info!("{} changed: reloading it (unload + load)", changed.join(", "));
                });
                // Try the new settings first: if they do not load, the
                // running version keeps serving.
                if let Err(e) = self.probe(p).await {
                    span.in_scope(|| {
                        tracing::error!(
                            "{}: the new settings do not load; the running version keeps serving: {e}",
                            self.at(p)
                        );
                    });
                    summary.failed += 1;
                    continue;
                }
                self.stop_plugin(&p.name);
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.reloaded += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            }
            if !running {
                span.in_scope(|| tracing::info!("not running (it failed to load, or was unloaded): loading it"));
                if self.start_plugin(p, tenant, &mut managed).await {
                    summary.added += 1;
                } else {
                    summary.failed += 1;
                }
                continue;
            }
            // Same settings: swap if the file (or which file) changed.
            let moved = m.cfg.wasm != p.wasm;
            let content = {
                let path = p.wasm.clone();
                tokio::fs::read(&path).await.map(|b| file_hash(&b))
            };
            match content {
                Err(e) => {
                    span.in_scope(|| {
                        tracing::error!(
                            "{}: cannot read {}: {e}; the running version keeps serving",
                            self.at(p),
                            p.wasm.display()
                        )
                    });
                    summary.failed += 1;
                }
                Ok(hash) if moved || m.file_hash.as_deref() != Some(hash.as_str()) => {
                    let registry = self.registry.lock().clone();
                    let Some(registry) = registry else { continue };
                    let (reg, n, path) = (registry.clone(), p.name.clone(), p.wasm.clone());
                    let file = tidy_path(&p.wasm).display().to_string();
                    match blocking(move || reg.swap(&n, WasmSource::File(path)))
                        .await
                        .and_then(|r| r.map_err(|e| e.to_string()))
                    {
                        Ok(_) => {
                            span.in_scope(|| {
                                tracing::info!(
                                    "swapped to version {} ({file} changed; on_swap = {})",
                                    short(&hash),
                                    on_swap_name(p.on_swap)
                                )
                            });
                            m.file_hash = Some(hash.clone());
                            m.tried_hash = Some(hash);
                            summary.swapped += 1;
                        }
                        Err(e) => {
                            span.in_scope(|| {
                                tracing::error!(
                                    "{}: {file} changed, but the new version cannot be swapped in; \
                                     the running version keeps serving: {e}",
                                    self.at(p)
                                )
                            });
                            summary.failed += 1;
                            // Keep the old path so the next reload tries again.
                            continue;
                        }
                    }
                }
                Ok(_) => summary.unchanged += 1,
            }
            // Only `wasm`, `watch` or the location can differ now.
            let watch_on = p.watch && (m.watch.is_none() || moved);
            m.cfg = p.clone();
            m.tenant = tenant.cloned();
            if !p.watch {
                m.watch = None;
            } else if watch_on {
                m.watch = None;
                m.watch = self.watch(p);
            }
        }
        drop(managed);
        self.sync_observed();
        let ReloadSummary { added, removed, swapped, reloaded, unchanged, failed } = summary;
        tracing::info!(
            "reloaded {}: {added} plugin(s) added, {removed} removed, {swapped} swapped, {reloaded} reloaded, \
             {unchanged} unchanged, {failed} failed",
            file.display()
        );
    }

    /// Loads `p` without registering it, to see that it would start.
    async fn probe(&self, p: &PluginConfig) -> Result<(), String> {
        let runtime = self.registry().map_err(|e| e.to_string())?.runtime().clone();
        self.def(p, None)?;
        let spec = p.spec();
        blocking(move || runtime.load(spec).map(drop)).await?.map_err(|e| e.to_string())
    }
}

fn on_swap_name(o: crate::registry::OnSwap) -> &'static str {
    match o {
        crate::registry::OnSwap::Continue => "continue",
        crate::registry::OnSwap::Replay => "replay",
    }
}

/// Waits for changes of `path` (its directory is watched: editors and
/// `cargo build` replace files), lets them settle, then swaps.
async fn watch_loop(
    plugins: Weak<Plugins>,
    name: String,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    stop: CancellationToken,
) {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    let file_name = path.file_name().map(|f| f.to_os_string());
    let touches = |ev: &notify::Event| {
        let kind = matches!(
            ev.kind,
            EventKind::Create(_) | EventKind::Modify(_) | EventKind::Access(AccessKind::Close(AccessMode::Write))
        );
        kind && ev.paths.iter().any(|p| p.file_name() == file_name.as_deref())
    };
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = rx.recv() => ev,
        };
        match ev {
            None => return,
            Some(Err(e)) => {
                tracing::warn!("watching {}: {e}", path.display());
                continue;
            }
            Some(Ok(ev)) if touches(&ev) => {}
            Some(Ok(_)) => continue,
        }
        // Debounce: wait until the directory is quiet.
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(WATCH_DEBOUNCE) => break,
                ev = rx.recv() => if ev.is_none() { return },
            }
        }
        let Some(p) = plugins.upgrade() else { return };
        if stop.is_cancelled() {
            return;
        }
        p.file_changed(&name, &path).await;
    }
}

fn runtime(config: &Config) -> Result<PluginRuntime, AppError> {
    let cache_dir = config.host.cache_dir.clone().or_else(default_cache_dir);
    PluginRuntime::new(RuntimeConfig { cache_dir }).map_err(AppError::Runtime)
}

/// `$XDG_CACHE_HOME/informer-host` or `~/.cache/informer-host`.
fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("informer-host"))
}

/// `loaded event_log.wasm (142 KiB), compiled in 1.2s, instantiated in 80µs`.
pub fn describe_load(info: &PluginInfo) -> String {
    let file = info.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let compiled = if info.from_cache {
        format!("loaded from the compile cache in {}", fmt_duration(info.compile_time))
    } else {
        format!("compiled in {}", fmt_duration(info.compile_time))
    };
    format!(
        "loaded {file} ({}), {compiled}, instantiated and initialised in {}",
        fmt_size(info.size_bytes),
        fmt_duration(info.instantiate_time)
    )
}

async fn report_synced(informer: SharedIndexInformer, started: Instant, stop: CancellationToken) {
    loop {
        if informer.has_synced() {
            tracing::info!(
                "listed {} objects, synced in {}",
                informer.indexer().len(),
                fmt_duration(started.elapsed())
            );
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
}

async fn report_ready(plugins: Arc<Plugins>, started: Instant, stop: CancellationToken) {
    let observed = plugins.observed.clone();
    let mut warned = false;
    loop {
        plugins.sync_observed();
        let r = observed.readiness();
        if r.ready {
            let plugins = observed.plugins();
            let failed = plugins.iter().filter(|p| matches!(p.state, PluginState::Failed { .. })).count();
            let running = plugins.len() - failed;
            let mut line = format!(
                "ready in {}: {} informer(s) synced, {running} plugin(s) handled their initial list",
                fmt_duration(started.elapsed()),
                observed.informers().len()
            );
            if failed > 0 {
                let _ = write!(line, ", {failed} plugin(s) failed to load");
            }
            tracing::info!("{line}");
            return;
        }
        if !warned && started.elapsed() > Duration::from_secs(30) {
            warned = true;
            let waiting: Vec<String> = r.checks.iter().filter(|c| !c.ok).map(|c| c.what.clone()).collect();
            tracing::warn!("not ready after 30s; waiting for {}", waiting.join(", "));
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
pub async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                let _ = tokio::signal::ctrl_c().await;
                return "SIGINT";
            }
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// Starts the host from a config and runs it until SIGINT/SIGTERM.
pub async fn run(config: &Config, opts: &RunOptions) -> Result<(), AppError> {
    let app = App::start(config, opts).await?;
    app.run_until_signal().await;
    tracing::info!("bye");
    Ok(())
}

// ---------------------------------------------------------------------------
// check

/// One plugin as `check` saw it.
pub struct CheckedPlugin {
    pub config: PluginConfig,
    pub result: Result<PluginInfo, PluginError>,
}

/// What `check` found.
pub struct CheckReport {
    pub plugins: Vec<CheckedPlugin>,
    /// A problem that stopped the check before any plugin was loaded.
    pub fatal: Option<String>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.fatal.is_none() && self.plugins.iter().all(|p| p.result.is_ok())
    }

    /// The table of plugins and, below it, every problem.
    pub fn render(&self, config: &Config) -> String {
        let mut rows =
            vec![["PLUGIN", "FILE", "SIZE", "WORLD", "IMPORTS", "GRANTED", "TENANT", "LIMITS"].map(String::from)];
        for p in &self.plugins {
            let limits = describe_limits(&p.config);
            let granted = if p.config.grant_names.is_empty() { "-".into() } else { p.config.grant_names.join(",") };
            let tenant = p.config.tenant.clone().unwrap_or_else(|| "-".into());
            let file = tidy_path(&p.config.wasm).display().to_string();
            let row = match &p.result {
                Ok(info) => [
                    p.config.name.clone(),
                    file,
                    fmt_size(info.size_bytes),
                    info.world.clone(),
                    describe_imports(&info.imports),
                    granted,
                    tenant,
                    limits,
                ],
                Err(_) => {
                    [p.config.name.clone(), file, "-".into(), "FAILED".into(), "-".into(), granted, tenant, limits]
                }
            };
            rows.push(row);
        }
        let mut widths = [0usize; 8];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        if !self.plugins.is_empty() {
            for r in &rows {
                let mut line = String::new();
                for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                    if i + 1 == r.len() {
                        line.push_str(c);
                    } else {
                        let _ = write!(line, "{c:<w$}  ");
                    }
                }
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        let informers = config.informers.len();
        let problems: Vec<String> = self
            .fatal
            .iter()
            .cloned()
            .chain(
                self.plugins
                    .iter()
                    .filter_map(|p| p.result.as_ref().err().map(|e| format!("{}: {e}", config.at(p.config.location)))),
            )
            .collect();
        if problems.is_empty() {
            let _ = writeln!(
                out,
                "{}: ok ({informers} informer(s), {} plugin(s))",
                config.file.display(),
                self.plugins.len()
            );
        } else {
            if !out.is_empty() {
                out.push('\n');
            }
            for p in &problems {
                let _ = writeln!(out, "error: {p}");
            }
            let n = problems.len();
            let _ = writeln!(out, "{}: {n} problem{}", config.file.display(), if n == 1 { "" } else { "s" });
        }
        out
    }
}

/// Compiles, type-checks and test-instantiates every plugin of a config.
pub fn check(config: &Config) -> CheckReport {
    if config.plugins.is_empty() {
        return CheckReport { plugins: Vec::new(), fatal: None };
    }
    let runtime = match runtime(config) {
        Ok(r) => r,
        Err(e) => return CheckReport { plugins: Vec::new(), fatal: Some(e.to_string()) },
    };
    let plugins = config
        .plugins
        .iter()
        .map(|p| CheckedPlugin { config: p.clone(), result: runtime.load(p.spec()).map(|l| l.info) })
        .collect();
    CheckReport { plugins, fatal: None }
}

fn describe_limits(p: &PluginConfig) -> String {
    let fuel = match p.limits.fuel_per_call {
        Some(f) => format!("fuel {f}"),
        None => "fuel unlimited".into(),
    };
    let mut s = format!(
        "{fuel}, deadline {}, memory {}",
        humantime::format_duration(p.limits.deadline_per_call),
        fmt_size(p.limits.memory_bytes as u64)
    );
    if let Some(n) = p.max_pending {
        let _ = write!(s, ", pending {n}");
    }
    s
}

/// `log, cache (+3 wasi)`: the capability imports by short name.
fn describe_imports(imports: &[String]) -> String {
    let mut caps = Vec::new();
    let mut wasi = 0;
    for i in imports {
        if i.starts_with("wasi:") {
            wasi += 1;
            continue;
        }
        let short = i.rsplit('/').next().unwrap_or(i);
        let short = short.split('@').next().unwrap_or(short);
        if short != "types" && short != "delivery" {
            caps.push(short.to_string());
        }
    }
    let mut s = if caps.is_empty() { "-".to_string() } else { caps.join(",") };
    if wasi > 0 {
        let _ = write!(s, " (+{wasi} wasi)");
    }
    s
}

/// Removes `.` and `dir/..` from a path, for display.
fn tidy_path(p: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    if out.is_empty() { PathBuf::from(".") } else { out.iter().collect() }
}

/// `1.2s`, `35ms`, `80µs`.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{}ms", (us + 500) / 1_000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `512 B`, `142 KiB`, `64 MiB`.
pub fn fmt_size(n: u64) -> String {
    const K: u64 = 1024;
    if n < K {
        format!("{n} B")
    } else if n < K * K {
        format!("{} KiB", n.div_ceil(K))
    } else if n < K * K * K {
        let v = n as f64 / (K * K) as f64;
        if v.fract() == 0.0 { format!("{v:.0} MiB") } else { format!("{v:.1} MiB") }
    } else {
        format!("{:.1} GiB", n as f64 / (K * K * K) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(fmt_duration(Duration::from_micros(80)), "80µs");
        assert_eq!(fmt_duration(Duration::from_micros(35_400)), "35ms");
        assert_eq!(fmt_duration(Duration::from_millis(1_234)), "1.2s");
        assert_eq!(fmt_size(512), "512 B");
        assert_eq!(fmt_size(145_000), "142 KiB");
        assert_eq!(fmt_size(64 << 20), "64 MiB");
        assert_eq!(tidy_path(Path::new("examples/../target/./x.wasm")), PathBuf::from("target/x.wasm"));
        assert_eq!(tidy_path(Path::new("../a/../b")), PathBuf::from("../b"));
        assert_eq!(
            describe_imports(&[
                "informer-host:plugin/types@0.1.0".into(),
                "informer-host:plugin/log@0.1.0".into(),
                "informer-host:plugin/cache@0.1.0".into(),
                "wasi:cli/environment@0.2.6".into(),
            ]),
            "log,cache (+1 wasi)"
        );
    }

    #[test]
    fn label_indexes() {
        let f = label_index("app".into());
        let o: ObjectRef = Arc::new(
            crate::informer::Object::from_json(r#"{"metadata":{"name":"a","labels":{"app":"web"}}}"#).unwrap(),
        );
        assert_eq!(f(&o), ["web"]);
        let o: ObjectRef = Arc::new(crate::informer::Object::from_json(r#"{"metadata":{"name":"a"}}"#).unwrap());
        assert!(f(&o).is_empty());
    }
}
