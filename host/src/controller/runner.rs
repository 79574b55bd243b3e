//! The runner: a controller's workqueue, its workers, and what feeds them.
//!
//! This module owns one running controller: a [`RateLimitingQueue`] of
//! primary keys (client-go's semantics: a key queued twice is reconciled
//! once, never by two workers at once, and again after `done` if it
//! changed meanwhile), `max_concurrent_reconciles` workers each owning an
//! instance (a trapped one is replaced by a fresh one), and the informer
//! handlers that enqueue keys, registered here and written in `feed`. What a reconcile's outcome means is decided
//! here, as client-go's controllers do it:
//!
//! - `done`: `forget` the key (its failures are reset);
//! - `requeue-after(d)`: `forget`, then `add_after(d)`;
//! - an error or a trap: `add_rate_limited` (5 ms doubling to 1000 s, and
//!   an overall 10/s bucket, unless configured otherwise).
//!
//! A controller is level-driven, so a trap is not a skipped notification:
//! the key is reconciled again, in a fresh instance, after its backoff.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::task::JoinHandle;

use super::feed::{Enqueuer, KeyMap, PluginMapper};
use super::instance::{ControllerInstance, LoadedController, ReconcileError};
use super::{ControllerCtx, KeyQueue, Outcome, WriteGuard};
use crate::informer::{HandlerOptions, InformerError, Registration, ResourceEventHandler, SharedIndexInformer};
use crate::plugin::{CacheView, PluginError, PluginRuntime, PluginSpec, Visibility};
use crate::workqueue::{
    ControllerRateLimiterConfig, InMemoryMetrics, QueueConfig, QueueMetricsSnapshot, RateLimitingQueue,
};

/// Most keys one `map` call may return; more are dropped with a warning.
pub const MAX_MAPPED_KEYS: usize = 10_000;

/// How a secondary informer's objects become primary keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// Through the object's controller owner reference to an object of the
    /// primary kind (controller-runtime's `Owns`).
    Owner,
    /// Through the value of this label: the name of the primary object.
    Label(String),
    /// Through the plugin's `map` export.
    Plugin,
}

/// A secondary informer of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secondary {
    pub informer: String,
    pub mapping: Mapping,
}

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The informer whose objects' keys are reconciled.
    pub primary: String,
    /// `kind` of the primary objects (owner references name it).
    pub primary_kind: String,
    pub secondaries: Vec<Secondary>,
    /// Workers, each with its own instance (controller-runtime's
    /// `MaxConcurrentReconciles`).
    pub max_concurrent_reconciles: usize,
    pub rate_limiter: ControllerRateLimiterConfig,
    /// How often every key is enqueued again (zero: never), through the
    /// primary informer; `None`: each informer's default resync period, as
    /// client-go's `AddEventHandler`.
    pub resync: Option<std::time::Duration>,
    /// Pending notifications beyond this are coalesced by key, per
    /// handler (the tenant's `max_pending`, as for its handler plugins).
    pub max_pending: Option<usize>,
}

impl ControllerOptions {
    pub fn new(primary: impl Into<String>, primary_kind: impl Into<String>) -> Self {
        ControllerOptions {
            primary: primary.into(),
            primary_kind: primary_kind.into(),
            secondaries: Vec::new(),
            max_concurrent_reconciles: 1,
            rate_limiter: ControllerRateLimiterConfig::default(),
            resync: None,
            max_pending: None,
        }
    }
}

/// What a controller's reconciles did.
#[derive(Debug, Default)]
pub struct ReconcileStats {
    pub succeeded: AtomicU64,
    /// Reconciles that returned an error (requeued with backoff).
    pub failed: AtomicU64,
    /// Reconciles that trapped (requeued with backoff, fresh instance).
    pub trapped: AtomicU64,
    /// Successful reconciles that asked for a requeue after a delay.
    pub requeued_after: AtomicU64,
    /// Keys that could not be mapped because `map` failed.
    pub map_failures: AtomicU64,
}

/// Why a controller did not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("controller {plugin}: no informer named {informer:?}")]
    UnknownInformer { plugin: String, informer: String },
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("controller {plugin}: {source}")]
    Informer { plugin: String, source: InformerError },
}

/// A running controller. Dropping it does not stop it: call
/// [`ControllerRunner::stop`].
pub struct ControllerRunner {
    name: String,
    queue: Arc<RateLimitingQueue<String>>,
    /// The workqueue's metrics (client-go's), named after the controller.
    queue_metrics: Arc<InMemoryMetrics>,
    loaded: Arc<LoadedController>,
    guard: Arc<WriteGuard>,
    stats: Arc<ReconcileStats>,
    registrations: Vec<(SharedIndexInformer, Registration)>,
    ctx: Arc<ControllerCtx>,
    /// Keys whose reconcile asked for another (a failure, a requeue-after)
    /// while the queue was shutting down, with when.
    leftover: Leftover,
    /// `max_concurrent_reconciles`: how many workers [`ControllerRunner::run`]
    /// starts.
    concurrency: usize,
    workers: Vec<JoinHandle<()>>,
}

impl ControllerRunner {
    /// Loads the controller in `spec`, registers its handlers on the
    /// informers (by name in `informers`) and starts its workers. The
    /// plugin sees only objects `visibility` accepts (its tenant's). Call it
    /// inside a Tokio runtime; compiling blocks the calling thread.
    pub fn start(
        runtime: &PluginRuntime,
        spec: PluginSpec,
        informers: &HashMap<String, SharedIndexInformer>,
        guard: Arc<WriteGuard>,
        options: ControllerOptions,
        visibility: Option<Visibility>,
    ) -> Result<ControllerRunner, ControllerError> {
        let mut runner = Self::prepare(runtime, spec, informers, guard, options, visibility)?;
        runner.run();
        Ok(runner)
    }

    /// As [`ControllerRunner::start`], without starting the workers: keys
    /// are queued (the informers' caches replayed as adds) but nothing is
    /// reconciled until [`ControllerRunner::run`]. A replacement is
    /// prepared so, while the version it replaces still runs.
    pub fn prepare(
        runtime: &PluginRuntime,
        spec: PluginSpec,
        informers: &HashMap<String, SharedIndexInformer>,
        guard: Arc<WriteGuard>,
        options: ControllerOptions,
        visibility: Option<Visibility>,
    ) -> Result<ControllerRunner, ControllerError> {
        Self::prepare_from(runtime, spec, None, informers, guard, options, visibility)
    }

    /// As [`ControllerRunner::prepare`] for a component in memory (one
    /// pulled from a registry) rather than at `spec.wasm`.
    pub fn prepare_bytes(
        runtime: &PluginRuntime,
        spec: PluginSpec,
        bytes: &[u8],
        informers: &HashMap<String, SharedIndexInformer>,
        guard: Arc<WriteGuard>,
        options: ControllerOptions,
        visibility: Option<Visibility>,
    ) -> Result<ControllerRunner, ControllerError> {
        Self::prepare_from(runtime, spec, Some(bytes), informers, guard, options, visibility)
    }

    fn prepare_from(
        runtime: &PluginRuntime,
        spec: PluginSpec,
        bytes: Option<&[u8]>,
        informers: &HashMap<String, SharedIndexInformer>,
        guard: Arc<WriteGuard>,
        options: ControllerOptions,
        visibility: Option<Visibility>,
    ) -> Result<ControllerRunner, ControllerError> {
        let name = spec.name.clone();
        // Tenants are the delivery workers' fairness groups, for a
        // controller's handlers (a `map` runs on them) as for plugins.
        let group = spec.tenant.clone();
        let informer = |informer: &str| {
            informers
                .get(informer)
                .cloned()
                .ok_or_else(|| ControllerError::UnknownInformer { plugin: name.clone(), informer: informer.into() })
        };
        let view = |i: &SharedIndexInformer| match &visibility {
            Some(v) => CacheView::filtered(i.indexer().clone(), v.clone()),
            None => CacheView::new(i.indexer().clone()),
        };
        let primary = informer(&options.primary)?;
        let mut stores = HashMap::new();
        stores.insert(options.primary.clone(), view(&primary));
        for s in &options.secondaries {
            stores.insert(s.informer.clone(), view(&informer(&s.informer)?));
        }
        let queue_metrics = InMemoryMetrics::new();
        let queue = Arc::new(RateLimitingQueue::with_config(
            QueueConfig::named(name.clone(), queue_metrics.clone()),
            options.rate_limiter.build(),
        ));
        let keys = KeyQueue::new(&queue);
        let ctx = Arc::new(ControllerCtx {
            runtime: tokio::runtime::Handle::current(),
            guard: guard.clone(),
            primary: stores.get(&options.primary).cloned(),
            stores,
            keys: keys.clone(),
        });
        let loaded = Arc::new(match bytes {
            Some(bytes) => runtime.load_controller_bytes(spec, bytes, ctx.clone())?,
            None => runtime.load_controller(spec, ctx.clone())?,
        });
        let stats = Arc::new(ReconcileStats::default());
        let filter = visibility.clone();
        let mut registrations = Vec::new();
        let resync = options.resync;
        let register = |informer: &SharedIndexInformer, handler: Box<dyn ResourceEventHandler>, what: &str| {
            // The informer's default resync, as client-go's `AddEventHandler`
            // gives it: a resync enqueues every key. A resync of the
            // controller's own enqueues the primary's keys, which are every
            // key: the secondaries need none.
            let period = match resync {
                None => informer.default_resync_period(),
                Some(d) if what == "primary" => d,
                Some(_) => std::time::Duration::ZERO,
            };
            let options = HandlerOptions {
                filter: filter.clone(),
                resync_period: period,
                group: group.clone(),
                max_pending: options.max_pending,
                ..HandlerOptions::named(format!("{name}/{what}"))
            };
            informer
                .add_event_handler_with_options(handler, options)
                .map_err(|source| ControllerError::Informer { plugin: name.clone(), source })
        };
        let primary_view = ctx.primary.clone().expect("inserted above");
        registrations.push((
            primary.clone(),
            register(&primary, Box::new(Enqueuer { map: KeyMap::Own, keys: keys.clone() }), "primary")?,
        ));
        for s in &options.secondaries {
            let i = informer(&s.informer)?;
            let handler: Box<dyn ResourceEventHandler> = match &s.mapping {
                Mapping::Owner => Box::new(Enqueuer {
                    map: KeyMap::Owner { kind: options.primary_kind.clone(), primary: primary_view.clone() },
                    keys: keys.clone(),
                }),
                Mapping::Label(label) => Box::new(Enqueuer {
                    map: KeyMap::Label { label: label.clone(), primary: primary_view.clone() },
                    keys: keys.clone(),
                }),
                Mapping::Plugin => Box::new(PluginMapper {
                    informer: s.informer.clone(),
                    loaded: loaded.clone(),
                    ctx: ctx.clone(),
                    instance: None,
                    stats: stats.clone(),
                }),
            };
            registrations.push((i.clone(), register(&i, handler, &s.informer)?));
        }
        Ok(ControllerRunner {
            name,
            queue,
            queue_metrics,
            loaded,
            guard,
            stats,
            registrations,
            ctx,
            leftover: Leftover::default(),
            concurrency: options.max_concurrent_reconciles.max(1),
            workers: Vec::new(),
        })
    }

    /// Starts the workers (once; later calls do nothing).
    pub fn run(&mut self) {
        if !self.workers.is_empty() {
            return;
        }
        let informers: Arc<[SharedIndexInformer]> = self.registrations.iter().map(|(i, _)| i.clone()).collect();
        self.workers = (0..self.concurrency)
            .map(|_| {
                // The caller's span (e.g. `controller{name=...}`) on every
                // line a worker logs.
                let w = worker(
                    self.queue.clone(),
                    self.loaded.clone(),
                    self.ctx.clone(),
                    self.stats.clone(),
                    self.name.clone(),
                    self.leftover.clone(),
                );
                let (informers, queue) = (informers.clone(), self.queue.clone());
                let w = async move {
                    if wait_for_cache_sync(&informers, &queue).await {
                        w.await
                    }
                };
                tokio::spawn(tracing::Instrument::instrument(w, tracing::Span::current()))
            })
            .collect();
        tracing::info!(plugin = %self.name, workers = self.concurrency, "controller started");
    }

    /// Replaces `old` by `self` (prepared, not running) with nothing lost
    /// and no key reconciled by both: `self`'s handlers already queue every
    /// key; `old` stops (its in-flight reconciles finish), then the keys it
    /// still had queued (those its guest enqueued too) and those it held
    /// back for a delay (a requeue-after, a backoff) are handed over, the
    /// latter with their deadlines, and `self`'s workers start. Keys
    /// changed while both were registered are reconciled by both versions,
    /// one after the other: harmless for a level-driven controller, and
    /// nothing is missed.
    pub async fn take_over(&mut self, old: ControllerRunner) {
        let mut waiting = old.queue.waiting();
        let leftover = old.leftover.clone();
        let queued = old.stop_taking_queued().await;
        waiting.append(&mut leftover.lock());
        let now = tokio::time::Instant::now();
        let n = queued.len() + waiting.len();
        for key in queued {
            self.queue.add(key);
        }
        for (key, at) in waiting {
            self.queue.add_after(key, at.saturating_duration_since(now));
        }
        self.run();
        tracing::info!(plugin = %self.name, handed_over = n, "took over from the previous version");
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The controller's workqueue.
    pub fn queue(&self) -> &RateLimitingQueue<String> {
        &self.queue
    }

    pub fn stats(&self) -> &ReconcileStats {
        &self.stats
    }

    /// The reconcile counters, shared (for metrics).
    pub fn shared_stats(&self) -> Arc<ReconcileStats> {
        self.stats.clone()
    }

    /// Reads the workqueue's metrics (depth, adds, retries, latencies,
    /// unfinished work), as client-go's workqueue reports them.
    pub fn queue_metrics(&self) -> impl Fn() -> QueueMetricsSnapshot + Send + Sync + 'static {
        let (metrics, name) = (self.queue_metrics.clone(), self.name.clone());
        move || metrics.snapshot(&name).unwrap_or_default()
    }

    /// The write guard's counters.
    pub fn guard(&self) -> &WriteGuard {
        &self.guard
    }

    pub fn loaded(&self) -> &LoadedController {
        &self.loaded
    }

    /// True once every informer handler of the controller has synced.
    pub fn has_synced(&self) -> bool {
        self.registrations.iter().all(|(_, r)| r.has_synced())
    }

    /// Stops feeding the queue, lets in-flight reconciles finish (each
    /// within its deadline), and stops the workers. Keys still queued are
    /// not reconciled: a controller that is removed, replaced or handed to
    /// another replica no longer owns them, and a backlog (up to the
    /// queue's 100 000 keys, a deadline each) would keep it running, and
    /// writing, long after. Level-driven, nothing is lost: a successor, or
    /// the next start, lists every object again.
    pub async fn stop(self) {
        self.stop_taking_queued().await;
    }

    /// [`stop`](Self::stop), answering the keys that were still queued.
    async fn stop_taking_queued(self) -> Vec<String> {
        for (informer, reg) in &self.registrations {
            let _ = informer.remove_event_handler(reg);
        }
        let queued = self.queue.shut_down_taking_queued();
        for w in self.workers {
            let _ = w.await;
        }
        tracing::info!(plugin = %self.name, not_reconciled = queued.len(), "controller stopped");
        queued
    }
}

/// Keys and when they are due, kept past a queue's shutdown.
type Leftover = Arc<parking_lot::Mutex<Vec<(String, tokio::time::Instant)>>>;

/// How often [`wait_for_cache_sync`] looks (client-go's `syncedPollPeriod`).
const SYNCED_POLL_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// client-go's `WaitForCacheSync`: true once every informer of the
/// controller has listed, so no reconcile reads a cache that is still
/// filling (a secondary object not listed yet would look absent, and the
/// controller would create what exists); false if the queue shuts down
/// first (client-go's stop channel): a controller whose watch never lists
/// (a kind the server does not serve, a list it may not make) must still
/// stop when removed or replaced.
async fn wait_for_cache_sync(informers: &[SharedIndexInformer], queue: &RateLimitingQueue<String>) -> bool {
    loop {
        if queue.shutting_down() {
            return false;
        }
        if informers.iter().all(SharedIndexInformer::has_synced) {
            return true;
        }
        tokio::time::sleep(SYNCED_POLL_PERIOD).await;
    }
}

/// One worker: takes a key, reconciles it in its own instance, and settles
/// the key in the queue according to the outcome.
async fn worker(
    queue: Arc<RateLimitingQueue<String>>,
    loaded: Arc<LoadedController>,
    ctx: Arc<ControllerCtx>,
    stats: Arc<ReconcileStats>,
    name: String,
    leftover: Leftover,
) {
    let mut instance: Option<ControllerInstance> = None;
    // While the queue shuts down it takes no more adds: what a reconcile asks
    // for then is kept for a successor (see `take_over`).
    let requeue = |key: String, after: std::time::Duration| {
        if queue.shutting_down() {
            // A guest's requeue-after may be any length: never overflow.
            leftover.lock().push((key, crate::deadline::after(tokio::time::Instant::now(), after)));
        } else {
            queue.add_after(key, after);
        }
    };
    while let Some(key) = queue.get().await {
        let (l, c, k) = (loaded.clone(), ctx.clone(), key.clone());
        let taken = instance.take();
        let span = tracing::Span::current();
        let joined = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let mut inst = match taken {
                Some(i) => i,
                None => match l.instance(c) {
                    Ok(i) => i,
                    Err(e) => return (None, Err(ReconcileError::Trapped(format!("cannot start an instance: {e}")))),
                },
            };
            let r = inst.reconcile(&k);
            let keep = !matches!(r, Err(ReconcileError::Trapped(_)));
            (keep.then_some(inst), r)
        })
        .await;
        let (inst, result) = match joined {
            Ok(v) => v,
            Err(e) => (None, Err(ReconcileError::Trapped(format!("reconcile worker failed: {e}")))),
        };
        instance = inst;
        match result {
            Ok(Outcome::Done) => {
                stats.succeeded.fetch_add(1, Ordering::Relaxed);
                queue.forget(&key);
            }
            Ok(Outcome::RequeueAfter(after)) => {
                stats.succeeded.fetch_add(1, Ordering::Relaxed);
                stats.requeued_after.fetch_add(1, Ordering::Relaxed);
                queue.forget(&key);
                requeue(key.clone(), after);
            }
            Err(e) => {
                let counter = match &e {
                    ReconcileError::Failed(_) => &stats.failed,
                    ReconcileError::Trapped(_) => &stats.trapped,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let retries = queue.num_requeues(&key);
                tracing::warn!(plugin = %name, key = %key, retries, "reconcile failed: {e}; requeued with backoff");
                if queue.shutting_down() {
                    requeue(key.clone(), queue.when(&key));
                } else {
                    queue.add_rate_limited(key.clone());
                }
            }
        }
        queue.done(&key);
    }
}
