//! Adding a key later: client-go's `delaying_queue.go`.
//!
//! This module owns the keys that wait for their deadline, and the task
//! that adds them to the [`Queue`] when it comes (client-go's
//! `waitingLoop` goroutine and its `waitingForQueue` heap).
//!
//! - [`DelayingQueue::add_after`] with a zero duration adds at once;
//!   otherwise the key waits until `now + duration`. A key already waiting
//!   keeps the earlier of the two deadlines (client-go's `insert`), so a
//!   later, longer request never postpones an earlier one.
//! - Every `add_after` counts as a retry in the metrics, even one that is
//!   de-duplicated (as in client-go).
//! - Shutting down stops the task; keys still waiting are dropped.
//! - The task also wakes at least every [`MAX_WAIT`] (client-go's
//!   heartbeat), though with Tokio's timer it has nothing to catch up on.
//!
//! Unlike client-go, `add_after` inserts into the waiting set directly
//! (under a lock) instead of sending it to the task through a 1000-entry
//! channel; it never blocks. Ordering among keys with the same deadline is
//! the order of their `add_after` calls.

use std::collections::{BTreeMap, HashMap};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Key;
use super::metrics::RetryMetrics;
use super::queue::{Queue, QueueConfig};

/// The longest the waiting task sleeps without checking its keys
/// (client-go's `maxWait`).
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// A [`Queue`] that can also add a key after a delay. Share it behind an
/// `Arc`. Must be created inside a Tokio runtime: it spawns the task that
/// adds waiting keys when they are due; dropping the queue ends that task.
pub struct DelayingQueue<K> {
    shared: Arc<Shared<K>>,
    /// Wakes the waiting task: an earlier deadline, a shutdown, a drop.
    wake: Arc<Notify>,
    retry_metrics: RetryMetrics,
}

struct Shared<K> {
    queue: Queue<K>,
    waiting: Mutex<WaitingForQueue<K>>,
}

/// The keys waiting for their deadline, soonest first (client-go's
/// `waitForPriorityQueue` plus `waitingEntryByData`).
struct WaitingForQueue<K> {
    by_deadline: BTreeMap<(Instant, u64), K>,
    by_key: HashMap<K, (Instant, u64)>,
    next_seq: u64,
}

impl<K: Key> WaitingForQueue<K> {
    fn new() -> Self {
        WaitingForQueue { by_deadline: BTreeMap::new(), by_key: HashMap::new(), next_seq: 0 }
    }

    /// Adds `item` to wait until `ready_at`, or moves its deadline earlier
    /// if it is already waiting. Returns whether the soonest deadline
    /// changed (the task must re-arm its timer).
    fn insert(&mut self, item: K, ready_at: Instant) -> bool {
        let head_before = self.next_ready_at();
        if let Some(&(existing, seq)) = self.by_key.get(&item) {
            if existing <= ready_at {
                return false;
            }
            self.by_deadline.remove(&(existing, seq));
        }
        let slot = (ready_at, self.next_seq);
        self.next_seq += 1;
        self.by_deadline.insert(slot, item.clone());
        self.by_key.insert(item, slot);
        head_before.is_none_or(|head| ready_at < head)
    }

    /// Removes and returns, soonest first, the keys whose deadline is not
    /// after `now`.
    fn pop_ready(&mut self, now: Instant) -> Vec<K> {
        let mut ready = Vec::new();
        while let Some(entry) = self.by_deadline.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let item = entry.remove();
            self.by_key.remove(&item);
            ready.push(item);
        }
        ready
    }

    fn next_ready_at(&self) -> Option<Instant> {
        self.by_deadline.first_key_value().map(|(slot, _)| slot.0)
    }

    fn ready_at(&self, item: &K) -> Option<Instant> {
        self.by_key.get(item).map(|slot| slot.0)
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }

    fn clear(&mut self) {
        self.by_deadline.clear();
        self.by_key.clear();
    }
}

impl<K: Key> Default for DelayingQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key> DelayingQueue<K> {
    /// An unnamed delaying queue without metrics (client-go's
    /// `NewTypedDelayingQueue`).
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// client-go's `NewTypedDelayingQueueWithConfig`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (it spawns the waiting task).
    pub fn with_config(config: QueueConfig) -> Self {
        let retry_metrics = RetryMetrics::new(config.metrics_provider.as_ref(), &config.name);
        let shared =
            Arc::new(Shared { queue: Queue::with_config(config), waiting: Mutex::new(WaitingForQueue::new()) });
        let wake = Arc::new(Notify::new());
        tokio::spawn(waiting_loop(Arc::downgrade(&shared), wake.clone()));
        DelayingQueue { shared, wake, retry_metrics }
    }

    /// Adds `item` once `duration` has passed; at once if it is zero.
    /// Ignored while shutting down. A key already waiting keeps the earlier
    /// deadline.
    pub fn add_after(&self, item: K, duration: Duration) {
        if self.shared.queue.shutting_down() {
            return;
        }
        self.retry_metrics.retry();
        if duration.is_zero() {
            self.shared.queue.add(item);
            return;
        }
        let now = Instant::now();
        let ready_at = crate::deadline::after(now, duration);
        if self.shared.waiting.lock().insert(item, ready_at) {
            self.wake.notify_one();
        }
    }

    /// How many keys wait for their deadline.
    pub fn waiting_len(&self) -> usize {
        self.shared.waiting.lock().len()
    }

    /// When `item` will be added, if it is waiting.
    pub fn ready_at(&self, item: &K) -> Option<Instant> {
        self.shared.waiting.lock().ready_at(item)
    }

    /// The keys waiting for their deadline, with it, earliest first (to
    /// hand them to another queue before this one shuts down and drops
    /// them).
    pub fn waiting(&self) -> Vec<(K, Instant)> {
        self.shared.waiting.lock().by_deadline.iter().map(|((at, _), k)| (k.clone(), *at)).collect()
    }

    /// See [`Queue::add`].
    pub fn add(&self, item: K) {
        self.shared.queue.add(item);
    }

    /// See [`Queue::get`].
    pub async fn get(&self) -> Option<K> {
        self.shared.queue.get().await
    }

    /// See [`Queue::done`].
    pub fn done(&self, item: &K) {
        self.shared.queue.done(item);
    }

    /// See [`Queue::len`]; keys waiting for a deadline are not counted.
    pub fn len(&self) -> usize {
        self.shared.queue.len()
    }

    /// See [`Queue::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.shared.queue.is_empty()
    }

    /// See [`Queue::processing_len`].
    pub fn processing_len(&self) -> usize {
        self.shared.queue.processing_len()
    }

    /// See [`Queue::shutdown`]; keys waiting for a deadline are dropped.
    pub fn shutdown(&self) {
        self.shared.queue.shutdown();
        self.wake.notify_one();
    }

    /// See [`Queue::shut_down_taking_queued`]; keys waiting for a deadline
    /// are dropped (read them first with [`DelayingQueue::waiting`]).
    pub fn shut_down_taking_queued(&self) -> Vec<K> {
        let taken = self.shared.queue.shut_down_taking_queued();
        self.wake.notify_one();
        taken
    }

    /// See [`Queue::shut_down_with_drain`]; keys waiting for a deadline
    /// are dropped.
    pub async fn shut_down_with_drain(&self) {
        self.shared.queue.begin_shut_down_with_drain();
        self.wake.notify_one();
        self.shared.queue.wait_for_drain().await;
    }

    /// See [`Queue::shutting_down`].
    pub fn shutting_down(&self) -> bool {
        self.shared.queue.shutting_down()
    }
}

impl<K> Drop for DelayingQueue<K> {
    fn drop(&mut self) {
        // The task holds only a weak reference: wake it to find it gone.
        self.wake.notify_one();
    }
}

/// client-go's `waitingLoop`: adds keys as their deadlines pass, until the
/// queue shuts down or is dropped.
async fn waiting_loop<K: Key>(shared: Weak<Shared<K>>, wake: Arc<Notify>) {
    loop {
        // Listen before looking, so an insert made after the look wakes us.
        let mut woken = pin!(wake.notified());
        woken.as_mut().enable();
        let next = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if shared.queue.shutting_down() {
                shared.waiting.lock().clear();
                return;
            }
            let now = Instant::now();
            let (ready, next) = {
                let mut waiting = shared.waiting.lock();
                (waiting.pop_ready(now), waiting.next_ready_at())
            };
            for item in ready {
                shared.queue.add(item);
            }
            let heartbeat = now + MAX_WAIT;
            next.map_or(heartbeat, |at| at.min(heartbeat))
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}
