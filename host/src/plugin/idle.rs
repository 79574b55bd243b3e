//! Idle reclaim: a handler's instance is dropped once it had nothing to do
//! for its idle timeout, and instantiated again from the `InstancePre` on
//! its next call (tens of microseconds; the compiled code stays shared).
//!
//! This module owns [`Resident`] (one handler's instance slot and how long
//! it has been idle) and [`Reaper`] (the one task per runtime that sweeps
//! every slot each [`REAP_TICK`]). A call never waits for the reaper: the
//! reaper only takes a slot's lock with `try_lock`, so an instance in a
//! call is never reclaimed. It does not decide what a woken instance gets
//! (a fresh `init`, or the cache replayed): the handler does.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Mutex, RawMutex};

/// How often the reaper sweeps; idle timeouts are counted in these.
pub const REAP_TICK: Duration = Duration::from_secs(1);

/// One handler's instance, and how many sweeps found it unused.
pub(crate) struct Resident<T> {
    live: Arc<Mutex<Option<T>>>,
    idle_ticks: AtomicU32,
    /// Sweeps without a call after which the instance is dropped; 0: never.
    timeout_ticks: u32,
    /// Set when the reaper dropped the instance (not a trap): the next
    /// instantiation is a wake.
    reclaimed: AtomicBool,
}

/// The lock on a slot, held for a whole call.
pub(crate) type SlotGuard<T> = ArcMutexGuard<RawMutex, Option<T>>;

impl<T: Send + 'static> Resident<T> {
    /// A slot whose instance is dropped after `timeout` without a call
    /// (`None` or zero: kept).
    pub fn new(timeout: Option<Duration>) -> Arc<Self> {
        let timeout_ticks = timeout
            .filter(|t| !t.is_zero())
            .map_or(0, |t| u32::try_from(t.as_nanos().div_ceil(REAP_TICK.as_nanos())).unwrap_or(u32::MAX).max(1));
        Arc::new(Resident {
            live: Arc::new(Mutex::new(None)),
            idle_ticks: AtomicU32::new(0),
            timeout_ticks,
            reclaimed: AtomicBool::new(false),
        })
    }

    /// Locks the slot for a call and marks it used.
    pub fn lock(&self) -> SlotGuard<T> {
        let guard = self.live.lock_arc();
        self.touch();
        guard
    }

    /// Marks the slot used (at the end of a call too: a long call is not
    /// idle time).
    pub fn touch(&self) {
        // A load first: most calls find it 0 and write nothing.
        if self.idle_ticks.load(Ordering::Relaxed) != 0 {
            self.idle_ticks.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the slot is empty because the reaper emptied it; clears it.
    pub fn take_reclaimed(&self) -> bool {
        self.reclaimed.swap(false, Ordering::AcqRel)
    }
}

/// What a sweep found in one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Resident,
    Idle,
    Reclaimed,
}

trait Sweep: Send + Sync {
    fn sweep(&self) -> Found;
}

impl<T: Send + 'static> Sweep for Resident<T> {
    fn sweep(&self) -> Found {
        let ticks = self.idle_ticks.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        // In a call: resident, and not idle.
        let Some(mut guard) = self.live.try_lock() else { return Found::Resident };
        if guard.is_none() {
            return Found::Idle;
        }
        if self.timeout_ticks == 0 || ticks < self.timeout_ticks {
            return Found::Resident;
        }
        let dropped = guard.take();
        self.reclaimed.store(true, Ordering::Release);
        drop(guard);
        // The store (and its linear memory) is freed outside the lock.
        drop(dropped);
        Found::Reclaimed
    }
}

/// Lets the reaper be started again once its task is gone.
struct Restart(Weak<Reaper>);

impl Drop for Restart {
    fn drop(&mut self) {
        if let Some(reaper) = self.0.upgrade() {
            reaper.started.store(false, Ordering::Release);
        }
    }
}

/// Instances of one runtime's handlers, as the last sweep counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// Handlers with an instance in memory.
    pub resident: u64,
    /// Handlers without one (reclaimed, or after a trap until their next
    /// call).
    pub idle: u64,
    /// Instances dropped for idleness since start.
    pub reclaimed_total: u64,
}

/// Sweeps every registered slot each [`REAP_TICK`], on a tokio task
/// started with the first slot registered inside a runtime.
#[derive(Default)]
pub(crate) struct Reaper {
    slots: Mutex<Vec<Weak<dyn Sweep>>>,
    started: AtomicBool,
    resident: AtomicU64,
    idle: AtomicU64,
    reclaimed: AtomicU64,
}

impl Reaper {
    /// Adds a handler's slot. Outside a tokio runtime nothing is swept
    /// until a slot is registered inside one.
    pub fn register<T: Send + 'static>(self: &Arc<Self>, slot: &Arc<Resident<T>>) {
        let weak: Weak<dyn Sweep> = Arc::downgrade(slot) as Weak<dyn Sweep>;
        self.slots.lock().push(weak);
        if !self.started.load(Ordering::Acquire)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
            && !self.started.swap(true, Ordering::AcqRel)
        {
            let reaper = Arc::downgrade(self);
            // A runtime that shuts down drops the task: the next slot
            // registered inside another runtime starts it there.
            let restart = Restart(reaper.clone());
            handle.spawn(async move {
                let _restart = restart;
                let mut tick = tokio::time::interval(REAP_TICK);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(reaper) = reaper.upgrade() else { return };
                    reaper.sweep_all();
                }
            });
        }
    }

    /// One sweep: drops the instances idle past their timeout, forgets the
    /// slots of dropped handlers, and counts.
    pub fn sweep_all(&self) {
        let slots: Vec<Arc<dyn Sweep>> = {
            let mut slots = self.slots.lock();
            slots.retain(|s| s.strong_count() > 0);
            slots.iter().filter_map(Weak::upgrade).collect()
        };
        let (mut resident, mut idle, mut reclaimed) = (0, 0, 0);
        for s in slots {
            match s.sweep() {
                Found::Resident => resident += 1,
                Found::Idle => idle += 1,
                Found::Reclaimed => {
                    idle += 1;
                    reclaimed += 1;
                }
            }
        }
        self.resident.store(resident, Ordering::Relaxed);
        self.idle.store(idle, Ordering::Relaxed);
        self.reclaimed.fetch_add(reclaimed, Ordering::Relaxed);
    }

    pub fn counts(&self) -> InstanceCounts {
        InstanceCounts {
            resident: self.resident.load(Ordering::Relaxed),
            idle: self.idle.load(Ordering::Relaxed),
            reclaimed_total: self.reclaimed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unused_instance_is_dropped_after_its_timeout_and_a_used_one_is_kept() {
        let reaper = Arc::new(Reaper::default());
        let idle = Resident::<String>::new(Some(Duration::from_secs(3)));
        let busy = Resident::<String>::new(Some(Duration::from_secs(3)));
        let kept = Resident::<String>::new(None);
        for r in [&idle, &busy, &kept] {
            *r.lock() = Some("instance".into());
            reaper.register(r);
        }
        for _ in 0..2 {
            reaper.sweep_all();
            drop(busy.lock());
        }
        assert!(idle.lock().is_some(), "two ticks of three");
        // `lock` marked it used: three more sweeps.
        for _ in 0..3 {
            reaper.sweep_all();
            drop(busy.lock());
        }
        let c = reaper.counts();
        assert_eq!((c.resident, c.idle, c.reclaimed_total), (2, 1, 1));
        assert!(idle.take_reclaimed());
        assert!(idle.lock().is_none());
        assert!(busy.lock().is_some() && kept.lock().is_some());
        // A slot in a call is never reclaimed.
        let held = busy.lock();
        for _ in 0..5 {
            reaper.sweep_all();
        }
        drop(held);
        assert!(busy.lock().is_some());
        // A dropped handler's slot is forgotten.
        drop(kept);
        reaper.sweep_all();
        assert_eq!(reaper.slots.lock().len(), 2);
    }
}
