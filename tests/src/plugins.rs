//! A harness for running real plugin components on a real informer.
//!
//! [`Log`] captures every line a plugin logs (with the instant it arrived),
//! [`Running`] runs an informer over the memory source until stopped.

use std::path::PathBuf;
use std::sync::Arc;
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

/// The built component of a plugin in `plugins/`.
pub fn wasm(name: &str) -> PathBuf {
    plugin_build::plugin_path(name)
}

/// A runtime with an in-memory compile cache only.
pub fn runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig::default()).unwrap()
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
        let informer = SharedIndexInformer::new(src.clone(), InformerOptions::default());
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
