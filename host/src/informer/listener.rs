//! client-go's `processorListener`: one handler's buffer and delivery loop.
//!
//! This module owns what happens between `distribute` and a handler call:
//! the handler's buffer, sequential delivery, panic-skip (skip the item,
//! wait one second, go on), the initial-list sync tracker, and the
//! listener's resync bookkeeping. The buffer is the part of the processor's
//! shared notification log after this listener's cursor, plus a private
//! queue for the cache copy a late joiner receives: it grows without bound
//! and is read at this handler's own pace, so a slow handler never blocks
//! the informer or another handler. It may not touch the store or the FIFO.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::bounded_queue::BoundedQueue;
use super::handler::{Delivered, Delivery, HandlerError, Notification, ResourceEventHandler};
use super::notification_log::{Cursor, Log};
use super::object::Object;

/// Decides which objects a handler receives (e.g. a tenant's namespaces).
pub type ObjectFilter = Arc<dyn Fn(&Object) -> bool + Send + Sync>;

/// How long a listener waits after a crashed notification (client-go's
/// `wait.Until(..., 1*time.Second, ...)`).
pub const CRASH_BACKOFF: Duration = Duration::from_secs(1);

/// Most notifications handed to a handler before the delivery task yields.
const MAX_BATCH: usize = 256;

/// A blocking handler keeps its delivery worker for at most this long (or
/// this many batches) before it lets another handler have it.
const SLICE: Duration = Duration::from_millis(2);
const SLICE_ROUNDS: usize = 16;

/// Counters a listener keeps; read them through a [`Registration`].
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Notifications the handler accepted.
    pub delivered: AtomicU64,
    /// Notifications for which the handler returned an error.
    pub failed: AtomicU64,
    /// Notifications skipped because the handler crashed.
    pub crashed: AtomicU64,
    /// Notifications merged into another of the same key (or cancelled)
    /// because the handler's pending cap was reached.
    pub coalesced: AtomicU64,
    /// The same outcomes by notification kind: `[outcome][kind]` with
    /// outcomes delivered, failed, crashed and kinds add, update, delete.
    pub by_kind: [[AtomicU64; 3]; 3],
}

impl ListenerStats {
    /// Notification kinds in the order of [`ListenerStats::by_kind`].
    pub const KINDS: [&'static str; 3] = ["add", "update", "delete"];
    /// Outcomes in the order of [`ListenerStats::by_kind`].
    pub const OUTCOMES: [&'static str; 3] = ["delivered", "failed", "crashed"];
}

/// The index of `n`'s kind in [`ListenerStats::by_kind`].
fn kind_index(n: &Notification) -> usize {
    match n {
        Notification::Add { .. } => 0,
        Notification::Update { .. } => 1,
        Notification::Delete(_) => 2,
    }
}

/// Outcomes counted locally, `[outcome][kind]` as in
/// [`ListenerStats::by_kind`].
#[derive(Default)]
struct Tally([[u64; 3]; 3]);

impl Tally {
    fn flush(&self, stats: &ListenerStats) {
        let totals = [&stats.delivered, &stats.failed, &stats.crashed];
        for (outcome, kinds) in self.0.iter().enumerate() {
            let sum: u64 = kinds.iter().sum();
            if sum == 0 {
                continue;
            }
            totals[outcome].fetch_add(sum, Ordering::Relaxed);
            for (kind, &count) in kinds.iter().enumerate() {
                if count > 0 {
                    stats.by_kind[outcome][kind].fetch_add(count, Ordering::Relaxed);
                }
            }
        }
    }
}

struct Resync {
    requested: Duration,
    period: Duration,
    next: Instant,
}

pub(crate) type SyncedFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// What one round of delivery ended with.
enum Round {
    /// Caught up: wait for more.
    Idle,
    /// Delivered a batch; more may be waiting.
    More,
    /// The handler crashed on a notification, which was skipped.
    Crashed {
        key: String,
        kind: &'static str,
        msg: String,
    },
    /// The handler crashed with no notification to blame; none was skipped.
    CrashedBetween {
        msg: String,
    },
    Closed,
}

/// One registered handler inside a `SharedProcessor`.
pub struct ProcessorListener {
    id: u64,
    name: String,
    log: Arc<Log>,
    /// Notifications for this listener only (a late joiner's copy of the
    /// cache; everything, for a listener with its own queue); delivered
    /// before anything from the log.
    private: Mutex<BoundedQueue>,
    /// Set for a listener with a filter or a pending cap: it does not read
    /// the shared log (which a stalled reader would keep alive); the
    /// processor hands it what passes its filter, into `private`.
    own_queue: bool,
    filter: Option<ObjectFilter>,
    /// This listener's place in the log, from the moment it was attached;
    /// the delivery task takes it.
    cursor: Mutex<Option<Cursor>>,
    /// Log entries before this sequence number were handled or skipped.
    consumed: AtomicU64,
    wake: Notify,
    /// Something was queued into `private` since the processor's last
    /// flush (which wakes this listener only then).
    offered: AtomicBool,
    resync: Mutex<Resync>,
    /// Private initial-list adds not yet handled (with `consumed` and the
    /// log's `initial_end`, client-go's `SingleFileTracker`).
    private_initial: AtomicUsize,
    upstream_synced: SyncedFn,
    stats: ListenerStats,
    handler: Mutex<Option<Box<dyn ResourceEventHandler>>>,
    blocking: Arc<Semaphore>,
    closed: AtomicBool,
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
        log: Arc<Log>,
        filter: Option<ObjectFilter>,
        max_pending: Option<usize>,
    ) -> Arc<Self> {
        Arc::new(ProcessorListener {
            id,
            name,
            log,
            private: Mutex::new(BoundedQueue::new(max_pending.unwrap_or(usize::MAX))),
            own_queue: filter.is_some() || max_pending.is_some(),
            filter,
            cursor: Mutex::new(None),
            consumed: AtomicU64::new(0),
            wake: Notify::new(),
            offered: AtomicBool::new(false),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync_period,
                next: crate::deadline::after(now, resync_period),
            }),
            private_initial: AtomicUsize::new(0),
            upstream_synced,
            stats: ListenerStats::default(),
            handler: Mutex::new(Some(handler)),
            blocking,
            closed: AtomicBool::new(false),
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
    /// Notifications waiting for this handler. Sync notifications of a
    /// resync round this handler is not in count until it skips them.
    pub fn pending(&self) -> usize {
        if self.is_closed() {
            return 0;
        }
        let private = self.private.lock().len();
        if self.own_queue {
            return private;
        }
        let consumed = self.consumed.load(Ordering::Acquire);
        private + self.log.appended().saturating_sub(consumed) as usize
    }

    /// True once the informer synced and every initial-list add queued for
    /// this handler was handled (or skipped after a crash).
    pub fn has_synced(&self) -> bool {
        (self.upstream_synced)()
            && self.private_initial.load(Ordering::Acquire) == 0
            && (self.own_queue || self.consumed.load(Ordering::Acquire) >= self.log.initial_end())
    }

    /// True when the listener takes notifications into its own queue.
    pub(crate) fn has_own_queue(&self) -> bool {
        self.own_queue
    }

    /// Starts reading the log from its current end. Called once, by the
    /// processor, when the listener is added.
    pub(crate) fn attach(&self, cursor: Cursor) {
        self.consumed.store(cursor.seq(), Ordering::Release);
        if !self.own_queue {
            *self.cursor.lock() = Some(cursor);
        }
    }

    fn passes(&self, n: &Notification) -> bool {
        let Some(f) = &self.filter else { return true };
        match n {
            Notification::Add { obj, .. } => f(obj),
            Notification::Update { new, .. } => f(new),
            Notification::Delete(d) => f(d.object()),
        }
    }

    /// Queues one notification into the listener's own queue (filtered,
    /// coalesced over the cap). The processor's flush wakes the listener.
    pub(crate) fn offer(&self, n: &Notification) {
        if self.is_closed() || !self.passes(n) {
            return;
        }
        let mut q = self.private.lock();
        self.push_private(&mut q, n.clone());
        drop(q);
        self.offered.store(true, Ordering::Release);
    }

    fn push_private(&self, q: &mut BoundedQueue, n: Notification) {
        if n.is_initial() {
            self.private_initial.fetch_add(1, Ordering::AcqRel);
        }
        let c = q.push(n);
        if c.removed > 0 {
            self.stats.coalesced.fetch_add(c.removed as u64, Ordering::Relaxed);
            self.private_initial.fetch_sub(c.removed_initial, Ordering::AcqRel);
        }
    }

    /// Queues notifications for this listener only; never blocks.
    pub(crate) fn add_private(&self, notifications: impl IntoIterator<Item = Notification>) {
        if self.is_closed() {
            return;
        }
        let mut q = self.private.lock();
        for n in notifications {
            if self.passes(&n) {
                self.push_private(&mut q, n);
            }
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Tells the delivery task that the processor distributed something:
    /// a log reader always (the log grew); a listener with its own queue
    /// only when something was queued for it since the last flush, so the
    /// plugins whose filter keeps a notification out (another tenant's
    /// objects) are not woken by it. With 1 000 plugins over 100 tenants,
    /// waking them all cost every event 1 000 task wake-ups.
    pub(crate) fn wake(&self) {
        if !self.own_queue || self.offered.swap(false, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }

    /// Stops delivery and drops the buffer (the private queue and this
    /// listener's hold on the log).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.private.lock().clear();
        *self.cursor.lock() = None;
        self.wake.notify_one();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Records the outcome of one call; returns the crash message if any.
    fn record(&self, n: &Notification, r: Result<(), HandlerError>) -> Option<String> {
        let mut tally = Tally::default();
        let crash = self.tally(&mut tally, n, r);
        tally.flush(&self.stats);
        crash
    }

    /// Like [`Self::record`] into `tally`, so a batch updates the shared
    /// counters once rather than once per notification.
    fn tally(&self, tally: &mut Tally, n: &Notification, r: Result<(), HandlerError>) -> Option<String> {
        let kind = kind_index(n);
        match r {
            Ok(()) => {
                tally.0[0][kind] += 1;
                None
            }
            Err(HandlerError::Failed(msg)) => {
                tally.0[1][kind] += 1;
                tracing::warn!(handler = %self.name, key = n.key(), kind = n.kind(), "handler returned an error: {msg}");
                None
            }
            Err(HandlerError::Crashed(msg)) => {
                tally.0[2][kind] += 1;
                Some(msg)
            }
        }
    }

    fn crashed(n: &Notification, msg: String) -> Round {
        Round::Crashed { key: n.key().to_string(), kind: n.kind(), msg }
    }

    /// Delivers up to `MAX_BATCH` notifications: the private queue first,
    /// then the log. Stops early when caught up or when a call crashes.
    fn deliver_batch(&self, handler: &mut dyn ResourceEventHandler, cursor: &mut Option<Cursor>) -> Round {
        let mut delivered = 0;
        while delivered < MAX_BATCH {
            let Some(n) = self.private.lock().pop() else { break };
            if self.is_closed() {
                return Round::Closed;
            }
            let r = handler.deliver(&n);
            if n.is_initial() {
                // Deliberate difference from client-go: a crashed initial
                // add still counts as handled, so `has_synced` cannot hang.
                self.private_initial.fetch_sub(1, Ordering::AcqRel);
            }
            if let Some(msg) = self.record(&n, r) {
                return Self::crashed(&n, msg);
            }
            delivered += 1;
        }
        let Some(cursor) = cursor else {
            return if delivered < MAX_BATCH { Round::Idle } else { Round::More };
        };
        while delivered < MAX_BATCH {
            if self.is_closed() {
                return Round::Closed;
            }
            let Some((seq, entry)) = cursor.next() else { return Round::Idle };
            if !entry.is_for(self.id) {
                self.consumed.store(seq + 1, Ordering::Release);
                continue;
            }
            let n = &entry.notification;
            let r = handler.deliver(n);
            // Handled or skipped (a crashed initial add counts as handled,
            // as above).
            self.consumed.store(seq + 1, Ordering::Release);
            if let Some(msg) = self.record(n, r) {
                return Self::crashed(n, msg);
            }
            delivered += 1;
        }
        Round::More
    }

    /// Like [`Self::deliver_batch`], handing the handler up to `MAX_BATCH`
    /// notifications in one [`ResourceEventHandler::deliver_many`] call:
    /// from the private queue if it holds any, else one run of the log.
    fn deliver_many(&self, handler: &mut dyn ResourceEventHandler, cursor: &mut Option<Cursor>) -> Round {
        if self.is_closed() {
            return Round::Closed;
        }
        let private: Vec<Notification> = {
            let mut q = self.private.lock();
            std::iter::from_fn(|| q.pop()).take(MAX_BATCH).collect()
        };
        if !private.is_empty() {
            let refs: Vec<&Notification> = private.iter().collect();
            let (handled, crash) = self.settle(&refs, handler.deliver_many(&refs), None);
            // As in `deliver_batch`: a crashed initial add counts.
            let initial = private[..handled].iter().filter(|n| n.is_initial()).count();
            self.private_initial.fetch_sub(initial, Ordering::AcqRel);
            if handled < private.len() {
                self.private.lock().unpop(private.into_iter().skip(handled));
            }
            return crash.unwrap_or(Round::More);
        }
        let Some(cursor) = cursor else { return Round::Idle };
        let run = cursor.peek(MAX_BATCH);
        if run.is_empty() {
            return Round::Idle;
        }
        let (mut refs, mut seqs) = (Vec::with_capacity(MAX_BATCH), Vec::with_capacity(MAX_BATCH));
        let mut kinds = [0u64; 3];
        for (seq, entry) in run.entries() {
            if entry.is_for(self.id) {
                kinds[kind_index(&entry.notification)] += 1;
                refs.push(&entry.notification);
                seqs.push(seq);
            }
        }
        let (handled, crash) = self.settle(&refs, handler.deliver_many(&refs), Some(kinds));
        // Handled or skipped, up to the last one reported; the rest come
        // again. The counters moved first, so whoever sees a handler caught
        // up also sees what it delivered.
        let next = match handled {
            h if h == refs.len() => run.end_seq(),
            0 => seqs[0],
            h => seqs[h - 1] + 1,
        };
        drop(run);
        cursor.advance(next);
        self.consumed.store(next, Ordering::Release);
        crash.unwrap_or(Round::More)
    }

    /// Counts what one `deliver_many` call reported (`kinds`: the batch's
    /// notifications by kind, when already known); returns how many were
    /// handled and the crash, if any.
    fn settle(&self, refs: &[&Notification], d: Delivered, kinds: Option<[u64; 3]>) -> (usize, Option<Round>) {
        let handled = d.handled.min(refs.len());
        let (mut tally, mut crash) = (Tally::default(), None);
        match kinds {
            Some(kinds) if d.all_ok(refs.len()) => tally.0[0] = kinds,
            _ => {
                let mut errors = d.errors.into_iter().peekable();
                for (i, n) in refs[..handled].iter().enumerate() {
                    let r = errors.next_if(|(at, _)| *at == i).map_or(Ok(()), |(_, e)| Err(e));
                    if let Some(msg) = self.tally(&mut tally, n, r) {
                        crash = Some(Self::crashed(n, msg));
                    }
                }
            }
        }
        tally.flush(&self.stats);
        (handled, crash.or(d.crashed_between.map(|msg| Round::CrashedBetween { msg })))
    }

    /// The delivery loop (client-go's `pop` and `run` together). Returns
    /// when the listener is closed.
    pub(crate) async fn run(self: Arc<Self>) {
        let Some(mut handler) = self.handler.lock().take() else { return };
        let mut cursor = self.cursor.lock().take();
        if cursor.is_none() && !self.own_queue {
            return;
        }
        let mode = handler.delivery();
        loop {
            let round = match mode {
                Delivery::Inline => self.deliver_batch(handler.as_mut(), &mut cursor),
                Delivery::Blocking => {
                    let Ok(_permit) = self.blocking.clone().acquire_owned().await else { return };
                    let me = self.clone();
                    let joined = tokio::task::spawn_blocking(move || {
                        // Several rounds per hop to the pool, within a slice of
                        // CPU time, so the hop's cost is shared by many calls.
                        let slice = std::time::Instant::now();
                        let mut rounds = 0;
                        let round = loop {
                            let round = me.deliver_many(handler.as_mut(), &mut cursor);
                            rounds += 1;
                            if !matches!(round, Round::More) || rounds == SLICE_ROUNDS || slice.elapsed() >= SLICE {
                                break round;
                            }
                        };
                        (handler, cursor, round)
                    })
                    .await;
                    match joined {
                        Ok((h, c, round)) => {
                            handler = h;
                            cursor = c;
                            round
                        }
                        Err(e) => {
                            tracing::error!(handler = %self.name, "delivery worker failed: {e}");
                            return;
                        }
                    }
                }
            };
            match round {
                Round::Closed => return,
                Round::More => tokio::task::yield_now().await,
                Round::Idle => {
                    let notified = self.wake.notified();
                    if self.is_closed() {
                        return;
                    }
                    if !cursor.as_ref().is_some_and(|c| c.has_next()) && self.private.lock().len() == 0 {
                        notified.await;
                    }
                }
                Round::Crashed { key, kind, msg } => {
                    tracing::error!(
                        handler = %self.name, key = %key, kind,
                        "handler crashed, notification skipped; resuming in 1s: {msg}"
                    );
                    tokio::time::sleep(CRASH_BACKOFF).await;
                }
                Round::CrashedBetween { msg } => {
                    tracing::error!(
                        handler = %self.name,
                        "handler crashed between notifications, none skipped; resuming in 1s: {msg}"
                    );
                    tokio::time::sleep(CRASH_BACKOFF).await;
                }
            }
            if self.is_closed() {
                return;
            }
        }
    }

    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let r = self.resync.lock();
        !r.period.is_zero() && now >= r.next
    }
    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = self.resync.lock();
        r.next = crate::deadline::after(now, r.period);
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
