//! client-go's `sharedProcessor`: the set of listeners of one informer.
//!
//! This module owns fan-out: `distribute` hands a notification to every
//! listener (sync notifications only to listeners due for resync), it
//! starts and stops listener tasks, and it keeps the resync bookkeeping
//! across listeners. It may not touch the store, the FIFO or a handler.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::handler::Notification;
use super::listener::ProcessorListener;

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
    entries: Vec<Entry>,
    started: bool,
}

/// Fans notifications out to listeners.
#[derive(Default)]
pub struct SharedProcessor {
    listeners: RwLock<Listeners>,
    tasks: TaskTracker,
}

impl SharedProcessor {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn add_listener(&self, listener: Arc<ProcessorListener>) {
        let mut l = self.listeners.write();
        if l.started {
            self.tasks.spawn(listener.clone().run());
        }
        l.entries.push(Entry { listener, syncing: true });
    }

    /// Removes and stops a listener; its buffer is dropped. Unknown ids are
    /// ignored, like client-go.
    pub(crate) fn remove_listener(&self, id: u64) -> bool {
        let mut l = self.listeners.write();
        let Some(pos) = l.entries.iter().position(|e| e.listener.id() == id) else { return false };
        let e = l.entries.remove(pos);
        e.listener.close();
        true
    }

    pub(crate) fn distribute(&self, n: Notification, sync: bool) {
        let l = self.listeners.read();
        let mut targets = l.entries.iter().filter(|e| !sync || e.syncing).peekable();
        while let Some(e) = targets.next() {
            if targets.peek().is_none() {
                e.listener.add(n);
                return;
            }
            e.listener.add(n.clone());
        }
    }

    /// Starts every listener's delivery task.
    pub(crate) fn run(&self) {
        let mut l = self.listeners.write();
        for e in &l.entries {
            self.tasks.spawn(e.listener.clone().run());
        }
        l.started = true;
    }

    /// Stops every listener and waits for their tasks to return.
    pub(crate) async fn stop(&self) {
        {
            let mut l = self.listeners.write();
            for e in l.entries.drain(..) {
                e.listener.close();
            }
            l.started = false;
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Marks which listeners are due for resync; true if any is.
    pub(crate) fn should_resync(&self) -> bool {
        let mut l = self.listeners.write();
        let now = Instant::now();
        let mut any = false;
        for e in l.entries.iter_mut() {
            e.syncing = e.listener.should_resync(now);
            if e.syncing {
                any = true;
                e.listener.determine_next_resync(now);
            }
        }
        any
    }

    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        let l = self.listeners.read();
        for e in &l.entries {
            e.listener.set_resync_period(determine_resync_period(e.listener.requested_resync_period(), check));
        }
    }

    pub(crate) fn listeners(&self) -> Vec<Arc<ProcessorListener>> {
        self.listeners.read().entries.iter().map(|e| e.listener.clone()).collect()
    }
}
