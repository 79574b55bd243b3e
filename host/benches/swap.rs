//! Hot-swap latency under load, and a well-behaved plugin's delivery latency
//! with and without misbehaving neighbours on the same informer.
//!
//! `cargo bench -p informer-host --bench swap`

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_host::informer::{InformerOptions, SharedIndexInformer};
use informer_host::plugin::{Grants, Level, Limits, LogSink, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, TenantPolicy, WasmSource};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

fn spec(name: &str, plugin: &str, lines: &Lines) -> PluginSpec {
    let mut s = PluginSpec::new(name, plugin_build::plugin_path(plugin));
    s.grants = Grants { log: true, ..Default::default() };
    let l = lines.clone();
    s.log_sink = Some(LogSink(Arc::new(move |_: Level, m: &str| l.lock().push((Instant::now(), m.to_string())))));
    // The benchmark observes through a line per notification: no per-second cap.
    s.limits.log.lines_per_second = u32::MAX;
    s.limits.log.bytes_per_second = usize::MAX;
    s
}

fn def(spec: PluginSpec) -> PluginDef {
    PluginDef {
        spec,
        informer: "cms".into(),
        resync: Duration::ZERO,
        on_swap: OnSwap::Continue,
        visibility: None,
        max_pending: None,
    }
}

fn start(src: &MemorySource, registry: &PluginRegistry) -> CancellationToken {
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions { blocking_workers: 4, ..Default::default() });
    registry.add_informer("cms", informer.clone());
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move { informer.run(s).await });
    stop
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Applies an update every `every` until stopped; returns apply instants by rv.
fn producer(
    src: MemorySource,
    every: Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<HashMap<String, Instant>> {
    tokio::spawn(async move {
        let mut sent = HashMap::new();
        let mut tick = tokio::time::interval(every);
        let mut i = 0u64;
        while !stop.is_cancelled() {
            tick.tick().await;
            let o = src.apply_config_map("ns", &format!("k{}", i % 100), &i.to_string()).unwrap();
            sent.insert(o.resource_version().unwrap().to_string(), Instant::now());
            i += 1;
        }
        sent
    })
}

async fn swap_latency() {
    let src = MemorySource::new();
    let wasm = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let registry = PluginRegistry::new(wasm);
    let stop = start(&src, &registry);
    let lines: Lines = Default::default();
    registry.load(def(spec("swapper", "swap-v1", &lines))).unwrap();
    let prod_stop = CancellationToken::new();
    let prod = producer(src.clone(), Duration::from_micros(200), prod_stop.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut to_first, mut pauses) = (Vec::new(), Vec::new());
    for round in 0..20 {
        let next = if round % 2 == 0 { ("swap-v2", "v2 ") } else { ("swap-v1", "v1 ") };
        let mark = lines.lock().len();
        let t0 = Instant::now();
        let registry2 = registry.clone();
        let path = plugin_build::plugin_path(next.0);
        tokio::task::spawn_blocking(move || registry2.swap("swapper", WasmSource::File(path)).unwrap()).await.unwrap();
        loop {
            let found = {
                let l = lines.lock();
                l[mark..].iter().position(|(_, m)| m.starts_with(next.1)).map(|i| {
                    let first = l[mark + i].0;
                    // The pause: the gap between the last line of the old
                    // version and the first of the new one.
                    let prev = if mark + i > 0 { l[mark + i - 1].0 } else { first };
                    (first, prev)
                })
            };
            if let Some((first, prev)) = found {
                to_first.push(first - t0);
                pauses.push(first.saturating_duration_since(prev));
                break;
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    prod_stop.cancel();
    let _ = prod.await;
    stop.cancel();
    println!("Hot swap under load (an update every 200 µs, 20 swaps, compile cached):");
    println!(
        "  request → first notification by the new version: median {:?}, p95 {:?}, max {:?}",
        percentile(to_first.clone(), 0.5),
        percentile(to_first.clone(), 0.95),
        percentile(to_first, 1.0)
    );
    println!(
        "  pause in delivery at the switch: median {:?}, max {:?}",
        percentile(pauses.clone(), 0.5),
        percentile(pauses, 1.0)
    );
}

/// Who shares the informer with the well-behaved plugin.
#[derive(Clone, Copy, PartialEq)]
enum Neighbours {
    None,
    /// A spinner (50 ms deadline) and a panicker, without tenants.
    Misbehaving,
    /// Tenant `a`: one spinning plugin per delivery worker, each spinning
    /// until its 1 s deadline on every update; the good plugin is tenant `b`.
    SpinningTenant,
    /// The same spinners and good plugin without tenants: one group sharing
    /// the informer's workers (what every tenant got before each had its own).
    SpinningSharedWorkers,
}

fn everything_policy() -> TenantPolicy {
    TenantPolicy {
        visibility: Arc::new(|_: &informer_host::informer::Object| true),
        max_plugins: None,
        fuel_per_call: None,
        deadline_per_call: None,
        memory_bytes: None,
        max_pending: None,
    }
}

async fn neighbour_latency(neighbours: Neighbours) -> (Duration, Duration, Duration, usize, usize) {
    let src = MemorySource::new();
    let wasm = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let registry = PluginRegistry::new(wasm);
    let stop = start(&src, &registry);
    let lines: Lines = Default::default();
    let mut good = spec("good", "recorder", &lines);
    if matches!(neighbours, Neighbours::SpinningTenant | Neighbours::SpinningSharedWorkers) {
        let tenants = neighbours == Neighbours::SpinningTenant;
        registry.set_tenant("a", everything_policy());
        registry.set_tenant("b", everything_policy());
        good.tenant = tenants.then(|| "b".into());
        for i in 0..4 {
            let sink: Lines = Default::default();
            let mut spin = spec(&format!("a-spinner-{i}"), "spin", &sink);
            spin.tenant = tenants.then(|| "a".into());
            spin.config_json = r#"{"name":"*"}"#.into();
            spin.limits =
                Limits { fuel_per_call: None, deadline_per_call: Duration::from_secs(1), ..Limits::default() };
            registry.load(def(spin)).unwrap();
        }
    }
    registry.load(def(good)).unwrap();
    if neighbours == Neighbours::Misbehaving {
        let sink: Lines = Default::default();
        let mut spin = spec("spinner", "spin", &sink);
        spin.config_json = r#"{"name":"*"}"#.into();
        spin.limits = Limits { fuel_per_call: None, deadline_per_call: Duration::from_millis(50), ..Limits::default() };
        registry.load(def(spin)).unwrap();
        let mut panicky = spec("panicky", "panic-on", &sink);
        panicky.config_json = r#"{"name":"*"}"#.into();
        registry.load(def(panicky)).unwrap();
    }
    let prod_stop = CancellationToken::new();
    let prod = producer(src.clone(), Duration::from_millis(1), prod_stop.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    prod_stop.cancel();
    let sent = prod.await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    let mut lat = Vec::new();
    for (t, line) in lines.lock().iter() {
        // `update ns/kN rv=A->B`
        if let Some(rv) = line.strip_prefix("update ").and_then(|l| l.rsplit("->").next())
            && let Some(s) = sent.get(rv)
        {
            lat.push(t.saturating_duration_since(*s));
        }
    }
    let delivered = lat.len();
    (percentile(lat.clone(), 0.5), percentile(lat.clone(), 0.99), percentile(lat, 1.0), delivered, sent.len())
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(swap_latency());
    println!();
    println!("Delivery latency of a well-behaved plugin (source apply → its handler ran), 1 update/ms for 3 s:");
    let alone = rt.block_on(neighbour_latency(Neighbours::None));
    let crowded = rt.block_on(neighbour_latency(Neighbours::Misbehaving));
    let tenant = rt.block_on(neighbour_latency(Neighbours::SpinningTenant));
    let shared = rt.block_on(neighbour_latency(Neighbours::SpinningSharedWorkers));
    println!(
        "  {:<48} median {:>10.1?}  p99 {:>10.1?}  max {:>10.1?}  ({} of {} updates delivered by the end)",
        "alone", alone.0, alone.1, alone.2, alone.3, alone.4
    );
    println!(
        "  {:<48} median {:>10.1?}  p99 {:>10.1?}  max {:>10.1?}  ({} of {} updates delivered by the end)",
        "beside a spinner (50 ms deadline) and a panicker", crowded.0, crowded.1, crowded.2, crowded.3, crowded.4
    );
    println!(
        "  {:<48} median {:>10.1?}  p99 {:>10.1?}  max {:>10.1?}  ({} of {} updates delivered by the end)",
        "beside a tenant spinning on all 4 workers (1 s)", tenant.0, tenant.1, tenant.2, tenant.3, tenant.4
    );
    println!(
        "  {:<48} median {:>10.1?}  p99 {:>10.1?}  max {:>10.1?}  ({} of {} updates delivered by the end)",
        "the same spinners, workers shared (no tenants)", shared.0, shared.1, shared.2, shared.3, shared.4
    );
}
