//! Workqueue metrics: client-go's `metrics.go` hooks, and a provider whose
//! values can be read.
//!
//! This module owns what a queue reports and to whom. A queue created with
//! a non-empty [`QueueConfig::name`](super::QueueConfig::name) and a
//! [`MetricsProvider`] asks the provider for one metric of each kind, as
//! client-go's `MetricsProvider` does, and then, under the queue's lock:
//!
//! - `add` (a key becomes dirty): adds +1, depth +1, remembers when;
//! - `get` (a worker takes it): depth −1, observes queue latency (seconds
//!   since its first add), remembers when processing started;
//! - `done`: observes work duration (seconds since `get`);
//! - every `unfinished_work_update_period` (500 ms): sets unfinished work
//!   seconds (the sum of the ages of all keys being processed) and longest
//!   running processor seconds (the oldest of them);
//! - `add_after` (and so `add_rate_limited`) on a delaying queue: retries +1.
//!
//! An unnamed queue, or one without a provider, reports nothing (client-go's
//! `noMetrics`). There is no global provider: each queue is given one.
//!
//! [`InMemoryMetrics`] is a provider that keeps the values itself, keyed by
//! queue name, for a `/metrics` handler to read with
//! [`InMemoryMetrics::snapshot`]. Its histograms count into
//! [`DURATION_BUCKETS`], the buckets client-go's Prometheus adapter uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Key;

/// Metric names as Kubernetes components expose them (subsystem
/// `workqueue`, one series per queue with label `name`).
pub mod names {
    pub const DEPTH: &str = "workqueue_depth";
    pub const ADDS: &str = "workqueue_adds_total";
    pub const QUEUE_LATENCY: &str = "workqueue_queue_duration_seconds";
    pub const WORK_DURATION: &str = "workqueue_work_duration_seconds";
    pub const UNFINISHED_WORK: &str = "workqueue_unfinished_work_seconds";
    pub const LONGEST_RUNNING_PROCESSOR: &str = "workqueue_longest_running_processor_seconds";
    pub const RETRIES: &str = "workqueue_retries_total";
}

/// Upper bounds (seconds) of the queue latency and work duration
/// histograms: Prometheus' `ExponentialBuckets(10e-9, 10, 10)`, as in
/// Kubernetes' workqueue metrics (`+Inf` is implied).
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// A value that goes up and down (client-go's `GaugeMetric`).
pub trait GaugeMetric: Send + Sync {
    fn inc(&self);
    fn dec(&self);
}

/// A value that is set (client-go's `SettableGaugeMetric`).
pub trait SettableGaugeMetric: Send + Sync {
    fn set(&self, value: f64);
}

/// A value that only goes up (client-go's `CounterMetric`).
pub trait CounterMetric: Send + Sync {
    fn inc(&self);
}

/// Observations, in seconds (client-go's `HistogramMetric`).
pub trait HistogramMetric: Send + Sync {
    fn observe(&self, value: f64);
}

/// Makes a queue's metrics (client-go's `MetricsProvider`). Called once per
/// metric when a named queue is created; the metrics are then called under
/// the queue's lock, so they should be quick (an atomic, a short lock).
pub trait MetricsProvider: Send + Sync {
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric>;
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric>;
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric>;
    fn new_longest_running_processor_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric>;
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric>;
}

/// The hooks a [`Queue`](super::Queue) calls (client-go's `queueMetrics`:
/// `defaultQueueMetrics` or `noMetrics`). Kept in the queue's locked state.
pub(crate) struct QueueMetrics<K> {
    inner: Option<DefaultQueueMetrics<K>>,
}

struct DefaultQueueMetrics<K> {
    depth: Arc<dyn GaugeMetric>,
    adds: Arc<dyn CounterMetric>,
    latency: Arc<dyn HistogramMetric>,
    work_duration: Arc<dyn HistogramMetric>,
    unfinished_work_seconds: Arc<dyn SettableGaugeMetric>,
    longest_running_processor: Arc<dyn SettableGaugeMetric>,
    add_times: HashMap<K, Instant>,
    processing_start_times: HashMap<K, Instant>,
}

impl<K: Key> QueueMetrics<K> {
    pub(crate) fn new(provider: Option<&Arc<dyn MetricsProvider>>, name: &str) -> Self {
        let inner = match provider {
            Some(mp) if !name.is_empty() => Some(DefaultQueueMetrics {
                depth: mp.new_depth_metric(name),
                adds: mp.new_adds_metric(name),
                latency: mp.new_latency_metric(name),
                work_duration: mp.new_work_duration_metric(name),
                unfinished_work_seconds: mp.new_unfinished_work_seconds_metric(name),
                longest_running_processor: mp.new_longest_running_processor_seconds_metric(name),
                add_times: HashMap::new(),
                processing_start_times: HashMap::new(),
            }),
            _ => None,
        };
        QueueMetrics { inner }
    }

    /// Whether anything is reported (else no update task is started).
    pub(crate) fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    pub(crate) fn add(&mut self, item: &K) {
        let Some(m) = &mut self.inner else { return };
        m.adds.inc();
        m.depth.inc();
        m.add_times.entry(item.clone()).or_insert_with(Instant::now);
    }

    pub(crate) fn get(&mut self, item: &K) {
        let Some(m) = &mut self.inner else { return };
        let now = Instant::now();
        m.depth.dec();
        m.processing_start_times.insert(item.clone(), now);
        if let Some(start) = m.add_times.remove(item) {
            m.latency.observe(seconds_since(start, now));
        }
    }

    /// `item` left the queue without being processed.
    pub(crate) fn taken(&mut self, item: &K) {
        let Some(m) = &mut self.inner else { return };
        m.depth.dec();
        m.add_times.remove(item);
    }

    pub(crate) fn done(&mut self, item: &K) {
        let Some(m) = &mut self.inner else { return };
        if let Some(start) = m.processing_start_times.remove(item) {
            m.work_duration.observe(seconds_since(start, Instant::now()));
        }
    }

    pub(crate) fn update_unfinished_work(&self) {
        let Some(m) = &self.inner else { return };
        let now = Instant::now();
        let mut total = 0.0;
        let mut oldest = 0.0_f64;
        for start in m.processing_start_times.values() {
            let age = seconds_since(*start, now);
            total += age;
            oldest = oldest.max(age);
        }
        m.unfinished_work_seconds.set(total);
        m.longest_running_processor.set(oldest);
    }
}

/// The retries counter of a delaying queue (client-go's `retryMetrics`).
pub(crate) struct RetryMetrics {
    retries: Option<Arc<dyn CounterMetric>>,
}

impl RetryMetrics {
    pub(crate) fn new(provider: Option<&Arc<dyn MetricsProvider>>, name: &str) -> Self {
        let retries = match provider {
            Some(mp) if !name.is_empty() => Some(mp.new_retries_metric(name)),
            _ => None,
        };
        RetryMetrics { retries }
    }

    pub(crate) fn retry(&self) {
        if let Some(r) = &self.retries {
            r.inc();
        }
    }
}

fn seconds_since(start: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(start).as_secs_f64()
}

/// A [`MetricsProvider`] that keeps every queue's values in memory, keyed by
/// queue name, for a `/metrics` handler to read on each scrape. Queues that
/// share a name share their values.
#[derive(Default)]
pub struct InMemoryMetrics {
    queues: Mutex<BTreeMap<String, Arc<QueueValues>>>,
}

/// What [`InMemoryMetrics`] holds for one queue name, as read at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueMetricsSnapshot {
    /// Keys waiting to be taken (not those waiting for a delay).
    pub depth: f64,
    /// Keys made dirty (adds that were not de-duplicated).
    pub adds: u64,
    /// `add_after` / `add_rate_limited` calls.
    pub retries: u64,
    /// Seconds from a key's first add to a worker taking it.
    pub queue_latency: HistogramSnapshot,
    /// Seconds from a worker taking a key to `done`.
    pub work_duration: HistogramSnapshot,
    /// Sum of the ages of the keys being processed, as of the last update.
    pub unfinished_work_seconds: f64,
    /// Age of the oldest key being processed, as of the last update.
    pub longest_running_processor_seconds: f64,
}

/// A histogram as read at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistogramSnapshot {
    pub count: u64,
    pub sum: f64,
    /// The most recent observation (0 before any).
    pub last: f64,
    /// Cumulative counts per upper bound of [`DURATION_BUCKETS`]; the
    /// `+Inf` bucket is `count`.
    pub buckets: Vec<(f64, u64)>,
}

impl InMemoryMetrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The values of the queue called `name`, if one was created.
    pub fn snapshot(&self, name: &str) -> Option<QueueMetricsSnapshot> {
        let values = self.queues.lock().get(name).cloned()?;
        Some(values.snapshot())
    }

    /// The names of the queues created with this provider, sorted.
    pub fn names(&self) -> Vec<String> {
        self.queues.lock().keys().cloned().collect()
    }

    fn values(&self, name: &str) -> Arc<QueueValues> {
        self.queues.lock().entry(name.to_owned()).or_default().clone()
    }
}

impl MetricsProvider for InMemoryMetrics {
    fn new_depth_metric(&self, name: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(Field(self.values(name), |v| &v.depth))
    }
    fn new_adds_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Field(self.values(name), |v| &v.adds))
    }
    fn new_latency_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Field(self.values(name), |v| &v.latency))
    }
    fn new_work_duration_metric(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Field(self.values(name), |v| &v.work_duration))
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(Field(self.values(name), |v| &v.unfinished))
    }
    fn new_longest_running_processor_seconds_metric(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(Field(self.values(name), |v| &v.longest))
    }
    fn new_retries_metric(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Field(self.values(name), |v| &v.retries))
    }
}

#[derive(Default)]
struct QueueValues {
    depth: Gauge,
    adds: Counter,
    latency: Histogram,
    work_duration: Histogram,
    unfinished: Gauge,
    longest: Gauge,
    retries: Counter,
}

impl QueueValues {
    fn snapshot(&self) -> QueueMetricsSnapshot {
        QueueMetricsSnapshot {
            depth: self.depth.get(),
            adds: self.adds.0.load(Ordering::Relaxed),
            retries: self.retries.0.load(Ordering::Relaxed),
            queue_latency: self.latency.snapshot(),
            work_duration: self.work_duration.snapshot(),
            unfinished_work_seconds: self.unfinished.get(),
            longest_running_processor_seconds: self.longest.get(),
        }
    }
}

/// One metric of a queue's [`QueueValues`]: the values and which field.
struct Field<T: 'static>(Arc<QueueValues>, fn(&QueueValues) -> &T);

impl<T> Field<T> {
    fn get(&self) -> &T {
        (self.1)(&self.0)
    }
}

#[derive(Default)]
struct Gauge(Mutex<f64>);

impl Gauge {
    fn get(&self) -> f64 {
        *self.0.lock()
    }
}

#[derive(Default)]
struct Counter(AtomicU64);

#[derive(Default)]
struct Histogram(Mutex<HistogramState>);

#[derive(Default)]
struct HistogramState {
    count: u64,
    sum: f64,
    last: f64,
    /// Non-cumulative counts per bucket of [`DURATION_BUCKETS`].
    buckets: [u64; DURATION_BUCKETS.len()],
}

impl Histogram {
    fn snapshot(&self) -> HistogramSnapshot {
        let h = self.0.lock();
        let mut cumulative = 0;
        let buckets = DURATION_BUCKETS
            .iter()
            .zip(h.buckets)
            .map(|(bound, n)| {
                cumulative += n;
                (*bound, cumulative)
            })
            .collect();
        HistogramSnapshot { count: h.count, sum: h.sum, last: h.last, buckets }
    }
}

impl GaugeMetric for Field<Gauge> {
    fn inc(&self) {
        *self.get().0.lock() += 1.0;
    }
    fn dec(&self) {
        *self.get().0.lock() -= 1.0;
    }
}

impl SettableGaugeMetric for Field<Gauge> {
    fn set(&self, value: f64) {
        *self.get().0.lock() = value;
    }
}

impl CounterMetric for Field<Counter> {
    fn inc(&self) {
        self.get().0.fetch_add(1, Ordering::Relaxed);
    }
}

impl HistogramMetric for Field<Histogram> {
    fn observe(&self, value: f64) {
        let mut h = self.get().0.lock();
        h.count += 1;
        h.sum += value;
        h.last = value;
        if let Some(i) = DURATION_BUCKETS.iter().position(|bound| value <= *bound) {
            h.buckets[i] += 1;
        }
    }
}
