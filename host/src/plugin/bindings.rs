//! Host bindings generated from `wit/` and the host side of its imports.
//!
//! This module owns the translation between engine objects and the WIT
//! `object` resource, and the `log` and `cache` capabilities. Each call
//! reads the sandbox of the calling instance only.

use std::sync::atomic::Ordering;

use wasmtime::component::Resource;

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
