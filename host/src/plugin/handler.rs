//! [`WasmHandler`]: a component instance behind the engine's handler trait.
//!
//! This module owns one registration's instance life cycle: instantiate
//! from the `InstancePre` and `init`, arm fuel and the epoch deadline before
//! every call, turn a trap into [`HandlerError::Crashed`] with its cause,
//! and never call a trapped instance again (the next call gets a fresh one,
//! optionally replayed the cache first).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use wasmtime::component::{ComponentExportIndex, TypedFunc};
use wasmtime::{Engine, Store, Trap};

use super::bindings::{Deleted, MAX_ERROR_BYTES, Plugin, PluginPre, Progress, ProtocolViolation, Tombstone, kind};
use super::idle::{Resident, SlotGuard};
use super::log_budget::sanitize;
use super::runtime::{EPOCH_TICK, Ticker};
use super::sandbox::{PluginShared, Sandbox, arm_call, new_store};
use super::{OnTrap, OnWake, PluginError, PluginSpec};
use crate::informer::{
    DeletedObject, Delivered, Delivery, HandlerError, Notification, ObjectRef, ResourceEventHandler, deliver_each,
};

/// Most items in one `on-batch` call.
const MAX_BATCH: usize = 256;

/// Init gets this many times a call's fuel and deadline.
const INIT_FACTOR: u32 = 10;

/// `batch-handler.on-batch(kinds, tombstone-keys)`.
type OnBatch = TypedFunc<(Vec<u8>, Vec<String>), ()>;

struct Live {
    store: Store<Sandbox>,
    plugin: Plugin,
    on_batch: Option<OnBatch>,
}

/// Where a new version waits for a running handler to pick it up between
/// two notifications (hot swap, `on-swap = "continue"`). Cheap to clone.
#[derive(Clone)]
pub struct SwapSlot {
    staged: Arc<Mutex<Option<WasmHandler>>>,
    waiting: Arc<AtomicBool>,
    active: Arc<watch::Sender<String>>,
}

impl SwapSlot {
    fn new(version: String) -> Self {
        SwapSlot {
            staged: Arc::new(Mutex::new(None)),
            waiting: Arc::new(AtomicBool::new(false)),
            active: Arc::new(watch::Sender::new(version)),
        }
    }

    /// Stages `next` (already instantiated and `init`ed); the handler
    /// switches to it before its next notification. A version staged
    /// earlier and not yet picked up is dropped.
    pub fn stage(&self, next: WasmHandler) {
        *self.staged.lock() = Some(next);
        self.waiting.store(true, Ordering::Release);
    }

    /// The content hash of the version that handles notifications now.
    pub fn active_version(&self) -> String {
        self.active.borrow().clone()
    }

    /// Follows the active version (changes when a staged one is picked up).
    pub fn subscribe(&self) -> watch::Receiver<String> {
        self.active.subscribe()
    }

    /// True while a staged version waits to be picked up.
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }
}

/// Delivers notifications into one instance of a plugin.
pub struct WasmHandler {
    engine: Engine,
    _ticker: Arc<Ticker>,
    pre: PluginPre<Sandbox>,
    on_batch: Option<ComponentExportIndex>,
    shared: Arc<PluginShared>,
    spec: PluginSpec,
    /// The instance, when there is one: none after a trap until the next
    /// call, or after the reaper reclaimed it for idleness.
    resident: Arc<Resident<Live>>,
    instantiate_time: Duration,
    version: String,
    slot: Option<SwapSlot>,
    /// (fuel, epoch ticks) armed before every call.
    call_budget: (u64, u64),
    /// Most items per `on-batch` call. Items that report nothing share
    /// one call's fuel and deadline, so the limit halves when a batch used
    /// more than a quarter of either (or trapped with no item at fault) and
    /// doubles when it used less than a sixteenth: a plugin whose items are
    /// heavy gets small batches before it ever outruns a budget.
    batch_limit: usize,
    /// Items still to deliver one at a time after such a trap.
    probing: usize,
}

type CallResult = wasmtime::Result<Result<(), String>>;

impl WasmHandler {
    pub(crate) fn new(
        (engine, ticker): (Engine, Arc<Ticker>),
        (pre, on_batch): (PluginPre<Sandbox>, Option<ComponentExportIndex>),
        shared: Arc<PluginShared>,
        spec: PluginSpec,
        version: String,
    ) -> Result<Self, PluginError> {
        let resident = Resident::new(spec.idle_timeout);
        let mut h = WasmHandler {
            engine,
            _ticker: ticker,
            pre,
            on_batch,
            shared,
            spec,
            resident,
            instantiate_time: Duration::ZERO,
            version,
            slot: None,
            call_budget: (0, 0),
            batch_limit: MAX_BATCH,
            probing: 0,
        };
        h.call_budget = h.budget(1);
        let live = h.instantiate()?;
        *h.resident.lock() = Some(live);
        Ok(h)
    }

    /// Lets the runtime's reaper reclaim the instance when it idles. Call
    /// it inside the tokio runtime (the reaper's task starts there).
    pub(crate) fn register_idle(&self) {
        self._ticker.reaper.register(&self.resident);
    }

    /// The slot through which a new version can replace this one while it
    /// runs inside an informer.
    pub fn swap_slot(&mut self) -> SwapSlot {
        self.slot.get_or_insert_with(|| SwapSlot::new(self.version.clone())).clone()
    }

    /// Content hash of the component this handler runs.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Switches to a staged version, if one waits.
    fn pick_up_staged(&mut self) {
        let Some(slot) = &self.slot else { return };
        // A load first: the swap's read-modify-write is needed only rarely.
        if !slot.waiting.load(Ordering::Acquire) || !slot.waiting.swap(false, Ordering::AcqRel) {
            return;
        }
        let Some(next) = slot.staged.lock().take() else { return };
        let slot = self.slot.take();
        let from = std::mem::take(&mut self.version);
        *self = WasmHandler { slot, ..next };
        tracing::info!(plugin = %self.spec.name, from = %short(&from), to = %short(&self.version), "swapped to a new version");
        if let Some(slot) = &self.slot {
            slot.active.send_replace(self.version.clone());
        }
    }

    /// How long the last instantiation plus `init` took.
    pub fn instantiate_time(&self) -> Duration {
        self.instantiate_time
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Fuel and epoch ticks for a call with `factor` times the limits
    /// (saturating: a huge deadline is a long one, never a short one).
    fn budget(&self, factor: u32) -> (u64, u64) {
        call_budget(&self.spec.limits, factor)
    }

    /// Arms fuel, the deadline and the log budget for a call.
    fn arm(&self, store: &mut Store<Sandbox>, factor: u32) -> u64 {
        let (fuel, ticks) = if factor == 1 { self.call_budget } else { self.budget(factor) };
        arm_call(&mut *store, fuel, ticks);
        fuel
    }

    /// A new instance, `init`ed.
    fn instantiate(&mut self) -> Result<Live, PluginError> {
        let t = Instant::now();
        let mut store = new_store(&self.engine, self.shared.clone());
        self.arm(&mut store, INIT_FACTOR);
        let trap = |h: &Self, e: wasmtime::Error, store: &Store<Sandbox>| PluginError::InitTrap {
            plugin: h.spec.name.clone(),
            file: h.spec.wasm.clone(),
            message: h.describe(&e, store, INIT_FACTOR),
        };
        let instance = match self.pre.instance_pre().instantiate(&mut store) {
            Ok(i) => i,
            Err(e) => return Err(trap(self, e, &store)),
        };
        let wrong = |h: &Self, e: wasmtime::Error| PluginError::WrongWorld {
            plugin: h.spec.name.clone(),
            file: h.spec.wasm.clone(),
            message: format!("{e:#}"),
        };
        let plugin = Plugin::new(&mut store, &instance).map_err(|e| wrong(self, e))?;
        let on_batch = match &self.on_batch {
            Some(idx) => Some(instance.get_typed_func(&mut store, idx).map_err(|e| wrong(self, e))?),
            None => None,
        };
        match plugin.informer_host_plugin_resource_event_handler().call_init(&mut store, &self.spec.config_json) {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                return Err(PluginError::Init {
                    plugin: self.spec.name.clone(),
                    file: self.spec.wasm.clone(),
                    message: sanitize(&message, MAX_ERROR_BYTES).into_owned(),
                });
            }
            Err(e) => return Err(trap(self, e, &store)),
        }
        self.instantiate_time = t.elapsed();
        Ok(Live { store, plugin, on_batch })
    }

    /// Names the cause of a trap for logs and counts it in the metrics.
    fn describe(&self, e: &wasmtime::Error, store: &Store<Sandbox>, factor: u32) -> String {
        self.describe_counting(e, store, factor, true)
    }

    /// [`Self::describe`]; `count: false` for a batch trap no item was at
    /// fault for: the one-at-a-time delivery after it counts the trap of
    /// the item that is.
    fn describe_counting(&self, e: &wasmtime::Error, store: &Store<Sandbox>, factor: u32, count: bool) -> String {
        describe_trap(e, store, &self.spec.limits, factor, count)
    }

    /// The slot, locked for a call, with a live instance in it: a fresh
    /// one after a trap, or after the reaper reclaimed the last one.
    fn live(&mut self) -> Result<SlotGuard<Live>, HandlerError> {
        let mut slot = self.resident.lock();
        if slot.is_none() {
            let woken = self.resident.take_reclaimed();
            let stats = &self.shared.stats;
            if woken { &stats.wakes } else { &stats.restarts }.fetch_add(1, Ordering::Relaxed);
            let live =
                self.instantiate().map_err(|e| HandlerError::Crashed(format!("cannot start a fresh instance: {e}")))?;
            *slot = Some(live);
            let replay = if woken { self.spec.on_wake == OnWake::Replay } else { self.spec.on_trap == OnTrap::Replay };
            if replay {
                self.replay_cache(&mut slot);
            }
            if woken {
                tracing::debug!(plugin = %self.spec.name, "woken: a fresh instance after idling");
            } else {
                tracing::info!(plugin = %self.spec.name, "fresh instance after a trap");
            }
        }
        Ok(slot)
    }

    /// Hands a fresh instance the whole visible cache as initial adds.
    fn replay_cache(&mut self, slot: &mut Option<Live>) {
        let Some(cache) = self.shared.cache.clone() else { return };
        for obj in cache.list(None) {
            if let Err(HandlerError::Crashed(msg)) = self.call_on(slot, |store, p| {
                let r = store.data_mut().push_object(obj)?;
                p.informer_host_plugin_resource_event_handler().call_on_add(store, r, true)
            }) {
                tracing::error!(plugin = %self.spec.name, "replay into a fresh instance trapped: {msg}");
                return;
            }
        }
    }

    /// Calls into the live instance in `slot` (no restart: used by replay).
    fn call_on(
        &mut self,
        slot: &mut Option<Live>,
        f: impl FnOnce(&mut Store<Sandbox>, &Plugin) -> CallResult,
    ) -> Result<(), HandlerError> {
        let (fuel, ticks) = self.call_budget;
        let Some(live) = slot.as_mut() else {
            return Err(HandlerError::Crashed("no live instance".into()));
        };
        arm_call(&mut live.store, fuel, ticks);
        // No batch is in flight: `delivery` refuses to serve this call.
        live.store.data_mut().progress = None;
        let started = Instant::now();
        let r = f(&mut live.store, &live.plugin);
        let stats = &self.shared.stats;
        stats.observe_call(started.elapsed().as_secs_f64());
        let left = live.store.get_fuel().unwrap_or(0);
        stats.fuel_consumed.fetch_add(fuel.saturating_sub(left), Ordering::Relaxed);
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(msg)) => Err(HandlerError::Failed(sanitize(&msg, MAX_ERROR_BYTES).into_owned())),
            // The instance is poisoned for good: it is dropped here.
            Err(e) => {
                let live = slot.take().expect("borrowed above");
                Err(HandlerError::Crashed(self.describe(&e, &live.store, 1)))
            }
        }
    }

    fn call(&mut self, f: impl FnOnce(&mut Store<Sandbox>, &Plugin) -> CallResult) -> Result<(), HandlerError> {
        self.pick_up_staged();
        let mut slot = self.live()?;
        let r = self.call_on(&mut slot, f);
        drop(slot);
        self.resident.touch();
        r
    }
}

impl ResourceEventHandler for WasmHandler {
    fn on_add(&mut self, obj: &ObjectRef, is_in_initial_list: bool) -> Result<(), HandlerError> {
        self.call(|store, p| {
            let r = store.data_mut().push_object(obj.clone())?;
            p.informer_host_plugin_resource_event_handler().call_on_add(store, r, is_in_initial_list)
        })
    }

    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        self.call(|store, p| {
            let o = store.data_mut().push_object(old.clone())?;
            let n = store.data_mut().push_object(new.clone())?;
            p.informer_host_plugin_resource_event_handler().call_on_update(store, o, n)
        })
    }

    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        self.call(|store, p| {
            let d = lend_deleted(store.data_mut(), obj)?;
            p.informer_host_plugin_resource_event_handler().call_on_delete(store, &d)
        })
    }

    fn delivery(&self) -> Delivery {
        Delivery::Blocking
    }

    /// One `on-batch` call for the whole batch when the plugin exports it.
    /// A trap while an item had begun a visible effect skips that item; any
    /// other trap leaves the unreported items to be delivered one at a time
    /// (probing), which names the item at fault without repeating anything
    /// the host or the world saw.
    fn deliver_many(&mut self, batch: &[&Notification]) -> Delivered {
        self.pick_up_staged();
        if self.probing > 0 {
            let d = deliver_each(self, &batch[..self.probing.min(batch.len())]);
            self.probing = self.probing.saturating_sub(d.handled);
            return d;
        }
        let mut slot = match self.live() {
            Ok(slot) => slot,
            Err(e) => return Delivered { handled: 1, errors: vec![(0, e)], crashed_between: None },
        };
        let live = slot.as_mut().expect("started above");
        let Some(on_batch) = live.on_batch else {
            // One call per item, each locking the slot itself.
            drop(slot);
            return deliver_each(self, batch);
        };
        let batch = &batch[..batch.len().min(self.batch_limit)];
        let mut progress = Progress::new(batch.len(), self.call_budget, self.spec.limits.deadline_per_call);
        let mut tombstone_keys = Vec::new();
        let kinds: Vec<u8> = batch.iter().map(|n| batch_kind(&mut progress, &mut tombstone_keys, n)).collect();
        let store = &mut live.store;
        let (fuel, ticks) = self.call_budget;
        store.data_mut().progress = Some(progress);
        arm_call(&mut *store, fuel, ticks);
        let started = Instant::now();
        let r = on_batch.call(&mut *store, (kinds, tombstone_keys));
        let elapsed = started.elapsed();
        self.resident.touch();
        let progress = store.data_mut().progress.take().expect("set above");
        let stats = &self.shared.stats;
        let fuel_spent = progress.fuel_spent(store.get_fuel().unwrap_or(0));
        stats.fuel_consumed.fetch_add(fuel_spent, Ordering::Relaxed);
        let failed = |upto: u32| {
            progress
                .errors
                .iter()
                .filter(|(at, _)| *at < upto)
                .map(|(at, msg)| (*at as usize, HandlerError::Failed(msg.clone())))
                .collect::<Vec<_>>()
        };
        let e = match r {
            Ok(()) => {
                stats.observe_calls(elapsed.as_secs_f64() / batch.len().max(1) as f64, batch.len() as u64);
                let fuel_share = fuel_spent as f64 / fuel as f64;
                let deadline = self.spec.limits.deadline_per_call.as_secs_f64();
                let time_share = if deadline > 0.0 { elapsed.as_secs_f64() / deadline } else { 0.0 };
                self.batch_limit = next_batch_limit(self.batch_limit, fuel_share.max(time_share));
                return Delivered { handled: batch.len(), errors: failed(u32::MAX), crashed_between: None };
            }
            Err(e) => e,
        };
        // The instance is poisoned for good: it is dropped.
        let live = slot.take().expect("borrowed above");
        // A broken protocol is the plugin's doing: the item in flight is
        // skipped, as for a trap after `begin`.
        let violation = e.downcast_ref::<ProtocolViolation>().is_some();
        let blamed = if violation { progress.in_flight() } else { progress.begun };
        // A trap before any item began is not counted: the probe that
        // follows finds (and counts) the item at fault, if there is one.
        // It is backed off all the same (`crashed_between`): it cost a
        // call's budget and the next instance an `init`, so trapping this
        // way again and again must cost what crashing on items costs.
        let msg = self.describe_counting(&e, &live.store, 1, blamed.is_some() || violation);
        match blamed {
            None if violation => {
                tracing::error!(
                    plugin = %self.spec.name,
                    "trapped after every item of the batch was reported ({msg}); none is skipped"
                );
                Delivered { handled: batch.len(), errors: failed(u32::MAX), crashed_between: None }
            }
            Some(at) => {
                stats.observe_call(progress.since.elapsed().as_secs_f64());
                let mut errors = failed(at);
                errors.push((at as usize, HandlerError::Crashed(msg)));
                Delivered { handled: at as usize + 1, errors, crashed_between: None }
            }
            None => {
                let handled = progress.done as usize;
                self.probing = batch.len() - handled;
                self.batch_limit = (self.batch_limit / 2).max(1);
                tracing::warn!(
                    plugin = %self.spec.name,
                    "trapped inside a batch before any item reported itself ({msg}); \
                     delivering the next {} one at a time to find the item at fault",
                    self.probing
                );
                Delivered { handled, errors: failed(progress.done), crashed_between: Some(msg) }
            }
        }
    }
}

/// The batch limit after a batch that returned having used `share` of one
/// call's fuel or deadline (whichever is more).
/// Fuel and epoch ticks for a call with `factor` times `limits`
/// (saturating: a huge deadline is a long one, never a short one).
pub(crate) fn call_budget(limits: &super::Limits, factor: u32) -> (u64, u64) {
    // Fuel is always enabled on the engine; unlimited means "a lot".
    let fuel = limits.fuel_per_call.map_or(u64::MAX, |f| f.saturating_mul(factor as u64));
    let deadline = limits.deadline_per_call.saturating_mul(factor);
    let ticks = u64::try_from(deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos())).unwrap_or(u64::MAX);
    // +1: the next tick may be only an instant away.
    (fuel, ticks.max(1).saturating_add(1))
}

/// Names the cause of a trap of a call with `factor` times `limits`, and
/// (with `count`) counts it in the plugin's trap counters.
pub(crate) fn describe_trap(
    e: &wasmtime::Error,
    store: &Store<Sandbox>,
    limits: &super::Limits,
    factor: u32,
    count: bool,
) -> String {
    let stats = &store.data().shared.stats;
    // The cause, not the backtrace context wasmtime wraps it in.
    let violation = e.downcast_ref::<ProtocolViolation>().map(ToString::to_string);
    let (counter, mut msg) = match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => {
            let fuel = limits.fuel_per_call.map_or(u64::MAX, |f| f.saturating_mul(factor as u64));
            (&stats.traps_fuel, format!("out of fuel ({fuel} per call)"))
        }
        Some(Trap::Interrupt) => (
            &stats.traps_deadline,
            format!("deadline of {:?} per call exceeded", limits.deadline_per_call.saturating_mul(factor)),
        ),
        _ if violation.is_some() => (&stats.traps_protocol, violation.unwrap_or_default()),
        _ if store.data().limiter.refused => {
            (&stats.traps_memory, format!("memory cap of {} bytes reached ({})", limits.memory_bytes, e.root_cause()))
        }
        Some(t) => (&stats.traps_other, format!("trap: {t}")),
        None => (&stats.traps_other, format!("{e:#}")),
    };
    if count {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(line) = store.data().stderr.last_line() {
        msg.push_str(&format!(" (stderr: {line})"));
    }
    msg
}

fn next_batch_limit(limit: usize, share: f64) -> usize {
    if share > 0.25 {
        (limit / 2).max(1)
    } else if share < 0.0625 {
        (limit * 2).min(MAX_BATCH)
    } else {
        limit
    }
}

/// The `on-batch` kind of `n`, lending its objects to `progress` in order.
fn batch_kind(progress: &mut Progress, tombstone_keys: &mut Vec<String>, n: &Notification) -> u8 {
    match n {
        Notification::Add { obj, is_in_initial_list } => {
            progress.lend(obj);
            if *is_in_initial_list { kind::ADD_INITIAL } else { kind::ADD }
        }
        Notification::Update { old, new } => {
            progress.lend(old);
            progress.lend(new);
            kind::UPDATE
        }
        Notification::Delete(DeletedObject::Object(o)) => {
            progress.lend(o);
            kind::DELETE
        }
        Notification::Delete(DeletedObject::FinalStateUnknown { key, obj }) => {
            progress.lend(obj);
            tombstone_keys.push(key.to_string());
            kind::DELETE_FINAL_STATE_UNKNOWN
        }
    }
}

fn lend_deleted(sandbox: &mut Sandbox, d: &DeletedObject) -> wasmtime::Result<Deleted> {
    Ok(match d {
        DeletedObject::Object(o) => Deleted::Object(sandbox.push_object(o.clone())?),
        DeletedObject::FinalStateUnknown { key, obj } => Deleted::UnknownFinalState(Tombstone {
            key: key.to_string(),
            last_known: Some(sandbox.push_object(obj.clone())?),
        }),
    })
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_batches_shrink_light_ones_grow_back() {
        // A plugin whose 256 items take 60 % of a budget: down to 64 items,
        // where a batch takes 15 %, and it stays there.
        let mut limit = MAX_BATCH;
        for _ in 0..10 {
            let share = limit as f64 * 0.6 / 256.0;
            limit = next_batch_limit(limit, share);
        }
        assert_eq!(limit, 64);
        // Never below one item, never above the maximum.
        assert_eq!(next_batch_limit(1, 10.0), 1);
        assert_eq!(next_batch_limit(MAX_BATCH, 0.0), MAX_BATCH);
        assert_eq!(next_batch_limit(8, 0.01), 16);
    }
}
