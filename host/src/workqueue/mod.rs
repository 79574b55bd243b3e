//! A port of client-go's `k8s.io/client-go/util/workqueue`: the queue a
//! controller's workers take keys from.
//!
//! Three layers, each wrapping the one before, as in client-go:
//!
//! - [`Queue`] (`queue.go`): a FIFO with client-go's *dirty* and
//!   *processing* sets. A key added twice before it is taken is handed out
//!   once; a key taken by a worker is never handed to a second worker until
//!   [`Queue::done`]; a key added while it is being processed is queued again
//!   when it is done.
//! - [`DelayingQueue`] (`delaying_queue.go`): adds [`DelayingQueue::add_after`];
//!   a key already waiting keeps the earlier of its deadlines.
//! - [`RateLimitingQueue`] (`rate_limiting_queue.go`): adds
//!   [`RateLimitingQueue::add_rate_limited`], [`RateLimitingQueue::forget`]
//!   and [`RateLimitingQueue::num_requeues`], asking a [`RateLimiter`]
//!   (`default_rate_limiters.go`) how long each key waits.
//!
//! [`metrics`] holds client-go's metric hooks (depth, adds, retries, queue
//! latency, work duration, unfinished work, longest running processor):
//! a [`MetricsProvider`] trait for pushing into any metrics library and
//! [`InMemoryMetrics`], a provider whose values a `/metrics` handler reads.
//! There is no global provider: each queue is given one in [`QueueConfig`].
//!
//! All time is Tokio's clock ([`tokio::time::Instant`], `sleep_until`), so
//! tests run on paused time. A [`DelayingQueue`] (and a [`Queue`] with
//! metrics) spawns a task, so it must be created inside a Tokio runtime.
//!
//! Left out of client-go, deliberately: the pluggable storage behind the
//! FIFO (`Queue[T]`, `Touch`, used for priority queues); the injectable
//! clock (Tokio's clock is the clock, paused in tests); the global
//! `SetProvider` (a provider per queue instead); the fake queues and
//! `ParallelizeUntil`; `Reservation.Cancel`, `SetLimit` and `SetBurst` of
//! x/time/rate. Small differences are listed in each module.
//!
//! The typical worker, as in client-go's controllers:
//!
//! ```no_run
//! # async fn worker(queue: std::sync::Arc<informer_host::workqueue::RateLimitingQueue<String>>) {
//! # async fn reconcile(_key: &str) -> Result<Option<std::time::Duration>, ()> { Ok(None) }
//! while let Some(key) = queue.get().await {
//!     match reconcile(&key).await {
//!         Ok(None) => queue.forget(&key),
//!         Ok(Some(after)) => {
//!             queue.forget(&key);
//!             queue.add_after(key.clone(), after);
//!         }
//!         Err(()) => queue.add_rate_limited(key.clone()),
//!     }
//!     queue.done(&key);
//! }
//! # }
//! ```

pub mod delaying;
pub mod metrics;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;
pub mod token_bucket;

use std::hash::Hash;

pub use delaying::DelayingQueue;
pub use metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, HistogramSnapshot, InMemoryMetrics, MetricsProvider,
    QueueMetricsSnapshot, SettableGaugeMetric,
};
pub use queue::{Queue, QueueConfig};
pub use rate_limiter::{
    BucketRateLimiter, ControllerRateLimiterConfig, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, WithMaxWaitRateLimiter, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;
pub use token_bucket::TokenBucket;

/// What a queue can hold: client-go's `comparable`, plus what Tokio tasks
/// need. Keys are `namespace/name` strings in practice.
pub trait Key: Clone + Eq + Hash + Send + Sync + 'static {}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> Key for T {}
