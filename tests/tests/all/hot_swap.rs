//! Hot swap through the plugin registry while the informer runs.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::eventually;
use e2e::plugins::{Log, Running, runtime, spec, wasm};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, RegistryError, WasmSource};
use informer_host::source::MemorySource;

fn def(name: &str, plugin: &str, log: &Log, on_swap: OnSwap) -> PluginDef {
    PluginDef {
        spec: spec(name, plugin, log),
        informer: "cms".into(),
        resync: Duration::ZERO,
        on_swap,
        visibility: None,
        max_pending: None,
    }
}

/// Splits `v1 update ns/k rv=3->4` into (version, key, new rv).
fn parse(line: &str) -> Option<(String, String, u64)> {
    let mut parts = line.split(' ');
    let version = parts.next()?.to_string();
    let _kind = parts.next()?;
    let key = parts.next()?.to_string();
    let rv = parts.next()?.rsplit(['=', '>']).next()?.parse().ok()?;
    Some((version, key, rv))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_fifty_times_under_load_loses_and_repeats_nothing() {
    const KEYS: usize = 100;
    const UPDATES: usize = 100_000;
    const SWAPS: usize = 50;
    let src = MemorySource::new();
    for k in 0..KEYS {
        src.apply_config_map("ns", &format!("k{k}"), "0").unwrap();
    }
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let log = Log::default();
    registry.load(def("swapper", "swap-v1", &log, OnSwap::Continue)).unwrap();
    eventually("initial sync", || registry.get("swapper").unwrap().synced).await;

    // What each key's states are, in order, as the source made them.
    let mut expected: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for o in src.objects() {
        expected.entry(o.key().to_string()).or_default().push(o.resource_version().unwrap().parse().unwrap());
    }
    let mut swaps = 0;
    for i in 0..UPDATES {
        let key = format!("k{}", i % KEYS);
        let o = src.apply_config_map("ns", &key, &i.to_string()).unwrap();
        expected.entry(o.key().to_string()).or_default().push(o.resource_version().unwrap().parse().unwrap());
        if i % (UPDATES / SWAPS) == UPDATES / SWAPS / 2 {
            let next = if swaps % 2 == 0 { "swap-v2" } else { "swap-v1" };
            registry.swap("swapper", WasmSource::File(wasm(next))).unwrap();
            swaps += 1;
            // Let delivery run a little between swaps.
            tokio::task::yield_now().await;
        }
        if i == UPDATES / 2 {
            // A broken version is refused and the old one keeps serving.
            let dir = tempfile::tempdir().unwrap();
            let broken = dir.path().join("broken.wasm");
            std::fs::write(&broken, b"not wasm").unwrap();
            let err = registry.swap("swapper", WasmSource::File(broken)).unwrap_err();
            assert!(matches!(err, RegistryError::Plugin(_)), "{err}");
            assert!(registry.get("swapper").unwrap().last_error.unwrap().contains("broken.wasm"));
        }
    }
    assert_eq!(swaps, SWAPS);
    let total = KEYS + UPDATES;
    eventually("every notification handled", || log.events().len() >= total).await;
    // Give a duplicate a chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events = log.events();
    assert_eq!(events.len(), total, "each notification exactly once across versions");
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut versions = BTreeMap::<String, usize>::new();
    for line in &events {
        let (version, key, rv) = parse(line).unwrap_or_else(|| panic!("unparsable line {line:?}"));
        *versions.entry(version).or_default() += 1;
        seen.entry(key).or_default().push(rv);
    }
    assert_eq!(seen, expected, "per key, every state in the source's order");
    assert!(versions["v1"] > 0 && versions["v2"] > 0, "both versions served: {versions:?}");
    let status = registry.get("swapper").unwrap();
    assert_eq!(status.swaps, SWAPS as u64);
    assert_eq!(status.crashed, 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_rebuilds_a_counting_plugins_state_from_the_cache() {
    let src = MemorySource::new();
    for k in 0..30 {
        src.apply_config_map("ns", &format!("k{k}"), "0").unwrap();
    }
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let log = Log::default();
    registry.load(def("counter", "counter", &log, OnSwap::Replay)).unwrap();
    eventually("initial sync", || registry.get("counter").unwrap().synced).await;
    for k in 0..5 {
        src.delete(&format!("ns/k{k}"));
    }
    eventually("deletes", || log.lines().last().map(String::as_str) == Some("count 25")).await;

    // The new instance starts empty; the replay must bring it to 25.
    let before = log.len();
    registry.swap("counter", WasmSource::File(wasm("counter"))).unwrap();
    eventually("replay handled", || registry.get("counter").unwrap().synced).await;
    let after: Vec<String> = log.lines()[before..].iter().filter(|l| l.starts_with("count ")).cloned().collect();
    assert_eq!(after.len(), 25, "one initial add per cached object: {after:?}");
    assert_eq!(after.first().map(String::as_str), Some("count 1"), "the new version started from nothing");
    assert_eq!(after.last().map(String::as_str), Some("count 25"), "its state equals the cache");
    src.apply_config_map("ns", "new", "1").unwrap();
    eventually("live events reach the new version", || log.lines().last().map(String::as_str) == Some("count 26"))
        .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_errors_name_what_is_wrong() {
    let src = MemorySource::new();
    let run = Running::start(&src);
    let registry = PluginRegistry::new(runtime());
    registry.add_informer("cms", run.informer.clone());
    let log = Log::default();
    let mut d = def("p", "recorder", &log, OnSwap::Continue);
    d.informer = "nope".into();
    assert!(matches!(registry.load(d), Err(RegistryError::UnknownInformer(i)) if i == "nope"));
    registry.load(def("p", "recorder", &log, OnSwap::Continue)).unwrap();
    assert!(matches!(
        registry.load(def("p", "recorder", &log, OnSwap::Continue)),
        Err(RegistryError::AlreadyLoaded(_))
    ));
    assert!(matches!(registry.swap("q", WasmSource::Bytes(vec![])), Err(RegistryError::UnknownPlugin(_))));
    registry.unload("p").unwrap();
    assert!(registry.list().is_empty());
    src.apply_config_map("ns", "a", "1").unwrap();
    assert!(matches!(registry.unload("p"), Err(RegistryError::UnknownPlugin(_))));
    run.stop().await;
}
