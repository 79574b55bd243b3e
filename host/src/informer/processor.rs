//! client-go's `sharedProcessor`: the set of listeners of one informer.
//!
//! This module owns fan-out: `distribute` appends a notification once to
//! the shared notification log every listener reads (sync notifications
//! carry the resync round, so only listeners due for resync take them),
//! `flush` wakes the listeners, it starts and stops listener tasks, and it
//! keeps the resync bookkeeping across listeners. It may not touch the
//! store, the FIFO or a handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::handler::Notification;
use super::listener::ProcessorListener;
use super::notification_log::{self, Log, SyncRound};

/// client-go's `minimumResyncPeriod`.
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// client-go's `determineResyncPeriod`: 0 stays 0; no resync when the
/// informer does not resync; never below the check period.
pub fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return desired;
    }
    if check.is_zero() {
        tracing::warn!("resync period {desired:?} is invalid because this shared informer doesn't support resyncing");
        return Duration::ZERO;
    }
    if desired < check {
        tracing::warn!("resync period {desired:?} is increased to the resync check period {check:?}");
        return check;
    }
    desired
}

struct Entry {
    listener: Arc<ProcessorListener>,
    /// Whether this listener receives the sync notifications of the
    /// current resync round.
    syncing: bool,
}

#[derive(Default)]
struct Listeners {
    /// By listener id (ids grow, so this is the order they were added
    /// in): adding or removing one does not walk the others.
    entries: BTreeMap<u64, Entry>,
    /// The listeners with `syncing` set, as sync notifications carry it;
    /// `None` once a listener was added or removed, made again by the next
    /// sync notification (not at every add, which walked every listener).
    round: Mutex<Option<Arc<SyncRound>>>,
    /// The runtime `run` was called on, while started: listeners added
    /// later (from any thread) are spawned there.
    runtime: Option<Handle>,
    /// How many listeners take notifications into their own queue.
    own_queues: usize,
}

impl Listeners {
    /// The listeners with `syncing` set, from now on.
    fn new_round(&mut self) {
        *self.round.get_mut() = None;
    }

    /// The current round (made once after each change).
    fn round(&self) -> Arc<SyncRound> {
        self.round
            .lock()
            .get_or_insert_with(|| {
                Arc::new(SyncRound::new(self.entries.values().filter(|e| e.syncing).map(|e| e.listener.id()).collect()))
            })
            .clone()
    }
}

/// Fans notifications out to listeners.
#[derive(Default)]
pub struct SharedProcessor {
    listeners: RwLock<Listeners>,
    log: Arc<Log>,
    /// Log length at the last `flush`.
    flushed: AtomicU64,
    tasks: TaskTracker,
}

impl SharedProcessor {
    pub fn new() -> Self {
        Self::default()
    }

    /// The log new listeners are created over.
    pub(crate) fn log(&self) -> Arc<Log> {
        self.log.clone()
    }

    /// Adds a listener; it receives what is distributed from now on.
    pub(crate) fn add_listener(&self, listener: Arc<ProcessorListener>) {
        let mut l = self.listeners.write();
        listener.attach(self.log.cursor());
        if listener.has_own_queue() {
            l.own_queues += 1;
        }
        if let Some(runtime) = &l.runtime {
            self.tasks.spawn_on(listener.clone().run(), runtime);
        }
        l.entries.insert(listener.id(), Entry { listener, syncing: true });
        l.new_round();
    }

    /// Removes and stops a listener; its buffer is dropped. Listeners of
    /// another processor (or already removed) are ignored, like client-go.
    pub(crate) fn remove_listener(&self, listener: &Arc<ProcessorListener>) -> bool {
        let mut l = self.listeners.write();
        let id = listener.id();
        if !l.entries.get(&id).is_some_and(|e| Arc::ptr_eq(&e.listener, listener)) {
            return false;
        }
        let Some(e) = l.entries.remove(&id) else { return false };
        if e.listener.has_own_queue() {
            l.own_queues -= 1;
        }
        l.new_round();
        e.listener.close();
        true
    }

    /// Hands `n` to every listener, or with `sync` to the listeners of the
    /// current resync round. Listeners are woken by the next [`flush`].
    ///
    /// [`flush`]: SharedProcessor::flush
    pub(crate) fn distribute(&self, n: Notification, sync: bool) {
        let l = self.listeners.read();
        if l.entries.is_empty() {
            return;
        }
        if l.own_queues > 0 {
            for e in l.entries.values().filter(|e| e.listener.has_own_queue() && (!sync || e.syncing)) {
                e.listener.offer(&n);
            }
        }
        let round = sync.then(|| l.round());
        self.log.append(notification_log::Entry { notification: n, round });
    }

    /// Wakes the listeners if anything was distributed since the last call
    /// (a listener with its own queue only if it was handed something).
    pub(crate) fn flush(&self) {
        let appended = self.log.appended();
        if self.flushed.swap(appended, Ordering::AcqRel) == appended {
            return;
        }
        for e in self.listeners.read().entries.values() {
            e.listener.wake();
        }
    }

    /// Starts every listener's delivery task on the current runtime.
    pub(crate) fn run(&self) {
        let mut l = self.listeners.write();
        let runtime = Handle::current();
        for e in l.entries.values() {
            self.tasks.spawn_on(e.listener.clone().run(), &runtime);
        }
        l.runtime = Some(runtime);
    }

    /// Stops every listener and waits for their tasks to return.
    pub(crate) async fn stop(&self) {
        {
            let mut l = self.listeners.write();
            for e in std::mem::take(&mut l.entries).into_values() {
                e.listener.close();
            }
            l.own_queues = 0;
            l.new_round();
            l.runtime = None;
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Marks which listeners are due for resync; true if any is.
    pub(crate) fn should_resync(&self) -> bool {
        let mut l = self.listeners.write();
        let now = Instant::now();
        let mut any = false;
        for e in l.entries.values_mut() {
            e.syncing = e.listener.should_resync(now);
            if e.syncing {
                any = true;
                e.listener.determine_next_resync(now);
            }
        }
        l.new_round();
        any
    }

    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        let l = self.listeners.read();
        for e in l.entries.values() {
            e.listener.set_resync_period(determine_resync_period(e.listener.requested_resync_period(), check));
        }
    }

    pub(crate) fn listeners(&self) -> Vec<Arc<ProcessorListener>> {
        self.listeners.read().entries.values().map(|e| e.listener.clone()).collect()
    }
}
