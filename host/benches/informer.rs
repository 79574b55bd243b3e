//! Delivery benchmark of the informer engine (not a test).
//!
//! `cargo bench -p informer-host --bench informer`
//!
//! 10 000 ConfigMaps of about 1 KiB are listed, then 100 000 updates are
//! watched and delivered to K = 1, 10, 100 native no-op handlers on one
//! informer. Each K runs in its own child process of this binary, so each
//! peak RSS (VmHWM) is that run's own.
//!
//! The updates are stamped by the memory source (JSON built, resourceVersion
//! set, metadata parsed) before the timed window: the source keeps them in
//! its watch history and the informer's watch is held back until every
//! handler has synced. The timed window runs from releasing the watch (the
//! first update) to the last update handled by the last handler, so the
//! rate is the engine's: reflector, DeltaFIFO, store, fan-out and listeners.
//!
//! Memory per cached object is reported twice: `Object::bytes_held` (what
//! the object's own accounting says) and the RSS growth while 10 000 such
//! objects are built and kept (which includes the allocator's overhead).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use informer_host::informer::{
    DeletedObject, HandlerError, InformerOptions, ListResult, ListerWatcher, ObjectRef, Registration,
    ResourceEventHandler, SharedIndexInformer, SourceError, WatchStream,
};
use informer_host::source::{MemorySource, stamp};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

const OBJECTS: usize = 10_000;
const UPDATES: usize = 100_000;
const KS: [usize; 3] = [1, 10, 100];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let k: usize = args.get(i + 1).and_then(|k| k.parse().ok()).expect("--child K");
        child(k);
        return;
    }
    parent();
}

/// One K's figures, as the child prints them (`key=value` pairs).
#[derive(Debug, Default)]
struct Figures {
    k: usize,
    notifications: u64,
    secs: f64,
    sync_secs: f64,
    prep_secs: f64,
    hwm_kib: u64,
    rss_before_kib: u64,
    bytes_held: f64,
    json_bytes: f64,
    rss_per_obj: f64,
}

impl Figures {
    fn parse(line: &str) -> Option<Figures> {
        let mut f = Figures::default();
        for pair in line.strip_prefix("RESULT ")?.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            match k {
                "k" => f.k = v.parse().ok()?,
                "notifications" => f.notifications = v.parse().ok()?,
                "secs" => f.secs = v.parse().ok()?,
                "sync_secs" => f.sync_secs = v.parse().ok()?,
                "prep_secs" => f.prep_secs = v.parse().ok()?,
                "hwm_kib" => f.hwm_kib = v.parse().ok()?,
                "rss_before_kib" => f.rss_before_kib = v.parse().ok()?,
                "bytes_held" => f.bytes_held = v.parse().ok()?,
                "json_bytes" => f.json_bytes = v.parse().ok()?,
                "rss_per_obj" => f.rss_per_obj = v.parse().ok()?,
                _ => {}
            }
        }
        Some(f)
    }
}

fn parent() {
    let exe = std::env::current_exe().expect("current exe");
    let mut rows = Vec::new();
    for k in KS {
        let out = std::process::Command::new(&exe).arg("--child").arg(k.to_string()).output().expect("spawn child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            eprintln!("child K={k} failed: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        }
        let f = stdout.lines().find_map(Figures::parse).expect("child printed no RESULT line");
        rows.push(f);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!();
    println!(
        "informer delivery: {OBJECTS} ConfigMaps listed, then {UPDATES} updates; native no-op handlers; memory source; {cores} cores"
    );
    println!(
        "{:>4} {:>13} {:>9} {:>14} {:>10} {:>10} {:>11} {:>11} {:>10} {:>10} {:>6} {:>9}",
        "K",
        "notifications",
        "time",
        "notif/s",
        "sync time",
        "peak RSS",
        "RSS at run",
        "engine RSS",
        "held/obj",
        "JSON/obj",
        "ratio",
        "RSS/obj"
    );
    for f in &rows {
        println!(
            "{:>4} {:>13} {:>8.3}s {:>14} {:>9.3}s {:>6.1} MiB {:>6.1} MiB {:>7.1} MiB {:>8.0} B {:>8.0} B {:>5.2}x {:>7.0} B",
            f.k,
            f.notifications,
            f.secs,
            group(f.notifications as f64 / f.secs),
            f.sync_secs,
            f.hwm_kib as f64 / 1024.0,
            f.rss_before_kib as f64 / 1024.0,
            f.hwm_kib.saturating_sub(f.rss_before_kib) as f64 / 1024.0,
            f.bytes_held,
            f.json_bytes,
            f.bytes_held / f.json_bytes,
            f.rss_per_obj,
        );
    }
    let prep = rows.iter().map(|f| f.prep_secs).sum::<f64>() / rows.len() as f64;
    println!(
        "notif/s: updates x K over the timed window (first update released -> last update handled by every handler)"
    );
    println!(
        "sync time: list of {OBJECTS} -> every handler synced; RSS at run: source with all {UPDATES} prepared updates, before the informer starts"
    );
    println!(
        "engine RSS: peak RSS - RSS at run; held/obj: Object::bytes_held of cached objects; ratio: held/obj / JSON/obj"
    );
    println!(
        "RSS/obj: RSS growth while {OBJECTS} such objects are built and kept (allocator overhead and the Arc included)"
    );
    println!(
        "preparing {UPDATES} updates in the memory source (JSON stamping, outside the window): {prep:.3}s ({} updates/s)",
        group(UPDATES as f64 / prep)
    );
    let k10 = rows.iter().find(|f| f.k == 10).expect("K = 10 row");
    let rate = k10.notifications as f64 / k10.secs;
    let ratio = rows.iter().map(|f| f.bytes_held / f.json_bytes).fold(0.0, f64::max);
    let rss_ratio = rows.iter().map(|f| f.rss_per_obj / f.json_bytes).fold(0.0, f64::max);
    println!(
        "bar: K=10 >= 3,000,000 notif/s: {} ({}); bytes held <= 1.5x JSON: {} ({ratio:.2}x; by RSS {rss_ratio:.2}x)",
        if rate >= 3e6 { "met" } else { "MISSED" },
        group(rate),
        if ratio <= 1.5 { "met" } else { "MISSED" },
    );
}

fn group(x: f64) -> String {
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A ConfigMap of about 1 KiB; `generation` changes with every update.
fn config_map(i: usize, generation: usize) -> serde_json::Value {
    // Deterministic, object-specific filler so objects do not share text.
    let mut seed = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation as u64;
    let filler: String = (0..760)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (b'a' + (seed % 26) as u8) as char
        })
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("config-{i:05}"),
            "namespace": format!("team-{:02}", i % 20),
            "uid": format!("6f1c2a3e-0000-4000-8000-{i:012}"),
            "labels": {"app": format!("app-{}", i % 50), "tier": "backend"},
            "annotations": {"bench/generation": generation.to_string()},
        },
        "data": {"generation": generation.to_string(), "payload": filler},
    })
}

/// The memory source, with its first list kept from before the updates and
/// its watch held back until the timed window opens.
struct Gated {
    source: MemorySource,
    first_list: Mutex<Option<ListResult>>,
    gate: tokio::sync::watch::Receiver<bool>,
}

impl ListerWatcher for Gated {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        match self.first_list.lock().take() {
            Some(l) => Box::pin(async move { Ok(l) }),
            None => self.source.list(),
        }
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let mut gate = self.gate.clone();
        let rv = resource_version.to_string();
        Box::pin(async move {
            let _ = gate.wait_for(|open| *open).await;
            self.source.watch(&rv).await
        })
    }
    fn describe(&self) -> String {
        "bench memory source".into()
    }
}

struct Done {
    remaining: AtomicUsize,
    at: Mutex<Option<Instant>>,
    notify: tokio::sync::Notify,
}

/// Counts updates; the last handler to see its last update stops the clock.
struct NoOp {
    updates: usize,
    done: Arc<Done>,
}

impl ResourceEventHandler for NoOp {
    fn on_add(&mut self, _: &ObjectRef, _: bool) -> Result<(), HandlerError> {
        Ok(())
    }
    fn on_update(&mut self, _: &ObjectRef, _: &ObjectRef) -> Result<(), HandlerError> {
        self.updates += 1;
        if self.updates == UPDATES && self.done.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.done.at.lock() = Some(Instant::now());
            self.done.notify.notify_one();
        }
        Ok(())
    }
    fn on_delete(&mut self, _: &DeletedObject) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn child(k: usize) {
    // What an object really costs in memory, allocator included.
    let rss0 = status_kib("VmRSS:");
    let objs: Vec<ObjectRef> = (0..OBJECTS).map(|i| stamp(config_map(i, 0), i as u64 + 1).expect("object")).collect();
    let rss_per_obj = status_kib("VmRSS:").saturating_sub(rss0) as f64 * 1024.0 / objs.len() as f64;
    drop(objs);

    let source = MemorySource::new();
    source.set_history_limit(OBJECTS + UPDATES + 16);
    for i in 0..OBJECTS {
        source.apply(config_map(i, 0)).expect("create");
    }
    let first_list = futures::executor::block_on(source.list()).expect("list");

    let prep = Instant::now();
    for u in 0..UPDATES {
        source.apply(config_map(u % OBJECTS, u / OBJECTS + 1)).expect("update");
    }
    let prep_secs = prep.elapsed().as_secs_f64();
    let rss_before_kib = status_kib("VmRSS:");

    let (open, gate) = tokio::sync::watch::channel(false);
    let lw = Gated { source: source.clone(), first_list: Mutex::new(Some(first_list)), gate };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_all()
        .build()
        .expect("runtime");
    let figures = rt.block_on(async move {
        let informer = SharedIndexInformer::new(lw, InformerOptions { name: "bench".into(), ..Default::default() });
        let done = Arc::new(Done { remaining: AtomicUsize::new(k), at: Mutex::new(None), notify: Default::default() });
        let regs: Vec<Registration> = (0..k)
            .map(|_| informer.add_event_handler(NoOp { updates: 0, done: done.clone() }).expect("add handler"))
            .collect();
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let informer = informer.clone();
            let stop = stop.clone();
            async move { informer.run(stop).await }
        });
        let sync_start = Instant::now();
        while !regs.iter().all(Registration::has_synced) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let sync_secs = sync_start.elapsed().as_secs_f64();

        let t0 = Instant::now();
        open.send(true).expect("gate");
        loop {
            let notified = done.notify.notified();
            if done.at.lock().is_some() {
                break;
            }
            notified.await;
        }
        let t1 = done.at.lock().expect("finished");
        let secs = (t1 - t0).as_secs_f64();

        let cached = informer.indexer().list();
        assert_eq!(cached.len(), OBJECTS);
        let bytes_held = cached.iter().map(|o| o.bytes_held()).sum::<usize>() as f64 / cached.len() as f64;
        let json_bytes = cached.iter().map(|o| o.json().len()).sum::<usize>() as f64 / cached.len() as f64;
        // Every handler counted exactly UPDATES updates when the clock stopped.
        let notifications = (k * UPDATES) as u64;
        stop.cancel();
        let _ = run.await;
        let delivered: u64 = regs.iter().map(|r| r.stats().delivered.load(Ordering::Relaxed)).sum();
        assert_eq!(delivered, (k * (OBJECTS + UPDATES)) as u64, "every list add and update delivered once");
        Figures {
            k,
            notifications,
            secs,
            sync_secs,
            prep_secs,
            hwm_kib: status_kib("VmHWM:"),
            rss_before_kib,
            bytes_held,
            json_bytes,
            rss_per_obj,
        }
    });
    let f = figures;
    println!(
        "RESULT k={} notifications={} secs={} sync_secs={} prep_secs={} hwm_kib={} rss_before_kib={} bytes_held={} json_bytes={} rss_per_obj={}",
        f.k,
        f.notifications,
        f.secs,
        f.sync_secs,
        f.prep_secs,
        f.hwm_kib,
        f.rss_before_kib,
        f.bytes_held,
        f.json_bytes,
        f.rss_per_obj
    );
}
