//! The wasm plugin runtime. (API sketch; implementation in progress.)
//!
//! It owns the wasmtime engine, compiled components, per-plugin sandboxes
//! and the adapter from a component to the engine's handler trait. It
//! knows nothing of Kubernetes transport.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::informer::{Indexer, ObjectRef};

/// Why a plugin could not be loaded or run. Every message names the plugin
/// and, where there is one, its file.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin:?}: cannot read {file}: {message}")]
    Io { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} is not a WebAssembly component: {message}")]
    NotAComponent { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} does not implement the plugin world: {message}")]
    WrongWorld { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} imports {import}, which its configuration does not grant")]
    NotGranted { plugin: String, file: PathBuf, import: String },
    #[error("plugin {plugin:?}: init failed: {message}")]
    Init { plugin: String, message: String },
    #[error("plugin {plugin:?}: trapped in init: {message}")]
    InitTrap { plugin: String, message: String },
    #[error("wasm engine: {0}")]
    Engine(String),
}

/// Per-call and per-instance limits of one plugin.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Fuel per call (`None`: unlimited).
    pub fuel_per_call: Option<u64>,
    /// Wall-clock deadline per call.
    pub deadline_per_call: Duration,
    /// Linear-memory cap per instance, in bytes.
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { fuel_per_call: Some(100_000_000), deadline_per_call: Duration::from_secs(1), memory_bytes: 64 << 20 }
    }
}

/// Capabilities a plugin is granted (imports other than `types`).
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub log: bool,
    pub cache: bool,
    /// Real wall and monotonic clocks (otherwise frozen at zero).
    pub clocks: bool,
}

/// Everything needed to load one plugin.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    pub name: String,
    pub tenant: Option<String>,
    pub wasm: PathBuf,
    /// Passed to `init` as JSON text.
    pub config_json: String,
    pub limits: Limits,
    pub grants: Grants,
}

/// Engine-wide settings.
#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// Where compiled components are kept across restarts (`None`: no disk cache).
    pub cache_dir: Option<PathBuf>,
}

/// Counters of one plugin, beyond the listener's delivered/failed/crashed.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Fresh instances made after a trap.
    pub restarts: AtomicU64,
    /// Fuel consumed by all calls.
    pub fuel_consumed: AtomicU64,
    /// Total nanoseconds spent in calls, and the number of calls.
    pub call_nanos: AtomicU64,
    pub calls: AtomicU64,
}

/// What `load` learned about a plugin (for `check` and the start-up log).
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub name: String,
    pub file: PathBuf,
    pub size_bytes: u64,
    /// Content hash (sha256, hex) of the component.
    pub hash: String,
    pub world: String,
    pub imports: Vec<String>,
    pub compile_time: Duration,
    pub from_cache: bool,
}

/// The process-wide wasmtime engine and compile cache.
#[derive(Clone)]
pub struct PluginRuntime {
    _private: Arc<()>,
}

/// A compiled, type-checked plugin ready to be instantiated.
pub struct LoadedPlugin {
    pub info: PluginInfo,
    pub stats: Arc<PluginStats>,
}

impl PluginRuntime {
    pub fn new(_config: RuntimeConfig) -> Result<Self, PluginError> {
        todo!("plugin runtime in progress")
    }
    /// Reads, compiles (or loads from cache) and type-checks a plugin, then
    /// instantiates it once and calls `init` to prove it works.
    pub fn load(&self, _spec: PluginSpec) -> Result<LoadedPlugin, PluginError> {
        todo!("plugin runtime in progress")
    }
}

impl LoadedPlugin {
    /// A handler for the engine; `cache` is what the `cache` import reads.
    pub fn handler(&self, _cache: Indexer) -> Result<Box<dyn crate::informer::ResourceEventHandler>, PluginError> {
        todo!("plugin runtime in progress")
    }
}

#[allow(dead_code)]
fn _unused(_: ObjectRef) {}
