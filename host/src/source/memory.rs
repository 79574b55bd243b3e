//! The `memory` source: a scripted, in-process API server for tests and
//! benchmarks.
//!
//! It owns nothing but a [`VersionedStore`] and a convenient script API:
//! create, modify and delete objects from JSON, send bookmarks, fail the
//! next list or watch, drop every watch, and compact history so the next
//! watch gets `410 Gone` and the informer relists.

use futures::future::BoxFuture;
use serde_json::Value;

use super::versioned::VersionedStore;
use crate::informer::{ListResult, ListerWatcher, ObjectError, ObjectRef, SourceError, WatchStream};

/// A scripted source. Clones share the same objects.
///
/// ```
/// use informer_host::source::MemorySource;
/// let src = MemorySource::new();
/// let cm = src.apply(serde_json::json!({"apiVersion":"v1","kind":"ConfigMap",
///     "metadata":{"name":"a","namespace":"default"}})).unwrap();
/// assert_eq!(cm.resource_version(), Some("1"));
/// assert_eq!(src.delete("default/a").unwrap().resource_version(), Some("2"));
/// ```
#[derive(Clone)]
pub struct MemorySource {
    store: VersionedStore,
}

impl Default for MemorySource {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for MemorySource {
    type Target = VersionedStore;
    fn deref(&self) -> &VersionedStore {
        &self.store
    }
}

impl MemorySource {
    pub fn new() -> Self {
        MemorySource { store: VersionedStore::new("memory") }
    }

    /// Creates or modifies a ConfigMap `namespace/name` with one data entry.
    pub fn apply_config_map(&self, namespace: &str, name: &str, value: &str) -> Result<ObjectRef, ObjectError> {
        self.store.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"value": value},
        }))
    }

    /// Creates or modifies an object given as JSON.
    pub fn apply(&self, value: Value) -> Result<ObjectRef, ObjectError> {
        self.store.apply(value)
    }
}

impl ListerWatcher for MemorySource {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        self.store.list()
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.store.watch(resource_version)
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}
