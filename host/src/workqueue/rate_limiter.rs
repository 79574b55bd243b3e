//! How long a key waits before it is retried: client-go's
//! `default_rate_limiters.go`.
//!
//! This module owns the [`RateLimiter`] trait and client-go's limiters:
//!
//! - [`ItemExponentialFailureRateLimiter`]: per key, `base · 2^failures`,
//!   capped at `max` (and never overflowing).
//! - [`ItemFastSlowRateLimiter`]: per key, `fast` for the first attempts,
//!   then `slow`.
//! - [`BucketRateLimiter`]: one [`TokenBucket`] for all keys; it returns a
//!   delay, it never refuses.
//! - [`MaxOfRateLimiter`]: the longest delay of several limiters.
//! - [`WithMaxWaitRateLimiter`]: another limiter's delay, capped.
//! - [`default_controller_rate_limiter`], client-go's
//!   `DefaultControllerRateLimiter`: the max of an exponential limiter
//!   (5 ms doubling to 1000 s) and a bucket (10 per second, burst 100);
//!   [`ControllerRateLimiterConfig`] builds the same with other numbers.
//!
//! `when` counts a failure (for the per-key limiters), `forget` clears a
//! key's failures, `num_requeues` reads them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::Key;
use super::token_bucket::TokenBucket;

/// Decides how long a key waits before it is added again (client-go's
/// `TypedRateLimiter`).
pub trait RateLimiter<K>: Send + Sync {
    /// How long `item` should wait; for per-key limiters this counts one
    /// more failure.
    fn when(&self, item: &K) -> Duration;
    /// Stop tracking `item` (it succeeded, or was given up on).
    fn forget(&self, item: &K);
    /// How many failures `item` has had.
    fn num_requeues(&self, item: &K) -> usize;
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<R> {
    fn when(&self, item: &K) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &K) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &K) -> usize {
        (**self).num_requeues(item)
    }
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Arc<R> {
    fn when(&self, item: &K) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &K) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &K) -> usize {
        (**self).num_requeues(item)
    }
}

/// `base_delay · 2^failures`, capped at `max_delay`, per key (client-go's
/// `ItemExponentialFailureRateLimiter`). Expiring failures is up to the
/// caller ([`RateLimiter::forget`]).
pub struct ItemExponentialFailureRateLimiter<K> {
    failures: Mutex<HashMap<K, usize>>,
    base_delay: Duration,
    max_delay: Duration,
}

impl<K: Key> ItemExponentialFailureRateLimiter<K> {
    pub fn new(base_delay: Duration, max_delay: Duration) -> Self {
        ItemExponentialFailureRateLimiter { failures: Mutex::new(HashMap::new()), base_delay, max_delay }
    }
}

/// client-go's `DefaultItemBasedRateLimiter`: exponential from 1 ms to
/// 1000 s.
pub fn default_item_based_rate_limiter<K: Key>() -> ItemExponentialFailureRateLimiter<K> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1000))
}

impl<K: Key> RateLimiter<K> for ItemExponentialFailureRateLimiter<K> {
    fn when(&self, item: &K) -> Duration {
        let exp = {
            let mut failures = self.failures.lock();
            let n = failures.entry(item.clone()).or_insert(0);
            let exp = *n;
            *n += 1;
            exp
        };
        // In floating point, so the calculation itself cannot overflow.
        let backoff = self.base_delay.as_nanos() as f64 * 2f64.powf(exp as f64);
        if backoff > i64::MAX as f64 {
            return self.max_delay;
        }
        let calculated = Duration::from_nanos(backoff as u64);
        calculated.min(self.max_delay)
    }

    fn forget(&self, item: &K) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &K) -> usize {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// `fast_delay` for the first `max_fast_attempts` failures of a key, then
/// `slow_delay` (client-go's `ItemFastSlowRateLimiter`).
pub struct ItemFastSlowRateLimiter<K> {
    failures: Mutex<HashMap<K, usize>>,
    max_fast_attempts: usize,
    fast_delay: Duration,
    slow_delay: Duration,
}

impl<K: Key> ItemFastSlowRateLimiter<K> {
    pub fn new(fast_delay: Duration, slow_delay: Duration, max_fast_attempts: usize) -> Self {
        ItemFastSlowRateLimiter { failures: Mutex::new(HashMap::new()), max_fast_attempts, fast_delay, slow_delay }
    }
}

impl<K: Key> RateLimiter<K> for ItemFastSlowRateLimiter<K> {
    fn when(&self, item: &K) -> Duration {
        let mut failures = self.failures.lock();
        let n = failures.entry(item.clone()).or_insert(0);
        *n += 1;
        if *n <= self.max_fast_attempts { self.fast_delay } else { self.slow_delay }
    }

    fn forget(&self, item: &K) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &K) -> usize {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// One token bucket for every key (client-go's `BucketRateLimiter`): the
/// overall retry rate. It keeps no per-key state.
pub struct BucketRateLimiter {
    bucket: TokenBucket,
}

impl BucketRateLimiter {
    /// `qps` tokens per second (`f64::INFINITY`: unlimited), `burst` at
    /// most, starting full.
    pub fn new(qps: f64, burst: usize) -> Self {
        BucketRateLimiter { bucket: TokenBucket::new(qps, burst) }
    }

    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&self, _item: &K) -> Duration {
        self.bucket.reserve()
    }

    fn forget(&self, _item: &K) {}

    fn num_requeues(&self, _item: &K) -> usize {
        0
    }
}

/// The worst case of several limiters (client-go's `MaxOfRateLimiter`).
/// Every limiter is asked, so each counts the failure. With a token bucket
/// among them the burst can appear exceeded when some keys were separately
/// delayed longer.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOfRateLimiter<K> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, item: &K) -> Duration {
        self.limiters.iter().map(|l| l.when(item)).max().unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &K) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &K) -> usize {
        self.limiters.iter().map(|l| l.num_requeues(item)).max().unwrap_or(0)
    }
}

/// Another limiter's delay, never more than `max_delay` (client-go's
/// `WithMaxWaitRateLimiter`).
pub struct WithMaxWaitRateLimiter<K> {
    limiter: Box<dyn RateLimiter<K>>,
    max_delay: Duration,
}

impl<K> WithMaxWaitRateLimiter<K> {
    pub fn new(limiter: Box<dyn RateLimiter<K>>, max_delay: Duration) -> Self {
        WithMaxWaitRateLimiter { limiter, max_delay }
    }
}

impl<K> RateLimiter<K> for WithMaxWaitRateLimiter<K> {
    fn when(&self, item: &K) -> Duration {
        self.limiter.when(item).min(self.max_delay)
    }

    fn forget(&self, item: &K) {
        self.limiter.forget(item)
    }

    fn num_requeues(&self, item: &K) -> usize {
        self.limiter.num_requeues(item)
    }
}

/// The numbers of a controller's rate limiter: per-key exponential backoff
/// combined with an overall token bucket. [`Default`] is client-go's
/// `DefaultControllerRateLimiter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerRateLimiterConfig {
    /// The first retry's delay (5 ms); it doubles with each failure.
    pub base_delay: Duration,
    /// The per-key delay's cap (1000 s).
    pub max_delay: Duration,
    /// Retries per second for all keys together (10).
    pub qps: f64,
    /// Retries allowed at once before `qps` applies (100).
    pub burst: usize,
}

impl Default for ControllerRateLimiterConfig {
    fn default() -> Self {
        ControllerRateLimiterConfig {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

impl ControllerRateLimiterConfig {
    /// `max(exponential(base_delay, max_delay), bucket(qps, burst))`.
    pub fn build<K: Key>(&self) -> MaxOfRateLimiter<K> {
        MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialFailureRateLimiter::new(self.base_delay, self.max_delay)),
            Box::new(BucketRateLimiter::new(self.qps, self.burst)),
        ])
    }
}

/// client-go's `DefaultControllerRateLimiter`: the max of a per-key
/// exponential limiter (5 ms doubling, capped at 1000 s) and an overall
/// token bucket (10 per second, burst 100).
pub fn default_controller_rate_limiter<K: Key>() -> MaxOfRateLimiter<K> {
    ControllerRateLimiterConfig::default().build()
}
