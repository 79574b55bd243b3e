//! End to end: real components built from `plugins/`, delivered by a real
//! informer over the memory source.
//!
//! Wasm calls run on real threads, so these tests use the real clock and
//! wait for conditions with a bound; timing assertions only compare
//! instants recorded by the plugins' own log lines.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::eventually;
use e2e::plugins::{Log, Running, runtime, spec};
use informer_host::informer::Registration;
use informer_host::plugin::{Limits, PluginError, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::source::MemorySource;
use serde_json::json;

fn cm(src: &MemorySource, name: &str, v: &str) {
    src.apply_config_map("ns", name, v).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorder_sees_the_exact_notification_sequence() {
    let src = MemorySource::new();
    cm(&src, "a", "1"); // rv 1
    cm(&src, "b", "1"); // rv 2
    let log = Log::default();
    let rt = runtime();
    let plugin = rt.load(spec("recorder", "recorder", &log)).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("initial sync", || reg.has_synced()).await;
    cm(&src, "a", "2"); // rv 3
    src.delete("ns/b"); // rv 4
    cm(&src, "c", "1"); // rv 5
    eventually("live events", || log.events().len() >= 5).await;
    // A deletion missed during a disconnection becomes a tombstone.
    src.delete_while_disconnected("ns/c"); // rv 6, never watched
    eventually("tombstone", || log.events().len() >= 7).await;
    let mut initial = log.events()[..2].to_vec();
    initial.sort();
    assert_eq!(initial, ["add ns/a rv=1 initial=true", "add ns/b rv=2 initial=true"]);
    assert_eq!(
        log.events()[2..],
        [
            "update ns/a rv=1->3",
            "delete ns/b rv=4",
            "add ns/c rv=5 initial=false",
            // The relist's unchanged object: a sync, which (as in client-go)
            // reaches every listener while the informer never resyncs.
            "update ns/a rv=3->3",
            "delete-tombstone ns/c rv=5",
        ]
    );
    // One init for the load probe, one for the registration's instance.
    assert_eq!(log.count("init "), 2);
    assert_eq!(reg.stats().delivered.load(Ordering::Relaxed), 7);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_skips_exactly_its_item_resumes_after_a_second_and_does_not_delay_others() {
    let src = MemorySource::new();
    let (plog, rlog) = (Log::default(), Log::default());
    let rt = runtime();
    let mut ps = spec("panic-on", "panic-on", &plog);
    ps.config_json = json!({"name": "bad"}).to_string();
    let panicky = rt.load(ps).unwrap();
    let recorder = rt.load(spec("recorder", "recorder", &rlog)).unwrap();
    let run = Running::start(&src);
    let preg = run.add(&panicky);
    let rreg = run.add(&recorder);
    eventually("sync", || preg.has_synced() && rreg.has_synced()).await;
    cm(&src, "before", "1"); // rv 1
    cm(&src, "bad", "1"); // rv 2
    cm(&src, "after", "1"); // rv 3
    eventually("panic-on resumes", || plog.events().len() >= 2).await;
    eventually("recorder", || rlog.events().len() >= 3).await;
    assert_eq!(plog.events(), ["add ns/before rv=1 initial=false", "add ns/after rv=3 initial=false"]);
    assert_eq!(
        rlog.events(),
        ["add ns/before rv=1 initial=false", "add ns/bad rv=2 initial=false", "add ns/after rv=3 initial=false"]
    );
    let skipped = rlog.when("add ns/bad rv=2 initial=false").unwrap();
    let resumed = plog.when("add ns/after rv=3 initial=false").unwrap();
    let before = plog.when("add ns/before rv=1 initial=false").unwrap();
    assert!(resumed - before >= Duration::from_secs(1), "resumed only {:?} later", resumed - before);
    // The healthy plugin had everything well before the crashed one resumed.
    assert!(rlog.when("add ns/after rv=3 initial=false").unwrap() < skipped + Duration::from_millis(900));
    assert_eq!(preg.stats().crashed.load(Ordering::Relaxed), 1);
    assert_eq!(panicky.stats.restarts.load(Ordering::Relaxed), 1);
    // A fresh instance served after the trap: init ran again.
    assert_eq!(plog.count("init "), 3);
    run.stop().await;
}

async fn spin_until_stopped(limits: Limits) -> (Log, Arc<informer_host::plugin::PluginStats>, Registration) {
    let src = MemorySource::new();
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("spin", "spin", &log);
    s.config_json = json!({"name": "loop"}).to_string();
    s.limits = limits;
    let plugin = rt.load(s).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    cm(&src, "loop", "1");
    cm(&src, "next", "1");
    eventually("delivery after the trap", || !log.events().is_empty()).await;
    assert_eq!(log.events(), ["add ns/next rv=2 initial=false"]);
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 1);
    run.stop().await;
    (log, plugin.stats.clone(), reg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_is_stopped_by_fuel() {
    let limits =
        Limits { fuel_per_call: Some(5_000_000), deadline_per_call: Duration::from_secs(30), ..Limits::default() };
    let (_, stats, _) = spin_until_stopped(limits).await;
    assert_eq!(stats.traps_fuel.load(Ordering::Relaxed), 1);
    assert_eq!(stats.traps_deadline.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_with_unlimited_fuel_is_stopped_by_the_deadline() {
    let limits = Limits { fuel_per_call: None, deadline_per_call: Duration::from_millis(100), ..Limits::default() };
    let (_, stats, _) = spin_until_stopped(limits).await;
    assert_eq!(stats.traps_deadline.load(Ordering::Relaxed), 1);
    assert_eq!(stats.traps_fuel.load(Ordering::Relaxed), 0);
}

/// Many notifications go into one `on-batch` call. When fuel runs out in
/// pure computation, no item reported itself, so the host delivers the
/// rest one at a time in a fresh instance: what was handled before is not
/// repeated, the spinning item is skipped, and the items after it arrive
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_inside_a_batch_skips_exactly_its_item_and_repeats_nothing() {
    let src = MemorySource::new();
    // The initial list reaches the plugin as one batch.
    for name in ["a", "b", "loop", "c", "d"] {
        cm(&src, name, "1");
    }
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("spin", "spin", &log);
    s.config_json = json!({"name": "loop"}).to_string();
    s.limits =
        Limits { fuel_per_call: Some(5_000_000), deadline_per_call: Duration::from_secs(30), ..Limits::default() };
    let plugin = rt.load(s).unwrap();
    assert_eq!(plugin.info.world, informer_host::plugin::BATCHED_WORLD);
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    eventually("all but the spinning one", || log.events().len() >= 4).await;
    let mut events = log.events();
    events.sort();
    assert_eq!(
        events,
        [
            "add ns/a rv=1 initial=true",
            "add ns/b rv=2 initial=true",
            "add ns/c rv=4 initial=true",
            "add ns/d rv=5 initial=true"
        ]
    );
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 1);
    assert_eq!(reg.stats().delivered.load(Ordering::Relaxed), 4);
    // Only the trap of the item at fault counts.
    assert_eq!(plugin.stats.traps_fuel.load(Ordering::Relaxed), 1);
    run.stop().await;
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 =
        status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hog_hits_its_cap_and_host_memory_stays_bounded() {
    let src = MemorySource::new();
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("memory-hog", "memory-hog", &log);
    s.config_json = json!({"name": "hog"}).to_string();
    s.limits =
        Limits { memory_bytes: 32 << 20, fuel_per_call: None, deadline_per_call: Duration::from_secs(10), ..s.limits };
    let plugin = rt.load(s).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    let before = rss_bytes();
    for i in 0..3 {
        cm(&src, "hog", &i.to_string());
    }
    cm(&src, "fine", "1");
    eventually("delivery after the traps", || !log.events().is_empty()).await;
    assert_eq!(log.events(), ["add ns/fine rv=4 initial=false"]);
    assert_eq!(plugin.stats.traps_memory.load(Ordering::Relaxed), 3);
    // Three instances each grew to the 32 MiB cap and were dropped.
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 96 << 20, "host RSS grew by {} MiB", grown >> 20);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_access_does_not_call_json() {
    let src = MemorySource::new();
    for i in 0..20 {
        cm(&src, &format!("o{i}"), "x");
    }
    let rt = runtime();
    let log = Log::default();
    let meta = rt.load(spec("metadata", "metadata", &log)).unwrap();
    let json = rt.load(spec("json-reader", "json-reader", &log)).unwrap();
    let run = Running::start(&src);
    let (m, j) = (run.add(&meta), run.add(&json));
    eventually("sync", || m.has_synced() && j.has_synced()).await;
    assert_eq!(m.stats().delivered.load(Ordering::Relaxed), 20);
    assert_eq!(meta.stats.json_calls.load(Ordering::Relaxed), 0);
    assert_eq!(json.stats.json_calls.load(Ordering::Relaxed), 20);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reader_reads_the_informer_cache() {
    let src = MemorySource::new();
    cm(&src, "a", "1");
    cm(&src, "b", "1");
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("cache-reader", "cache-reader", &log);
    s.grants.cache = true;
    let plugin = rt.load(s).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    cm(&src, "c", "1");
    eventually("update seen", || reg.stats().delivered.load(Ordering::Relaxed) == 3).await;
    let last = log.events().last().cloned().unwrap();
    assert!(last.contains('3'), "cache-reader should count 3 objects in ns, logged {last:?}");
    run.stop().await;
}

/// A plugin that logs several lines per notification, receiving many
/// notifications in one `on-batch` call: each line arrives once and no item
/// is taken for a crash (the SDK reports each item's first visible effect
/// once, and its end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_log_lines_per_item_in_one_batch() {
    let src = MemorySource::new();
    for name in ["a", "b", "c", "d", "e"] {
        cm(&src, name, "1");
    }
    let log = Log::default();
    let rt = runtime();
    let mut s = spec("cache-reader", "cache-reader", &log);
    s.grants.cache = true;
    s.config_json = json!({"probe": ["ns/a"]}).to_string();
    let plugin = rt.load(s).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&plugin);
    eventually("sync", || reg.has_synced()).await;
    assert_eq!(reg.stats().crashed.load(Ordering::Relaxed), 0);
    assert_eq!(reg.stats().delivered.load(Ordering::Relaxed), 5);
    // Three lines per item: its report, the count of all objects, the probe.
    assert_eq!(log.events().len(), 15, "{:?}", log.events());
    assert_eq!(log.count("probe ns/a found=true"), 5);
    assert_eq!(log.count("cache lists 5 objects in all"), 5);
    run.stop().await;
}

fn load_err(spec: PluginSpec) -> PluginError {
    match runtime().load(spec) {
        Ok(_) => panic!("load should fail"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_clear_errors_and_the_informer_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::default();

    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "hello").unwrap();
    let e = load_err(PluginSpec::new("texty", &text));
    assert!(matches!(e, PluginError::NotAComponent { .. }), "{e}");
    assert!(e.to_string().contains("texty") && e.to_string().contains("notes.wasm"), "{e}");

    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let e = load_err(PluginSpec::new("core", &core));
    assert!(e.to_string().contains("core wasm module"), "{e}");

    // A valid component that exports nothing.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\0\x01\0").unwrap();
    let e = load_err(PluginSpec::new("empty", &empty));
    assert!(matches!(e, PluginError::WrongWorld { .. }), "{e}");
    assert!(e.to_string().contains("missing export informer-host:plugin/resource-event-handler"), "{e}");

    let e = load_err(PluginSpec::new("missing", dir.path().join("nope.wasm")));
    assert!(matches!(e, PluginError::Io { .. }), "{e}");

    let mut s = spec("cache-reader", "cache-reader", &log);
    s.grants.cache = false;
    let e = load_err(s);
    assert!(matches!(e, PluginError::NotGranted { ref import, .. } if import.contains("cache")), "{e}");

    let mut s = spec("bad-config", "panic-on", &log);
    s.config_json = json!({"no-such-option": true}).to_string();
    let e = load_err(s);
    assert!(matches!(e, PluginError::Init { .. }), "{e}");
    assert!(e.to_string().contains("bad-config"), "{e}");

    let mut s = spec("init-trap", "panic-on", &log);
    s.config_json = json!({"name": "x", "panic_in_init": true}).to_string();
    let e = load_err(s);
    assert!(matches!(e, PluginError::InitTrap { .. }), "{e}");

    // After all that, a good plugin on a running informer is served.
    let src = MemorySource::new();
    let good_log = Log::default();
    let good = runtime().load(spec("recorder", "recorder", &good_log)).unwrap();
    let run = Running::start(&src);
    let reg = run.add(&good);
    cm(&src, "a", "1");
    eventually("good plugin served", || reg.stats().delivered.load(Ordering::Relaxed) == 1).await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_are_cached_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::default();
    let cfg = RuntimeConfig { cache_dir: Some(dir.path().to_path_buf()), ..RuntimeConfig::default() };
    let first = PluginRuntime::new(cfg.clone()).unwrap().load(spec("r", "recorder", &log)).unwrap();
    assert!(!first.info.from_cache);
    let second = PluginRuntime::new(cfg).unwrap().load(spec("r", "recorder", &log)).unwrap();
    assert!(second.info.from_cache, "a new runtime should load the compiled component from disk");
    assert_eq!(first.info.hash, second.info.hash);
}
