//! The one way a guest can wait: `wasi:clocks/monotonic-clock`'s
//! subscriptions, which `wasi:io/poll` then blocks on (Rust's
//! `thread::sleep`, Go's and Python's timers, JavaScript's `setTimeout`).
//!
//! wasmtime-wasi sleeps on the real clock for as long as the guest asks,
//! inside a host call, where the epoch deadline is never checked: a plugin
//! could hold its delivery worker and a blocking thread for hours (or for
//! ever, with `u64::MAX`), whatever its deadline, and without the `clocks`
//! grant. This module shadows the two `subscribe` functions with ones that
//! end every wait by the end of the call in flight (`Sandbox::call_ends`, set by
//! `sandbox::arm_call`);
//! once the wait is over the guest runs again and the epoch deadline traps
//! it. Nothing else a plugin can reach blocks: it has no sockets, no files
//! and an empty stdin.
//!
//! It owns nothing but that cap: the clocks themselves are the sandbox's.

use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::clocks::{WasiClocksCtxView, WasiClocksView};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{self, Host};

use super::sandbox::Sandbox;

/// The monotonic clock as a plugin sees it: the sandbox's clock, with every
/// subscription ending by the end of the call.
pub(crate) struct CappedClock<'a> {
    inner: WasiClocksCtxView<'a>,
    call_ends: Option<Instant>,
}

impl CappedClock<'_> {
    /// `wanted`, cut to what is left of the call (nothing, outside one).
    fn cap(&self, wanted: Duration) -> Duration {
        let left = self.call_ends.map_or(Duration::ZERO, |end| end.saturating_duration_since(Instant::now()));
        wanted.min(left)
    }
}

impl Host for CappedClock<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        self.inner.now()
    }
    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        self.inner.resolution()
    }
    fn subscribe_instant(&mut self, when: monotonic_clock::Instant) -> wasmtime::Result<Resource<DynPollable>> {
        // `when` is on the guest's clock (which, without the `clocks`
        // grant, only counts reads): the wait is how far ahead of it it is.
        let now = self.inner.now()?;
        let wanted = Duration::from_nanos(when.saturating_sub(now));
        self.inner.subscribe_duration(self.cap(wanted).as_nanos() as u64)
    }
    fn subscribe_duration(&mut self, nanos: monotonic_clock::Duration) -> wasmtime::Result<Resource<DynPollable>> {
        let capped = self.cap(Duration::from_nanos(nanos));
        self.inner.subscribe_duration(capped.as_nanos() as u64)
    }
}

struct Capped;

impl HasData for Capped {
    type Data<'a> = CappedClock<'a>;
}

fn capped_clock(s: &mut Sandbox) -> CappedClock<'_> {
    let call_ends = s.call_ends;
    CappedClock { inner: s.clocks(), call_ends }
}

/// Replaces WASI's `monotonic-clock` in `linker` (after
/// `wasmtime_wasi::p2::add_to_linker_sync`) with the capped one.
pub(crate) fn shadow_monotonic_clock(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let r = monotonic_clock::add_to_linker::<Sandbox, Capped>(linker, capped_clock);
    linker.allow_shadowing(false);
    r
}
