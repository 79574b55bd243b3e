//! [`App`]: a host started from a [`Config`], run until a signal, and shut
//! down in order.
//!
//! Start-up goes in this order: open every informer's source; serve
//! `/metrics`, `/healthz` and `/readyz` (and the admin API when `[admin]`
//! is configured); start the informers; then load the plugins, all at once
//! in the background ([`super::plugins`]), each registering with its
//! informer as soon as it has loaded. Health answers, and the healthy
//! plugins get their notifications, while a slow plugin is still loading;
//! `/readyz` says not ready until every plugin has loaded (or failed) and
//! handled its initial list. The controllers start after the informers,
//! in the background too ([`super::controllers`]), and count as not ready
//! until they started and their informers synced. On SIGINT/SIGTERM the
//! controllers stop first (in-flight reconciles finish), then the informers stop,
//! in-flight calls get a grace period, and the servers stop; SIGHUP
//! meanwhile re-reads the config ([`super::reload`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::admin::AdminServer;
use crate::admin_api::{self, AdminConfig};
use crate::config::{Config, DEFAULT_SHUTDOWN_GRACE, InformerConfig, PluginConfig};
use crate::coordination::{Coordinator, CoordinatorConfig};
use crate::informer::{
    IndexFunc, InformerOptions, MINIMUM_RESYNC_PERIOD, SharedIndexInformer, field_indexers, label_index, strip_fields,
};
use crate::kube_plugins::{PluginResources, PluginResourcesOptions};
use crate::metrics::{InformerEntry, Observed, Readiness};
use crate::oci::{OciConfig, OciPuller};

use super::format::{fmt_duration, fmt_size};
use super::plugins::Plugins;
use super::sources::Sources;
use super::{AppError, RunOptions, health};

/// The resync check period an informer starts with: its own resync,
/// lowered to the shortest resync of a plugin of the config on it.
///
/// Plugins register after the informer has started, when a shorter period
/// no longer lowers the check period (client-go raises the handler's
/// instead); starting with the period they need keeps their resyncs as if
/// they had registered before start. An informer without resync (zero)
/// keeps none, as client-go does.
fn resync_check_period(informer: &InformerConfig, plugins: &[PluginConfig]) -> Duration {
    if informer.resync.is_zero() {
        return Duration::ZERO;
    }
    plugins
        .iter()
        .filter(|p| p.informer == informer.name)
        .filter_map(|p| p.resync)
        .filter(|d| !d.is_zero())
        .map(|d| d.max(MINIMUM_RESYNC_PERIOD))
        .fold(informer.resync, Duration::min)
}

/// This replica's name: the pod's (`POD_NAME`, from the downward API in
/// `deploy/`), else the host's.
fn replica_identity() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "informer-host".into())
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
    /// The controller of the cluster's `Plugin` resources, if configured.
    plugin_resources: Option<Arc<PluginResources>>,
    /// SIGHUP, listened for from the start so it never kills the process.
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
    grace: Duration,
    /// The sources: an embedded cluster watches its directory while it
    /// is held.
    _sources: Sources,
}

impl App {
    /// Starts the host and waits until every plugin of the config has
    /// loaded or failed (the informers need not have synced).
    pub async fn start(config: &Config, opts: &RunOptions) -> Result<App, AppError> {
        let app = Self::launch(config, opts).await?;
        app.plugins.config_loaded().await;
        Ok(app)
    }

    /// Opens every source, serves metrics and health (and the admin API),
    /// starts the informers, starts loading the plugins, and returns: the
    /// plugins load in the background ([`App::plugins_loaded`]).
    pub async fn launch(config: &Config, opts: &RunOptions) -> Result<App, AppError> {
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

        // Informers, not yet running.
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
                    // No handler uses the default period (each plugin has
                    // its own); it sets the starting check period.
                    default_resync_period: resync_check_period(cfg, &config.plugins),
                    fifo: cfg.fifo,
                    ..InformerOptions::default()
                },
            );
            if cfg.strip.any() {
                // Before start: the informer takes a transform only then.
                informer.set_transform(strip_fields(cfg.strip)).map_err(|e| AppError::Informer {
                    at: at.clone(),
                    name: cfg.name.clone(),
                    message: format!("cannot set the strip transform: {e}"),
                })?;
            }
            if !cfg.indexers.is_empty() || !cfg.field_indexers.is_empty() {
                let field = field_indexers(&cfg.field_indexers).map_err(|message| AppError::Informer {
                    at: at.clone(),
                    name: cfg.name.clone(),
                    message,
                })?;
                let map: HashMap<String, IndexFunc> =
                    cfg.indexers.iter().map(|k| (k.clone(), label_index(k.clone()))).chain(field).collect();
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

        // The plugins' registry (made now if anything needs it, else on the
        // first SIGHUP that adds a plugin).
        let plugins = Arc::new(Plugins::new(observed.clone(), config.clone(), informers.clone()));
        plugins.expect_config_plugins(config);
        if !config.plugins.is_empty() || !config.controllers.is_empty() || config.admin.is_some() {
            plugins.registry().map_err(AppError::Runtime)?;
        }

        // Metrics and health.
        let metrics_addr = opts.metrics_addr.or(config.host.metrics_addr);
        let admin_stop = CancellationToken::new();
        let mut servers = Vec::new();
        let admin_addr = match metrics_addr {
            Some(addr) => {
                let server = health::serve(addr, &plugins, admin_stop.clone()).await?;
                let a = server.local_addr;
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
                let router = admin_api::router_with_wasm_dirs(
                    registry,
                    AdminConfig { token: admin.token.expose().to_string(), max_upload: admin.max_upload },
                    admin.wasm_dirs.clone(),
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

        // Run the informers, then load the plugins: each joins its informer
        // as soon as it has loaded and gets the cache as initial-list adds.
        let started = Instant::now();
        let mut running = Vec::new();
        for (cfg, informer) in informers {
            let span = info_span!("informer", name = %cfg.name);
            let task = tokio::spawn({
                let informer = informer.clone();
                let stop = stop.child_token();
                async move { informer.run(stop).await }.instrument(span.clone())
            });
            tokio::spawn(health::report_synced(informer, started, stop.clone()).instrument(span));
            running.push(RunningInformer { name: cfg.name.clone(), task });
        }
        plugins.load_config_plugins(config);
        // Controllers once the informers run: each reconciles as soon as
        // it has loaded and its informers deliver their initial lists.
        // Planned even without controllers: the plan keeps each informer's
        // writer for controllers a reload adds.
        let planned = plugins.controllers.plan(config, &sources);
        if !planned.is_empty() {
            let runtime = plugins.registry().map_err(AppError::Runtime)?.runtime().clone();
            plugins.controllers.start(planned, runtime, plugins.informers_by_name(), config, observed.clone());
        }
        // The cluster's Plugin resources, beside the file's plugins.
        let mut plugin_resources = None;
        if let Some(pr) = &config.plugin_resources {
            let client = sources.client().await.map_err(|message| AppError::Source {
                at: config.file.display().to_string(),
                name: "plugin_resources".into(),
                source_kind: "kube",
                message,
            })?;
            let registry = plugins.registry().map_err(AppError::Runtime)?;
            let options = PluginResourcesOptions {
                write_client: sources.kube_write_client(),
                namespace: pr.namespace.clone(),
                identity: pr.identity.clone().unwrap_or_else(replica_identity),
                max_component_bytes: pr.max_component_size,
                oci: Some(Arc::new(OciPuller::new(OciConfig {
                    cache_dir: pr.oci_cache_dir.clone().unwrap_or_else(|| match &config.host.cache_dir {
                        Some(dir) => dir.join("oci"),
                        None => std::env::temp_dir().join("informer-host-oci"),
                    }),
                    max_bytes: pr.max_component_size as u64,
                    plain_http: pr.plain_http_registries.clone(),
                    internal_registries: pr.internal_registries.clone(),
                    ..OciConfig::new("")
                }))),
                ..PluginResourcesOptions::default()
            };
            let coordinator = if pr.leases {
                let namespace = pr.lease_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
                let c = Coordinator::start(
                    client.clone(),
                    CoordinatorConfig::new(namespace, options.identity.clone()),
                    // Its own token: the leases go only after the plugins stopped.
                    CancellationToken::new(),
                )
                .map_err(|e| AppError::Source {
                    at: config.file.display().to_string(),
                    name: "plugin_resources".into(),
                    source_kind: "kube",
                    message: e.to_string(),
                })?;
                Some(c)
            } else {
                None
            };
            tracing::info!(identity = %options.identity, leases = pr.leases, "loading the cluster's Plugin resources");
            let pr = PluginResources::start_coordinated(client, registry, options, coordinator, stop.child_token());
            let weak = Arc::downgrade(&pr);
            observed.set_plugin_resources(Arc::new(move || weak.upgrade().map(|p| p.snapshot()).unwrap_or_default()));
            let weak = Arc::downgrade(&pr);
            observed
                .set_tenant_plugins(Arc::new(move || weak.upgrade().map(|p| p.registry_names()).unwrap_or_default()));
            plugin_resources = Some(pr);
        }
        tokio::spawn(health::report_ready(plugins.clone(), started, stop.clone()));

        Ok(App {
            observed,
            admin_addr,
            api_addr,
            stop,
            admin_stop,
            servers,
            informers: running,
            plugins,
            plugin_resources,
            #[cfg(unix)]
            hup,
            grace,
            _sources: sources,
        })
    }

    /// Resolves once every plugin of the config has loaded or failed.
    pub async fn plugins_loaded(&self) {
        self.plugins.config_loaded().await
    }

    /// What `/readyz` answers: [`Observed::readiness`], and every plugin
    /// still loading as not ready.
    pub fn readiness(&self) -> Readiness {
        self.plugins.readiness()
    }

    /// A token that, when cancelled, makes [`App::run_until_signal`] return.
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
        let App { stop, admin_stop, servers, informers, grace, plugins, plugin_resources, .. } = self;
        // Controllers first, while their informers still feed the caches
        // their last reconciles read: no new keys, in-flight ones finish.
        plugins.controllers.stop(grace, &plugins.observed).await;
        // The Plugin resources' plugins stop, then their leases go to the
        // other replicas at once.
        if let Some(pr) = plugin_resources
            && tokio::time::timeout(grace, pr.shutdown()).await.is_err()
        {
            tracing::warn!("plugin resources did not stop within the grace period; their leases will expire");
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Location;

    #[test]
    fn plugins_lower_the_resync_check_period_their_informer_starts_with() {
        let text = "[[informer]]\nname = \"a\"\nsource = \"manifests\"\ndir = \".\"\nresync = \"5m\"\n\
                    [[informer]]\nname = \"b\"\nsource = \"manifests\"\ndir = \".\"\n";
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse(text, "host.toml", dir.path()).unwrap();
        let plugin = |informer: &str, resync: Option<Duration>| {
            let mut p = PluginConfig {
                name: "p".into(),
                wasm: "p.wasm".into(),
                informer: informer.into(),
                resync,
                limits: Default::default(),
                grants: Default::default(),
                grant_names: Vec::new(),
                config_json: "{}".into(),
                on_trap: Default::default(),
                idle_timeout: None,
                on_wake: Default::default(),
                tenant: None,
                watch: false,
                on_swap: Default::default(),
                max_pending: None,
                location: Location::default(),
            };
            p.name = format!("{informer}-{resync:?}");
            p
        };
        let (a, b) = (&config.informers[0], &config.informers[1]);
        let secs = Duration::from_secs;
        assert_eq!(resync_check_period(a, &[]), secs(300));
        assert_eq!(
            resync_check_period(
                a,
                &[
                    plugin("a", Some(secs(60))),
                    plugin("a", Some(secs(30))),
                    plugin("a", None),
                    plugin("b", Some(secs(2)))
                ]
            ),
            secs(30)
        );
        // Zero is "no resync" for that plugin, not a shorter period.
        assert_eq!(resync_check_period(a, &[plugin("a", Some(Duration::ZERO))]), secs(300));
        assert_eq!(resync_check_period(a, &[plugin("a", Some(Duration::from_millis(10)))]), MINIMUM_RESYNC_PERIOD);
        // An informer without resync has no resync check at all.
        assert_eq!(resync_check_period(b, &[plugin("b", Some(secs(30)))]), Duration::ZERO);
    }
}
