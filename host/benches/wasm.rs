//! Wasm handlers against the native handler, side by side in one run.
//!
//! For each handler kind and K handlers on one informer, N objects are
//! listed and the clock runs from `run` until every registration has
//! synced (all initial adds handled): notifications/s = N × K / elapsed.
//! Listing from the memory source is `Arc` clones, so the figure is the
//! delivery path. Also prints instantiate time from `InstancePre` (+ init)
//! and resident memory per plugin instance.
//!
//! `cargo bench -p informer-host --bench wasm`

use std::time::{Duration, Instant};

use informer_host::informer::{
    FnHandler, InformerOptions, Notification, ResourceEventHandler, SharedIndexInformer, deliver_each,
};
use informer_host::plugin::{CacheView, LoadedPlugin, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::source::MemorySource;
use tokio_util::sync::CancellationToken;

#[path = "common/plot.rs"]
mod plot;

fn config_map(i: usize, size: usize) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % 10), "labels": {"app": "bench", "team": "a"}},
        "data": {"payload": "x".repeat(size)},
    })
}

fn source(n: usize, size: usize) -> MemorySource {
    let src = MemorySource::new();
    for i in 0..n {
        src.apply(config_map(i, size)).unwrap();
    }
    src
}

enum Kind<'a> {
    Native,
    Wasm(&'a LoadedPlugin),
}

async fn run_once(src: &MemorySource, kind: &Kind<'_>, k: usize) -> Duration {
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions { blocking_workers: 2, ..Default::default() });
    let mut regs = Vec::new();
    for i in 0..k {
        let h: Box<dyn ResourceEventHandler> = match kind {
            Kind::Native => Box::new(FnHandler(|n: &_| {
                std::hint::black_box(n);
                Ok(())
            })),
            Kind::Wasm(p) => Box::new(p.handler(Some(CacheView::new(informer.indexer().clone()))).unwrap()),
        };
        regs.push(informer.add_named_event_handler(format!("h{i}"), h, Duration::ZERO).unwrap());
    }
    let stop = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    while !regs.iter().all(|r| r.has_synced()) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    task.await.unwrap();
    elapsed
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _g = rt.enter();
    let wasm = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let load = |name: &str| wasm.load(PluginSpec::new(name, plugin_build::plugin_path(name))).unwrap();
    let noop = load("noop");
    let meta = load("metadata");
    let view = load("metadata-view");
    let json = load("json-reader");

    println!("Instantiate from InstancePre + init, and memory per instance (100 instances each):");
    println!("{:<14} {:>14} {:>16} {:>12}  world", "plugin", "instantiate", "RSS/instance", "size");
    for p in [&noop, &meta, &view, &json] {
        let before = rss_kib();
        let hs: Vec<_> = (0..100).map(|_| p.handler(None).unwrap()).collect();
        let per = hs.iter().map(|h| h.instantiate_time()).sum::<Duration>() / 100;
        let rss = (rss_kib().saturating_sub(before)) / 100;
        println!(
            "{:<14} {:>12.1?} {:>13} KiB {:>8} KiB  {}",
            p.info.name,
            per,
            rss,
            p.info.size_bytes / 1024,
            p.info.world
        );
        drop(hs);
    }
    println!();
    // WASM_BENCH_BATCH: notifications per batch call (256, the default, is
    // the most a listener hands a plugin at once).
    let batch_len: usize = std::env::var("WASM_BENCH_BATCH").ok().and_then(|r| r.parse().ok()).unwrap_or(256);
    println!("Cost of one notification inside a handler, one call each vs one call per {batch_len} (ns):");
    println!("{:<14} {:>12} {:>12} {:>12}", "plugin", "one by one", "batched", "best batch");
    let objs: Vec<_> = (0..batch_len)
        .map(|i| std::sync::Arc::new(informer_host::informer::Object::from_value(&config_map(i, 1024)).unwrap()))
        .collect();
    let batch: Vec<Notification> =
        objs.iter().map(|o| Notification::Add { obj: o.clone(), is_in_initial_list: false }).collect();
    let refs: Vec<&Notification> = batch.iter().collect();
    // WASM_BENCH_EXTRA: more components (comma-separated paths, each named
    // by its path), to compare builds of a plugin side by side in one run.
    let extra: Vec<LoadedPlugin> = std::env::var("WASM_BENCH_EXTRA")
        .iter()
        .flat_map(|paths| paths.split(','))
        .map(|path| wasm.load(PluginSpec::new(path, path)).unwrap())
        .collect();
    // WASM_BENCH_MICRO: only these plugins (comma-separated names).
    let micro = std::env::var("WASM_BENCH_MICRO").ok();
    let plugins: Vec<&LoadedPlugin> = [&noop, &meta, &view]
        .into_iter()
        .chain(&extra)
        .filter(|p| micro.as_ref().is_none_or(|m| m.split(',').any(|m| m == p.info.name)))
        .collect();
    let mut handlers: Vec<_> = plugins.iter().map(|p| p.handler(None).unwrap()).collect();
    let rounds: usize = std::env::var("WASM_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2000);
    // WASM_BENCH_SKIP_EACH: measure only the batch path (for profiling it).
    let each_rounds = if std::env::var("WASM_BENCH_SKIP_EACH").is_ok() { 0 } else { rounds };
    let each: Vec<f64> = handlers
        .iter_mut()
        .map(|h| {
            let t = Instant::now();
            for _ in 0..each_rounds {
                assert!(deliver_each(h, &refs).all_ok(refs.len()));
            }
            t.elapsed().as_nanos() as f64 / (each_rounds.max(1) * batch_len) as f64
        })
        .collect();
    // Each batch call timed on its own, the plugins taking turns: the
    // median and the best are steadier than the mean on a shared machine,
    // where other tenants' load comes and goes for seconds at a time, and
    // taking turns puts every plugin through the same spells, so their
    // figures compare side by side. WASM_BENCH_TURN: calls per turn (1, the
    // default, alternates call by call; a longer turn lets each plugin run
    // with the caches to itself, as it would alone).
    let turn: usize = std::env::var("WASM_BENCH_TURN").ok().and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
    let mut calls: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds.max(1)); handlers.len()];
    for _ in 0..rounds.max(1).div_ceil(turn) {
        for (h, calls) in handlers.iter_mut().zip(&mut calls) {
            for _ in 0..turn {
                let t = Instant::now();
                assert!(h.deliver_many(&refs).all_ok(refs.len()));
                calls.push(t.elapsed());
            }
        }
    }
    let per = |d: Duration| d.as_nanos() as f64 / batch_len as f64;
    for ((p, each), mut calls) in plugins.iter().zip(each).zip(calls) {
        calls.sort();
        println!("{:<14} {:>12.0} {:>12.0} {:>12.1}", p.info.name, each, per(calls[calls.len() / 2]), per(calls[0]));
    }
    println!();
    println!("Delivery of N initial adds to K handlers on one informer (notifications/s, aggregate):");
    println!("{:<22} {:>5} {:>7} {:>14} {:>12}", "handler", "K", "N", "notif/s", "vs native");
    // (handler, object size, K, notifications/s, % of native) for the report.
    let mut rows: Vec<(String, &str, usize, f64, f64)> = Vec::new();
    for (size, label) in [(1024usize, "1KiB"), (64 * 1024, "64KiB")] {
        for k in [1usize, 10, 100] {
            let n = match (size, k) {
                (1024, 1) => 50_000,
                (1024, 10) => 20_000,
                (1024, _) => 10_000,
                (_, 1) => 2_000,
                (_, 10) => 500,
                _ => 50,
            };
            let src = source(n, size);
            let mut native_rate = 0.0;
            let kinds: Vec<(&str, Kind)> = if size == 1024 {
                vec![
                    ("native no-op", Kind::Native),
                    ("wasm no-op", Kind::Wasm(&noop)),
                    ("wasm metadata", Kind::Wasm(&meta)),
                    ("wasm metadata view", Kind::Wasm(&view)),
                    ("wasm json() 1KiB", Kind::Wasm(&json)),
                ]
            } else {
                vec![("native no-op", Kind::Native), ("wasm json() 64KiB", Kind::Wasm(&json))]
            };
            let only = std::env::var("WASM_BENCH_ONLY").ok();
            for (name, kind) in kinds {
                if only.as_ref().is_some_and(|o| o != &format!("{name}/{k}/{label}")) {
                    continue;
                }
                // Best of three, to keep scheduler noise out of the ratio.
                let best = (0..3).map(|_| rt.block_on(run_once(&src, &kind, k))).min().unwrap();
                let rate = (n * k) as f64 / best.as_secs_f64();
                if matches!(kind, Kind::Native) {
                    native_rate = rate;
                }
                println!(
                    "{:<22} {:>5} {:>7} {:>14.0} {:>11.0}%  [{label}]",
                    name,
                    k,
                    n,
                    rate,
                    100.0 * rate / native_rate
                );
                rows.push((name.to_string(), label, k, rate, 100.0 * rate / native_rate));
            }
        }
    }
    report(&rows);
}

/// Writes the delivery table as a fragment of docs/benchmarks.md
/// (`target/bench-reports/wasm.md`, which `cargo run -p xtask --
/// bench-report` puts there) and plots it (`docs/plots/wasm-throughput.svg`).
fn report(rows: &[(String, &str, usize, f64, f64)]) {
    use std::fmt::Write as _;
    let ks = [1usize, 10, 100];
    let mut table = String::from("| handler | object | K = 1 | K = 10 | K = 100 |\n| --- | --- | --- | --- | --- |\n");
    let mut names: Vec<(&str, &str)> = Vec::new();
    for (name, label, ..) in rows {
        if !names.contains(&(name.as_str(), *label)) {
            names.push((name.as_str(), *label));
        }
    }
    for (name, label) in &names {
        let _ = write!(table, "| {name} | {label} |");
        for k in ks {
            match rows.iter().find(|r| r.0 == *name && r.1 == *label && r.2 == k) {
                Some((.., rate, pct)) => {
                    let _ = write!(table, " {} ({pct:.0} %) |", rate_text(*rate));
                }
                None => table.push_str(" – |"),
            }
        }
        table.push('\n');
    }
    table.push_str(&format!(
        "\nNotifications/s of N initial adds to K handlers on one informer, best of three, in % of the native \
         no-op handler's rate in the same run ({} cores).\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    let root = plugin_build::repo_root();
    let dir = root.join("target/bench-reports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("wasm.md"), &table).unwrap();
    let series: Vec<(String, Vec<(f64, f64)>)> = names
        .iter()
        .filter(|(_, label)| *label == "1KiB")
        .map(|(name, _)| {
            let points = rows.iter().filter(|r| r.0 == *name && r.1 == "1KiB").map(|r| (r.2 as f64, r.3)).collect();
            (name.to_string(), points)
        })
        .collect();
    let plots = root.join("docs/plots");
    std::fs::create_dir_all(&plots).unwrap();
    plot::plot(
        &plots.join("wasm-throughput.svg"),
        "Notifications/s against handlers on one informer (1 KiB objects)",
        "handlers",
        "notifications/s",
        &series,
    );
}

fn rate_text(rate: f64) -> String {
    if rate >= 1e6 { format!("{:.2} M/s", rate / 1e6) } else { format!("{:.0} k/s", rate / 1e3) }
}
