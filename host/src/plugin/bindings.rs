//! Host bindings generated from `wit/` and the host side of its imports.
//!
//! This module owns the translation between engine objects and the WIT
//! `object` resource, and the `log` and `cache` capabilities. Each call
//! reads the sandbox of the calling instance only.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};

use super::log_budget::sanitize;
use super::metadata_list::MetadataList;
use super::runtime::EPOCH_TICK;
use super::sandbox::{HANDLE_COST, SCAN_COST, Sandbox};
use crate::informer::ObjectRef;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    with: {
        "informer-host:plugin/types.object": ObjectHandle,
    },
    // May trap: handing out object handles past the instance's cap.
    imports: {
        "informer-host:plugin/cache": trappable,
        // Charged to the call's host work: out of fuel past it.
        "informer-host:plugin/types.[method]object.json": trappable,
        "informer-host:plugin/types.[method]object.pointer": trappable,
        "informer-host:plugin/types.[method]object.annotations": trappable,
        "informer-host:plugin/types.[method]object.labels": trappable,
        "informer-host:plugin/log": trappable,
    },
});

pub use self::informer_host::plugin::types::Level;
pub use self::informer_host::plugin::types::{Deleted, Tombstone};

/// The `batch-handler` interface and its one function.
pub const BATCH_EXPORT: &str = "informer-host:plugin/batch-handler@0.1.0";
pub const ON_BATCH: &str = "on-batch";
/// The `delivery` interface a batch reports its progress through.
pub const DELIVERY: &str = "informer-host:plugin/delivery@0.1.0";

/// Notification kinds of an `on-batch` call (see `wit/plugin.wit`).
pub mod kind {
    pub const ADD: u8 = 0;
    pub const ADD_INITIAL: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const DELETE_FINAL_STATE_UNKNOWN: u8 = 4;
}

/// An object of the batch in flight, by address: lending it costs no
/// reference-count traffic on an object every other listener is reading
/// too; only `delivery.lend` clones it. Its metadata record's address is
/// kept beside it, so copying a batch's records reads them one after
/// another instead of reaching each through the object first.
struct Lent {
    obj: *const ObjectRef,
    record: *const [u8],
}

// SAFETY: the pointees are an `Arc` (Send + Sync) and the record it owns,
// which outlive the batch (see `Progress::lend`).
unsafe impl Send for Lent {}

/// Longest error text kept from a guest (`delivery.done`, a returned
/// error); the rest is cut and the cut said.
pub const MAX_ERROR_BYTES: usize = 4096;

/// The guest broke the `delivery` protocol: the host traps the call and
/// blames the item in flight. Never a host failure.
#[derive(Debug, thiserror::Error)]
#[error("protocol violation: {0}")]
pub struct ProtocolViolation(pub String);

/// `now + d`, or a year from now where that cannot be represented.
fn far_or(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).or_else(|| now.checked_add(Duration::from_secs(365 * 86_400))).unwrap_or(now)
}

/// Fuel and epoch ticks of one call.
pub type Budget = (u64, u64);

/// The `on-batch` call in flight: what it lends and what it reported
/// through `delivery`.
///
/// The budget is a contract between the host and the batch. `begin` and
/// `done` re-arm a call's fuel and deadline only for items of this batch,
/// moving forward, each item at most once for each; anything else is a
/// [`ProtocolViolation`]. And whatever the guest calls, the whole batch
/// gets at most `items + 1` calls' worth of fuel and time (the allowance):
/// a re-arm never grants more than what is left of it.
pub struct Progress {
    /// The batch's objects, by slot.
    lent: Vec<Lent>,
    /// Bytes of their metadata records: what `delivery.metadata` copies.
    metadata_bytes: usize,
    /// How many items (notifications) the batch carries.
    items: u32,
    /// The item that called `begin` and not yet `done`.
    pub begun: Option<u32>,
    /// One past the last item reported `done`.
    pub done: u32,
    /// `(index, error)` of the items that returned an error (cut to
    /// [`MAX_ERROR_BYTES`]; at most one per item).
    pub errors: Vec<(u32, String)>,
    /// Fuel and epoch ticks re-armed at each report.
    pub budget: Budget,
    /// Fuel used up to the last report.
    pub fuel_used: u64,
    /// When the budget was last armed (for the partial item of a trap).
    pub since: Instant,
    /// The whole batch's fuel, and the instant its time runs out.
    allowance: (u64, Instant),
    /// The fuel put in the store at the last arming.
    armed: u64,
}

impl Progress {
    /// A batch of `items` notifications, each with `budget` (and
    /// `deadline`, the wall-clock time behind its epoch ticks).
    pub fn new(items: usize, budget: Budget, deadline: Duration) -> Self {
        let calls = items as u64 + 1;
        let now = Instant::now();
        Progress {
            // One slot an item, two for an update: grown at most once.
            lent: Vec::with_capacity(items),
            metadata_bytes: 0,
            items: items as u32,
            begun: None,
            done: 0,
            errors: Vec::new(),
            budget,
            fuel_used: 0,
            since: now,
            allowance: (budget.0.saturating_mul(calls), far_or(now, deadline.saturating_mul(calls as u32))),
            armed: budget.0,
        }
    }

    /// The item a trap now is blamed on: the one begun, else the next one
    /// not reported (`None` once every item was reported).
    pub fn in_flight(&self) -> Option<u32> {
        self.begun.or((self.done < self.items).then_some(self.done))
    }

    /// `delivery.begin(index)`: the next item to have a visible effect.
    fn begin(&mut self, index: u32) -> Result<(), ProtocolViolation> {
        if index >= self.items {
            return Err(ProtocolViolation(format!("delivery.begin({index}) in a batch of {} items", self.items)));
        }
        if let Some(b) = self.begun {
            return Err(ProtocolViolation(format!("delivery.begin({index}) while item {b} has begun")));
        }
        if index < self.done {
            return Err(ProtocolViolation(format!("delivery.begin({index}) after item {} was done", self.done - 1)));
        }
        self.begun = Some(index);
        Ok(())
    }

    /// `delivery.done(index, error)`: the item was handled.
    fn done(&mut self, index: u32, error: Option<String>) -> Result<(), ProtocolViolation> {
        if index >= self.items {
            return Err(ProtocolViolation(format!("delivery.done({index}) in a batch of {} items", self.items)));
        }
        if self.begun.is_some_and(|b| b != index) || index < self.done {
            let state = match self.begun {
                Some(b) => format!("item {b} has begun"),
                None => format!("item {} is the next one", self.done),
            };
            return Err(ProtocolViolation(format!("delivery.done({index}) out of order: {state}")));
        }
        self.begun = None;
        self.done = index + 1;
        if let Some(e) = error {
            self.errors.push((index, sanitize(&e, MAX_ERROR_BYTES).into_owned()));
        }
        Ok(())
    }

    /// What to arm next, given that `left` fuel is in the store: one call's
    /// budget, or what is left of the batch's allowance if that is less.
    fn next_budget(&mut self, left: u64) -> Budget {
        self.fuel_used += self.armed.saturating_sub(left);
        self.since = Instant::now();
        let fuel = self.budget.0.min(self.allowance.0.saturating_sub(self.fuel_used));
        let time_left = self.allowance.1.saturating_duration_since(self.since);
        // +1: the next tick may be only an instant away.
        let ticks = (time_left.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).saturating_add(1);
        self.armed = fuel;
        (fuel, self.budget.1.min(ticks))
    }

    /// All the fuel the batch spent, given that `left` is in the store.
    pub fn fuel_spent(&self, left: u64) -> u64 {
        self.fuel_used + self.armed.saturating_sub(left)
    }

    /// Lends `obj` to the batch as its next slot.
    ///
    /// The caller keeps `obj` alive and in place for as long as this
    /// `Progress` sits in a store: from just before the `on-batch` call
    /// until it is taken out right after, as `WasmHandler` does with the
    /// batch it borrows. Nothing else reads `lent`.
    pub fn lend(&mut self, obj: &ObjectRef) {
        let record = obj.metadata_record();
        self.metadata_bytes += record.len();
        self.lent.push(Lent { obj, record });
    }

    /// `delivery.metadata`: every lent object's metadata record, in slot
    /// order, which is the encoding the WIT describes; `indexed` puts the
    /// table of where each record starts in front
    /// (`delivery.indexed-metadata`).
    fn metadata(&self, indexed: bool) -> MetadataList {
        let records = self.lent.iter().map(|lent| lent.record).collect();
        // SAFETY: see `lend`: the batch outlives the call this runs in,
        // whose result is lowered before the call returns.
        unsafe { MetadataList::new(records, self.metadata_bytes, indexed) }
    }

    /// The object in `slot`, if there is one.
    fn lent(&self, slot: u32) -> Option<ObjectRef> {
        let lent = self.lent.get(slot as usize)?;
        // SAFETY: see `lend`: the batch outlives the call this runs in.
        Some(unsafe { (*lent.obj).clone() })
    }
}

fn progress(data: &mut Sandbox) -> Result<&mut Progress, ProtocolViolation> {
    data.progress.as_mut().ok_or_else(|| ProtocolViolation("delivery called outside on-batch".into()))
}

/// Accounts the fuel used since the last report and re-arms the budget
/// (within the batch's allowance). A new item gets a whole log budget too.
fn rearm(cx: &mut StoreContextMut<'_, Sandbox>) -> wasmtime::Result<()> {
    let left = cx.get_fuel().unwrap_or(0);
    let (fuel, ticks) = progress(cx.data_mut())?.next_budget(left);
    super::sandbox::arm_call(&mut *cx, fuel, ticks);
    Ok(())
}

/// Links the `delivery` interface (progress of an `on-batch` call).
pub fn add_delivery_to_linker(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    let mut i = linker.instance(DELIVERY)?;
    i.func_wrap("begin", |mut cx: StoreContextMut<'_, Sandbox>, (index,): (u32,)| {
        progress(cx.data_mut())?.begin(index)?;
        rearm(&mut cx)
    })?;
    i.func_wrap("done", |mut cx: StoreContextMut<'_, Sandbox>, (index, error): (u32, Option<String>)| {
        progress(cx.data_mut())?.done(index, error)?;
        rearm(&mut cx)
    })?;
    i.func_wrap("lend", |mut cx: StoreContextMut<'_, Sandbox>, (slot,): (u32,)| {
        let data = cx.data_mut();
        let Some(obj) = data.progress.as_ref().and_then(|p| p.lent(slot)) else {
            return Err(ProtocolViolation(format!("delivery.lend({slot}): no such slot in this batch")).into());
        };
        Ok((data.push_object(obj)?,))
    })?;
    for (name, indexed) in [("metadata", false), ("indexed-metadata", true)] {
        i.func_wrap(name, move |mut cx: StoreContextMut<'_, Sandbox>, (): ()| {
            // A copy of every record each call: host work, charged as such.
            let data = cx.data_mut();
            let list = progress(data)?.metadata(indexed);
            data.charge_host_work(list.byte_len())?;
            Ok((list,))
        })?;
    }
    Ok(())
}

/// The host's representation of a WIT `object`: a shared object version.
pub struct ObjectHandle(pub ObjectRef);

impl Sandbox {
    fn obj(&self, r: &Resource<ObjectHandle>) -> &ObjectRef {
        // The handle was created by this store's table; a missing entry is
        // a host bug, and a panic here traps only this call.
        &self.table.get(r).expect("object handle belongs to this instance").0
    }

    /// Lends an object to the guest. A handle keeps its object version
    /// alive, so each counts the object's JSON and [`HANDLE_COST`] bytes
    /// against the instance's memory cap, beside its linear memory: past
    /// it, or past the count the cap allows, a trap.
    pub fn push_object(&mut self, obj: ObjectRef) -> wasmtime::Result<Resource<ObjectHandle>> {
        if self.handles >= self.max_handles || !self.limiter.take_handle(obj.json().len()) {
            self.limiter.refused = true;
            wasmtime::bail!(
                "the instance holds {} object handles keeping {} bytes of objects alive beside {} bytes of its \
                 own memory, the most its memory cap of {} bytes allows ({HANDLE_COST} bytes a handle and the \
                 object's JSON); drop the handles it no longer needs",
                self.handles,
                self.limiter.handle_bytes,
                self.limiter.linear_bytes(),
                self.shared.memory_bytes
            );
        }
        let r = self.table.push(ObjectHandle(obj))?;
        self.handles += 1;
        Ok(r)
    }

    /// Lends what a cache read found: the objects it examined to find
    /// them are paid in fuel first ([`SCAN_COST`] each), then each object
    /// found gets a handle ([`Sandbox::push_object`]).
    pub(crate) fn hand_out(
        &mut self,
        (objects, examined): (Vec<ObjectRef>, usize),
    ) -> wasmtime::Result<Vec<Resource<ObjectHandle>>> {
        self.charge_host_work(examined.saturating_mul(SCAN_COST))?;
        objects.into_iter().map(|o| self.push_object(o)).collect()
    }
}

impl self::informer_host::plugin::types::HostObject for Sandbox {
    fn key(&mut self, s: Resource<ObjectHandle>) -> String {
        self.obj(&s).key().to_string()
    }
    fn namespace(&mut self, s: Resource<ObjectHandle>) -> Option<String> {
        self.obj(&s).namespace().map(str::to_string)
    }
    fn name(&mut self, s: Resource<ObjectHandle>) -> String {
        self.obj(&s).name().to_string()
    }
    fn uid(&mut self, s: Resource<ObjectHandle>) -> Option<String> {
        self.obj(&s).uid().map(str::to_string)
    }
    fn resource_version(&mut self, s: Resource<ObjectHandle>) -> Option<String> {
        self.obj(&s).resource_version().map(str::to_string)
    }
    fn api_version(&mut self, s: Resource<ObjectHandle>) -> String {
        self.obj(&s).api_version().to_string()
    }
    fn kind(&mut self, s: Resource<ObjectHandle>) -> String {
        self.obj(&s).kind().to_string()
    }
    fn labels(&mut self, s: Resource<ObjectHandle>) -> wasmtime::Result<Vec<(String, String)>> {
        let obj = self.obj(&s).clone();
        self.charge_host_work(obj.labels().map(|(k, v)| k.len() + v.len()).sum())?;
        Ok(obj.labels().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }
    fn label(&mut self, s: Resource<ObjectHandle>, key: String) -> Option<String> {
        self.obj(&s).label(&key).map(str::to_string)
    }
    // These three parse or copy the whole object on the host: each charges
    // its size to the call's host work (see `Sandbox::charge_host_work`).
    fn annotations(&mut self, s: Resource<ObjectHandle>) -> wasmtime::Result<Vec<(String, String)>> {
        let obj = self.obj(&s).clone();
        self.charge_host_work(obj.json().len())?;
        Ok(obj.annotations())
    }
    fn json(&mut self, s: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        self.shared.stats.json_calls.fetch_add(1, Ordering::Relaxed);
        let obj = self.obj(&s).clone();
        self.charge_host_work(obj.json().len())?;
        Ok(obj.json().to_string())
    }
    fn pointer(&mut self, s: Resource<ObjectHandle>, pointer: String) -> wasmtime::Result<Option<String>> {
        let obj = self.obj(&s).clone();
        self.charge_host_work(obj.json().len())?;
        Ok(obj.pointer_value(&pointer).map(|v| v.to_string()))
    }
    fn drop(&mut self, rep: Resource<ObjectHandle>) -> wasmtime::Result<()> {
        let ObjectHandle(obj) = self.table.delete(rep)?;
        self.limiter.drop_handle(obj.json().len());
        self.handles -= 1;
        Ok(())
    }
}

impl self::informer_host::plugin::types::Host for Sandbox {}

impl self::informer_host::plugin::log::Host for Sandbox {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        // Escaped and cut on the host, whether kept or dropped.
        self.charge_host_work(message.len())?;
        let s = &self.shared;
        let tenant = s.tenant.as_deref().unwrap_or("");
        // Within the log budget, cut and escaped; dropped lines are counted.
        if let Some(line) = s.log.emit(&s.name, tenant, level, &message, &s.stats)
            && let Some(sink) = &s.log_sink
        {
            (sink.0)(level, &line);
        }
        Ok(())
    }
}

impl self::informer_host::plugin::cache::Host for Sandbox {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Resource<ObjectHandle>>> {
        let Some(obj) = self.shared.cache.as_ref().and_then(|c| c.get(&key)) else { return Ok(None) };
        Ok(Some(self.push_object(obj)?))
    }
    fn list(&mut self, namespace: Option<String>) -> wasmtime::Result<Vec<Resource<ObjectHandle>>> {
        let Some(cache) = self.shared.cache.clone() else { return Ok(Vec::new()) };
        self.hand_out(cache.list_examined(namespace.as_deref()))
    }
    fn by_index(
        &mut self,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, String>> {
        let Some(cache) = self.shared.cache.clone() else { return Ok(Ok(Vec::new())) };
        match cache.by_index_examined(&index, &value) {
            Ok(found) => Ok(Ok(self.hand_out(found)?)),
            Err(e) => Ok(Err(e.to_string())),
        }
    }
}
