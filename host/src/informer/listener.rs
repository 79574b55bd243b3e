//! client-go's `processorListener`: one handler's buffer and delivery loop.
//!
//! This module owns what happens between `distribute` and a handler call:
//! the per-handler growable buffer (so a slow handler never blocks the
//! informer or another handler), sequential delivery, panic-skip (skip the
//! item, wait one second, go on), the initial-list sync tracker, and the
//! listener's resync bookkeeping. It may not touch the store or the FIFO.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::handler::{Delivery, HandlerError, Notification, ResourceEventHandler};

/// How long a listener waits after a crashed notification (client-go's
/// `wait.Until(..., 1*time.Second, ...)`).
pub const CRASH_BACKOFF: Duration = Duration::from_secs(1);

/// Most notifications handed to a handler per wake-up.
const MAX_BATCH: usize = 256;

/// Counters a listener keeps; read them through a [`Registration`].
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Notifications the handler accepted.
    pub delivered: AtomicU64,
    /// Notifications for which the handler returned an error.
    pub failed: AtomicU64,
    /// Notifications skipped because the handler crashed.
    pub crashed: AtomicU64,
}

struct Buffer {
    queue: VecDeque<Notification>,
    closed: bool,
}

struct Resync {
    requested: Duration,
    period: Duration,
    next: Instant,
}

pub(crate) type SyncedFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// One registered handler inside a `SharedProcessor`.
pub struct ProcessorListener {
    id: u64,
    name: String,
    buffer: Mutex<Buffer>,
    wake: Notify,
    resync: Mutex<Resync>,
    /// Initial-list adds queued but not yet handled (client-go's
    /// `SingleFileTracker`).
    initial_pending: AtomicUsize,
    upstream_synced: SyncedFn,
    stats: ListenerStats,
    handler: Mutex<Option<Box<dyn ResourceEventHandler>>>,
    blocking: Arc<Semaphore>,
    stopped: AtomicBool,
}

impl ProcessorListener {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u64,
        name: String,
        handler: Box<dyn ResourceEventHandler>,
        requested_resync: Duration,
        resync_period: Duration,
        now: Instant,
        upstream_synced: SyncedFn,
        blocking: Arc<Semaphore>,
    ) -> Arc<Self> {
        Arc::new(ProcessorListener {
            id,
            name,
            buffer: Mutex::new(Buffer { queue: VecDeque::new(), closed: false }),
            wake: Notify::new(),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync_period,
                next: now + resync_period,
            }),
            initial_pending: AtomicUsize::new(0),
            upstream_synced,
            stats: ListenerStats::default(),
            handler: Mutex::new(Some(handler)),
            blocking,
            stopped: AtomicBool::new(false),
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }
    /// Notifications buffered and not yet handed to the handler.
    pub fn pending(&self) -> usize {
        self.buffer.lock().queue.len()
    }

    /// True once the informer synced and every initial-list add queued for
    /// this handler was handled (or skipped after a crash).
    pub fn has_synced(&self) -> bool {
        (self.upstream_synced)() && self.initial_pending.load(Ordering::Acquire) == 0
    }

    /// Queues a notification; never blocks.
    pub(crate) fn add(&self, n: Notification) {
        if n.is_initial() {
            self.initial_pending.fetch_add(1, Ordering::AcqRel);
        }
        let mut b = self.buffer.lock();
        if b.closed {
            return;
        }
        let was_empty = b.queue.is_empty();
        b.queue.push_back(n);
        drop(b);
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// Stops delivery and drops the buffer.
    pub(crate) fn close(&self) {
        let mut b = self.buffer.lock();
        b.closed = true;
        b.queue = VecDeque::new();
        drop(b);
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn is_closed(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    async fn next_batch(&self) -> Option<VecDeque<Notification>> {
        loop {
            let notified = self.wake.notified();
            {
                let mut b = self.buffer.lock();
                if b.closed {
                    return None;
                }
                if !b.queue.is_empty() {
                    let n = b.queue.len().min(MAX_BATCH);
                    if n == b.queue.len() {
                        return Some(std::mem::take(&mut b.queue));
                    }
                    return Some(b.queue.drain(..n).collect());
                }
            }
            notified.await;
        }
    }

    /// Records the outcome of one call; returns the crash message if any.
    fn record(&self, n: &Notification, r: Result<(), HandlerError>) -> Option<String> {
        if n.is_initial() {
            // Deliberate difference from client-go: a crashed initial add
            // still counts as handled, so `has_synced` cannot hang forever.
            self.initial_pending.fetch_sub(1, Ordering::AcqRel);
        }
        match r {
            Ok(()) => {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(HandlerError::Failed(msg)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(handler = %self.name, key = n.key(), kind = n.kind(), "handler returned an error: {msg}");
                None
            }
            Err(HandlerError::Crashed(msg)) => {
                self.stats.crashed.fetch_add(1, Ordering::Relaxed);
                Some(msg)
            }
        }
    }

    /// Delivers from `batch` until it is empty or a call crashes.
    fn deliver_until_crash(
        &self,
        handler: &mut dyn ResourceEventHandler,
        batch: &mut VecDeque<Notification>,
    ) -> Option<(Notification, String)> {
        while let Some(n) = batch.pop_front() {
            if self.is_closed() {
                batch.clear();
                return None;
            }
            let r = handler.deliver(&n);
            if let Some(msg) = self.record(&n, r) {
                return Some((n, msg));
            }
        }
        None
    }

    /// The delivery loop (client-go's `pop` and `run` together). Returns
    /// when the listener is closed.
    pub(crate) async fn run(self: Arc<Self>) {
        let Some(mut handler) = self.handler.lock().take() else { return };
        let mode = handler.delivery();
        while let Some(mut batch) = self.next_batch().await {
            while !batch.is_empty() {
                let crash = match mode {
                    Delivery::Inline => self.deliver_until_crash(handler.as_mut(), &mut batch),
                    Delivery::Blocking => {
                        let Ok(_permit) = self.blocking.clone().acquire_owned().await else { return };
                        let me = self.clone();
                        let joined = tokio::task::spawn_blocking(move || {
                            let crash = me.deliver_until_crash(handler.as_mut(), &mut batch);
                            (handler, batch, crash)
                        })
                        .await;
                        match joined {
                            Ok((h, b, crash)) => {
                                handler = h;
                                batch = b;
                                crash
                            }
                            Err(e) => {
                                tracing::error!(handler = %self.name, "delivery worker failed: {e}");
                                return;
                            }
                        }
                    }
                };
                if let Some((n, msg)) = crash {
                    tracing::error!(
                        handler = %self.name, key = n.key(), kind = n.kind(),
                        "handler crashed, notification skipped; resuming in 1s: {msg}"
                    );
                    tokio::time::sleep(CRASH_BACKOFF).await;
                }
                if self.is_closed() {
                    return;
                }
            }
        }
    }

    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let r = self.resync.lock();
        !r.period.is_zero() && now >= r.next
    }
    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = self.resync.lock();
        r.next = now + r.period;
    }
    pub(crate) fn set_resync_period(&self, period: Duration) {
        self.resync.lock().period = period;
    }
    pub(crate) fn requested_resync_period(&self) -> Duration {
        self.resync.lock().requested
    }
    /// The resync period in force for this listener.
    pub fn resync_period(&self) -> Duration {
        self.resync.lock().period
    }
}

/// The handle `add_event_handler` returns (client-go's
/// `ResourceEventHandlerRegistration`).
#[derive(Clone)]
pub struct Registration {
    pub(crate) listener: Arc<ProcessorListener>,
}

impl Registration {
    /// True when the informer synced and this handler handled its initial list.
    pub fn has_synced(&self) -> bool {
        self.listener.has_synced()
    }
    pub fn name(&self) -> &str {
        self.listener.name()
    }
    pub fn id(&self) -> u64 {
        self.listener.id()
    }
    pub fn stats(&self) -> &ListenerStats {
        self.listener.stats()
    }
    pub fn pending(&self) -> usize {
        self.listener.pending()
    }
    pub fn resync_period(&self) -> Duration {
        self.listener.resync_period()
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("id", &self.id()).field("name", &self.name()).finish()
    }
}
