//! The workqueue (`informer_host::workqueue`) against client-go's own tests
//! (`util/workqueue/*_test.go`), ported under their names, on Tokio's paused
//! clock; plus a few of ours and a property test with several workers.
//!
//! Where client-go steps a fake clock, these tests call
//! `tokio::time::advance`; where it polls (`wait.Poll`), they sleep on the
//! paused clock. client-go's `waitingForDepth` gauge is `waiting_len()`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer_host::workqueue::{
    BucketRateLimiter, ControllerRateLimiterConfig, CounterMetric, DelayingQueue, GaugeMetric, HistogramMetric,
    InMemoryMetrics, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, MaxOfRateLimiter, MetricsProvider,
    Queue, QueueConfig, RateLimiter, RateLimitingQueue, SettableGaugeMetric, WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
};
use parking_lot::Mutex;
use proptest::prelude::*;
use tokio::time::{Instant, advance, sleep};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Lets every ready task run (no time passes).
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Lets `d` pass and the delaying queue's task add what is due.
async fn let_fire(d: Duration) {
    sleep(d).await;
    settle().await;
}

/// client-go's `waitForAdded`: polls every 1 ms, for up to 10 s, until the
/// queue holds `depth` keys.
async fn wait_for_added(len: impl Fn() -> usize, depth: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if len() == depth {
            return true;
        }
        sleep(MS).await;
    }
    false
}

#[derive(Clone, Copy, Debug)]
enum ShutDown {
    Now,
    WithDrain,
}

async fn shut_down(q: &Queue<String>, how: ShutDown) {
    match how {
        ShutDown::Now => q.shutdown(),
        ShutDown::WithDrain => q.shut_down_with_drain().await,
    }
}

// ---------------------------------------------------------------------------
// queue_test.go

#[tokio::test(start_paused = true)]
async fn test_basic() {
    for how in [ShutDown::Now, ShutDown::WithDrain] {
        let q = Arc::new(Queue::<String>::new());
        let in_flight = Arc::new(Mutex::new(HashSet::new()));

        let producers: Vec<_> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        q.add(i.to_string());
                        sleep(MS).await;
                    }
                })
            })
            .collect();

        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        assert_ne!(item, "added after shutdown!", "got an item added after shutdown");
                        assert!(in_flight.lock().insert(item.clone()), "{item} processed twice at once");
                        sleep(3 * MS).await;
                        in_flight.lock().remove(&item);
                        q.done(&item);
                    }
                })
            })
            .collect();

        for p in producers {
            p.await.unwrap();
        }
        shut_down(&q, how).await;
        q.add("added after shutdown!".to_owned());
        for c in consumers {
            c.await.unwrap();
        }
        assert_eq!(q.len(), 0, "{how:?}: expected the queue to be empty");
    }
}

#[tokio::test(start_paused = true)]
async fn test_add_while_processing() {
    for how in [ShutDown::Now, ShutDown::WithDrain] {
        let q = Arc::new(Queue::<String>::new());

        let producers: Vec<_> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move { q.add(i.to_string()) })
            })
            .collect();

        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    // Every worker re-adds every item up to two times: the
                    // dirty-while-processing case.
                    let mut counters: HashMap<String, usize> = HashMap::new();
                    while let Some(item) = q.get().await {
                        let n = counters.entry(item.clone()).or_default();
                        *n += 1;
                        if *n < 2 {
                            q.add(item.clone());
                        }
                        q.done(&item);
                    }
                })
            })
            .collect();

        for p in producers {
            p.await.unwrap();
        }
        shut_down(&q, how).await;
        for c in consumers {
            c.await.unwrap();
        }
        assert_eq!(q.len(), 0, "{how:?}: expected the queue to be empty");
    }
}

#[tokio::test]
async fn test_len() {
    let q = Queue::new();
    q.add("foo");
    assert_eq!(q.len(), 1);
    q.add("bar");
    assert_eq!(q.len(), 2);
    q.add("foo"); // should not increase the queue length
    assert_eq!(q.len(), 2);
}

#[tokio::test]
async fn test_reinsert() {
    let q = Queue::new();
    q.add("foo");

    // Start processing.
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");

    // Add it back while processing: not queued yet.
    q.add(i);
    assert_eq!(q.len(), 0);

    // Finish it up.
    q.done(&i);

    // It should be back on the queue.
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");

    // Finish that one up.
    q.done(&i);
    assert_eq!(q.len(), 0, "expected the queue to be empty");
}

#[tokio::test(start_paused = true)]
async fn test_queue_drainage_using_shut_down_with_drain() {
    let q = Arc::new(Queue::new());
    q.add("foo");
    q.add("bar");

    let first = q.get().await.unwrap();
    let second = q.get().await.unwrap();

    let finished = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });

    // ShutDownWithDrain is called before the items are done: get reports
    // the shutdown while the drain waits.
    while q.get().await.is_some() {}
    settle().await;
    assert!(!finished.is_finished(), "the drain returned with items in flight");

    q.done(&first);
    settle().await;
    assert!(!finished.is_finished(), "the drain returned with an item in flight");
    q.done(&second);

    finished.await.unwrap();
}

#[tokio::test]
async fn test_no_queue_drainage_using_shut_down() {
    let q = Queue::new();
    q.add("foo");
    q.add("bar");
    q.get().await.unwrap();
    q.get().await.unwrap();

    // ShutDown returns at once, though neither item is done.
    q.shutdown();
    assert!(q.shutting_down());
    assert_eq!(q.get().await, None);
}

/// Ours: a stop that hands the backlog on. Every key not yet handed out
/// comes back in order, a key added again while in flight among them, and
/// workers get nothing more: finishing what they hold queues nothing.
#[tokio::test(start_paused = true)]
async fn shut_down_taking_queued_hands_back_what_no_worker_took() {
    let metrics = InMemoryMetrics::new();
    let q = Queue::with_config(QueueConfig::named("taken", metrics.clone()));
    for k in ["a", "b", "c"] {
        q.add(k);
    }
    assert_eq!(q.get().await, Some("a"));
    q.add("a");
    assert_eq!(q.shut_down_taking_queued(), ["b", "c", "a"]);
    assert!(q.shutting_down());
    assert_eq!(q.get().await, None, "nothing is handed out after the take");
    q.done(&"a");
    assert_eq!((q.len(), q.get().await), (0, None), "done does not queue the taken key again");
    q.add("d");
    assert_eq!(q.shut_down_taking_queued(), Vec::<&str>::new(), "adds after the shutdown are ignored");
    assert_eq!(metrics.snapshot("taken").unwrap().depth, 0.0, "the taken keys left the depth gauge");
}

#[tokio::test(start_paused = true)]
async fn test_force_queue_shutdown_using_shut_down() {
    let q = Arc::new(Queue::new());
    q.add("foo");
    q.add("bar");
    q.get().await.unwrap();
    q.get().await.unwrap();

    let finished = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });

    // ShutDownWithDrain is called before ShutDown.
    while q.get().await.is_some() {}

    // ShutDown forces the drain to return (a second SIGTERM), though no
    // item is done.
    q.shutdown();
    finished.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn test_queue_drainage_using_shut_down_with_drain_with_dirty_item() {
    let q = Arc::new(Queue::new());
    q.add("foo");
    let gotten = q.get().await.unwrap();
    q.add("foo");

    let finished = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });

    // Ensure ShutDownWithDrain has started.
    while q.get().await.is_some() {}

    // Finish "working": the dirty item goes back into the queue...
    q.done(&gotten);

    // ...so get hands it out although the queue is shutting down.
    let again = q.get().await.expect("should not have been done");
    q.done(&again);

    // Now we are really done.
    assert_eq!(q.get().await, None, "should have been done");
    finished.await.unwrap();
}

#[tokio::test]
async fn test_garbage_collection() {
    // Keys taken and done are not kept by the queue.
    let q = Queue::new();
    let c = Arc::new("hello".to_owned());
    q.add(c.clone());
    let o = q.get().await.unwrap();
    q.done(&o);
    drop(o);
    assert_eq!(Arc::strong_count(&c), 1);
}

// Ours.

#[tokio::test(start_paused = true)]
async fn test_get_is_cancel_safe() {
    let q = Arc::new(Queue::new());
    // A get given up on (a timeout, a select) takes nothing...
    assert!(tokio::time::timeout(MS, q.get()).await.is_err());
    // ...and another waiting worker still gets the next key.
    // The first waiter is woken for the next key, but is cancelled before
    // it runs: the wake-up passes to the second.
    let cancelled = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    settle().await;
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    settle().await;
    q.add("foo");
    cancelled.abort();
    let got = tokio::time::timeout(Duration::from_secs(1), waiter).await;
    let from_cancelled = cancelled.await.ok().flatten();
    match (got, from_cancelled) {
        (Ok(Ok(Some("foo"))), None) | (Err(_), Some("foo")) => {}
        other => panic!("foo was lost or handed out twice: {other:?}"),
    }
}

#[tokio::test]
async fn test_done_of_a_key_not_processing_is_ignored() {
    // client-go would queue "foo" a second time here.
    let q = Queue::new();
    q.add("foo");
    q.done(&"foo");
    assert_eq!(q.len(), 1);
    let foo = q.get().await.unwrap();
    assert_eq!(q.len(), 0);
    q.done(&foo);
    assert_eq!(q.len(), 0);
}

/// The same guarantees with real threads: several producers and workers on
/// a multi-threaded runtime, no key held by two workers at once, every key's
/// last add processed after it, and no lost wake-up (the timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_workers_on_threads() {
    #[derive(Default)]
    struct Log {
        seq: usize,
        last_add: HashMap<String, usize>,
        last_start: HashMap<String, usize>,
        in_flight: HashSet<String>,
        overlaps: usize,
    }
    let q = Arc::new(Queue::<String>::new());
    let log = Arc::new(Mutex::new(Log::default()));

    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (q, log) = (q.clone(), log.clone());
            tokio::spawn(async move {
                let mut n = 0usize;
                while let Some(key) = q.get().await {
                    {
                        let mut l = log.lock();
                        l.seq += 1;
                        let seq = l.seq;
                        l.last_start.insert(key.clone(), seq);
                        if !l.in_flight.insert(key.clone()) {
                            l.overlaps += 1;
                        }
                    }
                    tokio::task::yield_now().await;
                    n += 1;
                    if (n + w).is_multiple_of(5) {
                        // Changed while processing.
                        let mut l = log.lock();
                        l.seq += 1;
                        let seq = l.seq;
                        l.last_add.insert(key.clone(), seq);
                        drop(l);
                        q.add(key.clone());
                    }
                    log.lock().in_flight.remove(&key);
                    q.done(&key);
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..4)
        .map(|p| {
            let (q, log) = (q.clone(), log.clone());
            tokio::spawn(async move {
                for i in 0..500usize {
                    let key = format!("ns/k{}", (i * 7 + p) % 20);
                    {
                        let mut l = log.lock();
                        l.seq += 1;
                        let seq = l.seq;
                        l.last_add.insert(key.clone(), seq);
                    }
                    q.add(key);
                    if i.is_multiple_of(3) {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();

    tokio::time::timeout(Duration::from_secs(30), async {
        for p in producers {
            p.await.unwrap();
        }
        while !(q.is_empty() && q.processing_len() == 0) {
            sleep(MS).await;
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.unwrap();
        }
    })
    .await
    .expect("the workers hung: a lost wake-up?");

    let l = log.lock();
    assert_eq!(l.overlaps, 0, "a key was processed by two workers at once");
    assert_eq!(l.last_add.len(), 20);
    for (key, added) in &l.last_add {
        let started = l.last_start.get(key).copied();
        assert!(started.is_some_and(|s| s > *added), "{key}: last added at {added}, last started at {started:?}");
    }
}

// ---------------------------------------------------------------------------
// metrics_test.go

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test(start_paused = true)]
async fn test_metrics() {
    let mp = InMemoryMetrics::new();
    let q =
        Queue::with_config(QueueConfig { unfinished_work_update_period: MS, ..QueueConfig::named("test", mp.clone()) });
    let m = || mp.snapshot("test").unwrap();

    q.add("foo");
    assert_eq!(m().adds, 1);
    assert_eq!(m().depth, 1.0);

    advance(Duration::from_micros(50)).await;

    // Start processing.
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");
    assert!(approx(m().queue_latency.last, 5e-05), "{:?}", m().queue_latency);
    assert_eq!(m().queue_latency.count, 1);

    // Add it back while processing; multiple adds of the same item are
    // de-duplicated.
    for _ in 0..5 {
        q.add(i);
    }
    assert_eq!(m().adds, 2);
    // One thing remains in the queue.
    assert_eq!(m().depth, 1.0);

    advance(Duration::from_micros(25)).await;

    // Finish it up.
    q.done(&i);
    assert!(approx(m().work_duration.last, 2.5e-05), "{:?}", m().work_duration);
    assert_eq!(m().work_duration.count, 1);
    // One thing remains in the queue.
    assert_eq!(m().depth, 1.0);

    // It should be back on the queue.
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");
    assert!(approx(m().queue_latency.last, 2.5e-05), "{:?}", m().queue_latency);
    assert_eq!(m().queue_latency.count, 2);

    advance(MS).await;
    settle().await;
    assert!(approx(m().unfinished_work_seconds, 0.001), "{}", m().unfinished_work_seconds);
    assert!(approx(m().longest_running_processor_seconds, 0.001), "{}", m().longest_running_processor_seconds);

    // Finish that one up.
    q.done(&i);
    assert!(approx(m().work_duration.last, 0.001), "{:?}", m().work_duration);
    assert_eq!(m().work_duration.count, 2);
    assert_eq!(m().depth, 0.0);
    q.shutdown();
}

/// Counts the unfinished-work updates (client-go's `testMetrics`).
#[derive(Default)]
struct CountingProvider {
    updates: Arc<AtomicUsize>,
}

struct Noop;
impl GaugeMetric for Noop {
    fn inc(&self) {}
    fn dec(&self) {}
}
impl CounterMetric for Noop {
    fn inc(&self) {}
}
impl HistogramMetric for Noop {
    fn observe(&self, _: f64) {}
}
struct CountSets(Arc<AtomicUsize>);
impl SettableGaugeMetric for CountSets {
    fn set(&self, _: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl MetricsProvider for CountingProvider {
    fn new_depth_metric(&self, _: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(Noop)
    }
    fn new_adds_metric(&self, _: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Noop)
    }
    fn new_latency_metric(&self, _: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Noop)
    }
    fn new_work_duration_metric(&self, _: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(Noop)
    }
    fn new_unfinished_work_seconds_metric(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(CountSets(self.updates.clone()))
    }
    fn new_longest_running_processor_seconds_metric(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(Noop2)
    }
    fn new_retries_metric(&self, _: &str) -> Arc<dyn CounterMetric> {
        Arc::new(Noop)
    }
}
struct Noop2;
impl SettableGaugeMetric for Noop2 {
    fn set(&self, _: f64) {}
}

#[tokio::test(start_paused = true)]
async fn test_metric_shutdown() {
    let provider = CountingProvider::default();
    let updates = provider.updates.clone();
    let q = Queue::<String>::with_config(QueueConfig {
        unfinished_work_update_period: MS,
        ..QueueConfig::named("test", Arc::new(provider))
    });

    advance(MS).await;
    settle().await;
    assert_eq!(updates.load(Ordering::SeqCst), 1);
    q.shutdown();

    advance(Duration::from_secs(3600)).await;
    settle().await;
    assert_eq!(updates.load(Ordering::SeqCst), 1, "unexpected update after shutdown was called");
}

#[tokio::test]
async fn test_unnamed_queue_reports_nothing() {
    let mp = InMemoryMetrics::new();
    let q = Queue::with_config(QueueConfig {
        metrics_provider: Some(mp.clone() as Arc<dyn MetricsProvider>),
        ..QueueConfig::default()
    });
    q.add("foo");
    assert!(mp.names().is_empty());
}

#[tokio::test(start_paused = true)]
async fn test_retries_metric() {
    let mp = InMemoryMetrics::new();
    let q = DelayingQueue::with_config(QueueConfig::named("retries", mp.clone()));
    q.add("foo");
    q.add_after("foo", Duration::ZERO);
    q.add_after("bar", ms(10));
    q.add_after("bar", ms(20)); // de-duplicated, still a retry
    let m = mp.snapshot("retries").unwrap();
    assert_eq!(m.retries, 3);
    assert_eq!(m.adds, 1);
    q.shutdown();
    q.add_after("baz", ms(10)); // ignored, not a retry
    assert_eq!(mp.snapshot("retries").unwrap().retries, 3);
}

// ---------------------------------------------------------------------------
// delaying_queue_test.go

#[tokio::test(start_paused = true)]
async fn test_simple_queue() {
    let q = DelayingQueue::new();
    let first = "foo";

    q.add_after(first, ms(50));
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.len(), 0, "should not have added");

    advance(ms(60)).await;

    assert!(wait_for_added(|| q.len(), 1).await, "should have added");
    assert_eq!(q.waiting_len(), 0);
    let item = q.get().await.unwrap();
    q.done(&item);

    // Step past the next heartbeat.
    advance(Duration::from_secs(10)).await;
    sleep(ms(30)).await;
    assert_eq!(q.len(), 0, "should not have added");
}

#[tokio::test(start_paused = true)]
async fn test_deduping() {
    let q = DelayingQueue::new();
    let first = "foo";

    q.add_after(first, ms(50));
    q.add_after(first, ms(70));
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.len(), 0, "should not have added");

    // Step past the first block, we should receive now.
    advance(ms(60)).await;
    assert!(wait_for_added(|| q.len(), 1).await, "should have added");
    assert_eq!(q.waiting_len(), 0);
    let item = q.get().await.unwrap();
    q.done(&item);

    // Step past the second add.
    advance(ms(20)).await;
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");

    // Test again, but this time the earlier should override.
    q.add_after(first, ms(50));
    q.add_after(first, ms(30));
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.len(), 0, "should not have added");

    advance(ms(40)).await;
    assert!(wait_for_added(|| q.len(), 1).await, "should have added");
    assert_eq!(q.waiting_len(), 0);
    let item = q.get().await.unwrap();
    q.done(&item);

    // Step past the second add.
    advance(ms(20)).await;
    settle().await;
    assert_eq!(q.len(), 0, "should not have added");
}

#[tokio::test(start_paused = true)]
async fn test_add_two_fire_early() {
    let q = DelayingQueue::new();
    let (first, second, third) = ("foo", "bar", "baz");

    q.add_after(first, Duration::from_secs(1));
    q.add_after(second, ms(50));
    assert_eq!(q.waiting_len(), 2);
    assert_eq!(q.len(), 0, "should not have added");

    advance(ms(60)).await;
    assert!(wait_for_added(|| q.len(), 1).await);
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.get().await, Some(second));

    q.add_after(third, Duration::from_secs(2));

    advance(Duration::from_secs(1)).await;
    assert!(wait_for_added(|| q.len(), 1).await);
    assert_eq!(q.waiting_len(), 1);
    assert_eq!(q.get().await, Some(first));

    advance(Duration::from_secs(2)).await;
    assert!(wait_for_added(|| q.len(), 1).await);
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(q.get().await, Some(third));
}

#[tokio::test(start_paused = true)]
async fn test_copy_shifting() {
    let q = DelayingQueue::new();
    let (first, second, third) = ("foo", "bar", "baz");

    q.add_after(first, Duration::from_secs(1));
    q.add_after(second, ms(500));
    q.add_after(third, ms(250));
    assert_eq!(q.waiting_len(), 3);
    assert_eq!(q.len(), 0, "should not have added");

    advance(Duration::from_secs(2)).await;
    assert!(wait_for_added(|| q.len(), 3).await);
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(q.get().await, Some(third));
    assert_eq!(q.get().await, Some(second));
    assert_eq!(q.get().await, Some(first));
}

// Ours.

#[tokio::test(start_paused = true)]
async fn test_add_after_fires_on_time() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("foo", ms(50));
    assert_eq!(q.ready_at(&"foo"), Some(start + ms(50)));
    assert_eq!(q.get().await, Some("foo"));
    assert_eq!(Instant::now() - start, ms(50));
}

#[tokio::test(start_paused = true)]
async fn test_add_after_zero_adds_at_once() {
    let q = DelayingQueue::new();
    q.add_after("foo", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.waiting_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn test_add_after_while_processing_requeues_after_done() {
    let q = DelayingQueue::new();
    q.add("foo");
    let foo = q.get().await.unwrap();
    q.add_after("foo", ms(10));
    advance(ms(20)).await;
    settle().await;
    // Dirty, but not handed out while processing.
    assert_eq!(q.len(), 0);
    q.done(&foo);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn test_delaying_shutdown_drops_waiting_keys() {
    let q = DelayingQueue::new();
    q.add_after("foo", ms(10));
    q.shutdown();
    q.add_after("bar", ms(10));
    advance(ms(20)).await;
    settle().await;
    assert_eq!(q.len(), 0);
    assert_eq!(q.waiting_len(), 0);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn test_delaying_shut_down_with_drain() {
    let q = Arc::new(DelayingQueue::new());
    q.add("foo");
    q.add_after("bar", ms(10));
    let foo = q.get().await.unwrap();
    let drained = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    assert!(q.shutting_down());
    advance(ms(20)).await;
    settle().await;
    assert!(!drained.is_finished());
    assert_eq!(q.len(), 0, "bar was added after the shutdown");
    q.done(&foo);
    drained.await.unwrap();
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn test_dropping_a_queue_ends_its_tasks() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let mp = InMemoryMetrics::new();
    let q = RateLimitingQueue::with_config(QueueConfig::named("dropped", mp), default_controller_rate_limiter());
    q.add_after("ns/foo".to_owned(), Duration::from_secs(60));
    settle().await;
    // The waiting task and the unfinished-work ticker.
    assert_eq!(metrics.num_alive_tasks(), before + 2);
    drop(q);
    // The waiting task ends at once, the ticker at its next tick.
    advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(metrics.num_alive_tasks(), before);
}

// ---------------------------------------------------------------------------
// rate_limiting_queue_test.go

#[tokio::test(start_paused = true)]
async fn test_rate_limiting_queue() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));
    let queue = RateLimitingQueue::new(limiter);

    // client-go reads each wait entry off the delaying queue's channel; here
    // each entry is read with `ready_at`, then let fire.
    let check = |key: &'static str, expected: Duration| {
        assert_eq!(queue.ready_at(&key).map(|at| at - Instant::now()), Some(expected), "{key}");
    };

    queue.add_rate_limited("one");
    check("one", MS);
    let_fire(MS).await;
    queue.add_rate_limited("one");
    check("one", 2 * MS);
    let_fire(2 * MS).await;
    assert_eq!(queue.num_requeues(&"one"), 2);

    queue.add_rate_limited("two");
    check("two", MS);
    let_fire(MS).await;
    queue.add_rate_limited("two");
    check("two", 2 * MS);
    let_fire(2 * MS).await;

    queue.forget(&"one");
    assert_eq!(queue.num_requeues(&"one"), 0);
    queue.add_rate_limited("one");
    check("one", MS);
}

// Ours: what issue 11 asks of a failing reconcile.

#[tokio::test(start_paused = true)]
async fn test_failing_key_backs_off_exponentially_and_caps() {
    let q = RateLimitingQueue::new(default_controller_rate_limiter());
    q.add("ns/foo".to_owned());
    let mut last = Instant::now();
    let mut gaps = Vec::new();
    for _ in 0..22 {
        let key = q.get().await.unwrap();
        let now = Instant::now();
        gaps.push(now - last);
        last = now;
        // A failed reconcile.
        q.add_rate_limited(key.clone());
        q.done(&key);
    }
    assert_eq!(gaps[0], Duration::ZERO);
    let expected: Vec<Duration> = (0..21).map(|n| (ms(5) * 2u32.pow(n)).min(Duration::from_secs(1000))).collect();
    assert_eq!(&gaps[1..], &expected[..]);
    assert_eq!(*gaps.last().unwrap(), Duration::from_secs(1000));
    assert_eq!(q.num_requeues(&"ns/foo".to_owned()), 22);

    // Success forgets: the next failure waits 5 ms again.
    let key = q.get().await.unwrap();
    q.forget(&key);
    q.done(&key);
    q.add_rate_limited(key.clone());
    assert_eq!(q.ready_at(&key).unwrap() - Instant::now(), ms(5));
}

// ---------------------------------------------------------------------------
// default_rate_limiters_test.go

#[test]
fn test_item_exponential_failure_rate_limiter() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));

    assert_eq!(limiter.when(&"one"), MS);
    assert_eq!(limiter.when(&"one"), 2 * MS);
    assert_eq!(limiter.when(&"one"), 4 * MS);
    assert_eq!(limiter.when(&"one"), 8 * MS);
    assert_eq!(limiter.when(&"one"), 16 * MS);
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), MS);
    assert_eq!(limiter.when(&"two"), 2 * MS);
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), MS);
}

#[test]
fn test_item_exponential_failure_rate_limiter_overflow() {
    let limiter = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1000));
    for _ in 0..5 {
        limiter.when(&"one");
    }
    assert_eq!(limiter.when(&"one"), 32 * MS);

    for _ in 0..1000 {
        limiter.when(&"overflow1");
    }
    assert_eq!(limiter.when(&"overflow1"), Duration::from_secs(1000));

    let limiter = ItemExponentialFailureRateLimiter::new(Duration::from_secs(60), Duration::from_secs(1000 * 3600));
    for _ in 0..2 {
        limiter.when(&"two");
    }
    assert_eq!(limiter.when(&"two"), Duration::from_secs(4 * 60));

    for _ in 0..1000 {
        limiter.when(&"overflow2");
    }
    assert_eq!(limiter.when(&"overflow2"), Duration::from_secs(1000 * 3600));
}

#[test]
fn test_item_fast_slow_rate_limiter() {
    let limiter = ItemFastSlowRateLimiter::new(ms(5), Duration::from_secs(10), 3);

    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), Duration::from_secs(10));
    assert_eq!(limiter.when(&"one"), Duration::from_secs(10));
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), ms(5));
    assert_eq!(limiter.when(&"two"), ms(5));
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), ms(5));
}

#[test]
fn test_max_of_rate_limiter() {
    let limiter: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(ms(5), Duration::from_secs(3), 3)),
        Box::new(ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1))),
    ]);

    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), ms(5));
    assert_eq!(limiter.when(&"one"), Duration::from_secs(3));
    assert_eq!(limiter.when(&"one"), Duration::from_secs(3));
    assert_eq!(limiter.num_requeues(&"one"), 5);

    assert_eq!(limiter.when(&"two"), ms(5));
    assert_eq!(limiter.when(&"two"), ms(5));
    assert_eq!(limiter.num_requeues(&"two"), 2);

    limiter.forget(&"one");
    assert_eq!(limiter.num_requeues(&"one"), 0);
    assert_eq!(limiter.when(&"one"), ms(5));
}

/// client-go's `StepRateLimiter` (a test helper): `base` for the first
/// `threshold` calls, whatever the key, then `max`.
struct StepRateLimiter {
    count: AtomicUsize,
    threshold: usize,
    base_delay: Duration,
    max_delay: Duration,
}

impl RateLimiter<usize> for StepRateLimiter {
    fn when(&self, _: &usize) -> Duration {
        if self.count.fetch_add(1, Ordering::SeqCst) < self.threshold { self.base_delay } else { self.max_delay }
    }
    fn forget(&self, _: &usize) {}
    fn num_requeues(&self, _: &usize) -> usize {
        0
    }
}

#[test]
fn test_with_max_wait_rate_limiter() {
    let step = StepRateLimiter {
        count: AtomicUsize::new(0),
        threshold: 100,
        base_delay: ms(5),
        max_delay: Duration::from_secs(1000),
    };
    let limiter = WithMaxWaitRateLimiter::new(Box::new(step), Duration::from_secs(500));
    for i in 0..100 {
        assert_eq!(limiter.when(&i), ms(5));
    }
    for i in 100..200 {
        assert_eq!(limiter.when(&i), Duration::from_secs(500));
    }
}

// Ours: the bucket (client-go has no test of its own for it).

#[tokio::test(start_paused = true)]
async fn test_bucket_rate_limiter() {
    let limiter = BucketRateLimiter::new(10.0, 100);
    // Starts full: 100 at once.
    for i in 0..100 {
        assert_eq!(RateLimiter::<usize>::when(&limiter, &i), Duration::ZERO, "{i}");
    }
    // Then reservations in debt: 100 ms apart, never refused.
    assert_eq!(RateLimiter::<usize>::when(&limiter, &100), ms(100));
    assert_eq!(RateLimiter::<usize>::when(&limiter, &101), ms(200));
    assert_eq!(RateLimiter::<usize>::num_requeues(&limiter, &101), 0);

    // After 1 s the debt of 2 is paid and 8 tokens are back.
    advance(Duration::from_secs(1)).await;
    for i in 0..8 {
        assert_eq!(RateLimiter::<usize>::when(&limiter, &i), Duration::ZERO, "{i}");
    }
    assert_eq!(RateLimiter::<usize>::when(&limiter, &8), ms(100));

    // It never holds more than the burst.
    advance(Duration::from_secs(3600)).await;
    for i in 0..100 {
        assert_eq!(RateLimiter::<usize>::when(&limiter, &i), Duration::ZERO, "{i}");
    }
    assert_eq!(RateLimiter::<usize>::when(&limiter, &100), ms(100));
}

#[tokio::test(start_paused = true)]
async fn test_bucket_rate_limiter_corner_cases() {
    let unlimited = BucketRateLimiter::new(f64::INFINITY, 0);
    for i in 0..1000 {
        assert_eq!(RateLimiter::<usize>::when(&unlimited, &i), Duration::ZERO);
    }
    let never = BucketRateLimiter::new(10.0, 0);
    assert!(RateLimiter::<usize>::when(&never, &0) > Duration::from_secs(86_400 * 365 * 100));
    let zero = BucketRateLimiter::new(0.0, 2);
    assert_eq!(RateLimiter::<usize>::when(&zero, &0), Duration::ZERO);
    assert_eq!(RateLimiter::<usize>::when(&zero, &0), Duration::ZERO);
    assert!(RateLimiter::<usize>::when(&zero, &0) > Duration::from_secs(86_400 * 365 * 100));
}

#[tokio::test(start_paused = true)]
async fn test_default_controller_rate_limiter() {
    let limiter = default_controller_rate_limiter::<String>();
    // Per key: 5 ms doubling...
    let key = "ns/a".to_owned();
    let delays: Vec<_> = (0..4).map(|_| limiter.when(&key)).collect();
    assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40)]);
    assert_eq!(limiter.num_requeues(&key), 4);
    // ...and overall 10 per second after a burst of 100 (4 used above).
    for i in 0..96 {
        assert_eq!(limiter.when(&format!("ns/{i}")), ms(5));
    }
    assert_eq!(limiter.when(&"ns/late".to_owned()), ms(100));
    limiter.forget(&key);
    assert_eq!(limiter.num_requeues(&key), 0);

    let custom = ControllerRateLimiterConfig { base_delay: MS, max_delay: ms(4), qps: 1.0, burst: 1 }.build::<String>();
    let delays: Vec<_> = (0..4).map(|_| custom.when(&key)).collect();
    assert_eq!(delays, [MS, Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(3)]);
}

// ---------------------------------------------------------------------------
// Property: several workers, random adds, delays, failures.

#[derive(Debug, Clone)]
enum Op {
    Add,
    AddAfter(u64),
    AddRateLimited,
}

fn op() -> impl Strategy<Value = (u64, usize, Op)> {
    let kind = prop_oneof![Just(Op::Add), (0u64..30).prop_map(Op::AddAfter), Just(Op::AddRateLimited)];
    (0u64..5, 0usize..6, kind)
}

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Add(String),
    Start(String),
}

#[derive(Default)]
struct Record {
    log: Vec<Event>,
    in_flight: HashSet<String>,
    overlaps: Vec<String>,
}

fn run_workers(workers: usize, ops: Vec<(u64, usize, Op)>, work: Vec<u64>, failures: Vec<bool>) -> Record {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(async move {
        let config = ControllerRateLimiterConfig { base_delay: MS, max_delay: ms(50), qps: 100.0, burst: 5 };
        let q = Arc::new(RateLimitingQueue::new(config.build::<String>()));
        let record = Arc::new(Mutex::new(Record::default()));
        let work = Arc::new(Mutex::new(work.into_iter().cycle()));
        let failures = Arc::new(Mutex::new(VecDeque::from(failures)));

        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (q, record, work, failures) = (q.clone(), record.clone(), work.clone(), failures.clone());
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        {
                            let mut r = record.lock();
                            if !r.in_flight.insert(key.clone()) {
                                r.overlaps.push(key.clone());
                            }
                            r.log.push(Event::Start(key.clone()));
                        }
                        let d = work.lock().next().unwrap_or(0);
                        sleep(ms(d)).await;
                        let failed = failures.lock().pop_front().unwrap_or(false);
                        let mut r = record.lock();
                        r.in_flight.remove(&key);
                        if failed {
                            r.log.push(Event::Add(key.clone()));
                            q.add_rate_limited(key.clone());
                        } else {
                            q.forget(&key);
                        }
                        drop(r);
                        q.done(&key);
                    }
                })
            })
            .collect();

        for (gap, key, op) in ops {
            sleep(ms(gap)).await;
            let key = format!("ns/k{key}");
            record.lock().log.push(Event::Add(key.clone()));
            match op {
                Op::Add => q.add(key),
                Op::AddAfter(after) => q.add_after(key, ms(after)),
                Op::AddRateLimited => q.add_rate_limited(key),
            }
        }

        // Wait until everything added has been processed.
        for _ in 0..100_000 {
            if q.is_empty() && q.waiting_len() == 0 && q.processing_len() == 0 {
                break;
            }
            sleep(ms(5)).await;
        }
        q.shut_down_with_drain().await;
        for h in handles {
            h.await.unwrap();
        }
        Arc::try_unwrap(record).ok().unwrap().into_inner()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// No key is processed by two workers at once, and every key's last add
    /// is followed by a processing that started after it.
    #[test]
    fn workers_never_overlap_and_last_add_is_processed(
        workers in 1usize..6,
        ops in prop::collection::vec(op(), 1..60),
        work in prop::collection::vec(0u64..8, 1..20),
        failures in prop::collection::vec(any::<bool>(), 0..30),
    ) {
        let record = run_workers(workers, ops, work, failures);
        prop_assert!(record.overlaps.is_empty(), "processed twice at once: {:?}", record.overlaps);

        let mut last_add: HashMap<&str, usize> = HashMap::new();
        let mut last_start: HashMap<&str, usize> = HashMap::new();
        for (i, e) in record.log.iter().enumerate() {
            match e {
                Event::Add(k) => last_add.insert(k.as_str(), i),
                Event::Start(k) => last_start.insert(k.as_str(), i),
            };
        }
        for (key, added) in &last_add {
            let started = last_start.get(key).copied();
            prop_assert!(
                started.is_some_and(|s| s > *added),
                "{key}: last added at event {added}, last started at {started:?}"
            );
        }
    }
}
