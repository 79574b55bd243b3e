//! Start-up of many plugins on one informer: the host (`App`, as
//! `informer-host run` starts it) with N `noop` plugins spread over 10
//! tenants (host-filtered by namespace) on 2000 ConfigMaps in 10
//! namespaces. Reports the time per load around 10, 1000 and 5000 plugins
//! loaded (time between the k-th and the (k+Δ)-th plugin shown by metrics,
//! divided by Δ), the time until every plugin has loaded, and the time
//! until `/readyz` passes (every plugin handled its initial list).
//!
//! Then, on the registry alone (the same informer and tenants), the cost
//! of loading, swapping (`on_swap = continue` and `replay`) and unloading
//! one plugin with 10, 1000 and 5000 others loaded.
//!
//! Loading must cost the same with 10 plugins loaded as with 5000.
//!
//! Then N plugins with a 2 s `idle_timeout`: the process's RSS with every
//! instance resident, and once the reaper reclaimed them.
//!
//! `cargo bench -p informer-host --bench density`
//! (`DENSITY_N=100,1000`, `DENSITY_RECLAIM_N=1000` and
//! `DENSITY_REGISTRY_N=10,1000` choose the sizes; empty: skip.)

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use informer_host::app::{App, RunOptions};
use informer_host::config::Config;
use informer_host::informer::{InformerOptions, SharedIndexInformer};
use informer_host::plugin::{PluginRuntime, PluginSpec, RuntimeConfig, Visibility};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, WasmSource};
use informer_host::source::MemorySource;
use tokio_util::sync::CancellationToken;

const OBJECTS: usize = 2000;
const TENANTS: usize = 10;
/// Around how many loaded plugins the per-load time is reported.
const MARKS: [usize; 3] = [10, 1000, 5000];
/// Loads measured at each mark.
const WINDOW: usize = 50;

fn write_fixture(dir: &std::path::Path, n: usize, wasm: &std::path::Path, idle_timeout: &str) -> std::path::PathBuf {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let mut yaml = String::new();
    for i in 0..OBJECTS {
        let _ = write!(
            yaml,
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\n  namespace: ns{}\ndata:\n  k: \"{i}\"\n",
            i % TENANTS
        );
    }
    std::fs::write(manifests.join("cms.yaml"), yaml).unwrap();
    let mut toml = String::new();
    let _ = writeln!(toml, "[host]\ncache_dir = {:?}\n", dir.join("cache").display().to_string());
    for t in 0..TENANTS {
        let _ = writeln!(toml, "[[tenant]]\nname = \"t{t}\"\nnamespaces = [\"ns{t}\"]\n");
    }
    let _ = writeln!(
        toml,
        "[[informer]]\nname = \"cms\"\nsource = \"manifests\"\ndir = \"manifests\"\napi_version = \"v1\"\nkind = \"ConfigMap\"\n"
    );
    for i in 0..n {
        let _ = writeln!(
            toml,
            "[[plugin]]\nname = \"p{i}\"\nwasm = {:?}\ninformer = \"cms\"\ntenant = \"t{}\"\nidle_timeout = \"{idle_timeout}\"\n",
            wasm.display().to_string(),
            i % TENANTS
        );
    }
    let file = dir.join("host.toml");
    std::fs::write(&file, toml).unwrap();
    file
}

struct Run {
    n: usize,
    /// Seconds per load around each mark (None: mark beyond n).
    per_load: Vec<Option<Duration>>,
    loaded: Duration,
    ready: Duration,
}

async fn run(n: usize, wasm: &std::path::Path) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let file = write_fixture(dir.path(), n, wasm, "0s");
    let config = Config::load(&file).unwrap();
    let started = Instant::now();
    let app = App::launch(&config, &RunOptions::default()).await.unwrap();
    // When the k-th plugin became visible to metrics (running or failed).
    let mut seen: Vec<(usize, Instant)> = Vec::new();
    let mut loaded = None;
    let ready;
    let deadline = Duration::from_secs(600);
    {
        let loaded_fut = app.plugins_loaded();
        tokio::pin!(loaded_fut);
        loop {
            tokio::select! {
                _ = &mut loaded_fut, if loaded.is_none() => {
                    loaded = Some(started.elapsed());
                }
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
            seen.push((app.observed.plugin_count(), Instant::now()));
            if loaded.is_some() && app.readiness().ready {
                ready = started.elapsed();
                break;
            }
            if started.elapsed() > deadline {
                panic!("{n} plugins not ready after {deadline:?}");
            }
        }
    }
    let at = |k: usize| seen.iter().find(|(c, _)| *c >= k).map(|(_, t)| *t);
    let per_load = MARKS
        .iter()
        .map(|&m| {
            if m > n {
                return None;
            }
            // Centred on the mark, or ending at it when it is the last.
            let hi = (m + WINDOW / 2).min(n);
            let lo = hi.saturating_sub(WINDOW).max(1);
            let (a, b) = (at(lo)?, at(hi)?);
            Some((b - a) / (hi - lo) as u32)
        })
        .collect();
    app.shutdown().await;
    Run { n, per_load, loaded: loaded.unwrap(), ready }
}

fn registry_def(name: &str, wasm: &std::path::Path, tenant: usize, on_swap: OnSwap) -> PluginDef {
    let ns = format!("ns{tenant}");
    let visibility: Visibility =
        std::sync::Arc::new(move |o: &informer_host::informer::Object| o.namespace() == Some(ns.as_str()));
    PluginDef {
        spec: PluginSpec::new(name, wasm),
        informer: "cms".into(),
        resync: Duration::ZERO,
        on_swap,
        visibility: Some(visibility),
        max_pending: None,
    }
}

/// Mean time of `f` over `times` runs.
fn mean(times: u32, mut f: impl FnMut(u32)) -> Duration {
    let t0 = Instant::now();
    for i in 0..times {
        f(i);
    }
    t0.elapsed() / times
}

/// Load, swap and unload of one plugin with `n` others loaded, on the
/// registry (blocking: the informer runs on `rt`).
fn registry_ops(rt: &tokio::runtime::Runtime, wasm: &std::path::Path, sizes: &[usize]) {
    let src = MemorySource::new();
    for i in 0..OBJECTS {
        src.apply_config_map(&format!("ns{}", i % TENANTS), &format!("cm{i}"), &i.to_string()).unwrap();
    }
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions::default());
    let registry = PluginRegistry::new(PluginRuntime::new(RuntimeConfig::default()).unwrap());
    registry.add_informer("cms", informer.clone());
    let stop = CancellationToken::new();
    rt.spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    while !informer.has_synced() {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!();
    println!("registry: one plugin's load, swap and unload with N others loaded (mean of 20)");
    println!("{:>6} | {:>12} | {:>16} | {:>16} | {:>12}", "N", "load", "swap (continue)", "swap (replay)", "unload");
    let mut loaded = 0;
    for &n in sizes {
        while loaded < n {
            registry.load(registry_def(&format!("p{loaded}"), wasm, loaded % TENANTS, OnSwap::Continue)).unwrap();
            loaded += 1;
        }
        let load = mean(20, |i| {
            registry.load(registry_def(&format!("x{i}"), wasm, i as usize % TENANTS, OnSwap::Continue)).unwrap();
        });
        let swap = mean(20, |i| {
            registry.swap(&format!("x{i}"), WasmSource::File(wasm.to_path_buf())).unwrap();
        });
        let unload = mean(20, |i| registry.unload(&format!("x{i}")).unwrap());
        for i in 0..20u32 {
            registry.load(registry_def(&format!("r{i}"), wasm, i as usize % TENANTS, OnSwap::Replay)).unwrap();
        }
        let replay = mean(20, |i| {
            registry.swap(&format!("r{i}"), WasmSource::File(wasm.to_path_buf())).unwrap();
        });
        for i in 0..20u32 {
            registry.unload(&format!("r{i}")).unwrap();
        }
        let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1e3);
        println!("{n:>6} | {:>12} | {:>16} | {:>16} | {:>12}", ms(load), ms(swap), ms(replay), ms(unload));
    }
    stop.cancel();
}

/// The process's resident set, in bytes (Linux).
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<usize>().ok()).unwrap_or(0) * 1024
}

/// N plugins with a 2 s idle timeout: the process's RSS before start-up,
/// once every plugin handled its initial list (all resident), and once the
/// reaper reclaimed them (all idle).
async fn reclaim(n: usize, wasm: &std::path::Path) -> (usize, usize, usize, crate_counts::Counts) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_fixture(dir.path(), n, wasm, "2s");
    let config = Config::load(&file).unwrap();
    let before = rss();
    let app = App::launch(&config, &RunOptions::default()).await.unwrap();
    app.plugins_loaded().await;
    while !app.readiness().ready {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resident = rss();
    // The timeout, and up to two sweeps more.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let idle = rss();
    let metrics = informer_host::metrics::Metrics::new(app.observed.clone()).encode();
    app.shutdown().await;
    (before, resident, idle, crate_counts::read(&metrics))
}

/// Reads the instance gauges out of the metrics text.
mod crate_counts {
    #[derive(Debug, Default)]
    pub struct Counts {
        pub resident: u64,
        pub idle: u64,
    }
    pub fn read(text: &str) -> Counts {
        let value = |series: &str| {
            text.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
        };
        Counts {
            resident: value("informer_host_plugin_instances{state=\"resident\"} "),
            idle: value("informer_host_plugin_instances{state=\"idle\"} "),
        }
    }
}

/// The sizes listed in environment variable `var` (`100,1000`; empty:
/// none), or `default`.
fn sizes_from_env(var: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(var) {
        Ok(s) => s
            .split(',')
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{var}: numbers, comma-separated")))
            .collect(),
        Err(_) => default.to_vec(),
    }
}

fn main() {
    let wasm = plugin_build::plugin_path("noop");
    let sizes: Vec<usize> = sizes_from_env("DENSITY_N", &[100, 1000, 5000]);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let reclaim_sizes: Vec<usize> = sizes_from_env("DENSITY_RECLAIM_N", &[1000]);
    if !reclaim_sizes.is_empty() {
        println!(
            "idle reclaim: N noop plugins, idle_timeout 2s; process RSS (the informer's {OBJECTS} objects included)"
        );
        println!(
            "{:>6} | {:>12} | {:>12} | {:>12} | {:>16} | {:>16} | {:>18}",
            "N", "before", "resident", "reclaimed", "per plugin, res.", "per plugin, idle", "instances res/idle"
        );
        for n in reclaim_sizes {
            let (before, resident, idle, counts) = rt.block_on(reclaim(n, &wasm));
            let mib = |b: usize| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
            let per = |b: usize| format!("{:.1} KiB", b.saturating_sub(before) as f64 / 1024.0 / n as f64);
            println!(
                "{n:>6} | {:>12} | {:>12} | {:>12} | {:>16} | {:>16} | {:>18}",
                mib(before),
                mib(resident),
                mib(idle),
                per(resident),
                per(idle),
                format!("{}/{}", counts.resident, counts.idle)
            );
        }
    }
    println!("density: N noop plugins over {TENANTS} tenants on {OBJECTS} ConfigMaps (one informer)");
    println!(
        "{:>6} | {:>14} | {:>14} | {:>14} | {:>10} | {:>10}",
        "N", "load @10", "load @1000", "load @5000", "loaded", "ready"
    );
    let fmt = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3));
    for n in sizes {
        let r = rt.block_on(run(n, &wasm));
        println!(
            "{:>6} | {:>14} | {:>14} | {:>14} | {:>8.2} s | {:>8.2} s",
            r.n,
            fmt(r.per_load[0]),
            fmt(r.per_load[1]),
            fmt(r.per_load[2]),
            r.loaded.as_secs_f64(),
            r.ready.as_secs_f64()
        );
    }
    let marks: Vec<usize> = sizes_from_env("DENSITY_REGISTRY_N", &MARKS);
    registry_ops(&rt, &wasm, &marks);
}
