//! The Rust peer, side by side: kube-runtime's shared reflector
//! (`watcher` → `reflect_shared` into a `store_shared` writer, K
//! subscribers each consuming its own `subscribe()` stream) against this
//! host's `KubeSource` + `SharedIndexInformer` with K native handlers, both
//! against the same in-process loopback test API server.
//!
//! `cargo bench -p e2e --bench peer`
//!
//! Each (implementation, K) runs in a fresh child process of this binary
//! (`PEER_CHILD=host:K` or `PEER_CHILD=kube-runtime:K`), so each peak RSS
//! (VmHWM) is that configuration's own. In the child:
//!
//! 1. the test API server starts and is filled with the ConfigMaps (~1 KiB
//!    of JSON each); the RSS then is the baseline, and the peak is reset
//!    (`/proc/self/clear_refs`), so the server's fill is not in the peak;
//! 2. the implementation starts (both list in pages of 500, kube-runtime's
//!    default; the host's watch-list is turned off for the comparison) and
//!    the bench waits until every handler/subscriber has seen the initial
//!    state and the watch is open; the RSS then, minus the baseline, over
//!    the objects, is "RSS/obj";
//! 3. the timed window: a thread applies the updates (random objects of
//!    the set, same seed in every child) through `ApiServer::update` as fast
//!    as it can; the window ends when the last handler/subscriber has seen
//!    its last update. The server's change log is compacted every 1 000
//!    updates so its history does not grow into the peak (the open watch
//!    is past it).
//!
//! The API server runs in the child, so the RSS figures include its
//! per-watch buffers: it renders watch events into an unbounded channel,
//! so a client that reads slower than the writer leaves rendered events
//! buffered in the server, and that counts in its peak.
//!
//! Each configuration runs a second time "from a backlog": the watch that
//! follows the initial list is held by the server (`hold_watches`) while
//! all the updates are written, and the window runs from releasing it to
//! the last update seen, so the rate is the client's, not the writer's.
//!
//! A first child runs the server alone (no client, the same writes), to
//! show what the in-process server itself adds to the peak.
//!
//! Every configuration runs `PEER_ROUNDS` times (3), interleaved; each
//! row is the run with the median rate.
//!
//! Environment: `PEER_OBJECTS` (10 000), `PEER_UPDATES` (20 000), `PEER_K`
//! (`1,10,100`), `PEER_IMPLS` (`server-alone,kube-runtime,host`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::apiserver::{ApiServer, config_map};
use futures::StreamExt;
use informer_host::informer::{
    DeletedObject, HandlerError, InformerOptions, ObjectRef, Registration, ResourceEventHandler, SharedIndexInformer,
};
use informer_host::source::kube::{KubeResource, KubeSource, KubeSourceOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube_runtime::{WatchStreamExt, reflector, watcher};
use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The buffer of kube-runtime's shared stream (`store_shared`), as in
/// kube-rs's `shared_stream_controllers` example.
const SUBSCRIBE_BUFFER: usize = 256;
const NAMESPACES: usize = 20;
const COMPACT_EVERY: usize = 1_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().replace('_', "").parse().ok()).unwrap_or(default)
}

fn objects() -> usize {
    env_usize("PEER_OBJECTS", 10_000)
}

fn updates() -> usize {
    env_usize("PEER_UPDATES", 20_000)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    /// No client at all: the server taking the same writes, for what the
    /// in-process server itself adds to the RSS figures.
    ServerAlone,
    KubeRuntime,
    Host,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::ServerAlone => "server-alone",
            Impl::KubeRuntime => "kube-runtime",
            Impl::Host => "host",
        }
    }
    fn parse(s: &str) -> Option<Impl> {
        match s.trim() {
            "server-alone" => Some(Impl::ServerAlone),
            "kube-runtime" => Some(Impl::KubeRuntime),
            "host" => Some(Impl::Host),
            _ => None,
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var("PEER_CHILD") {
        let mut parts = spec.split(':');
        let which = parts.next().and_then(Impl::parse).expect("PEER_CHILD=impl:K[:backlog]");
        let k = parts.next().and_then(|k| k.parse().ok()).expect("PEER_CHILD=impl:K[:backlog]");
        child(which, k, parts.next() == Some("backlog"));
        return;
    }
    parent();
}

/// One configuration's figures, as the child prints them (`key=value`).
#[derive(Debug, Default)]
struct Figures {
    k: usize,
    notifications: u64,
    secs: f64,
    write_secs: f64,
    sync_secs: f64,
    baseline_kib: u64,
    synced_kib: u64,
    peak_kib: u64,
    fill_peak_kib: u64,
    bytes_held: f64,
    json_bytes: f64,
}

impl Figures {
    fn line(&self) -> String {
        format!(
            "RESULT k={} notifications={} secs={} write_secs={} sync_secs={} baseline_kib={} synced_kib={} peak_kib={} fill_peak_kib={} bytes_held={} json_bytes={}",
            self.k,
            self.notifications,
            self.secs,
            self.write_secs,
            self.sync_secs,
            self.baseline_kib,
            self.synced_kib,
            self.peak_kib,
            self.fill_peak_kib,
            self.bytes_held,
            self.json_bytes
        )
    }

    fn parse(line: &str) -> Option<Figures> {
        let mut f = Figures::default();
        for pair in line.strip_prefix("RESULT ")?.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            match k {
                "k" => f.k = v.parse().ok()?,
                "notifications" => f.notifications = v.parse().ok()?,
                "secs" => f.secs = v.parse().ok()?,
                "write_secs" => f.write_secs = v.parse().ok()?,
                "sync_secs" => f.sync_secs = v.parse().ok()?,
                "baseline_kib" => f.baseline_kib = v.parse().ok()?,
                "synced_kib" => f.synced_kib = v.parse().ok()?,
                "peak_kib" => f.peak_kib = v.parse().ok()?,
                "fill_peak_kib" => f.fill_peak_kib = v.parse().ok()?,
                "bytes_held" => f.bytes_held = v.parse().ok()?,
                "json_bytes" => f.json_bytes = v.parse().ok()?,
                _ => {}
            }
        }
        Some(f)
    }
}

fn parent() {
    let n = objects();
    let u = updates();
    let ks: Vec<usize> = std::env::var("PEER_K")
        .ok()
        .map(|v| v.split(',').filter_map(|k| k.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100]);
    let impls: Vec<Impl> = std::env::var("PEER_IMPLS")
        .ok()
        .map(|v| v.split(',').filter_map(Impl::parse).collect())
        .unwrap_or_else(|| vec![Impl::ServerAlone, Impl::KubeRuntime, Impl::Host]);
    let exe = std::env::current_exe().expect("current exe");
    let started = Instant::now();
    let rounds = env_usize("PEER_ROUNDS", 3).max(1);
    let mut runs: Vec<(Impl, usize, bool, Figures)> = Vec::new();
    // Rounds outer, then K, then implementation: drift on the machine hits
    // all configurations alike.
    for round in 1..=rounds {
        for (ki, &k) in ks.iter().enumerate() {
            for (&which, backlog) in impls.iter().flat_map(|w| [(w, false), (w, true)]) {
                // The server alone runs once, without a backlog (K means nothing there).
                if which == Impl::ServerAlone && (ki > 0 || backlog) {
                    continue;
                }
                let k = if which == Impl::ServerAlone { 0 } else { k };
                let mode = if backlog { ":backlog" } else { "" };
                let out = std::process::Command::new(&exe)
                    .env("PEER_CHILD", format!("{}:{k}{mode}", which.name()))
                    .output()
                    .expect("spawn child");
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() {
                    eprintln!(
                        "child {} K={k} failed: {}\n{stdout}\n{}",
                        which.name(),
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    std::process::exit(1);
                }
                let f = stdout.lines().find_map(Figures::parse).expect("child printed no RESULT line");
                eprintln!(
                    "round {round}: {} K={k}{mode}: {} /s ({:.1}s since start)",
                    which.name(),
                    group(rate(which, &f)),
                    started.elapsed().as_secs_f64()
                );
                runs.push((which, k, backlog, f));
            }
        }
    }
    // Per configuration, the run with the median rate (its own RSS figures
    // with it), and the range of the rates over the rounds.
    let mut rows: Vec<(Impl, Figures, f64, f64)> = Vec::new();
    let mut backlog_rows: Vec<(Impl, Figures, f64, f64)> = Vec::new();
    let mut peaks: Vec<(Impl, usize, Vec<f64>)> = Vec::new();
    let mut configs: Vec<(Impl, usize, bool)> = Vec::new();
    for (w, k, b, _) in &runs {
        if !configs.contains(&(*w, *k, *b)) {
            configs.push((*w, *k, *b));
        }
    }
    for (w, k, b) in configs {
        let mut these: Vec<Figures> = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            if (runs[i].0, runs[i].1, runs[i].2) == (w, k, b) {
                these.push(runs.remove(i).3);
            } else {
                i += 1;
            }
        }
        if !b {
            let deltas = these.iter().map(|f| f.peak_kib.saturating_sub(f.baseline_kib) as f64 / 1024.0).collect();
            peaks.push((w, k, deltas));
        }
        these.sort_by(|x, y| rate(w, x).total_cmp(&rate(w, y)));
        let (lo, hi) = (rate(w, &these[0]), rate(w, &these[these.len() - 1]));
        let median = these.swap_remove(these.len() / 2);
        if b { backlog_rows.push((w, median, lo, hi)) } else { rows.push((w, median, lo, hi)) }
    }

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!();
    println!(
        "Rust peer: {n} ConfigMaps (~1 KiB) in the in-process test API server, then {u} updates of random ones; \
         K native no-op handlers/subscribers; one process per row; {cores} cores"
    );
    println!();
    println!(
        "| implementation | K | notifications/s | peak RSS: delta (absolute) | bytes/cached object | time to last delivery | writes done at | sync |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (which, f, lo, hi) in &rows {
        let rss_per_obj = f.synced_kib.saturating_sub(f.baseline_kib) as f64 * 1024.0 / n as f64;
        if *which == Impl::ServerAlone {
            println!(
                "| server alone (no client; writes/s) | - | {} ({}–{}) | +{:.1} MiB ({:.1} MiB) | - | - | {:.3} s | - |",
                group(u as f64 / f.write_secs),
                group(*lo),
                group(*hi),
                mib(f.peak_kib.saturating_sub(f.baseline_kib)),
                mib(f.peak_kib),
                f.write_secs,
            );
            continue;
        }
        let bytes = match which {
            Impl::Host => {
                format!("{:.0} B held ({:.0} B JSON); {:.0} B by RSS", f.bytes_held, f.json_bytes, rss_per_obj)
            }
            _ => format!("{rss_per_obj:.0} B by RSS"),
        };
        println!(
            "| {} | {} | {} ({}–{}) | +{:.1} MiB ({:.1} MiB) | {} | {:.3} s | {:.3} s | {:.0} ms |",
            which.name(),
            f.k,
            group(f.notifications as f64 / f.secs),
            group(*lo),
            group(*hi),
            mib(f.peak_kib.saturating_sub(f.baseline_kib)),
            mib(f.peak_kib),
            bytes,
            f.secs,
            f.write_secs,
            f.sync_secs * 1e3,
        );
    }
    println!();
    println!(
        "each row: the median of {rounds} rounds by rate (that run's figures; the rates' range over the rounds in brackets)"
    );
    println!("notifications/s: {u} updates x K / (first update written -> last update seen by the last of the K)");
    println!("writes done at: when the writer thread had applied all {u} updates to the server (same window start)");
    println!(
        "peak RSS: VmHWM of the child after the run (peak reset once the API server, in the same process, held the {n} objects); \
         delta over the RSS then (baseline, before the informer/reflector started), absolute in brackets"
    );
    for (which, k, deltas) in &peaks {
        let deltas: Vec<String> = deltas.iter().map(|d| format!("+{d:.1}")).collect();
        println!("  peak RSS delta in each round, {} K={k}: {} MiB", which.name(), deltas.join(", "));
    }
    for (which, f, _, _) in rows.iter().filter(|(w, ..)| *w != Impl::ServerAlone) {
        println!(
            "  {} K={}: baseline {:.1} MiB (peak while filling the server {:.1} MiB), after sync {:.1} MiB",
            which.name(),
            f.k,
            mib(f.baseline_kib),
            mib(f.fill_peak_kib),
            mib(f.synced_kib)
        );
    }
    println!(
        "bytes/cached object: host: Object::memory_bytes averaged over informer.store() (JSON text of the object in brackets); \
         both: (RSS after the initial sync - baseline) / {n} (\"by RSS\": includes the client's and the server's buffers still held)"
    );
    println!(
        "kube-runtime: watcher(Api::<ConfigMap>::all, watcher::Config::default()).default_backoff().reflect_shared(store_shared({SUBSCRIBE_BUFFER})), \
         K tasks each draining writer.subscribe(); host: KubeSource (paged lists, watch_list off) + SharedIndexInformer, K handlers"
    );
    println!();
    println!(
        "From a backlog (client-side rate, not bounded by the writer): the watch after the initial list is held by the \
         server while the {u} updates are written; the window runs from releasing it to the last update seen by the last of the K \
         (the server renders the backlog inside the window, for both alike; RSS not reported for these runs)"
    );
    println!();
    println!("| implementation | K | notifications/s from a backlog | time to last delivery |");
    println!("| --- | --- | --- | --- |");
    for (which, f, lo, hi) in &backlog_rows {
        println!(
            "| {} | {} | {} ({}–{}) | {:.3} s |",
            which.name(),
            f.k,
            group(f.notifications as f64 / f.secs),
            group(*lo),
            group(*hi),
            f.secs
        );
    }
    println!();
    println!("total: {:.1}s", started.elapsed().as_secs_f64());
}

/// Notifications per second (writes per second for the server alone).
fn rate(which: Impl, f: &Figures) -> f64 {
    match which {
        Impl::ServerAlone => updates() as f64 / f.write_secs,
        _ => f.notifications as f64 / f.secs,
    }
}

fn group(x: f64) -> String {
    let s = format!("{x:.0}");
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

/// Deterministic filler, different per object, so objects share no text.
fn payload(i: usize, generation: usize) -> String {
    let mut seed = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation as u64;
    (0..800)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (b'a' + (seed % 26) as u8) as char
        })
        .collect()
}

/// ConfigMap `i` at `generation` (~1 KiB once the server stamps it).
fn object(i: usize, generation: usize) -> Value {
    let app = format!("app-{}", i % 50);
    config_map(
        &format!("team-{:02}", i % NAMESPACES),
        &format!("config-{i:05}"),
        &[("app", &app), ("tier", "backend")],
        &[("generation", &generation.to_string()), ("payload", &payload(i, generation))],
    )
}

/// Counts done handlers; the last one to see its last update stops the clock.
struct Done {
    remaining: AtomicUsize,
    at: Mutex<Option<Instant>>,
    notify: tokio::sync::Notify,
}

impl Done {
    fn new(k: usize) -> Arc<Done> {
        Arc::new(Done { remaining: AtomicUsize::new(k), at: Mutex::new(None), notify: Default::default() })
    }
    /// One handler saw everything.
    fn finish_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.at.lock() = Some(Instant::now());
            self.notify.notify_one();
        }
    }
    async fn wait(&self) -> Instant {
        loop {
            let notified = self.notify.notified();
            if let Some(at) = *self.at.lock() {
                return at;
            }
            notified.await;
        }
    }
}

/// The host's no-op handler: counts updates.
struct Counter {
    updates: Arc<AtomicU64>,
    target: u64,
    done: Arc<Done>,
}

impl ResourceEventHandler for Counter {
    fn on_add(&mut self, _: &ObjectRef, _: bool) -> Result<(), HandlerError> {
        Ok(())
    }
    fn on_update(&mut self, _: &ObjectRef, _: &ObjectRef) -> Result<(), HandlerError> {
        if self.updates.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.finish_one();
        }
        Ok(())
    }
    fn on_delete(&mut self, _: &DeletedObject) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Applies the updates as fast as it can, on its own thread; returns when
/// the last one was applied.
fn write_updates(server: &ApiServer, n: usize, u: usize, compact: bool) -> Instant {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut generation = vec![0usize; n];
    for done in 1..=u {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let i = (seed % n as u64) as usize;
        generation[i] += 1;
        server.update(object(i, generation[i])).expect("update");
        if compact && done % COMPACT_EVERY == 0 {
            server.compact();
        }
    }
    Instant::now()
}

fn child(which: Impl, k: usize, backlog: bool) {
    let n = objects();
    let u = updates();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_all()
        .build()
        .expect("runtime");
    let f = rt.block_on(async move {
        let server = Arc::new(ApiServer::start().await);
        for i in 0..n {
            server.create(object(i, 0)).expect("create");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fill_peak_kib = status_kib("VmHWM:");
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let baseline_kib = status_kib("VmRSS:");
        let done = Done::new(k);
        let counters: Vec<Arc<AtomicU64>> = (0..k).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let stop = CancellationToken::new();
        if backlog {
            server.hold_watches();
        }
        let sync_start = Instant::now();

        // Start, and wait until every handler has the initial state.
        let (run, host_informer) = match which {
            Impl::Host => {
                let options = KubeSourceOptions { watch_list: false, ..KubeSourceOptions::default() };
                let source = KubeSource::new(server.client(), &KubeResource::new("v1", "ConfigMap"), options);
                let informer =
                    SharedIndexInformer::new(source, InformerOptions { name: "peer".into(), ..Default::default() });
                let regs: Vec<Registration> = counters
                    .iter()
                    .map(|c| {
                        let handler = Counter { updates: c.clone(), target: u as u64, done: done.clone() };
                        informer.add_event_handler(handler).expect("add handler")
                    })
                    .collect();
                let run = tokio::spawn({
                    let (informer, stop) = (informer.clone(), stop.clone());
                    async move { informer.run(stop).await }
                });
                while !regs.iter().all(Registration::has_synced) {
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
                (run, Some((informer, regs)))
            }
            Impl::KubeRuntime => {
                let api: Api<ConfigMap> = Api::all(server.client());
                let (reader, writer) = reflector::store_shared::<ConfigMap>(SUBSCRIBE_BUFFER);
                // Every subscriber sees the initial state (n objects when the
                // list is done), then one item per update.
                let target = (n + u) as u64;
                for c in &counters {
                    let mut sub = writer.subscribe().expect("a shared writer");
                    let (c, done) = (c.clone(), done.clone());
                    tokio::spawn(async move {
                        while let Some(_obj) = sub.next().await {
                            if c.fetch_add(1, Ordering::Relaxed) + 1 == target {
                                done.finish_one();
                            }
                        }
                    });
                }
                let stream = watcher(api, watcher::Config::default()).default_backoff().reflect_shared(writer);
                let run = tokio::spawn({
                    let stop = stop.clone();
                    async move {
                        tokio::select! {
                            _ = stream.for_each(|_| futures::future::ready(())) => {}
                            _ = stop.cancelled() => {}
                        }
                    }
                });
                reader.wait_until_ready().await.expect("store ready");
                while !counters.iter().all(|c| c.load(Ordering::Relaxed) >= n as u64) {
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
                assert_eq!(reader.len(), n);
                (run, None)
            }
            Impl::ServerAlone => (tokio::spawn(async {}), None),
        };
        // The watch after the list must be open (or, from a backlog,
        // asked for and held) before the history is compacted under it.
        while which != Impl::ServerAlone
            && if backlog { server.watches().is_empty() } else { server.open_watches() == 0 }
        {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let sync_secs = sync_start.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let synced_kib = status_kib("VmRSS:");

        // The timed window.
        let (secs, write_secs) = if backlog {
            let server2 = server.clone();
            tokio::task::spawn_blocking(move || write_updates(&server2, n, u, false)).await.expect("writer");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let t0 = Instant::now();
            server.release_watches();
            let t1 = done.wait().await;
            ((t1 - t0).as_secs_f64(), 0.0)
        } else {
            let t0 = Instant::now();
            let writer = std::thread::spawn({
                let server = server.clone();
                move || write_updates(&server, n, u, true)
            });
            let t1 = if which == Impl::ServerAlone { None } else { Some(done.wait().await) };
            let written = tokio::task::spawn_blocking(move || writer.join().expect("writer")).await.expect("join");
            let t1 = t1.unwrap_or(written);
            ((t1 - t0).as_secs_f64(), (written - t0).as_secs_f64())
        };
        let peak_kib = status_kib("VmHWM:");

        let (mut bytes_held, mut json_bytes) = (0.0, 0.0);
        let per_handler = match which {
            Impl::Host => u as u64,
            _ => (n + u) as u64,
        };
        for c in &counters {
            assert_eq!(c.load(Ordering::Relaxed), per_handler, "every handler saw every update exactly once");
        }
        if let Some((informer, regs)) = host_informer {
            let cached = informer.store().list();
            assert_eq!(cached.len(), n);
            bytes_held = cached.iter().map(|o| o.bytes_held()).sum::<usize>() as f64 / n as f64;
            json_bytes = cached.iter().map(|o| o.json().len()).sum::<usize>() as f64 / n as f64;
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
            let delivered: u64 = regs.iter().map(|r| r.stats().delivered.load(Ordering::Relaxed)).sum();
            assert_eq!(delivered, (k * (n + u)) as u64, "every list add and update delivered once");
        } else {
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), run).await;
        }
        Figures {
            k,
            notifications: (k * u) as u64,
            secs,
            write_secs,
            sync_secs,
            baseline_kib,
            synced_kib,
            peak_kib,
            fill_peak_kib,
            bytes_held,
            json_bytes,
        }
    });
    println!("{}", f.line());
    // The server's and the subscribers' tasks are not waited for.
    rt.shutdown_timeout(Duration::from_millis(100));
}
