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
use wasmtime::{AsContextMut, ResourceLimiter, Store};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::Progress;
use super::log_budget::LogBudget;
use super::runtime::EPOCH_TICK;
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

/// What the host charges for each object handle an instance holds (a
/// resource-table entry and the handle behind it) on top of the object's
/// JSON, which the handle keeps alive.
pub(crate) const HANDLE_COST: usize = 128;

/// Bytes charged per table element (a function reference).
const TABLE_ELEMENT_COST: usize = 8;

/// How many memories, tables and core instances one instance may create.
/// Real components use a few of each (a Python one about a dozen
/// instances); each memory reserves its own address space, so their number
/// is bounded whatever their size.
const MAX_MEMORIES: usize = 16;
const MAX_TABLES: usize = 256;
const MAX_INSTANCES: usize = 256;

/// The memory cap of one instance: its linear memories and tables, however
/// many a component declares, and the objects its handles keep alive count
/// together against `cap`. A plugin with `memory = 16 MiB` holds at most
/// that in host memory, whether as its own memory or as objects it keeps.
pub(crate) struct MemoryCap {
    cap: usize,
    /// Bytes of every linear memory and table of the instance.
    linear: usize,
    /// Bytes charged for the object handles it holds.
    pub handle_bytes: usize,
    /// Set when a growth or a handle was refused (names the trap that follows).
    pub refused: bool,
}

impl MemoryCap {
    pub(crate) fn new(cap: usize) -> Self {
        MemoryCap { cap, linear: 0, handle_bytes: 0, refused: false }
    }

    /// Whether `linear` bytes of memories and tables beside `handles` bytes
    /// of kept objects fit the cap; notes a refusal for the trap message.
    fn fits(&mut self, linear: usize, handles: usize) -> bool {
        let fits = linear.saturating_add(handles) <= self.cap;
        self.refused |= !fits;
        fits
    }

    /// Grows the linear total from `current` to `desired` bytes of one
    /// memory or table, unless that passes the cap.
    fn grow(&mut self, current: usize, desired: usize) -> bool {
        let next = self.linear.saturating_sub(current).saturating_add(desired);
        let fits = self.fits(next, self.handle_bytes);
        if fits {
            self.linear = next;
        }
        fits
    }

    /// Charges a handle on an object of `bytes`; false past the cap.
    pub(crate) fn take_handle(&mut self, bytes: usize) -> bool {
        let next = self.handle_bytes.saturating_add(handle_cost(bytes));
        let fits = self.fits(self.linear, next);
        if fits {
            self.handle_bytes = next;
        }
        fits
    }

    /// Bytes of the instance's memories and tables.
    pub(crate) fn linear_bytes(&self) -> usize {
        self.linear
    }

    pub(crate) fn drop_handle(&mut self, bytes: usize) {
        self.handle_bytes = self.handle_bytes.saturating_sub(handle_cost(bytes));
    }
}

fn handle_cost(object_bytes: usize) -> usize {
    HANDLE_COST.saturating_add(object_bytes)
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(self.grow(current, desired))
    }
    fn table_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(self.grow(current.saturating_mul(TABLE_ELEMENT_COST), desired.saturating_mul(TABLE_ELEMENT_COST)))
    }
    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
    fn tables(&self) -> usize {
        MAX_TABLES
    }
    fn instances(&self) -> usize {
        MAX_INSTANCES
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
    /// When the call in flight must end: every wait the guest starts ends
    /// by then (see `waits`).
    pub call_ends: Option<std::time::Instant>,
    /// What the host may still do for the call in flight, in bytes it
    /// parses or copies on the guest's behalf (`pointer`, `annotations`,
    /// `json`, `labels`, `log`, `delivery.metadata`, a write's body) and
    /// objects its cache reads examine ([`SCAN_COST`] each): as much as the
    /// call's fuel, so that fuel bounds the work a call causes, not only
    /// the instructions it runs.
    pub host_work_left: u64,
}

/// Host work charged per object a cache read examines (in the units of
/// [`Sandbox::charge_host_work`], bytes parsed or copied): a `list` of a
/// tenant-filtered view examines every object of the informer, other
/// tenants' included, however few it returns.
pub(crate) const SCAN_COST: usize = 64;

impl Sandbox {
    /// Charges `bytes` of host work to the call in flight; out of fuel past
    /// its budget.
    pub(crate) fn charge_host_work(&mut self, bytes: usize) -> wasmtime::Result<()> {
        match self.host_work_left.checked_sub(bytes as u64) {
            Some(left) => {
                self.host_work_left = left;
                Ok(())
            }
            None => Err(wasmtime::Trap::OutOfFuel.into()),
        }
    }
}

/// Arms a call: `fuel`, an epoch deadline `ticks` from now, the instant
/// the guest's waits end by, the host work it may cause, and a whole log
/// budget.
pub(crate) fn arm_call(mut store: impl AsContextMut<Data = Sandbox>, fuel: u64, ticks: u64) {
    let mut cx = store.as_context_mut();
    let _ = cx.set_fuel(fuel);
    cx.set_epoch_deadline(ticks);
    let left = EPOCH_TICK.saturating_mul(u32::try_from(ticks).unwrap_or(u32::MAX));
    let data = cx.data_mut();
    data.call_ends = std::time::Instant::now().checked_add(left);
    data.host_work_left = fuel;
    data.shared.log.new_call();
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
    let limiter = MemoryCap::new(shared.memory_bytes);
    let max_handles = (shared.memory_bytes / HANDLE_COST).max(1024);
    // What the guest may hand the host in one call (lifted strings and
    // lists): its cap, or 4 MiB for a small one (a write's body), instead
    // of wasmtime's 128 MiB whatever the cap.
    let hostcall_fuel = shared.memory_bytes.max(4 << 20);
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
        call_ends: None,
        host_work_left: 0,
    };
    let mut store = Store::new(engine, sandbox);
    store.limiter(|s| &mut s.limiter);
    store.set_hostcall_fuel(hostcall_fuel);
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

    fn shared(memory_bytes: usize) -> Arc<PluginShared> {
        Arc::new(PluginShared {
            name: "t".into(),
            tenant: None,
            stats: Arc::default(),
            log_sink: None,
            cache: None,
            clocks: false,
            memory_bytes,
            log_granted: false,
            log: LogBudget::new(super::super::LogLimits::default()),
            controller: None,
        })
    }

    /// Instantiates the core module `wat` in a fresh sandbox capped at 4 MiB.
    fn instantiate(wat: &str) -> Result<(), String> {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        let mut store = new_store(&engine, shared(4 << 20));
        wasmtime::Instance::new(&mut store, &module, &[]).map(drop).map_err(|e| format!("{e:#}"))
    }

    /// Every memory and table of an instance counts against one cap: a
    /// component declaring many memories or huge tables gets no more than
    /// one memory of the cap's size would.
    #[test]
    fn memories_and_tables_share_one_cap() {
        // 64 KiB pages: 32 pages are 2 MiB.
        assert!(instantiate("(module (memory 32) (memory 31))").is_ok(), "4 MiB less a page in two memories");
        let e = instantiate("(module (memory 32) (memory 32) (memory 32))").unwrap_err();
        assert!(e.contains("memory"), "{e}");
        // 2 MiB of memory and more than 2 MiB of table elements (8 bytes each).
        assert!(instantiate("(module (memory 32) (table 262145 funcref))").is_err());
        assert!(instantiate("(module (memory 32) (table 131072 funcref))").is_ok());
        // Growing is counted too: one memory grown past what the other left.
        let grow = "(module (memory 40) (memory 1) (func (export \"g\") (result i32) (memory.grow 1 (i32.const 30))))";
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(grow).unwrap()).unwrap();
        let mut store = new_store(&engine, shared(4 << 20));
        let i = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let g = i.get_typed_func::<(), i32>(&mut store, "g").unwrap();
        assert_eq!(g.call(&mut store, ()).unwrap(), -1, "growth past the shared cap fails");
        assert!(store.data().limiter.refused);
    }

    #[test]
    fn the_number_of_memories_is_bounded_whatever_their_size() {
        let memories = |n: usize| format!("(module {})", "(memory 0) ".repeat(n));
        assert!(instantiate(&memories(MAX_MEMORIES)).is_ok());
        assert!(instantiate(&memories(MAX_MEMORIES + 1)).is_err());
    }

    #[test]
    fn handles_count_the_objects_they_keep_alive() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.take_handle(600 << 10));
        assert!(!cap.take_handle(600 << 10), "two 600 KiB objects pass a 1 MiB budget");
        assert!(cap.refused);
        cap.drop_handle(600 << 10);
        assert_eq!(cap.handle_bytes, 0);
        assert!(cap.take_handle(600 << 10), "dropping gives the budget back");
    }

    /// Memory and kept objects share the one cap: what one holds, the
    /// other cannot grow into.
    #[test]
    fn memory_and_kept_objects_share_one_cap() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.grow(0, 512 << 10));
        assert!(!cap.take_handle(600 << 10), "600 KiB of objects beside 512 KiB of memory");
        assert!(cap.take_handle(400 << 10));
        assert!(!cap.grow(512 << 10, 640 << 10), "memory may not grow into what objects hold");
        assert_eq!(cap.linear_bytes(), 512 << 10, "a refused growth changes nothing");
        cap.drop_handle(400 << 10);
        assert!(cap.grow(512 << 10, 640 << 10), "dropped objects give the room back");
    }

    /// A component whose `f(n)` returns `n` strings that all alias one
    /// 32 KiB region of its 64 KiB memory: what it hands the host grows
    /// with `n`, what it holds does not.
    const ALIASING: &str = r#"(component
        (core module $m
            (memory (export "mem") 1)
            (func (export "f") (param $n i32) (result i32)
                (local $i i32)
                ;; The return area at 0: the list at 16, n entries.
                (i32.store (i32.const 0) (i32.const 16))
                (i32.store (i32.const 4) (local.get $n))
                (block $done (loop $next
                    (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
                    ;; Entry i: the string at 32 KiB, 32 KiB long (zeros: UTF-8).
                    (i32.store (i32.add (i32.const 16) (i32.shl (local.get $i) (i32.const 3))) (i32.const 32768))
                    (i32.store (i32.add (i32.const 20) (i32.shl (local.get $i) (i32.const 3))) (i32.const 32768))
                    (local.set $i (i32.add (local.get $i) (i32.const 1)))
                    (br $next)))
                (i32.const 0)))
        (core instance $i (instantiate $m))
        (func (export "f") (param "n" u32) (result (list string))
            (canon lift (core func $i "f") (memory (core memory $i "mem")))))"#;

    /// What a guest hands the host in one call is bounded by its cap (at
    /// least 4 MiB), not by what it holds: strings aliasing one region
    /// would otherwise make the host copy as much as wasmtime's default
    /// 128 MiB allows, per call.
    #[test]
    fn what_a_guest_hands_the_host_in_one_call_is_bounded_by_its_cap() {
        let engine = wasmtime::Engine::default();
        let component = wasmtime::component::Component::new(&engine, wat::parse_str(ALIASING).unwrap()).unwrap();
        let call = |cap: usize, n: u32| {
            let mut store = new_store(&engine, shared(cap));
            let linker = wasmtime::component::Linker::new(&engine);
            let instance = linker.instantiate(&mut store, &component).unwrap();
            let f = instance.get_typed_func::<(u32,), (Vec<String>,)>(&mut store, "f").unwrap();
            f.call(&mut store, (n,)).map(|(l,)| l.iter().map(String::len).sum::<usize>()).map_err(|e| format!("{e:#}"))
        };
        // 96 strings of 32 KiB: 3 MiB, under the 4 MiB floor.
        assert_eq!(call(1 << 20, 96), Ok(96 << 15));
        // 160 of them: 5 MiB, past what a 1 MiB plugin may hand over.
        let e = call(1 << 20, 160).unwrap_err();
        assert!(e.contains("fuel allocated for hostcalls has been exhausted"), "{e}");
        // A plugin capped at 16 MiB may hand over 5 MiB, but not 20.
        assert_eq!(call(16 << 20, 160), Ok(160 << 15));
        assert!(call(16 << 20, 640).is_err());
    }

    #[test]
    fn the_ungranted_wall_clock_stays_frozen() {
        assert_eq!(FrozenClock.now(), Duration::ZERO);
        assert_eq!(FrozenClock.now(), Duration::ZERO);
    }
}
