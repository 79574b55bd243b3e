//! The work queue itself: client-go's `queue.go` (`Typed[T]`).
//!
//! This module owns the FIFO and client-go's two sets:
//!
//! - **dirty**: every key that needs processing. [`Queue::add`] of a dirty
//!   key does nothing, so a key added many times before a worker takes it is
//!   handed out once.
//! - **processing**: every key a worker has taken and not yet marked
//!   [`Queue::done`]. A key added while processing becomes dirty but is not
//!   queued; `done` queues it again. So no key is ever held by two workers,
//!   and a change that arrives during processing is processed afterwards.
//!
//! Every key in the FIFO is dirty and not processing.
//!
//! Shutting down: [`Queue::shutdown`] makes `add` a no-op and wakes every
//! worker; [`Queue::get`] still hands out what is queued and returns `None`
//! once the FIFO is empty. [`Queue::shut_down_with_drain`] does the same and
//! then waits until no key is being processed (or until `shutdown` is
//! called, which forces it to return), as client-go's `ShutDownWithDrain`.
//! A key that was added during its processing is queued again by `done`
//! even while shutting down, and the drain waits for that processing too.
//!
//! Deliberate differences from client-go: the storage is always a FIFO (no
//! pluggable `Queue[T]`/`Touch`); and `done` of a key that is not being
//! processed does nothing (client-go would queue a dirty key a second time,
//! which could hand it to two workers at once).

use std::collections::{HashSet, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::Key;
use super::metrics::{MetricsProvider, QueueMetrics};

/// How often unfinished work is reported (client-go's
/// `defaultUnfinishedWorkUpdatePeriod`).
pub const DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

/// Options for every kind of queue (client-go's `TypedQueueConfig`, without
/// the clock, which is always Tokio's).
#[derive(Clone)]
pub struct QueueConfig {
    /// The queue's name in metrics. An unnamed queue reports no metrics.
    pub name: String,
    /// Where metrics go; `None`: no metrics.
    pub metrics_provider: Option<Arc<dyn MetricsProvider>>,
    /// How often unfinished work seconds and longest running processor are
    /// updated (500 ms).
    pub unfinished_work_update_period: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            name: String::new(),
            metrics_provider: None,
            unfinished_work_update_period: DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD,
        }
    }
}

impl QueueConfig {
    /// A named queue reporting to `provider`.
    pub fn named(name: impl Into<String>, provider: Arc<dyn MetricsProvider>) -> Self {
        QueueConfig { name: name.into(), metrics_provider: Some(provider), ..QueueConfig::default() }
    }
}

/// A work queue with client-go's semantics (see the module documentation).
/// Share it between workers behind an `Arc`.
pub struct Queue<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    state: Mutex<State<K>>,
    /// Wakes workers waiting in `get` (client-go's `cond` for `Get`).
    item_ready: Notify,
    /// Wakes `shut_down_with_drain` (client-go's `cond` for the drain).
    processing_changed: Notify,
}

struct State<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    shutting_down: bool,
    drain: bool,
    metrics: QueueMetrics<K>,
}

impl<K: Key> Default for Queue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key> Queue<K> {
    /// An unnamed queue without metrics (client-go's `NewTyped`).
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// client-go's `NewTypedWithConfig`.
    ///
    /// # Panics
    ///
    /// With metrics (a name and a provider) this spawns the unfinished-work
    /// updater, so it panics outside a Tokio runtime.
    pub fn with_config(config: QueueConfig) -> Self {
        let metrics = QueueMetrics::new(config.metrics_provider.as_ref(), &config.name);
        let enabled = metrics.enabled();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shutting_down: false,
                drain: false,
                metrics,
            }),
            item_ready: Notify::new(),
            processing_changed: Notify::new(),
        });
        if enabled {
            // The ticker starts now, not when the task first runs.
            let period = config.unfinished_work_update_period.max(Duration::from_millis(1));
            let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            tokio::spawn(update_unfinished_work_loop(Arc::downgrade(&shared), ticker));
        }
        Queue { shared }
    }

    /// Marks `item` as needing processing. Ignored while shutting down.
    pub fn add(&self, item: K) {
        let mut st = self.shared.state.lock();
        if st.shutting_down || st.dirty.contains(&item) {
            return;
        }
        st.metrics.add(&item);
        st.dirty.insert(item.clone());
        if st.processing.contains(&item) {
            return;
        }
        st.queue.push_back(item);
        drop(st);
        self.shared.item_ready.notify_one();
    }

    /// How many keys are queued (not counting those being processed), for
    /// information only.
    pub fn len(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for a key and marks it as being processed; call
    /// [`Queue::done`] with it when finished. `None` once shutting down
    /// and nothing is queued: the worker should stop.
    ///
    /// Cancel-safe: a key is only taken in the poll that returns it.
    pub async fn get(&self) -> Option<K> {
        loop {
            let mut notified = pin!(self.shared.item_ready.notified());
            notified.as_mut().enable();
            {
                let mut st = self.shared.state.lock();
                if let Some(item) = st.queue.pop_front() {
                    st.metrics.get(&item);
                    st.dirty.remove(&item);
                    st.processing.insert(item.clone());
                    let more = !st.queue.is_empty();
                    drop(st);
                    if more {
                        // This waiter may have consumed a wake-up meant for
                        // another key: pass one on.
                        self.shared.item_ready.notify_one();
                    }
                    return Some(item);
                }
                if st.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `item` as done processing. If it was added meanwhile, it is
    /// queued again.
    pub fn done(&self, item: &K) {
        let mut st = self.shared.state.lock();
        st.metrics.done(item);
        if !st.processing.remove(item) {
            return;
        }
        if st.dirty.contains(item) {
            st.queue.push_back(item.clone());
            drop(st);
            self.shared.item_ready.notify_one();
        } else if st.processing.is_empty() {
            drop(st);
            self.shared.processing_changed.notify_waiters();
        }
    }

    /// Ignores every later add and tells workers to stop once the queue is
    /// empty; forces a pending [`Queue::shut_down_with_drain`] to return.
    pub fn shutdown(&self) {
        {
            let mut st = self.shared.state.lock();
            st.drain = false;
            st.shutting_down = true;
        }
        self.shared.item_ready.notify_waiters();
        self.shared.processing_changed.notify_waiters();
    }

    /// As [`Queue::shutdown`], and takes out every key that was still to be
    /// handed out, in order: the keys queued, and those added again while
    /// being processed (which `done` would queue). Workers get nothing
    /// more and finish only what they hold. Not in client-go, whose
    /// `ShutDown` still hands out what is queued: the host's way to stop a
    /// controller without reconciling a backlog it no longer owns (its
    /// successor gets the keys, or, for a removed controller, no one).
    pub fn shut_down_taking_queued(&self) -> Vec<K> {
        let taken = {
            let mut st = self.shared.state.lock();
            st.drain = false;
            st.shutting_down = true;
            let st = &mut *st;
            let mut taken: Vec<K> = st.queue.drain(..).collect();
            for k in &taken {
                st.dirty.remove(k);
                st.metrics.taken(k);
            }
            let again: Vec<K> = st.dirty.iter().filter(|k| st.processing.contains(*k)).cloned().collect();
            for k in &again {
                // Counted in the depth when added (as client-go counts it).
                st.dirty.remove(k);
                st.metrics.taken(k);
            }
            taken.extend(again);
            taken
        };
        self.shared.item_ready.notify_waiters();
        self.shared.processing_changed.notify_waiters();
        taken
    }

    /// As [`Queue::shutdown`], then waits until no key is being processed:
    /// every worker must call `done` for what it holds, or this waits
    /// forever (unless `shutdown` is called meanwhile).
    pub async fn shut_down_with_drain(&self) {
        self.begin_shut_down_with_drain();
        self.wait_for_drain().await;
    }

    /// The first half of [`Queue::shut_down_with_drain`]: shut down, ask
    /// for a drain.
    pub(crate) fn begin_shut_down_with_drain(&self) {
        {
            let mut st = self.shared.state.lock();
            st.drain = true;
            st.shutting_down = true;
        }
        self.shared.item_ready.notify_waiters();
    }

    /// The second half of [`Queue::shut_down_with_drain`]: wait until no
    /// key is being processed or the drain is called off.
    pub(crate) async fn wait_for_drain(&self) {
        loop {
            let mut notified = pin!(self.shared.processing_changed.notified());
            notified.as_mut().enable();
            {
                let st = self.shared.state.lock();
                if st.processing.is_empty() || !st.drain {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Whether [`Queue::shutdown`] or [`Queue::shut_down_with_drain`] was
    /// called.
    pub fn shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }

    /// How many keys are being processed (taken and not yet done).
    pub fn processing_len(&self) -> usize {
        self.shared.state.lock().processing.len()
    }
}

/// client-go's `updateUnfinishedWorkLoop`: at every tick, report unfinished
/// work, until the queue shuts down or is dropped.
async fn update_unfinished_work_loop<K: Key>(shared: Weak<Shared<K>>, mut ticker: Interval) {
    loop {
        ticker.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let st = shared.state.lock();
        if st.shutting_down {
            return;
        }
        st.metrics.update_unfinished_work();
    }
}
