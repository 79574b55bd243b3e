//! The program: turns a [`Config`] into running informers and plugins.
//!
//! This module owns the wiring of the host proper: it opens each
//! informer's source, loads each plugin through the [`PluginRuntime`]
//! (a plugin that fails to load is reported and marked failed; the rest
//! keep running), registers the handlers with their resync periods, serves
//! metrics and health, writes the start-up lines a person reads, and shuts
//! down in order on SIGINT/SIGTERM: informers stop, in-flight calls get a
//! grace period, the process exits 0. It also implements `check`, which
//! loads every plugin without starting anything, and sets up logging.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use crate::admin::AdminServer;
use crate::config::{Config, DEFAULT_SHUTDOWN_GRACE, InformerConfig, LogFormat, PluginConfig, SourceConfig};
use crate::informer::{IndexFunc, InformerOptions, ListerWatcher, ObjectRef, SharedIndexInformer};
use crate::metrics::{InformerEntry, Observed, PluginEntry, PluginState};
use crate::plugin::{CacheView, LoadedPlugin, PluginError, PluginInfo, PluginRuntime, RuntimeConfig};
use crate::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use crate::source::manifests::{ManifestFilter, ManifestsSource};

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
    stop: CancellationToken,
    admin_stop: CancellationToken,
    admin: Option<AdminServer>,
    informers: Vec<RunningInformer>,
    /// Kept for the lifetime of the host (hot swap builds on them).
    _plugins: Vec<LoadedPlugin>,
    /// Kept alive for the host's lifetime: its epoch ticker enforces every
    /// call's deadline, and stops when the last clone is dropped.
    _runtime: Option<PluginRuntime>,
    grace: Duration,
}

impl App {
    /// Opens every source, loads every plugin, starts the admin server and
    /// the informers. Returns once everything is started (not synced).
    pub async fn start(config: &Config, opts: &RunOptions) -> Result<App, AppError> {
        let stop = CancellationToken::new();
        let observed = Observed::new();
        let grace = opts.shutdown_grace.or(config.host.shutdown_grace).unwrap_or(DEFAULT_SHUTDOWN_GRACE);

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

        // Plugins.
        let mut loaded_plugins = Vec::new();
        let mut plugin_runtime = None;
        if !config.plugins.is_empty() {
            let runtime = plugin_runtime.insert(runtime(config)?);
            for p in &config.plugins {
                let Some((icfg, informer)) = informers.iter().find(|(c, _)| c.name == p.informer) else {
                    // Config validation guarantees the informer exists.
                    continue;
                };
                let span = info_span!("plugin", name = %p.name);
                let state = load_and_register(runtime, p, icfg, informer).instrument(span).await;
                let state = match state {
                    Ok((loaded, state)) => {
                        loaded_plugins.push(loaded);
                        state
                    }
                    Err(error) => {
                        tracing::error!(plugin = %p.name, "{}: {error}; the other plugins keep running", config.at(p.location));
                        PluginState::Failed { error: error.to_string() }
                    }
                };
                observed.set_plugin(PluginEntry { name: p.name.clone(), informer: p.informer.clone(), state });
            }
        }

        // Metrics and health.
        let metrics_addr = opts.metrics_addr.or(config.host.metrics_addr);
        let admin_stop = CancellationToken::new();
        let admin = match metrics_addr {
            Some(addr) => {
                let server = AdminServer::start(addr, observed.clone(), admin_stop.clone())
                    .await
                    .map_err(|e| AppError::Bind { addr, message: e.to_string() })?;
                let a = server.local_addr;
                tracing::info!("serving http://{a}/metrics, http://{a}/healthz and http://{a}/readyz");
                Some(server)
            }
            None => None,
        };
        let admin_addr = admin.as_ref().map(|a| a.local_addr);

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
        tokio::spawn(report_ready(observed.clone(), started, stop.clone()));

        Ok(App {
            observed,
            admin_addr,
            stop,
            admin_stop,
            admin,
            informers: running,
            _plugins: loaded_plugins,
            _runtime: plugin_runtime,
            grace,
        })
    }

    /// A token that, when cancelled, makes [`App::wait`] return.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Waits for SIGINT or SIGTERM (or the stop token), then shuts down.
    pub async fn run_until_signal(self) {
        let stop = self.stop.clone();
        tokio::select! {
            sig = shutdown_signal() => {
                tracing::info!("received {sig}, shutting down (again to exit at once)");
                tokio::spawn(async {
                    let sig = shutdown_signal().await;
                    tracing::warn!("received {sig} again, exiting at once");
                    std::process::exit(130);
                });
            }
            _ = stop.cancelled() => {}
        }
        self.shutdown().await;
    }

    /// Stops the informers, lets in-flight calls finish within the grace
    /// period, and stops the admin server.
    pub async fn shutdown(self) {
        let App { stop, admin_stop, admin, informers, grace, .. } = self;
        tracing::info!(
            "stopping {} informer(s); in-flight calls have {} to finish",
            informers.len(),
            humantime::format_duration(grace)
        );
        stop.cancel();
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
        if let Some(a) = admin {
            a.join().await;
        }
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

async fn load_and_register(
    runtime: &PluginRuntime,
    p: &PluginConfig,
    icfg: &InformerConfig,
    informer: &SharedIndexInformer,
) -> Result<(LoadedPlugin, PluginState), String> {
    let loaded = {
        let runtime = runtime.clone();
        let spec = p.spec();
        tokio::task::spawn_blocking(move || runtime.load(spec))
            .await
            .map_err(|e| format!("loading panicked: {e}"))?
            .map_err(|e| e.to_string())?
    };
    tracing::info!("{}", describe_load(&loaded.info));
    let handler = loaded.handler(Some(CacheView::new(informer.indexer().clone()))).map_err(|e| e.to_string())?;
    let resync = p.resync.unwrap_or(icfg.resync);
    let registration = informer
        .add_named_event_handler(p.name.clone(), Box::new(handler), resync)
        .map_err(|e| format!("cannot register with informer {:?}: {e}", p.informer))?;
    let state = PluginState::Running { registration, stats: loaded.stats.clone(), info: Box::new(loaded.info.clone()) };
    Ok((loaded, state))
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

async fn report_ready(observed: Observed, started: Instant, stop: CancellationToken) {
    let mut warned = false;
    loop {
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
        let mut rows = vec![["PLUGIN", "FILE", "SIZE", "WORLD", "IMPORTS", "GRANTED", "LIMITS"].map(String::from)];
        for p in &self.plugins {
            let limits = describe_limits(&p.config);
            let granted = if p.config.grant_names.is_empty() { "-".into() } else { p.config.grant_names.join(",") };
            let file = tidy_path(&p.config.wasm).display().to_string();
            let row = match &p.result {
                Ok(info) => [
                    p.config.name.clone(),
                    file,
                    fmt_size(info.size_bytes),
                    info.world.clone(),
                    describe_imports(&info.imports),
                    granted,
                    limits,
                ],
                Err(_) => [p.config.name.clone(), file, "-".into(), "FAILED".into(), "-".into(), granted, limits],
            };
            rows.push(row);
        }
        let mut widths = [0usize; 7];
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
    format!(
        "{fuel}, deadline {}, memory {}",
        humantime::format_duration(p.limits.deadline_per_call),
        fmt_size(p.limits.memory_bytes as u64)
    )
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
        if short != "types" {
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
