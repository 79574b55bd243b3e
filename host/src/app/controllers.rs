//! The config's controllers as the program runs them: each started once
//! the informers run, writing to the source of its primary informer, and
//! stopped (drained) at shutdown before the informers stop.
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
//! Controllers are not reloaded by SIGHUP: a changed `[[controller]]`
//! needs a restart (the reload says so).

use std::collections::{BTreeMap, HashMap};
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
                .kube_client()
                .ok_or_else(|| format!("informer {:?} has no Kubernetes client", informer.name))?;
            let writer: Arc<dyn ClusterWriter> = Arc::new(KubeWriter::new(client));
            Ok(kube.insert(writer).clone())
        }
    }
}

/// What is known of one configured controller.
enum State {
    Starting { since: Instant },
    Running(Box<ControllerRunner>),
    Failed { error: String },
}

/// The config's controllers, by name.
#[derive(Default)]
pub(super) struct Controllers {
    states: parking_lot::Mutex<BTreeMap<String, State>>,
    /// Set by [`Controllers::stop`]: controllers not started yet are not
    /// started, one that finishes starting is stopped at once.
    stopping: std::sync::atomic::AtomicBool,
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
        let mut states = self.states.lock();
        config
            .controllers
            .iter()
            .map(|c| {
                states.insert(c.name.clone(), State::Starting { since: Instant::now() });
                let writer = match config.informer(&c.informer) {
                    Some(i) => writer_for(sources, i, &mut kube),
                    None => Err(format!("informer {:?} is not defined", c.informer)),
                };
                Planned { cfg: c.clone(), tenant: config.tenant_of_controller(c).cloned(), writer }
            })
            .collect()
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
                if this.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    this.states.lock().remove(&p.cfg.name);
                    continue;
                }
                let name = p.cfg.name.clone();
                let informer = p.cfg.informer.clone();
                let span = info_span!("controller", name = %name);
                let at = format!("{}:{}", file.display(), p.cfg.location);
                let outcome = start_one(p, runtime.clone(), informers.clone()).instrument(span.clone()).await;
                match outcome {
                    Ok((runner, guard)) => {
                        let entry = ControllerEntry {
                            name: name.clone(),
                            informer: informer.clone(),
                            reconciles: runner.shared_stats(),
                            guard,
                            queue: Arc::new(runner.queue_metrics()),
                        };
                        // Checked under the lock `stop` takes after setting
                        // the flag: a runner is either seen by `stop` or
                        // stopped here.
                        let late = {
                            let mut states = this.states.lock();
                            if this.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                                states.remove(&name);
                                Some(runner)
                            } else {
                                observed.set_controller(entry);
                                states.insert(name, State::Running(Box::new(runner)));
                                None
                            }
                        };
                        if let Some(runner) = late {
                            runner.stop().instrument(span).await;
                        }
                    }
                    Err(error) => {
                        span.in_scope(|| tracing::error!("{at}: {error}; the rest keep running"));
                        this.states.lock().insert(name, State::Failed { error });
                    }
                }
            }
        });
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
                State::Running(runner) if runner.has_synced() => (true, "synced".to_string()),
                State::Running(_) => (false, "not synced: its informers have not listed yet".to_string()),
                State::Failed { error } => (true, format!("failed to start (not counted for readiness): {error}")),
            };
            r.ready &= ok;
            r.checks.push(Check { ok, what, detail });
        }
    }

    /// How many controllers run.
    pub(super) fn running(&self) -> usize {
        self.states.lock().values().filter(|s| matches!(s, State::Running(_))).count()
    }

    /// Stops every running controller: no more keys are queued, in-flight
    /// reconciles finish (within `grace`), the workers end.
    pub(super) async fn stop(&self, grace: Duration, observed: &Observed) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        let runners: Vec<ControllerRunner> = {
            let mut states = self.states.lock();
            let names: Vec<String> =
                states.iter().filter(|(_, s)| matches!(s, State::Running(_))).map(|(n, _)| n.clone()).collect();
            names
                .into_iter()
                .filter_map(|n| match states.remove(&n) {
                    Some(State::Running(r)) => Some(*r),
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

/// Loads one controller and starts its workers; its write guard too.
async fn start_one(
    p: Planned,
    runtime: PluginRuntime,
    informers: HashMap<String, SharedIndexInformer>,
) -> Result<(ControllerRunner, Arc<WriteGuard>), String> {
    let writer = p.writer?;
    let guard = Arc::new(WriteGuard::new(p.cfg.guard_config(p.tenant.as_ref()), writer));
    let kept = guard.clone();
    let visibility = p.tenant.as_ref().map(TenantConfig::visibility);
    let options = p.cfg.options();
    let spec = p.cfg.spec();
    let handle = tokio::runtime::Handle::current();
    let span = tracing::Span::current();
    let started = Instant::now();
    let runner = tokio::task::spawn_blocking(move || {
        let _entered = handle.enter();
        span.in_scope(|| ControllerRunner::start(&runtime, spec, &informers, guard, options, visibility))
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
