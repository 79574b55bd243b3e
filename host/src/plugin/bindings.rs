//! Host bindings generated from `wit/` and the host side of its imports.
//!
//! This module owns the translation between engine objects and the WIT
//! `object` resource, and the `log` and `cache` capabilities. Each call
//! reads the sandbox of the calling instance only.

use std::sync::atomic::Ordering;
use std::time::Instant;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};

use super::sandbox::Sandbox;
use crate::informer::ObjectRef;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    with: {
        "informer-host:plugin/types.object": ObjectHandle,
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
/// too; only `delivery.lend` clones it.
struct Lent(*const ObjectRef);

// SAFETY: the pointee is an `Arc` (Send + Sync) that outlives the batch
// (see `Progress::lend`).
unsafe impl Send for Lent {}

/// The `on-batch` call in flight: what it lends and what it reported
/// through `delivery`.
pub struct Progress {
    /// The batch's objects, by slot.
    lent: Vec<Lent>,
    /// The item that called `begin` and not yet `done`.
    pub begun: Option<u32>,
    /// One past the last item reported `done`.
    pub done: u32,
    /// `(index, error)` of the items that returned an error.
    pub errors: Vec<(u32, String)>,
    /// Fuel and epoch ticks re-armed at each report.
    pub budget: (u64, u64),
    /// Fuel used up to the last report.
    pub fuel_used: u64,
    /// When the budget was last armed (for the partial item of a trap).
    pub since: Instant,
}

impl Progress {
    pub fn new(budget: (u64, u64)) -> Self {
        Progress {
            lent: Vec::new(),
            begun: None,
            done: 0,
            errors: Vec::new(),
            budget,
            fuel_used: 0,
            since: Instant::now(),
        }
    }

    /// Lends `obj` to the batch as its next slot.
    ///
    /// The caller keeps `obj` alive and in place for as long as this
    /// `Progress` sits in a store: from just before the `on-batch` call
    /// until it is taken out right after, as `WasmHandler` does with the
    /// batch it borrows. Nothing else reads `lent`.
    pub fn lend(&mut self, obj: &ObjectRef) {
        self.lent.push(Lent(obj));
    }

    /// `delivery.metadata`: every lent object's metadata, encoded as the
    /// WIT describes.
    fn metadata(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, s: Option<&str>) {
            match s {
                Some(s) => {
                    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
        }
        let mut out = Vec::with_capacity(self.lent.len() * 128);
        for lent in &self.lent {
            // SAFETY: see `lend`: the batch outlives the call this runs in.
            let obj: &ObjectRef = unsafe { &*lent.0 };
            put(&mut out, Some(obj.key()));
            put(&mut out, obj.namespace());
            put(&mut out, Some(obj.name()));
            put(&mut out, obj.uid());
            put(&mut out, obj.resource_version());
            put(&mut out, Some(obj.api_version()));
            put(&mut out, Some(obj.kind()));
            let count_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            let mut count = 0u32;
            for (k, v) in obj.labels() {
                put(&mut out, Some(k));
                put(&mut out, Some(v));
                count += 1;
            }
            out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
        }
        out
    }

    /// The object in `slot`, if there is one.
    fn lent(&self, slot: u32) -> Option<ObjectRef> {
        let lent = self.lent.get(slot as usize)?;
        // SAFETY: see `lend`: the batch outlives the call this runs in.
        Some(unsafe { (*lent.0).clone() })
    }
}

fn progress(data: &mut Sandbox) -> wasmtime::Result<&mut Progress> {
    match data.progress.as_mut() {
        Some(p) => Ok(p),
        None => wasmtime::bail!("delivery called outside on-batch"),
    }
}

/// Accounts the fuel used since the last report and re-arms the budget.
fn rearm(cx: &mut StoreContextMut<'_, Sandbox>) -> wasmtime::Result<()> {
    let left = cx.get_fuel().unwrap_or(0);
    let p = progress(cx.data_mut())?;
    p.fuel_used += p.budget.0.saturating_sub(left);
    p.since = Instant::now();
    let (fuel, ticks) = p.budget;
    cx.set_fuel(fuel)?;
    cx.set_epoch_deadline(ticks);
    Ok(())
}

/// Links the `delivery` interface (progress of an `on-batch` call).
pub fn add_delivery_to_linker(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    let mut i = linker.instance(DELIVERY)?;
    i.func_wrap("begin", |mut cx: StoreContextMut<'_, Sandbox>, (index,): (u32,)| {
        let p = progress(cx.data_mut())?;
        if index < p.done || p.begun.is_some_and(|b| b != index) {
            wasmtime::bail!("delivery.begin({index}) out of order");
        }
        p.begun = Some(index);
        rearm(&mut cx)
    })?;
    i.func_wrap("done", |mut cx: StoreContextMut<'_, Sandbox>, (index, error): (u32, Option<String>)| {
        let p = progress(cx.data_mut())?;
        if index < p.done || p.begun.is_some_and(|b| b != index) {
            wasmtime::bail!("delivery.done({index}) out of order");
        }
        p.begun = None;
        p.done = index + 1;
        if let Some(e) = error {
            p.errors.push((index, e));
        }
        rearm(&mut cx)
    })?;
    i.func_wrap("lend", |mut cx: StoreContextMut<'_, Sandbox>, (slot,): (u32,)| {
        let data = cx.data_mut();
        let Some(obj) = data.progress.as_ref().and_then(|p| p.lent(slot)) else {
            wasmtime::bail!("delivery.lend({slot}): no such slot in this batch");
        };
        Ok((data.push_object(obj)?,))
    })?;
    i.func_wrap("metadata", |mut cx: StoreContextMut<'_, Sandbox>, (): ()| Ok((progress(cx.data_mut())?.metadata(),)))?;
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

    /// Lends an object to the guest for one call.
    pub fn push_object(&mut self, obj: ObjectRef) -> wasmtime::Result<Resource<ObjectHandle>> {
        Ok(self.table.push(ObjectHandle(obj))?)
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
    fn labels(&mut self, s: Resource<ObjectHandle>) -> Vec<(String, String)> {
        self.obj(&s).labels().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
    fn label(&mut self, s: Resource<ObjectHandle>, key: String) -> Option<String> {
        self.obj(&s).label(&key).map(str::to_string)
    }
    fn annotations(&mut self, s: Resource<ObjectHandle>) -> Vec<(String, String)> {
        self.obj(&s).annotations()
    }
    fn json(&mut self, s: Resource<ObjectHandle>) -> String {
        self.shared.stats.json_calls.fetch_add(1, Ordering::Relaxed);
        self.obj(&s).json().to_string()
    }
    fn pointer(&mut self, s: Resource<ObjectHandle>, pointer: String) -> Option<String> {
        self.obj(&s).pointer_value(&pointer).map(|v| v.to_string())
    }
    fn drop(&mut self, rep: Resource<ObjectHandle>) -> wasmtime::Result<()> {
        self.table.delete(rep)?;
        Ok(())
    }
}

impl self::informer_host::plugin::types::Host for Sandbox {}

impl self::informer_host::plugin::log::Host for Sandbox {
    fn log(&mut self, level: Level, message: String) {
        let s = &self.shared;
        let tenant = s.tenant.as_deref().unwrap_or("");
        match level {
            Level::Trace => tracing::trace!(plugin = %s.name, tenant, "{message}"),
            Level::Debug => tracing::debug!(plugin = %s.name, tenant, "{message}"),
            Level::Info => tracing::info!(plugin = %s.name, tenant, "{message}"),
            Level::Warn => tracing::warn!(plugin = %s.name, tenant, "{message}"),
            Level::Error => tracing::error!(plugin = %s.name, tenant, "{message}"),
        }
        if let Some(sink) = &s.log_sink {
            (sink.0)(level, &message);
        }
    }
}

impl self::informer_host::plugin::cache::Host for Sandbox {
    fn get(&mut self, key: String) -> Option<Resource<ObjectHandle>> {
        let obj = self.shared.cache.as_ref()?.get(&key)?;
        self.push_object(obj).ok()
    }
    fn list(&mut self, namespace: Option<String>) -> Vec<Resource<ObjectHandle>> {
        let Some(cache) = self.shared.cache.clone() else { return Vec::new() };
        cache.list(namespace.as_deref()).into_iter().filter_map(|o| self.push_object(o).ok()).collect()
    }
    fn by_index(&mut self, index: String, value: String) -> Result<Vec<Resource<ObjectHandle>>, String> {
        let Some(cache) = self.shared.cache.clone() else { return Ok(Vec::new()) };
        let objs = cache.by_index(&index, &value).map_err(|e| e.to_string())?;
        Ok(objs.into_iter().filter_map(|o| self.push_object(o).ok()).collect())
    }
}
