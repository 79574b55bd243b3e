//! The scale benchmark: many tenants' plugins on one host, a few busy and
//! the rest idle.
//!
//! Ten informers: the plugins' informer of 10 000 ConfigMaps of ~1 KiB in
//! 100 namespaces, and 9 more of 1 000 ConfigMaps each that no plugin
//! watches (the rest of a host's caches). N Rust plugins over 100 tenants,
//! each tenant seeing one namespace (host-filtered, so a plugin receives
//! its 100 objects). The plugins of tenant 0 (1 % of them, at least one)
//! are busy: a `recorder` whose log lines are timestamped as the host
//! receives them; every other plugin is a `noop` that, after its initial
//! list, receives nothing.
//!
//! Per N, with idle reclaim off (`idle_timeout` unset: every instance
//! resident) and on (`idle_timeout = 1s`), one child process each:
//!
//! - start-up: the first plugin's compile (from the warm disk cache), every
//!   plugin loaded (compiled component shared, instantiated, `init` run;
//!   loads on as many threads as cores), every plugin's initial list
//!   delivered;
//! - memory: peak RSS of the whole process, and RSS per plugin (what each
//!   plugin after the first added to the RSS: the first one also pays for
//!   the engine and the compiled code), once synced and again 2.5 s later
//!   (reclaim on: idle instances dropped);
//! - notifications/s: 2 000 updates of tenant 0's objects written at once,
//!   until every busy plugin logged every one;
//! - latency: 1 000 updates written one every 2 ms; for every busy plugin
//!   and update, the time from the write to the source to the plugin's
//!   log call, p50 and p99.
//!
//! Beside them, the same tenants as N separate processes: a child process
//! holding one informer and one native no-op handler of one namespace's
//! 100 objects (what a per-tenant controller process caches, built on this
//! engine), measured in the same run, times N.
//!
//! `cargo bench -p informer-host --bench scale` prints the table, writes it
//! to `target/bench-reports/scale.md` (and the figures as `scale.json`),
//! and plots memory, latency and start-up against the number of plugins
//! into `docs/plots/scale-*.svg`. `SCALE_N=1,100,1000,10000` and
//! `SCALE_RECLAIM=off,on` choose the rows.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_host::informer::{FnHandler, InformerOptions, Object, SharedIndexInformer};
use informer_host::plugin::{LogLimits, LogSink, PluginRuntime, PluginSpec, RuntimeConfig};
use informer_host::registry::{OnSwap, PluginDef, PluginRegistry, TenantPolicy};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[path = "common/plot.rs"]
mod plot;
use plot::plot;

const OBJECTS: usize = 10_000;
const TENANTS: usize = 100;
/// The other informers and their objects each.
const OTHER_INFORMERS: usize = 9;
const OTHER_OBJECTS: usize = 1_000;
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long after the initial sync the idle RSS is read.
const IDLE_WAIT: Duration = Duration::from_millis(2500);
const BURST: usize = 2_000;
const PACED: usize = 1_000;
const PACE: Duration = Duration::from_millis(2);

/// A ConfigMap of ~1 KiB; `generation` changes its data.
fn config_map(ns: usize, i: usize, generation: usize) -> Value {
    let mut seed = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation as u64;
    let filler: String = (0..800)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (b'a' + (seed % 26) as u8) as char
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("cm-{i:05}"),
            "namespace": format!("ns{ns}"),
            "uid": format!("6f1c2a3e-0000-4000-8000-{i:012}"),
            "labels": {"app": format!("app-{}", i % 50), "tier": "backend"},
        },
        "data": {"generation": generation.to_string(), "filler": filler},
    })
}

/// The process's resident set and its peak, in bytes (Linux).
fn rss() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        let kib = status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next());
        kib.and_then(|k| k.parse::<usize>().ok()).unwrap_or(0) * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn spawn_informer(rt: &tokio::runtime::Runtime, src: &MemorySource, stop: &CancellationToken) -> SharedIndexInformer {
    let informer = SharedIndexInformer::new(src.clone(), InformerOptions::default());
    rt.spawn({
        let (i, s) = (informer.clone(), stop.clone());
        async move { i.run(s).await }
    });
    informer
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What the busy plugins logged: when each update's line arrived, by
/// resourceVersion.
#[derive(Default)]
struct Seen {
    lines: Mutex<Vec<(Instant, u64)>>,
}

impl Seen {
    fn sink(self: &Arc<Self>) -> LogSink {
        let seen = self.clone();
        LogSink(Arc::new(move |_, line: &str| {
            let at = Instant::now();
            // `update ns0/cm-00042 rv=17->1234`
            if let Some(Ok(rv)) = line.strip_prefix("update ").and_then(|l| l.rsplit("->").next()).map(str::parse) {
                seen.lines.lock().push((at, rv));
            }
        }))
    }
    fn count(&self) -> usize {
        self.lines.lock().len()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// One configuration in this process; returns its figures as JSON.
fn child(n: usize, reclaim: bool, cache: &Path) -> Value {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let stop = CancellationToken::new();
    let src = MemorySource::new();
    for i in 0..OBJECTS {
        src.apply(config_map(i % TENANTS, i, 0)).unwrap();
    }
    let others: Vec<MemorySource> = (0..OTHER_INFORMERS)
        .map(|k| {
            let s = MemorySource::new();
            for i in 0..OTHER_OBJECTS {
                s.apply(config_map(i % TENANTS, OBJECTS + k * OTHER_OBJECTS + i, 0)).unwrap();
            }
            s
        })
        .collect();
    let informer = spawn_informer(&rt, &src, &stop);
    let other_informers: Vec<_> = others.iter().map(|s| spawn_informer(&rt, s, &stop)).collect();
    wait_until("informers synced", Duration::from_secs(60), || {
        informer.has_synced() && other_informers.iter().all(|i| i.has_synced())
    });
    let (base, _) = rss();

    let runtime =
        PluginRuntime::new(RuntimeConfig { cache_dir: Some(cache.to_path_buf()), ..RuntimeConfig::default() }).unwrap();
    let registry = PluginRegistry::new(runtime);
    registry.add_informer("cms", informer.clone());
    for (k, i) in other_informers.iter().enumerate() {
        registry.add_informer(format!("other{k}"), i.clone());
    }
    for t in 0..TENANTS {
        let ns = format!("ns{t}");
        registry.set_tenant(
            format!("t{t}"),
            TenantPolicy {
                visibility: Arc::new(move |o: &Object| o.namespace() == Some(ns.as_str())),
                max_plugins: None,
                fuel_per_call: None,
                deadline_per_call: None,
                memory_bytes: None,
                max_pending: None,
            },
        );
    }
    let seen = Arc::new(Seen::default());
    let (noop, recorder) = (plugin_build::plugin_path("noop"), plugin_build::plugin_path("recorder"));
    let def = |i: usize| {
        let tenant = i % TENANTS;
        let busy = tenant == 0;
        let mut spec = PluginSpec::new(format!("p{i}"), if busy { &recorder } else { &noop });
        spec.tenant = Some(format!("t{tenant}"));
        spec.idle_timeout = reclaim.then_some(IDLE_TIMEOUT);
        if busy {
            spec.grants.log = true;
            spec.log_sink = Some(seen.sink());
            spec.limits.log =
                LogLimits { lines_per_second: u32::MAX, bytes_per_second: usize::MAX, ..LogLimits::default() };
        }
        PluginDef {
            spec,
            informer: "cms".into(),
            resync: Duration::ZERO,
            on_swap: OnSwap::Continue,
            visibility: None,
            max_pending: None,
        }
    };

    // Start-up: the first load compiles (from the disk cache), the rest
    // share the compiled component.
    // Loads run inside the runtime, as the host's do (the idle reaper
    // starts there).
    let _in_runtime = rt.enter();
    let started = Instant::now();
    registry.load(def(0)).unwrap();
    let compile = started.elapsed();
    assert!(registry.loaded("p0").unwrap().info.from_cache, "the disk cache was not warm");
    let first = registry.registration("p0").unwrap();
    wait_until("the first plugin synced", Duration::from_secs(60), || first.has_synced());
    // What one plugin costs is what each further one adds to this.
    let (rss_one, _) = rss();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (registry, def, rt) = (&registry, &def, &rt);
            s.spawn(move || {
                let _in_runtime = rt.enter();
                for i in (1..n).filter(|i| i % threads == t) {
                    registry.load(def(i)).unwrap();
                }
            });
        }
    });
    let loaded = started.elapsed();
    let registrations: Vec<_> = (0..n).map(|i| registry.registration(&format!("p{i}")).unwrap()).collect();
    wait_until("every plugin synced", Duration::from_secs(600), || registrations.iter().all(|r| r.has_synced()));
    let synced = started.elapsed();
    let (rss_synced, _) = rss();
    std::thread::sleep(IDLE_WAIT);
    let (rss_later, _) = rss();
    let counts = registry.runtime().instances();
    let busy = (0..n).filter(|i| i % TENANTS == 0).count();

    // Notifications/s: a burst of updates of tenant 0's objects.
    let tenant0: Vec<usize> = (0..OBJECTS).filter(|i| i % TENANTS == 0).collect();
    let mut generation = 1;
    let burst_started = Instant::now();
    for k in 0..BURST {
        src.apply(config_map(0, tenant0[k % tenant0.len()], generation)).unwrap();
        generation += 1;
    }
    wait_until("the burst delivered", Duration::from_secs(600), || seen.count() >= BURST * busy);
    let burst_end = seen.lines.lock().iter().map(|(t, _)| *t).max().unwrap();
    let rate = (BURST * busy) as f64 / (burst_end - burst_started).as_secs_f64();

    // Latency: paced updates, each timed from its write.
    seen.lines.lock().clear();
    let mut written: HashMap<u64, Instant> = HashMap::with_capacity(PACED);
    let mut next = Instant::now();
    for k in 0..PACED {
        next += PACE;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let at = Instant::now();
        let obj = src.apply(config_map(0, tenant0[k % tenant0.len()], generation)).unwrap();
        generation += 1;
        written.insert(obj.resource_version().unwrap().parse().unwrap(), at);
    }
    wait_until("the paced updates delivered", Duration::from_secs(600), || seen.count() >= PACED * busy);
    let mut latencies: Vec<Duration> = seen
        .lines
        .lock()
        .iter()
        .filter_map(|(t, rv)| written.get(rv).map(|w| t.saturating_duration_since(*w)))
        .collect();
    assert_eq!(latencies.len(), PACED * busy);
    latencies.sort();
    let (_, peak) = rss();
    stop.cancel();
    // The marginal cost: over the RSS with one plugin synced.
    let per_plugin = |r: usize| (n > 1).then(|| r.saturating_sub(rss_one) as f64 / (n - 1) as f64);
    json!({
        "n": n, "reclaim": reclaim, "busy": busy,
        "compile_ms": compile.as_secs_f64() * 1e3,
        "loaded_s": loaded.as_secs_f64(), "synced_s": synced.as_secs_f64(),
        "peak_rss": peak, "base_rss": base, "one_plugin_rss": rss_one,
        "per_plugin_synced": per_plugin(rss_synced), "per_plugin_later": per_plugin(rss_later),
        "resident": counts.resident, "idle": counts.idle,
        "notifications_per_s": rate,
        "p50_us": percentile(&latencies, 0.5).as_secs_f64() * 1e6,
        "p99_us": percentile(&latencies, 0.99).as_secs_f64() * 1e6,
    })
}

/// A single-tenant process: one informer of one namespace's objects, one
/// native no-op handler; its peak RSS once synced.
fn single_process() -> Value {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let stop = CancellationToken::new();
    let src = MemorySource::new();
    for i in (0..OBJECTS).filter(|i| i % TENANTS == 0) {
        src.apply(config_map(0, i, 0)).unwrap();
    }
    let informer = spawn_informer(&rt, &src, &stop);
    let reg = informer.add_event_handler(FnHandler(|_: &_| Ok(()))).unwrap();
    wait_until("synced", Duration::from_secs(60), || informer.has_synced() && reg.has_synced());
    let (rss_now, peak) = rss();
    stop.cancel();
    json!({"rss": rss_now, "peak_rss": peak, "objects": OBJECTS / TENANTS})
}

fn run_child(args: &str) -> Value {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("SCALE_CHILD", args)
        .output()
        .unwrap_or_else(|e| panic!("starting the child for {args}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).unwrap_or_else(|| {
        panic!("child {args} failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr))
    });
    serde_json::from_str(line).unwrap()
}

fn list_from_env(var: &str, default: &str) -> Vec<String> {
    std::env::var(var).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1 << 20) as f64)
}

fn main() {
    let cache: PathBuf = plugin_build::repo_root().join("target/scale-bench-cache");
    if let Ok(args) = std::env::var("SCALE_CHILD") {
        let result = if args == "single" {
            single_process()
        } else {
            let (n, reclaim) = args.split_once(',').unwrap();
            child(n.parse().unwrap(), reclaim == "on", &cache)
        };
        println!("RESULT {result}");
        return;
    }
    // A warm disk cache: both components compiled once, here.
    let runtime =
        PluginRuntime::new(RuntimeConfig { cache_dir: Some(cache.clone()), ..RuntimeConfig::default() }).unwrap();
    for name in ["noop", "recorder"] {
        let mut spec = PluginSpec::new(name, plugin_build::plugin_path(name));
        spec.grants.log = true;
        runtime.load(spec).unwrap();
    }
    drop(runtime);

    let single = run_child("single");
    let per_process = single["peak_rss"].as_f64().unwrap();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| N plugins | reclaim | busy | compile (cache) | all loaded | all synced | peak RSS | per plugin, synced | \
         per plugin, 2.5 s later | instances resident/idle | notifications/s | p50 | p99 | N processes |"
    );
    let _ = writeln!(table, "|{}", " --- |".repeat(14));
    let mut rows: Vec<(String, Value)> = Vec::new();
    for n in list_from_env("SCALE_N", "1,100,1000,10000") {
        for reclaim in list_from_env("SCALE_RECLAIM", "off,on") {
            let r = run_child(&format!("{n},{reclaim}"));
            rows.push((reclaim.clone(), r.clone()));
            let f = |k: &str| r[k].as_f64().unwrap();
            let n: f64 = f("n");
            let kib = |k: &str| r[k].as_f64().map_or("–".to_string(), |b| format!("{:.1} KiB", b / 1024.0));
            let row = format!(
                "| {} | {reclaim} | {} | {:.1} ms | {:.2} s | {:.2} s | {} | {} | {} | {}/{} | {:.0} | {:.0} µs | {:.0} µs | {} |",
                n,
                r["busy"],
                f("compile_ms"),
                f("loaded_s"),
                f("synced_s"),
                mib(f("peak_rss")),
                kib("per_plugin_synced"),
                kib("per_plugin_later"),
                r["resident"],
                r["idle"],
                f("notifications_per_s"),
                f("p50_us"),
                f("p99_us"),
                mib(per_process * n),
            );
            println!("{row}");
            let _ = writeln!(table, "{row}");
        }
    }
    // A fragment of docs/benchmarks.md (`cargo run -p xtask -- bench-report`
    // puts it there).
    let mut report = format!(
        "{table}\n{} cores. N processes: N × the peak RSS of one single-tenant process measured in the same run \
         (one informer of one namespace's {} ConfigMaps, one native no-op handler, this engine): {}.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        single["objects"],
        mib(per_process),
    );
    // Per plugin above includes what the 100 tenants cost once (their
    // delivery workers, filters, metrics series), spread over N - 1 plugins;
    // between two sizes with the same tenants that cancels out.
    for reclaim in ["off", "on"] {
        let later = |n: u64| {
            rows.iter()
                .find(|(r, v)| r == reclaim && v["n"] == n)
                .and_then(|(_, v)| v["per_plugin_later"].as_f64().map(|p| p * (n - 1) as f64))
        };
        if let (Some(small), Some(large)) = (later(1000), later(10_000)) {
            let _ = writeln!(
                report,
                "Reclaim {reclaim}: each plugin from the 1 000th to the 10 000th added {:.1} KiB, 2.5 s after sync.",
                (large - small) / 9000.0 / 1024.0
            );
        }
    }
    let dir = plugin_build::repo_root().join("target/bench-reports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scale.md"), &report).unwrap();
    std::fs::write(
        dir.join("scale.json"),
        serde_json::to_string_pretty(&json!({"single": single, "rows": rows})).unwrap(),
    )
    .unwrap();
    let plots = plugin_build::repo_root().join("docs/plots");
    std::fs::create_dir_all(&plots).unwrap();
    let series = |reclaim: &str, f: &dyn Fn(&Value) -> f64| -> Vec<(f64, f64)> {
        rows.iter().filter(|(r, _)| r == reclaim).map(|(_, v)| (v["n"].as_f64().unwrap(), f(v))).collect()
    };
    let mib_of = |k: &'static str| move |v: &Value| v[k].as_f64().unwrap() / (1 << 20) as f64;
    let of = |k: &'static str| move |v: &Value| v[k].as_f64().unwrap();
    let processes: Vec<(f64, f64)> = series("off", &|v| v["n"].as_f64().unwrap() * per_process / (1 << 20) as f64);
    plot(
        &plots.join("scale-memory.svg"),
        "Peak RSS of the whole host against plugins",
        "plugins",
        "MiB",
        &[
            ("reclaim off".into(), series("off", &mib_of("peak_rss"))),
            ("reclaim on".into(), series("on", &mib_of("peak_rss"))),
            ("N single-tenant processes".into(), processes),
        ],
    );
    plot(
        &plots.join("scale-latency.svg"),
        "Source event to plugin call, 1 % of plugins busy",
        "plugins",
        "µs",
        &[
            ("p50, reclaim off".into(), series("off", &of("p50_us"))),
            ("p99, reclaim off".into(), series("off", &of("p99_us"))),
            ("p50, reclaim on".into(), series("on", &of("p50_us"))),
            ("p99, reclaim on".into(), series("on", &of("p99_us"))),
        ],
    );
    plot(
        &plots.join("scale-startup.svg"),
        "Start to every plugin's initial list delivered",
        "plugins",
        "seconds",
        &[("reclaim off".into(), series("off", &of("synced_s"))), ("reclaim on".into(), series("on", &of("synced_s")))],
    );
    println!("\n{report}\nplots in {}", plots.display());
}
