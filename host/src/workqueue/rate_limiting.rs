//! Retrying with backoff: client-go's `rate_limiting_queue.go`.
//!
//! This module owns the pairing of a [`DelayingQueue`] with a
//! [`RateLimiter`]: [`RateLimitingQueue::add_rate_limited`] is
//! `add_after(key, rate_limiter.when(key))`; [`RateLimitingQueue::forget`]
//! clears the key's failures in the limiter (the caller still calls
//! `done`); [`RateLimitingQueue::num_requeues`] reads them. Remember to
//! call `forget` on success, or failures are tracked for ever.

use std::time::Duration;

use tokio::time::Instant;

use super::Key;
use super::delaying::DelayingQueue;
use super::queue::QueueConfig;
use super::rate_limiter::RateLimiter;

/// A [`DelayingQueue`] with a [`RateLimiter`] (client-go's
/// `TypedRateLimitingInterface`). Share it behind an `Arc`; create it inside
/// a Tokio runtime.
pub struct RateLimitingQueue<K> {
    queue: DelayingQueue<K>,
    rate_limiter: Box<dyn RateLimiter<K>>,
}

impl<K: Key> RateLimitingQueue<K> {
    /// An unnamed queue without metrics (client-go's
    /// `NewTypedRateLimitingQueue`).
    pub fn new(rate_limiter: impl RateLimiter<K> + 'static) -> Self {
        Self::with_config(QueueConfig::default(), rate_limiter)
    }

    /// client-go's `NewTypedRateLimitingQueueWithConfig`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (see [`DelayingQueue::with_config`]).
    pub fn with_config(config: QueueConfig, rate_limiter: impl RateLimiter<K> + 'static) -> Self {
        RateLimitingQueue { queue: DelayingQueue::with_config(config), rate_limiter: Box::new(rate_limiter) }
    }

    /// Adds `item` after the delay the rate limiter gives it (which, for
    /// per-key limiters, counts one more failure).
    pub fn add_rate_limited(&self, item: K) {
        let delay = self.rate_limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// The delay [`Self::add_rate_limited`] would give `item` (counting one
    /// more failure), without adding it: for a key kept past shutdown.
    pub fn when(&self, item: &K) -> Duration {
        self.rate_limiter.when(item)
    }

    /// Stops tracking `item`'s failures (on success, or when giving up).
    /// This does not replace [`RateLimitingQueue::done`].
    pub fn forget(&self, item: &K) {
        self.rate_limiter.forget(item);
    }

    /// How many times `item` was requeued with [`Self::add_rate_limited`]
    /// since it was last forgotten.
    pub fn num_requeues(&self, item: &K) -> usize {
        self.rate_limiter.num_requeues(item)
    }

    /// See [`DelayingQueue::add_after`].
    pub fn add_after(&self, item: K, duration: Duration) {
        self.queue.add_after(item, duration);
    }

    /// See [`DelayingQueue::waiting_len`].
    pub fn waiting_len(&self) -> usize {
        self.queue.waiting_len()
    }

    /// See [`DelayingQueue::waiting`].
    pub fn waiting(&self) -> Vec<(K, Instant)> {
        self.queue.waiting()
    }

    /// See [`DelayingQueue::ready_at`].
    pub fn ready_at(&self, item: &K) -> Option<Instant> {
        self.queue.ready_at(item)
    }

    /// See [`Queue::add`](super::Queue::add).
    pub fn add(&self, item: K) {
        self.queue.add(item);
    }

    /// See [`Queue::get`](super::Queue::get).
    pub async fn get(&self) -> Option<K> {
        self.queue.get().await
    }

    /// See [`Queue::done`](super::Queue::done).
    pub fn done(&self, item: &K) {
        self.queue.done(item);
    }

    /// See [`Queue::len`](super::Queue::len).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// See [`Queue::is_empty`](super::Queue::is_empty).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// See [`Queue::processing_len`](super::Queue::processing_len).
    pub fn processing_len(&self) -> usize {
        self.queue.processing_len()
    }

    /// See [`DelayingQueue::shutdown`].
    pub fn shutdown(&self) {
        self.queue.shutdown();
    }

    /// See [`DelayingQueue::shut_down_taking_queued`].
    pub fn shut_down_taking_queued(&self) -> Vec<K> {
        self.queue.shut_down_taking_queued()
    }

    /// See [`DelayingQueue::shut_down_with_drain`].
    pub async fn shut_down_with_drain(&self) {
        self.queue.shut_down_with_drain().await;
    }

    /// See [`Queue::shutting_down`](super::Queue::shutting_down).
    pub fn shutting_down(&self) -> bool {
        self.queue.shutting_down()
    }
}
