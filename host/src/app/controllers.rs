//! The config's controllers as the program runs them: each started once
//! the informers run, writing to the source of its primary informer, and
//! stopped (in-flight reconciles finish) at shutdown before the informers stop.
//!
//! This module owns, for each `[[controller]]`:
//!
//! - its writer ([`writer_for`]): a manifests informer's writes go to the
//!   embedded cluster of its directory (what every manifests informer of
//!   that directory reads), a kube informer's to the API server through a
//!   [`KubeWriter`] over the sources' shared client;
//! - its write guard: its rules, its tenant's namespaces as
//!   [`NamespaceScope`](crate::controller::NamespaceScope) and its tenant's
//!   visibility for what it reads;
//! - its state for `/readyz` ([`Controllers::add_checks`]): starting and
//!   not synced count as not ready, failed to start is reported but not
//!   counted (as a plugin that failed to load);
//! - its log lines, in a `controller{name=...}` span.
//!
//! SIGHUP reloads them ([`Controllers::reload`]): an added controller
//! starts, a removed one stops (in-flight reconciles finish), and one whose settings, tenant or
//! wasm file changed is replaced with nothing lost
//! ([`ControllerRunner::take_over`]): the new version is loaded and queues
//! every key while the old one still runs; if it does not load, the old one
//! keeps running.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument, info_span};

use crate::cluster::ClusterWriter;
use crate::cluster::kube_writer::KubeWriter;
use crate::config::{Config, ControllerConfig, InformerConfig, SourceConfig, TenantConfig};
use crate::controller::{ControllerRunner, WriteGuard};
use crate::informer::SharedIndexInformer;
use crate::metrics::{Check, ControllerEntry, Observed, Readiness};
use crate::plugin::PluginRuntime;

use super::format::fmt_duration;
use super::plugins::file_hash;
use super::sources::Sources;

/// Where a controller whose primary informer is `informer` writes: the
/// embedded cluster of a manifests directory, or the API server.
/// `kube` is the writer kube informers share, made on first use.
pub(super) fn writer_for(
    sources: &Sources,
    informer: &InformerConfig,
    kube: &mut Option<Arc<dyn ClusterWriter>>,
) -> Result<Arc<dyn ClusterWriter>, String> {
    match &informer.source {
        SourceConfig::Manifests(m) => sources.writer_for(&m.dir).ok_or_else(|| {
            format!(
                "no embedded cluster is open for the manifests directory {} of informer {:?}",
                m.dir.display(),
                informer.name
            )
        }),
        SourceConfig::Kube(_) => {
            if let Some(w) = kube {
                return Ok(w.clone());
            }
            let client = sources
                .kube_write_client()
                .ok_or_else(|| format!("informer {:?} has no Kubernetes client", informer.name))?;
            let writer: Arc<dyn ClusterWriter> = Arc::new(KubeWriter::new(client));
            Ok(kube.insert(writer).clone())
        }
    }
}

/// A writer, or why an informer has none.
type Writer = Result<Arc<dyn ClusterWriter>, String>;

/// What is known of one configured controller.
enum State {
    Starting { since: Instant },
    Running(Box<ControllerRunner>, Box<Version>),
    Failed { error: String },
}

/// What a running controller was started from: a reload replaces it when
/// this differs.
#[derive(PartialEq)]
struct Version {
    /// Its settings (without where they were written) and its tenant's.
    settings: String,
    /// The wasm file's content hash.
    hash: Option<String>,
}

impl Version {
    fn of(cfg: &ControllerConfig, tenant: Option<&TenantConfig>, hash: Option<String>) -> Version {
        let cfg = ControllerConfig { location: Default::default(), ..cfg.clone() };
        Version { settings: format!("{cfg:?}\n{tenant:?}"), hash }
    }
}

async fn wasm_hash(cfg: &ControllerConfig) -> Option<String> {
    tokio::fs::read(&cfg.wasm).await.ok().map(|b| file_hash(&b))
}

/// The config's controllers, by name.
#[derive(Default)]
pub(super) struct Controllers {
    states: parking_lot::Mutex<BTreeMap<String, State>>,
    /// Set by [`Controllers::stop`]: controllers not started yet are not
    /// started, one that finishes starting is stopped at once.
    stopping: std::sync::atomic::AtomicBool,
    /// Every informer's writer, chosen at the first plan (informers are not
    /// reloaded), for controllers a reload adds or changes.
    writers: parking_lot::Mutex<HashMap<String, Writer>>,
}

/// One controller ready to start: its config, tenant and writer.
pub(super) struct Planned {
    pub(super) cfg: ControllerConfig,
    pub(super) tenant: Option<TenantConfig>,
    pub(super) writer: Result<Arc<dyn ClusterWriter>, String>,
}

impl Controllers {
    /// What each controller of `config` will start with (its writer chosen
    /// now, while the sources are at hand); every one counts as starting
    /// from now.
    pub(super) fn plan(&self, config: &Config, sources: &Sources) -> Vec<Planned> {
        let mut kube = None;
        *self.writers.lock() =
            config.informers.iter().map(|i| (i.name.clone(), writer_for(sources, i, &mut kube))).collect();
        let mut states = self.states.lock();
        config
            .controllers
            .iter()
            .map(|c| {
                states.insert(c.name.clone(), State::Starting { since: Instant::now() });
                self.planned(config, c)
            })
            .collect()
    }

    fn planned(&self, config: &Config, c: &ControllerConfig) -> Planned {
        let writer = match self.writers.lock().get(&c.informer) {
            Some(w) => w.clone(),
            None => Err(format!("informer {:?} is not defined", c.informer)),
        };
        Planned { cfg: c.clone(), tenant: config.tenant_of_controller(c).cloned(), writer }
    }

    /// Starts the planned controllers in the background, one after the
    /// other (loading compiles on a blocking thread), and returns at once.
    pub(super) fn start(
        self: &Arc<Self>,
        planned: Vec<Planned>,
        runtime: PluginRuntime,
        informers: HashMap<String, SharedIndexInformer>,
        config: &Config,
        observed: Observed,
    ) {
        if planned.is_empty() {
            return;
        }
        let this = self.clone();
        let file = config.file.clone();
        tokio::spawn(async move {
            tracing::info!("starting {} controller(s)", planned.len());
            for p in planned {
                this.launch(p, &runtime, &informers, &file, &observed).await;
            }
        });
    }

    /// Loads and starts one controller; records it as running or failed.
    async fn launch(
        &self,
        p: Planned,
        runtime: &PluginRuntime,
        informers: &HashMap<String, SharedIndexInformer>,
        file: &Path,
        observed: &Observed,
    ) {
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            self.states.lock().remove(&p.cfg.name);
            return;
        }
        let name = p.cfg.name.clone();
        let span = info_span!("controller", name = %name);
        let at = format!("{}:{}", file.display(), p.cfg.location);
        let version = Version::of(&p.cfg, p.tenant.as_ref(), wasm_hash(&p.cfg).await);
        let informer = p.cfg.informer.clone();
        match prepare(p, runtime.clone(), informers.clone()).instrument(span.clone()).await {
            Ok((mut runner, guard)) => {
                span.in_scope(|| runner.run());
                self.running_now(runner, version, guard, informer, observed, span).await;
            }
            Err(error) => {
                span.in_scope(|| tracing::error!("{at}: {error}; the rest keep running"));
                self.states.lock().insert(name, State::Failed { error });
            }
        }
    }

    /// Records `runner` as running, unless the host is stopping: then it
    /// is stopped at once.
    async fn running_now(
        &self,
        runner: ControllerRunner,
        version: Version,
        guard: Arc<WriteGuard>,
        informer: String,
        observed: &Observed,
        span: tracing::Span,
    ) {
        let name = runner.name().to_string();
        let entry = ControllerEntry {
            name: name.clone(),
            informer,
            reconciles: runner.shared_stats(),
            guard,
            queue: Arc::new(runner.queue_metrics()),
        };
        // Checked under the lock `stop` takes after setting the flag: a
        // runner is either seen by `stop` or stopped here.
        let late = {
            let mut states = self.states.lock();
            if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                states.remove(&name);
                Some(runner)
            } else {
                observed.set_controller(entry);
                states.insert(name, State::Running(Box::new(runner), Box::new(version)));
                None
            }
        };
        if let Some(runner) = late {
            runner.stop().instrument(span).await;
        }
    }

    /// Applies `config`'s `[[controller]]`s to what runs (SIGHUP): see the
    /// module documentation. One at a time, in the config's order.
    pub(super) async fn reload(
        &self,
        config: &Config,
        runtime: &PluginRuntime,
        informers: &HashMap<String, SharedIndexInformer>,
        observed: &Observed,
    ) {
        let removed: Vec<String> = {
            let states = self.states.lock();
            states.keys().filter(|n| !config.controllers.iter().any(|c| &c.name == *n)).cloned().collect()
        };
        for name in removed {
            let span = info_span!("controller", name = %name);
            observed.remove_controller(&name);
            let state = self.states.lock().remove(&name);
            if let Some(State::Running(runner, _)) = state {
                runner.stop().instrument(span.clone()).await;
            }
            span.in_scope(|| tracing::info!("removed from the config: stopped"));
        }
        for c in &config.controllers {
            let span = info_span!("controller", name = %c.name);
            let p = self.planned(config, c);
            let version = Version::of(c, p.tenant.as_ref(), wasm_hash(c).await);
            let current = match self.states.lock().get(&c.name) {
                None => None,
                Some(State::Failed { .. }) => Some(false),
                Some(State::Starting { .. }) => Some(true),
                Some(State::Running(_, v)) if **v == version => continue,
                Some(State::Running(..)) => Some(true),
            };
            match current {
                // Added, or failed before: start it.
                None | Some(false) => {
                    span.in_scope(|| tracing::info!("starting it (added to the config, or failed before)"));
                    self.states.lock().insert(c.name.clone(), State::Starting { since: Instant::now() });
                    self.launch(p, runtime, informers, &config.file, observed).await;
                }
                Some(true) => self.replace(p, version, runtime, informers, &config.file, observed, span).await,
            }
        }
    }

    /// Replaces a running controller by the version `p` describes, or
    /// leaves it running if that does not load.
    #[allow(clippy::too_many_arguments)]
    async fn replace(
        &self,
        p: Planned,
        version: Version,
        runtime: &PluginRuntime,
        informers: &HashMap<String, SharedIndexInformer>,
        file: &Path,
        observed: &Observed,
        span: tracing::Span,
    ) {
        let name = p.cfg.name.clone();
        let at = format!("{}:{}", file.display(), p.cfg.location);
        let informer = p.cfg.informer.clone();
        span.in_scope(|| tracing::info!("changed (settings, tenant or wasm file): replacing it"));
        let (mut next, guard) = match prepare(p, runtime.clone(), informers.clone()).instrument(span.clone()).await {
            Ok(r) => r,
            Err(error) => {
                span.in_scope(|| {
                    tracing::error!("{at}: the new version does not start; the running one keeps running: {error}")
                });
                return;
            }
        };
        let old = match self.states.lock().remove(&name) {
            Some(State::Running(runner, _)) => Some(runner),
            _ => None,
        };
        if let Some(old) = old {
            next.take_over(*old).instrument(span.clone()).await;
        } else {
            span.in_scope(|| next.run());
        }
        self.running_now(next, version, guard, informer, observed, span).await;
    }

    /// Adds a check for every controller to `r`: starting or not synced is
    /// not ready; failed to start is reported, not counted.
    pub(super) fn add_checks(&self, r: &mut Readiness) {
        for (name, state) in self.states.lock().iter() {
            let what = format!("controller {name}");
            let (ok, detail) = match state {
                State::Starting { since } => {
                    (false, format!("starting for {} (compiling and instantiating)", fmt_duration(since.elapsed())))
                }
                State::Running(runner, _) if runner.has_synced() => (true, "synced".to_string()),
                State::Running(..) => (false, "not synced: its informers have not listed yet".to_string()),
                State::Failed { error } => (true, format!("failed to start (not counted for readiness): {error}")),
            };
            r.ready &= ok;
            r.checks.push(Check { ok, what, detail });
        }
    }

    /// How many controllers are known (starting, running or failed).
    pub(super) fn configured(&self) -> usize {
        self.states.lock().len()
    }

    /// How many controllers run.
    pub(super) fn running(&self) -> usize {
        self.states.lock().values().filter(|s| matches!(s, State::Running(..))).count()
    }

    /// Stops every running controller: no more keys are queued, in-flight
    /// reconciles finish (within `grace`), the workers end.
    pub(super) async fn stop(&self, grace: Duration, observed: &Observed) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        let runners: Vec<ControllerRunner> = {
            let mut states = self.states.lock();
            let names: Vec<String> =
                states.iter().filter(|(_, s)| matches!(s, State::Running(..))).map(|(n, _)| n.clone()).collect();
            names
                .into_iter()
                .filter_map(|n| match states.remove(&n) {
                    Some(State::Running(r, _)) => Some(*r),
                    _ => None,
                })
                .collect()
        };
        if runners.is_empty() {
            return;
        }
        for r in &runners {
            observed.remove_controller(r.name());
        }
        let t = Instant::now();
        let n = runners.len();
        let stops = runners.into_iter().map(|r| {
            let span = info_span!("controller", name = %r.name());
            r.stop().instrument(span)
        });
        match tokio::time::timeout(grace, futures::future::join_all(stops)).await {
            Ok(_) => tracing::info!("{n} controller(s) stopped in {}", fmt_duration(t.elapsed())),
            Err(_) => tracing::warn!(
                "grace period of {} elapsed with reconciles still running; stopping anyway",
                humantime::format_duration(grace)
            ),
        }
    }
}

/// Loads one controller and registers its handlers (its workers are not
/// started); its write guard too.
async fn prepare(
    p: Planned,
    runtime: PluginRuntime,
    informers: HashMap<String, SharedIndexInformer>,
) -> Result<(ControllerRunner, Arc<WriteGuard>), String> {
    let writer = p.writer?;
    let guard = Arc::new(WriteGuard::new(p.cfg.guard_config(p.tenant.as_ref()), writer));
    let kept = guard.clone();
    let visibility = p.tenant.as_ref().map(TenantConfig::visibility);
    let options = crate::controller::ControllerOptions {
        max_pending: p.tenant.as_ref().and_then(|t| t.max_pending),
        ..p.cfg.options()
    };
    let spec = p.cfg.spec();
    let handle = tokio::runtime::Handle::current();
    let span = tracing::Span::current();
    let started = Instant::now();
    let runner = tokio::task::spawn_blocking(move || {
        let _entered = handle.enter();
        span.in_scope(|| ControllerRunner::prepare(&runtime, spec, &informers, guard, options, visibility))
    })
    .await
    .map_err(|e| format!("the starting task failed: {e}"))?
    .map_err(|e| e.to_string())?;
    let c = &p.cfg;
    let watches: Vec<&str> = c.watches.iter().map(|w| w.informer.as_str()).collect();
    tracing::info!(
        "started in {}: reconciles {} of informer {}{}, {} worker(s), {} rule(s){}{}",
        fmt_duration(started.elapsed()),
        c.primary_kind,
        c.informer,
        if watches.is_empty() { String::new() } else { format!(" (watches {})", watches.join(", ")) },
        c.max_concurrent_reconciles,
        c.rules.len(),
        c.tenant.as_ref().map(|t| format!(", tenant {t}")).unwrap_or_default(),
        if c.dry_run { ", dry run" } else { "" },
    );
    Ok((runner, kept))
}
