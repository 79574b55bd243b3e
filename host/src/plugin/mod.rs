//! The wasm plugin runtime: every handler is a sandboxed component.
//!
//! It owns the process-wide wasmtime [`PluginRuntime`] (engine, epoch
//! ticker, compile cache), loading and type-checking components against
//! the WIT world in `wit/`, per-instance sandboxes (fuel per call, an
//! epoch deadline per call, a memory cap, capabilities), and
//! [`WasmHandler`], which adapts a component to the engine's
//! [`ResourceEventHandler`](crate::informer::ResourceEventHandler). It
//! knows nothing of Kubernetes transport.
//!
//! # Execution model
//!
//! Calls are synchronous typed component calls (≈ 80 ns host→guest in
//! wasmtime's own measurements, against ≈ 1.4 µs for a component-model
//! async call). They run on tokio's blocking pool, bounded by
//! `blocking_workers` permits per tenant per informer, so hundreds of
//! plugins share a few threads and a plugin spinning until its deadline
//! holds one worker and never the runtime or another plugin. A listener
//! keeps its worker for up to 2 ms or 16 batches before it lets another one
//! have it.
//!
//! # Fairness between tenants
//!
//! Each tenant (plugins without one form one more group) has its own
//! workers on each informer, handed out first come, first served within the
//! tenant. So a tenant whose plugins all spin until their deadlines delays
//! another tenant by no worker at all: the other tenant's calls run on its
//! own threads, which the OS time-slices with the spinning ones (on `c`
//! cores with `s` spinning threads, a call takes at most about
//! `(s + 1) / c` times as long as alone). Inside a tenant a plugin waits at
//! most for the calls queued before it on that tenant's workers, each at
//! most one deadline long. The bound holds while the tenants busy at the
//! same time need no more than tokio's blocking pool (512 threads):
//! busy tenants × `blocking_workers` × informers.
//!
//! Measured with `benches/wasm.rs`, one call per notification cost
//! ≈ 340 ns for a no-op plugin: the call itself, the `object` handle's push,
//! lowering and drop (a host call), and arming fuel and the deadline. That
//! kept a wasm no-op handler at 38 % of the native one at 10 handlers and
//! 4 % at 100. So a plugin that exports `batch-handler` (the Rust SDK does)
//! gets up to 256 notifications in one `on-batch` call as one byte per
//! notification (a plain byte list is one copy into the guest, where a list
//! of variants is lowered element by element). Objects are slots that
//! `delivery.lend` turns into handles only when the guest asks for more
//! than metadata, and `delivery.metadata` hands over the metadata of the
//! whole batch in one byte list: ≈ 6 ns per notification for a no-op
//! plugin, ≈ 0.4 µs for one reading five metadata fields (1.7 µs one call
//! at a time). Every SDK here exports it (Rust, C, Go, Python and
//! JavaScript); a plugin that does not gets one call per notification.
//!
//! A trap must still skip exactly one notification, and nothing the host or
//! the world saw may happen twice. The guest calls `delivery.begin` before
//! an item's first visible effect (a log line, a panic message) and
//! `delivery.done` after it, re-arming the per-call fuel and deadline each
//! time, so an item that has begun has a call's limits of its own and a trap
//! then skips it. A trap with no item begun (fuel or memory running out in
//! pure computation) is blamed on no one: the items not yet reported are
//! delivered again one call at a time in a fresh instance, which finds the
//! item at fault; as they had no visible effect, nothing is seen twice.
//! Items that report nothing share one call's budget, so the batch size
//! halves after such a trap or a batch that used more than a quarter of the
//! fuel or deadline, and doubles back below a sixteenth: a plugin with heavy
//! items gets small batches before it outruns a budget. Such a blameless
//! trap is not counted as a trap; the one it leads to is.
//!
//! # Failure
//!
//! Any trap (panic, `unreachable`, fuel, deadline, memory cap) is client-go's
//! handler panic: the notification is skipped, the listener waits one second,
//! and the trapped instance is dropped; the next call gets a fresh instance
//! from the `InstancePre`, with `init` called again. Unlike Go, where the
//! handler keeps its memory across a panic, state inside the guest is lost
//! ([`OnTrap::Replay`] re-delivers the cache to rebuild it).
//!
//! A handler with an `idle_timeout` drops its instance after that long
//! without a call, and is instantiated again on its next one
//! ([`OnWake`]); see the `idle` module.

pub(crate) mod bindings;
pub(crate) mod handler;
pub(crate) mod idle;
pub(crate) mod log_budget;
mod metadata_list;
pub(crate) mod runtime;
pub(crate) mod sandbox;
mod stderr;
pub(crate) mod waits;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub use bindings::Level;
pub use handler::{SwapSlot, WasmHandler};
pub use idle::{InstanceCounts, REAP_TICK};
pub use log_budget::{LogLimits, sanitize};
pub use runtime::{BATCHED_WORLD, LoadedPlugin, PluginRuntime, WORLD};

use crate::informer::{IndexError, Indexer, NAMESPACE_INDEX, Object, ObjectRef};

/// Why a plugin could not be loaded or run. Every message names the plugin
/// and, where there is one, its file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin:?}: cannot read {file}: {message}")]
    Io { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} is not a WebAssembly component: {message}")]
    NotAComponent { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} does not implement the plugin world {WORLD}: {message}")]
    WrongWorld { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file} imports {import}, which its configuration does not grant")]
    NotGranted { plugin: String, file: PathBuf, import: String },
    #[error("plugin {plugin:?}: {file}: init returned an error: {message}")]
    Init { plugin: String, file: PathBuf, message: String },
    #[error("plugin {plugin:?}: {file}: trapped in init: {message}")]
    InitTrap { plugin: String, file: PathBuf, message: String },
    #[error("wasm engine: {0}")]
    Engine(String),
}

/// Per-call and per-instance limits of one plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Fuel per call (`None`: unlimited).
    pub fuel_per_call: Option<u64>,
    /// Wall-clock deadline per call (enforced with epoch interruption).
    pub deadline_per_call: Duration,
    /// Linear-memory cap per instance, in bytes. Host-side resources the
    /// instance holds (object handles) count against it too.
    pub memory_bytes: usize,
    /// What the plugin may write into the host's log (`log` and stderr).
    pub log: LogLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: Some(100_000_000),
            deadline_per_call: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            log: LogLimits::default(),
        }
    }
}

/// Capabilities a plugin is granted (imports other than `types`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Grants {
    /// The `log` import.
    pub log: bool,
    /// The `cache` import (and a controller's `stores`).
    pub cache: bool,
    /// A controller's `kube` import: writes to the cluster, checked against
    /// its write rules.
    pub kube: bool,
    /// Real wall and monotonic clocks (otherwise frozen at zero).
    pub clocks: bool,
}

impl Grants {
    /// Every capability.
    pub fn all() -> Self {
        Grants { log: true, cache: true, kube: true, clocks: true }
    }
}

/// What to do with a fresh instance after a trap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnTrap {
    /// Go on with the next notification (client-go's behaviour, minus the
    /// guest's memory).
    #[default]
    Continue,
    /// First hand the fresh instance the whole cache as initial-list adds.
    Replay,
}

/// What an instance instantiated again after idling gets before its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnWake {
    /// `init` only: for plugins that keep no state between calls.
    #[default]
    Init,
    /// The whole visible cache as initial-list adds first, as after a trap
    /// with `on_trap = replay`: a stateful plugin rebuilds its state.
    Replay,
}

/// Receives every line a plugin logs (besides `tracing`); for tests and
/// the admin API.
#[derive(Clone)]
pub struct LogSink(pub LogFn);

/// The function behind a [`LogSink`].
pub type LogFn = Arc<dyn Fn(Level, &str) + Send + Sync>;

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogSink")
    }
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
    pub on_trap: OnTrap,
    pub log_sink: Option<LogSink>,
    /// A handler whose instance had no call for this long drops it (and
    /// its memory); the next call instantiates it again. `None`: resident.
    pub idle_timeout: Option<Duration>,
    /// What a handler's instance gets when it is instantiated again after
    /// idling.
    pub on_wake: OnWake,
}

impl PluginSpec {
    /// A spec with default limits, no grants and `{}` as config.
    pub fn new(name: impl Into<String>, wasm: impl Into<PathBuf>) -> Self {
        PluginSpec {
            name: name.into(),
            tenant: None,
            wasm: wasm.into(),
            config_json: "{}".into(),
            limits: Limits::default(),
            grants: Grants::default(),
            on_trap: OnTrap::Continue,
            log_sink: None,
            idle_timeout: None,
            on_wake: OnWake::Init,
        }
    }
}

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are kept across restarts (`None`: memory only).
    pub cache_dir: Option<PathBuf>,
    /// The most bytes of compiled code `cache_dir` keeps: past it, the
    /// files used least recently are removed (a tenant loading new
    /// components again and again must not fill the disk).
    pub cache_max_bytes: u64,
}

impl Default for RuntimeConfig {
    /// No disk cache; 2 GiB when one is set.
    fn default() -> Self {
        RuntimeConfig { cache_dir: None, cache_max_bytes: DEFAULT_COMPILE_CACHE_BYTES }
    }
}

/// The default bound of the compile cache on disk.
pub const DEFAULT_COMPILE_CACHE_BYTES: u64 = 2 << 30;

/// Counters of one plugin, beyond the listener's delivered/failed/crashed.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Fresh instances made after a trap.
    pub restarts: AtomicU64,
    /// Fresh instances made after the last was reclaimed for idleness.
    pub wakes: AtomicU64,
    /// Fuel consumed by all calls.
    pub fuel_consumed: AtomicU64,
    /// Nanoseconds spent in calls, and the number of calls.
    pub call_nanos: AtomicU64,
    pub calls: AtomicU64,
    /// Calls by duration: `call_buckets[i]` counts calls that took at most
    /// [`CALL_BUCKETS`]`[i]` seconds and more than the bucket before.
    pub call_buckets: [AtomicU64; CALL_BUCKETS.len()],
    /// Calls of `object.json()` (metadata-only plugins keep this at 0).
    pub json_calls: AtomicU64,
    /// Traps, by cause.
    pub traps_fuel: AtomicU64,
    pub traps_deadline: AtomicU64,
    pub traps_memory: AtomicU64,
    pub traps_other: AtomicU64,
    /// Traps the host raised because the guest broke the `delivery`
    /// protocol (an index out of range or out of order, a repeated report).
    pub traps_protocol: AtomicU64,
    /// Log lines (and their bytes) dropped over the plugin's log budget.
    pub log_dropped_lines: AtomicU64,
    pub log_dropped_bytes: AtomicU64,
}

/// Upper bounds (seconds) of the call-latency histogram; one more bucket
/// (+Inf) is implied by `calls`.
pub const CALL_BUCKETS: [f64; 10] = [1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 2e-3, 1e-2, 5e-2, 0.25, 1.0];

impl PluginStats {
    /// Every counter, in a fixed order (buckets last), so that the counters
    /// of retired versions can be summed with the current one's.
    pub fn values(&self) -> Vec<u64> {
        // Every field, without `..`: a new counter must be added here too.
        let PluginStats {
            restarts,
            wakes,
            fuel_consumed,
            call_nanos,
            calls,
            call_buckets,
            json_calls,
            traps_fuel,
            traps_deadline,
            traps_memory,
            traps_other,
            traps_protocol,
            log_dropped_lines,
            log_dropped_bytes,
        } = self;
        [
            restarts,
            fuel_consumed,
            call_nanos,
            calls,
            json_calls,
            traps_fuel,
            traps_deadline,
            traps_memory,
            traps_other,
            traps_protocol,
            log_dropped_lines,
            log_dropped_bytes,
            wakes,
        ]
        .into_iter()
        .chain(call_buckets)
        .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
    }

    /// The counters [`PluginStats::values`] returned (missing ones are 0).
    pub fn from_values(values: &[u64]) -> PluginStats {
        let mut v = values.iter().map(|v| AtomicU64::new(*v)).chain(std::iter::repeat_with(|| AtomicU64::new(0)));
        let mut next = || v.next().expect("endless");
        PluginStats {
            restarts: next(),
            fuel_consumed: next(),
            call_nanos: next(),
            calls: next(),
            json_calls: next(),
            traps_fuel: next(),
            traps_deadline: next(),
            traps_memory: next(),
            traps_other: next(),
            traps_protocol: next(),
            log_dropped_lines: next(),
            log_dropped_bytes: next(),
            wakes: next(),
            call_buckets: std::array::from_fn(|_| next()),
        }
    }

    /// Records one call that took `secs`.
    pub fn observe_call(&self, secs: f64) {
        self.observe_calls(secs, 1);
    }

    /// Records `n` calls of `secs` each (the items of one batch, which
    /// share its duration).
    pub fn observe_calls(&self, secs: f64, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(i) = CALL_BUCKETS.iter().position(|b| secs <= *b) {
            self.call_buckets[i].fetch_add(n, Relaxed);
        }
        self.call_nanos.fetch_add((secs * 1e9 * n as f64) as u64, Relaxed);
        self.calls.fetch_add(n, Relaxed);
    }
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
    /// Interfaces the component imports.
    pub imports: Vec<String>,
    pub compile_time: Duration,
    pub from_cache: bool,
    /// Time to instantiate from the `InstancePre` and call `init`.
    pub instantiate_time: Duration,
}

/// A filter deciding which objects a plugin may see.
pub type Visibility = Arc<dyn Fn(&Object) -> bool + Send + Sync>;

/// The read-only view of an informer's cache behind the `cache` import.
#[derive(Clone)]
pub struct CacheView {
    indexer: Indexer,
    visible: Option<Visibility>,
}

impl CacheView {
    /// Everything in `indexer`.
    pub fn new(indexer: Indexer) -> Self {
        CacheView { indexer, visible: None }
    }
    /// Only the objects `visible` accepts (e.g. a tenant's namespaces).
    pub fn filtered(indexer: Indexer, visible: Visibility) -> Self {
        CacheView { indexer, visible: Some(visible) }
    }
    fn ok(&self, o: &Object) -> bool {
        self.visible.as_ref().is_none_or(|f| f(o))
    }
    pub fn get(&self, key: &str) -> Option<ObjectRef> {
        self.indexer.get(key).filter(|o| self.ok(o))
    }
    pub fn list(&self, namespace: Option<&str>) -> Vec<ObjectRef> {
        self.list_examined(namespace).0
    }
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<ObjectRef>, IndexError> {
        Ok(self.by_index_examined(index, value)?.0)
    }
    /// [`CacheView::list`], and how many objects it examined: the whole
    /// informer's (or namespace's), other tenants' included, which is
    /// what the call cost the host whatever it returns.
    pub fn list_examined(&self, namespace: Option<&str>) -> (Vec<ObjectRef>, usize) {
        let all = match namespace {
            Some(ns) => self.indexer.by_index(NAMESPACE_INDEX, ns).unwrap_or_default(),
            None => self.indexer.list(),
        };
        let examined = all.len();
        (all.into_iter().filter(|o| self.ok(o)).collect(), examined)
    }
    /// [`CacheView::by_index`], and how many objects it examined.
    pub fn by_index_examined(&self, index: &str, value: &str) -> Result<(Vec<ObjectRef>, usize), IndexError> {
        let all = self.indexer.by_index(index, value)?;
        let examined = all.len();
        Ok((all.into_iter().filter(|o| self.ok(o)).collect(), examined))
    }
}
