//! client-go's `sharedIndexInformer`: one list+watch, one cache, many handlers.
//!
//! This module owns the informer's life cycle (run until cancelled, then
//! stopped for good), `HandleDeltas` (store update, then distribution while
//! `block_deltas` is held), when listeners are woken (in bursts: before the
//! process loop waits for the FIFO, and every `FLUSH_EVERY` keys while it is
//! busy), handler registration including late joiners, and resync timing.
//! It wires the reflector, the FIFO, the store and the processor; it knows
//! nothing of wasm or of any transport.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::delta_fifo::{DeltaObject, DeltaType, Popped, Queue, TransformFunc};
use super::handler::{Notification, ResourceEventHandler};
use super::listener::{ObjectFilter, ProcessorListener, Registration};
use super::lister_watcher::{ListerWatcher, SourceError};
use super::object::DeletedObject;
use super::processor::{MINIMUM_RESYNC_PERIOD, SharedProcessor, determine_resync_period};
use super::real_fifo::{Fifo, FifoKind};
use super::reflector::{Reflector, ReflectorStats, WatchErrorHandler};
use super::store::{IndexError, IndexFunc, Indexer};

/// Keys handled between two wake-ups of the listeners while the FIFO is busy.
const FLUSH_EVERY: usize = 256;

/// Why an informer call was refused.
#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    #[error("handler {0:?} was not added to shared informer because it has stopped already")]
    Stopped(String),
    #[error("informer has already started")]
    AlreadyStarted,
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// How one handler is registered.
#[derive(Clone, Default)]
pub struct HandlerOptions {
    /// Name used in logs and metrics.
    pub name: String,
    /// Resync period (client-go's rules apply; 0: none).
    pub resync_period: Duration,
    /// Only notifications about objects this accepts are delivered (the
    /// host filters; the handler never sees the others).
    pub filter: Option<ObjectFilter>,
    /// Pending notifications beyond this are coalesced by key (client-go's
    /// buffer is unbounded; `None` keeps that).
    pub max_pending: Option<usize>,
    /// The fairness group (the tenant) whose delivery workers this handler
    /// uses when it delivers on the blocking pool. Each group of an informer
    /// has its own `blocking_workers` permits, so a group that keeps all of
    /// its workers busy (spinning plugins at their full deadline) cannot take
    /// a worker from another group. `None`: the informer's shared group.
    pub group: Option<String>,
}

impl HandlerOptions {
    pub fn named(name: impl Into<String>) -> Self {
        HandlerOptions { name: name.into(), ..Default::default() }
    }
}

/// Options of a [`SharedIndexInformer`].
#[derive(Clone)]
pub struct InformerOptions {
    /// Name used in logs and metrics.
    pub name: String,
    /// Resync period given to handlers added without one (0: none).
    pub default_resync_period: Duration,
    /// Delivery workers shared by the `Delivery::Blocking` handlers of one
    /// fairness group (see [`HandlerOptions::group`]).
    pub blocking_workers: usize,
    /// The FIFO between the reflector and the cache: client-go's
    /// `DeltaFIFO` (the default) or `RealFIFO`.
    pub fifo: FifoKind,
}

impl Default for InformerOptions {
    fn default() -> Self {
        InformerOptions {
            name: "informer".into(),
            default_resync_period: Duration::ZERO,
            blocking_workers: 4,
            fifo: FifoKind::Delta,
        }
    }
}

struct State {
    started: bool,
    stopped: bool,
    resync_check_period: Duration,
    transform: Option<TransformFunc>,
    on_error: Option<WatchErrorHandler>,
    fifo: Option<Arc<Fifo>>,
}

struct Inner {
    name: String,
    lw: Arc<dyn ListerWatcher>,
    indexer: Indexer,
    processor: SharedProcessor,
    state: Mutex<State>,
    /// Held while deltas are handled, and while a late joiner is given the
    /// cache, so it misses nothing and sees nothing twice.
    block_deltas: Mutex<()>,
    default_resync_period: Duration,
    next_id: AtomicU64,
    /// Delivery workers of handlers without a group.
    blocking: Arc<Semaphore>,
    /// Delivery workers per fairness group, created on first use.
    group_workers: Mutex<HashMap<String, Arc<Semaphore>>>,
    blocking_workers: usize,
    fifo_kind: FifoKind,
    last_sync_resource_version: Arc<Mutex<String>>,
    reflector_stats: Arc<ReflectorStats>,
}

impl Inner {
    /// The delivery workers of a fairness group. A group's semaphore lives
    /// as long as the informer: one per tenant, a few hundred bytes each.
    fn workers_of(&self, group: Option<&str>) -> Arc<Semaphore> {
        match group {
            None => self.blocking.clone(),
            Some(group) => self
                .group_workers
                .lock()
                .entry(group.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.blocking_workers)))
                .clone(),
        }
    }
}

/// A shared informer over any [`ListerWatcher`]. Cheap to clone.
///
/// ```no_run
/// # async fn demo(lw: impl informer_host::informer::ListerWatcher) {
/// use informer_host::informer::{SharedIndexInformer, InformerOptions, FnHandler};
/// let informer = SharedIndexInformer::new(lw, InformerOptions::default());
/// let reg = informer.add_event_handler(FnHandler(|n: &_| { println!("{n:?}"); Ok(()) })).unwrap();
/// let stop = tokio_util::sync::CancellationToken::new();
/// tokio::spawn({ let i = informer.clone(); let s = stop.clone(); async move { i.run(s).await } });
/// while !reg.has_synced() { tokio::time::sleep(std::time::Duration::from_millis(10)).await }
/// stop.cancel();
/// # }
/// ```
#[derive(Clone)]
pub struct SharedIndexInformer {
    inner: Arc<Inner>,
}

impl SharedIndexInformer {
    pub fn new(lw: impl ListerWatcher, options: InformerOptions) -> Self {
        Self::from_arc(Arc::new(lw), options)
    }

    pub fn from_arc(lw: Arc<dyn ListerWatcher>, options: InformerOptions) -> Self {
        SharedIndexInformer {
            inner: Arc::new(Inner {
                name: options.name,
                lw,
                indexer: Indexer::new(),
                processor: SharedProcessor::new(),
                state: Mutex::new(State {
                    started: false,
                    stopped: false,
                    resync_check_period: options.default_resync_period,
                    transform: None,
                    on_error: None,
                    fifo: None,
                }),
                block_deltas: Mutex::new(()),
                default_resync_period: options.default_resync_period,
                next_id: AtomicU64::new(1),
                blocking: Arc::new(Semaphore::new(options.blocking_workers.max(1))),
                group_workers: Mutex::new(HashMap::new()),
                blocking_workers: options.blocking_workers.max(1),
                fifo_kind: options.fifo,
                last_sync_resource_version: Arc::new(Mutex::new(String::new())),
                reflector_stats: Arc::default(),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The informer's cache.
    pub fn indexer(&self) -> &Indexer {
        &self.inner.indexer
    }
    /// Same as [`SharedIndexInformer::indexer`] (client-go's `GetStore`).
    pub fn store(&self) -> &Indexer {
        &self.inner.indexer
    }

    /// Adds indexes; only before the informer starts.
    pub fn add_indexers(&self, indexers: HashMap<String, IndexFunc>) -> Result<(), InformerError> {
        if self.inner.state.lock().started {
            return Err(IndexError::AlreadyStarted.into());
        }
        Ok(self.inner.indexer.add_indexers(indexers)?)
    }

    /// Sets a transform applied to each object before it is stored.
    pub fn set_transform(&self, f: TransformFunc) -> Result<(), InformerError> {
        let mut st = self.inner.state.lock();
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.transform = Some(f);
        Ok(())
    }

    /// Sets the function called with every list and watch failure (the
    /// reflector logs each one as well), including a watch that is retried
    /// from the same resourceVersion. A watch that simply ends is not a
    /// failure.
    pub fn set_watch_error_handler(&self, f: WatchErrorHandler) -> Result<(), InformerError> {
        let mut st = self.inner.state.lock();
        if st.started {
            return Err(InformerError::AlreadyStarted);
        }
        st.on_error = Some(f);
        Ok(())
    }

    /// True once the first list was fully processed.
    pub fn has_synced(&self) -> bool {
        self.inner.state.lock().fifo.as_ref().is_some_and(|f| f.has_synced())
    }
    pub fn has_started(&self) -> bool {
        self.inner.state.lock().started
    }
    pub fn is_stopped(&self) -> bool {
        self.inner.state.lock().stopped
    }
    /// What its reflector did: lists, watches, relists by cause, the last
    /// failure.
    pub fn reflector_stats(&self) -> &ReflectorStats {
        &self.inner.reflector_stats
    }
    /// The resourceVersion of the last list, watch event or bookmark.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.last_sync_resource_version.lock().clone()
    }
    /// The resync period of handlers added without one
    /// ([`SharedIndexInformer::add_event_handler`], controllers' handlers).
    pub fn default_resync_period(&self) -> Duration {
        self.inner.default_resync_period
    }
    /// The period at which the informer checks for due resyncs.
    pub fn resync_check_period(&self) -> Duration {
        self.inner.state.lock().resync_check_period
    }

    /// Adds a handler with the informer's default resync period.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler) -> Result<Registration, InformerError> {
        self.add_event_handler_with_resync_period(handler, self.inner.default_resync_period)
    }

    /// Adds a handler with its own resync period (client-go's rules apply).
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler,
        resync_period: Duration,
    ) -> Result<Registration, InformerError> {
        let id = self.inner.next_id.load(Ordering::Relaxed);
        self.add_named_event_handler(format!("handler-{id}"), Box::new(handler), resync_period)
    }

    /// Adds a named handler (the name appears in logs and metrics).
    pub fn add_named_event_handler(
        &self,
        name: impl Into<String>,
        handler: Box<dyn ResourceEventHandler>,
        resync_period: Duration,
    ) -> Result<Registration, InformerError> {
        self.add_event_handler_with_options(handler, HandlerOptions { resync_period, ..HandlerOptions::named(name) })
    }

    /// Adds a handler with every option: a name, a resync period, a filter
    /// applied before delivery, and a cap on pending notifications beyond
    /// which they are coalesced by key.
    pub fn add_event_handler_with_options(
        &self,
        handler: Box<dyn ResourceEventHandler>,
        options: HandlerOptions,
    ) -> Result<Registration, InformerError> {
        let HandlerOptions { name, mut resync_period, filter, max_pending, group } = options;
        let inner = &self.inner;
        let mut st = inner.state.lock();
        if st.stopped {
            return Err(InformerError::Stopped(name));
        }
        if !resync_period.is_zero() {
            if resync_period < MINIMUM_RESYNC_PERIOD {
                tracing::warn!(handler = %name, "resync period {resync_period:?} is too small; using the minimum of {MINIMUM_RESYNC_PERIOD:?}");
                resync_period = MINIMUM_RESYNC_PERIOD;
            }
            if resync_period < st.resync_check_period {
                if st.started {
                    tracing::warn!(handler = %name, "resync period {resync_period:?} is smaller than the resync check period {:?} and the informer has already started; using {:?}", st.resync_check_period, st.resync_check_period);
                    resync_period = st.resync_check_period;
                } else {
                    st.resync_check_period = resync_period;
                    inner.processor.resync_check_period_changed(resync_period);
                }
            }
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let weak = Arc::downgrade(inner);
        let upstream = Arc::new(move || {
            weak.upgrade().is_some_and(|i| i.state.lock().fifo.as_ref().is_some_and(|f| f.has_synced()))
        });
        let listener = ProcessorListener::new(
            id,
            name,
            handler,
            resync_period,
            determine_resync_period(resync_period, st.resync_check_period),
            tokio::time::Instant::now(),
            upstream,
            inner.workers_of(group.as_deref()),
            inner.processor.log(),
            filter,
            max_pending,
        );
        if !st.started {
            inner.processor.add_listener(listener.clone());
            return Ok(Registration { listener });
        }
        // A late joiner: block distribution, then hand it the whole cache
        // as initial-list adds before anything newer.
        let _block = inner.block_deltas.lock();
        drop(st);
        inner.processor.add_listener(listener.clone());
        listener.add_private(
            inner.indexer.list().into_iter().map(|obj| Notification::Add { obj, is_in_initial_list: true }),
        );
        Ok(Registration { listener })
    }

    /// Stops and removes a handler; its pending notifications are dropped.
    pub fn remove_event_handler(&self, reg: &Registration) -> Result<(), InformerError> {
        let _st = self.inner.state.lock();
        let _block = self.inner.block_deltas.lock();
        self.inner.processor.remove_listener(&reg.listener);
        Ok(())
    }

    /// Every registration currently attached.
    pub fn registrations(&self) -> Vec<Registration> {
        self.inner.processor.listeners().into_iter().map(|listener| Registration { listener }).collect()
    }

    /// Runs the informer until `cancel` fires; then it is stopped for good.
    pub async fn run(&self, cancel: CancellationToken) {
        let inner = self.inner.clone();
        let (fifo, check_period, on_error) = {
            let mut st = inner.state.lock();
            if st.started {
                tracing::warn!(informer = %inner.name, "the informer has started, run more than once is not allowed");
                return;
            }
            let fifo = Arc::new(Fifo::new(inner.fifo_kind, inner.indexer.clone(), st.transform.clone()));
            st.fifo = Some(fifo.clone());
            st.started = true;
            // The reflector logs every failure itself, once; the default
            // handler adds nothing to that.
            let on_error = st.on_error.clone().unwrap_or_else(|| Arc::new(|_: &SourceError| {}));
            (fifo, st.resync_check_period, on_error)
        };
        inner.processor.run();
        let reflector = Reflector {
            name: inner.name.clone(),
            lw: inner.lw.clone(),
            queue: fifo.clone(),
            last_sync_resource_version: inner.last_sync_resource_version.clone(),
            on_error,
            stats: inner.reflector_stats.clone(),
            watch_list_failed: Default::default(),
            watch_list_ended_early: Default::default(),
        };
        // What the list and watch requests log underneath (the kube client's
        // own lines about a refused connection, say) names the informer too.
        let span = tracing::info_span!("reflector", informer = %inner.name);
        let reflector = tokio::spawn(reflector.run(cancel.clone()).instrument(span));
        let resync = (!check_period.is_zero()).then(|| {
            let inner = inner.clone();
            let fifo = fifo.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(check_period) => {}
                    }
                    if inner.processor.should_resync() {
                        fifo.resync();
                    }
                }
            })
        });
        {
            let fifo = fifo.clone();
            let cancel2 = cancel.clone();
            tokio::spawn(async move {
                cancel2.cancelled().await;
                fifo.close();
            });
        }
        // Listeners are woken in bursts: before waiting for the FIFO, and
        // every `FLUSH_EVERY` keys while it stays busy.
        let mut since_flush = 0;
        loop {
            let popped = match fifo.try_pop() {
                Some(p) => p,
                None => {
                    inner.processor.flush();
                    since_flush = 0;
                    match fifo.pop().await {
                        Some(p) => p,
                        None => break,
                    }
                }
            };
            if cancel.is_cancelled() {
                break;
            }
            let initial = popped.is_in_initial_list;
            self.handle_deltas(popped);
            fifo.done(initial);
            since_flush += 1;
            if since_flush == FLUSH_EVERY {
                inner.processor.flush();
                since_flush = 0;
            }
            tokio::task::coop::consume_budget().await;
        }
        inner.processor.flush();
        let _ = reflector.await;
        if let Some(r) = resync {
            let _ = r.await;
        }
        inner.state.lock().stopped = true;
        inner.processor.stop().await;
    }

    /// client-go's `HandleDeltas`/`processDeltas`.
    fn handle_deltas(&self, popped: Popped) {
        let inner = &self.inner;
        let _block = inner.block_deltas.lock();
        for d in popped.deltas {
            match d.kind {
                DeltaType::Sync | DeltaType::Replaced | DeltaType::Added | DeltaType::Updated => {
                    let obj = d.object.object().clone();
                    match inner.indexer.update(obj.clone()) {
                        Some(old) => {
                            // Unchanged resourceVersion: a resync, only for
                            // listeners due for one.
                            let is_sync = old.resource_version() == obj.resource_version();
                            inner.processor.distribute(Notification::Update { old, new: obj }, is_sync);
                        }
                        None => inner.processor.distribute(
                            Notification::Add { obj, is_in_initial_list: popped.is_in_initial_list },
                            false,
                        ),
                    }
                }
                DeltaType::Deleted => {
                    let deleted = match d.object {
                        DeltaObject::Object(o) => DeletedObject::Object(o),
                        DeltaObject::Tombstone(t) => t,
                    };
                    inner.indexer.delete(deleted.key());
                    inner.processor.distribute(Notification::Delete(deleted), false);
                }
            }
        }
    }
}
