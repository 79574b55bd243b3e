//! One instance's sandbox: its store data, limits and capabilities.
//!
//! This module owns what a single wasm instance may touch: a resource
//! table, a WASI context with no files, network, environment or (unless
//! granted) clocks (a wall clock frozen at zero and a monotonic clock that
//! only counts its own reads), a memory cap, and the plugin's view of the cache. It
//! may not reach the informer except through that read-only view.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::Progress;
use super::log_budget::LogBudget;
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
    /// The `log` grant: without it stderr is kept for crash reports only.
    pub log_granted: bool,
    /// What `log` and stderr may still write.
    pub log: LogBudget,
    /// A controller instance's stores, writes and queue.
    pub controller: Option<Arc<crate::controller::ControllerCtx>>,
}

/// What the host charges against the memory cap for each object handle an
/// instance holds (a resource-table entry and the handle behind it), so a
/// guest cannot grow host memory by taking handles it never drops.
pub(crate) const HANDLE_COST: usize = 128;

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
    /// Object handles the instance holds, and the most it may hold.
    pub handles: usize,
    pub max_handles: usize,
    /// `queue.enqueue` calls in the call in flight (controllers).
    pub enqueues: u32,
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The wall clock of a plugin without the `clocks` grant: stopped at zero,
/// so it cannot observe the time of day (and so cannot behave differently
/// across replays).
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// The monotonic clock of a plugin without the `clocks` grant: it advances
/// by [`TickingClock::STEP`] nanoseconds per read and by nothing else, so it
/// never goes backwards and never stands still (Go's runtime aborts at start
/// when its clock reads zero twice) yet reveals no time at all: what it
/// reads depends only on how many reads the instance made. One per store,
/// so a fresh instance starts from the beginning again.
struct TickingClock {
    reads: AtomicU64,
}

impl TickingClock {
    /// Nanoseconds per read: a microsecond.
    const STEP: u64 = 1_000;

    fn new() -> Self {
        TickingClock { reads: AtomicU64::new(0) }
    }
}

impl HostMonotonicClock for TickingClock {
    fn resolution(&self) -> u64 {
        Self::STEP
    }
    fn now(&self) -> u64 {
        let before = self.reads.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| Some(r.saturating_add(1)));
        let before = before.unwrap_or_else(|r| r);
        before.saturating_add(1).saturating_mul(Self::STEP)
    }
}

/// A fresh store for one instance of the plugin.
pub(crate) fn new_store(engine: &wasmtime::Engine, shared: Arc<PluginShared>) -> Store<Sandbox> {
    let stderr = StderrCapture::new(shared.clone());
    let mut wasi = WasiCtx::builder();
    wasi.stderr(stderr.clone());
    if !shared.clocks {
        wasi.wall_clock(FrozenClock).monotonic_clock(TickingClock::new());
    }
    let wasi = wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false).build();
    let limiter = MemoryCap { cap: shared.memory_bytes, refused: false };
    let max_handles = (shared.memory_bytes / HANDLE_COST).max(1024);
    let sandbox = Sandbox {
        table: ResourceTable::new(),
        wasi,
        limiter,
        shared,
        stderr,
        progress: None,
        handles: 0,
        max_handles,
        enqueues: 0,
    };
    let mut store = Store::new(engine, sandbox);
    store.limiter(|s| &mut s.limiter);
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ungranted_monotonic_clock_advances_by_a_step_per_read_and_reveals_no_time() {
        let clock = TickingClock::new();
        let reads: Vec<u64> = (0..5).map(|_| clock.now()).collect();
        assert_eq!(reads, [1_000, 2_000, 3_000, 4_000, 5_000], "never zero, strictly increasing");
        // Waiting changes nothing: only reads advance it.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.now(), 6_000);
        assert_eq!(clock.resolution(), TickingClock::STEP);
        // A fresh clock (a fresh instance) starts over: nothing carries over.
        assert_eq!(TickingClock::new().now(), 1_000);
    }

    #[test]
    fn the_ungranted_monotonic_clock_never_goes_backwards_even_at_its_end() {
        let clock = TickingClock { reads: AtomicU64::new(u64::MAX / TickingClock::STEP - 1) };
        let a = clock.now();
        let b = clock.now();
        let c = clock.now();
        assert!(a <= b && b <= c && c == u64::MAX, "{a} {b} {c}");
    }

    #[test]
    fn the_ungranted_wall_clock_stays_frozen() {
        assert_eq!(FrozenClock.now(), Duration::ZERO);
        assert_eq!(FrozenClock.now(), Duration::ZERO);
    }
}
