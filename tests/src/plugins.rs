//! A harness for running real plugin components on a real informer.
//!
//! [`Log`] captures every line a plugin logs (with the instant it arrived),
//! [`Running`] runs an informer over the memory source until stopped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use informer_host::informer::{InformerOptions, Registration, SharedIndexInformer};
use informer_host::plugin::{
    CacheView, Grants, Level, LoadedPlugin, LogLimits, LogSink, PluginRuntime, PluginSpec, RuntimeConfig,
};
use informer_host::source::MemorySource;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Lines a plugin logged, with the instant each arrived.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<(Instant, String)>>>);

impl Log {
    /// A sink for [`PluginSpec::log_sink`] that appends here.
    pub fn sink(&self) -> LogSink {
        let lines = self.0.clone();
        LogSink(Arc::new(move |_: Level, m: &str| lines.lock().push((Instant::now(), m.to_string()))))
    }
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().iter().map(|(_, l)| l.clone()).collect()
    }
    /// Every line with the instant it arrived.
    pub fn timed_lines(&self) -> Vec<(Instant, String)> {
        self.0.lock().clone()
    }
    /// Lines other than `init …`.
    pub fn events(&self) -> Vec<String> {
        self.lines().into_iter().filter(|l| !l.starts_with("init ")).collect()
    }
    /// When `line` was first logged.
    pub fn when(&self, line: &str) -> Option<Instant> {
        self.0.lock().iter().find(|(_, l)| l == line).map(|(t, _)| *t)
    }
    pub fn count(&self, prefix: &str) -> usize {
        self.0.lock().iter().filter(|(_, l)| l.starts_with(prefix)).count()
    }
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The built component of a plugin in `plugins/`: a Rust one from the
/// cargo build, one in Python, JavaScript, C or Go (`python-*`, `js-*`, `c-*`, `go-*`)
/// from [`other_language_wasm`].
pub fn wasm(name: &str) -> PathBuf {
    if is_other_language(name) { other_language_wasm(name) } else { plugin_build::plugin_path(name) }
}

/// Whether plugin `name` is built by `plugins/build-other-languages.sh`.
pub fn is_other_language(name: &str) -> bool {
    ["python-", "js-", "c-", "go-"].iter().any(|language| name.starts_with(language))
}

/// The component of the Python, JavaScript, C or Go plugin in `plugins/examples/<name>` or `plugins/tests/<name>`,
/// built by `plugins/build-other-languages.sh <name>` once per process (the
/// script rebuilds only what changed, and serializes concurrent runs).
///
/// # Panics
///
/// When the build fails (with the script's output).
pub fn other_language_wasm(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, Result<PathBuf, String>>>> = Mutex::new(None);
    let mut built = BUILT.lock();
    let result = built.get_or_insert_with(HashMap::new).entry(name.to_string()).or_insert_with(|| {
        let root = plugin_build::repo_root();
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(root.join("plugins").join("build-other-languages.sh"))
            .arg(name)
            .current_dir(&root)
            .output()
            .map_err(|e| format!("cannot run plugins/build-other-languages.sh: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!("plugins/build-other-languages.sh {name} failed ({}):\n{stderr}", out.status));
        }
        eprintln!("plugins/build-other-languages.sh {name} took {:?}\n{stderr}", started.elapsed());
        let path = root.join("target").join("plugins").join("other").join(format!("{}.wasm", name.replace('-', "_")));
        if path.is_file() { Ok(path) } else { Err(format!("no component for plugin `{name}` at {}", path.display())) }
    });
    result.clone().unwrap_or_else(|e| panic!("building plugin `{name}` failed:\n{e}"))
}

/// A runtime with an in-memory compile cache only.
pub fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig::default()).unwrap()
}

/// One runtime for the whole test process, with the compile cache on disk
/// (`target/wasm-cache`): a component compiled once (a Python or JavaScript
/// one takes seconds) is reused by every test, and by the next run.
pub fn shared_runtime() -> &'static PluginRuntime {
    static RUNTIME: OnceLock<PluginRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let cache_dir = plugin_build::repo_root().join("target").join("wasm-cache");
        PluginRuntime::new(RuntimeConfig { cache_dir: Some(cache_dir), ..RuntimeConfig::default() }).unwrap()
    })
}

/// A spec for plugin `plugin` named `name`, granted `log`, logging into `log`.
///
/// The tests observe plugins through what they log (a line per
/// notification, a hundred thousand a second), so the per-second log
/// budget is lifted; the per-call one stays as it is by default.
pub fn spec(name: &str, plugin: &str, log: &Log) -> PluginSpec {
    let mut s = PluginSpec::new(name, wasm(plugin));
    s.grants = Grants { log: true, ..Grants::default() };
    s.log_sink = Some(log.sink());
    s.limits.log = observing_log_limits();
    s
}

/// The default log budget without its per-second limits.
pub fn observing_log_limits() -> LogLimits {
    LogLimits { lines_per_second: u32::MAX, bytes_per_second: usize::MAX, ..LogLimits::default() }
}

/// An informer over a memory source, running until [`Running::stop`].
pub struct Running {
    pub informer: SharedIndexInformer,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn start(src: &MemorySource) -> Running {
        Running::run(SharedIndexInformer::new(src.clone(), InformerOptions::default()))
    }

    /// Runs `informer` (one over any source) until [`Running::stop`].
    pub fn run(informer: SharedIndexInformer) -> Running {
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (i, s) = (informer.clone(), stop.clone());
            async move { i.run(s).await }
        });
        Running { informer, stop, task }
    }

    /// Registers a fresh instance of `plugin`, reading this informer's cache.
    pub fn add(&self, plugin: &LoadedPlugin) -> Registration {
        let h = plugin.handler(Some(CacheView::new(self.informer.indexer().clone()))).unwrap();
        self.informer.add_named_event_handler(plugin.spec.name.clone(), Box::new(h), Duration::ZERO).unwrap()
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}
