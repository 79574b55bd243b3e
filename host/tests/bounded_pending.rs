//! A stalled handler with a pending cap: memory stays bounded, nothing of
//! the final state is lost, per-key order holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_host::informer::{
    DeletedObject, Delivery, HandlerError, HandlerOptions, InformerOptions, ObjectRef, ResourceEventHandler,
    SharedIndexInformer,
};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Blocks in its first call until released, then records key → rv and
/// counts any notification that goes back in time for its key.
struct Stalled {
    released: Arc<AtomicBool>,
    view: Arc<Mutex<HashMap<String, u64>>>,
    out_of_order: Arc<AtomicU64>,
}

fn rv(o: &ObjectRef) -> u64 {
    o.resource_version().unwrap().parse().unwrap()
}

impl Stalled {
    fn wait(&self) {
        while !self.released.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    fn saw(&self, o: &ObjectRef) {
        let mut v = self.view.lock();
        let prev = v.insert(o.key().to_string(), rv(o));
        if prev.is_some_and(|p| p >= rv(o)) {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ResourceEventHandler for Stalled {
    fn on_add(&mut self, obj: &ObjectRef, _: bool) -> Result<(), HandlerError> {
        self.wait();
        self.saw(obj);
        Ok(())
    }
    fn on_update(&mut self, _: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        self.wait();
        self.saw(new);
        Ok(())
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        self.wait();
        self.view.lock().remove(obj.key());
        Ok(())
    }
    fn delivery(&self) -> Delivery {
        Delivery::Blocking
    }
}

/// Releases the stalled handler when dropped, so a failing assertion does
/// not leave a delivery thread blocked forever (and the runtime with it).
struct ReleaseOnDrop(Arc<AtomicBool>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn rss_mib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 =
        s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_plugin_with_a_cap_stays_bounded_and_catches_up_with_the_source() {
    const KEYS: usize = 200;
    const UPDATES: usize = 1_000_000;
    const CAP: usize = 1_000;
    let src = MemorySource::new();
    // A bounded history, as an API server keeps; the producer below stays
    // within it, so every update reaches the informer as a notification.
    src.set_history_limit(10_000);
    for k in 0..KEYS {
        src.apply_config_map("ns", &format!("k{k}"), "0").unwrap();
    }
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions::default());
    let released = Arc::new(AtomicBool::new(false));
    let _release = ReleaseOnDrop(released.clone());
    let view = Arc::new(Mutex::new(HashMap::new()));
    let out_of_order = Arc::new(AtomicU64::new(0));
    let handler = Stalled { released: released.clone(), view: view.clone(), out_of_order: out_of_order.clone() };
    let reg = informer
        .add_event_handler_with_options(
            Box::new(handler),
            HandlerOptions { max_pending: Some(CAP), ..HandlerOptions::named("stalled") },
        )
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    while !informer.has_synced() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let before = rss_mib();
    let mut max_pending = 0;
    let mut max_rss = before;
    for i in 0..UPDATES {
        src.apply_config_map("ns", &format!("k{}", i % KEYS), &i.to_string()).unwrap();
        if i % 1000 == 0 {
            // Let the informer keep up with the source.
            while informer.last_sync_resource_version().parse::<u64>().unwrap() + 5_000 < src.resource_version() {
                tokio::task::yield_now().await;
            }
            max_pending = max_pending.max(reg.pending());
        }
        if i % 100_000 == 0 {
            max_rss = max_rss.max(rss_mib());
        }
    }
    // Pending stays within twice the cap (it coalesces on the way up).
    assert!(max_pending <= 2 * CAP, "pending reached {max_pending}");
    let coalesced = reg.stats().coalesced.load(Ordering::Relaxed);
    assert!(coalesced > (UPDATES / 2) as u64, "only {coalesced} coalesced");
    // A million notifications of ~300 bytes would be hundreds of MiB.
    assert!(max_rss - before < 64, "RSS grew from {before} MiB to {max_rss} MiB");

    released.store(true, Ordering::Release);
    let expected: HashMap<String, u64> = src.objects().iter().map(|o| (o.key().to_string(), rv(o))).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while *view.lock() != expected {
        assert!(std::time::Instant::now() < deadline, "the handler's view never caught up with the source");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(out_of_order.load(Ordering::Relaxed), 0, "per-key order held");
    stop.cancel();
    task.await.unwrap();
}
