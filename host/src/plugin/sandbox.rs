//! One instance's sandbox: its store data, limits and capabilities.
//!
//! This module owns what a single wasm instance may touch: a resource
//! table, a WASI context with no files, network, environment or (unless
//! granted) clocks, a memory cap, and the plugin's view of the cache. It
//! may not reach the informer except through that read-only view.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::Progress;
use super::stderr::StderrCapture;
use super::{CacheView, LogSink, PluginStats};

/// What every instance of one plugin registration shares.
pub(crate) struct PluginShared {
    pub name: Arc<str>,
    pub tenant: Option<String>,
    pub stats: Arc<PluginStats>,
    pub log_sink: Option<LogSink>,
    pub cache: Option<CacheView>,
    pub clocks: bool,
    pub memory_bytes: usize,
}

/// Refuses linear-memory growth past the plugin's cap.
pub(crate) struct MemoryCap {
    cap: usize,
    /// Set when a growth was refused (names the trap that follows).
    pub refused: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }
    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// The data of one instance's `Store`.
pub(crate) struct Sandbox {
    pub table: ResourceTable,
    pub wasi: WasiCtx,
    pub limiter: MemoryCap,
    pub shared: Arc<PluginShared>,
    pub stderr: StderrCapture,
    /// Set while an `on-batch` call runs.
    pub progress: Option<Progress>,
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A clock stopped at zero: plugins without the `clocks` grant cannot
/// observe time (and so cannot behave differently across replays).
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}
impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A fresh store for one instance of the plugin.
pub(crate) fn new_store(engine: &wasmtime::Engine, shared: Arc<PluginShared>) -> Store<Sandbox> {
    let stderr = StderrCapture::new(shared.name.clone());
    let mut wasi = WasiCtx::builder();
    wasi.stderr(stderr.clone());
    if !shared.clocks {
        wasi.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
    }
    let wasi = wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false).build();
    let limiter = MemoryCap { cap: shared.memory_bytes, refused: false };
    let mut store =
        Store::new(engine, Sandbox { table: ResourceTable::new(), wasi, limiter, shared, stderr, progress: None });
    store.limiter(|s| &mut s.limiter);
    store
}
