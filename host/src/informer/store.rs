//! The informer's local cache: client-go's thread-safe `Indexer`.
//!
//! This module owns the map from key to the newest object version and the
//! named indexes over it. Reads take a snapshot (`Arc` clones) under a read
//! lock, so readers never block each other. It may not emit notifications:
//! that is the informer's job.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;

use super::object::ObjectRef;

/// Computes the index values of an object (client-go's `IndexFunc`).
pub type IndexFunc = Arc<dyn Fn(&ObjectRef) -> Vec<String> + Send + Sync>;

/// The name of the index every store has: objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Why an index operation was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IndexError {
    #[error("index {0:?} does not exist")]
    NoSuchIndex(String),
    #[error("index {0:?} already exists")]
    Conflict(String),
    #[error("indexers can only be added before the informer starts")]
    AlreadyStarted,
}

#[derive(Default)]
struct Inner {
    items: HashMap<Box<str>, ObjectRef>,
    indexers: HashMap<String, IndexFunc>,
    /// index name → index value → keys
    indices: HashMap<String, HashMap<String, HashSet<Box<str>>>>,
}

/// A thread-safe store with named indexes. Cheap to clone (shared).
///
/// ```
/// use informer_host::informer::{Indexer, Object};
/// use std::sync::Arc;
/// let store = Indexer::new();
/// store.add(Arc::new(Object::from_json(r#"{"metadata":{"name":"a","namespace":"x"}}"#).unwrap()));
/// assert_eq!(store.by_index("namespace", "x").unwrap().len(), 1);
/// ```
#[derive(Clone)]
pub struct Indexer {
    inner: Arc<RwLock<Inner>>,
}

impl Default for Indexer {
    fn default() -> Self {
        Self::new()
    }
}

fn namespace_index(obj: &ObjectRef) -> Vec<String> {
    vec![obj.namespace().unwrap_or("").to_string()]
}

impl Indexer {
    /// A store with the built-in namespace index.
    pub fn new() -> Self {
        let mut inner = Inner::default();
        inner.indexers.insert(NAMESPACE_INDEX.to_string(), Arc::new(namespace_index));
        inner.indices.insert(NAMESPACE_INDEX.to_string(), HashMap::new());
        Indexer { inner: Arc::new(RwLock::new(inner)) }
    }

    /// Adds named indexes, indexing what is already stored.
    pub fn add_indexers(&self, indexers: HashMap<String, IndexFunc>) -> Result<(), IndexError> {
        let mut inner = self.inner.write();
        if let Some(name) = indexers.keys().find(|n| inner.indexers.contains_key(*n)) {
            return Err(IndexError::Conflict(name.clone()));
        }
        for (name, f) in indexers {
            let mut index: HashMap<String, HashSet<Box<str>>> = HashMap::new();
            for (key, obj) in &inner.items {
                for v in f(obj) {
                    index.entry(v).or_default().insert(key.clone());
                }
            }
            inner.indices.insert(name.clone(), index);
            inner.indexers.insert(name, f);
        }
        Ok(())
    }

    /// Inserts or replaces the object under its key; returns the old version.
    pub fn add(&self, obj: ObjectRef) -> Option<ObjectRef> {
        let mut guard = self.inner.write();
        let Inner { items, indexers, indices } = &mut *guard;
        if let Some(slot) = items.get_mut(obj.key()) {
            let old = std::mem::replace(slot, obj.clone());
            reindex(indexers, indices, obj.key(), Some(&old), Some(&obj));
            return Some(old);
        }
        reindex(indexers, indices, obj.key(), None, Some(&obj));
        items.insert(obj.key().into(), obj);
        None
    }

    /// Same as [`Indexer::add`]; kept for client-go's vocabulary.
    pub fn update(&self, obj: ObjectRef) -> Option<ObjectRef> {
        self.add(obj)
    }

    /// Removes the key; returns what was stored.
    pub fn delete(&self, key: &str) -> Option<ObjectRef> {
        let mut guard = self.inner.write();
        let Inner { items, indexers, indices } = &mut *guard;
        let old = items.remove(key);
        if let Some(o) = &old {
            reindex(indexers, indices, key, Some(o), None);
        }
        old
    }

    /// Replaces the whole content (used by tests and relist bookkeeping).
    pub fn replace(&self, objs: Vec<ObjectRef>) {
        let mut guard = self.inner.write();
        let Inner { items, indexers, indices } = &mut *guard;
        items.clear();
        for index in indices.values_mut() {
            index.clear();
        }
        for obj in objs {
            reindex(indexers, indices, obj.key(), None, Some(&obj));
            items.insert(obj.key().into(), obj);
        }
    }

    pub fn get(&self, key: &str) -> Option<ObjectRef> {
        self.inner.read().items.get(key).cloned()
    }
    pub fn contains(&self, key: &str) -> bool {
        self.inner.read().items.contains_key(key)
    }
    pub fn list(&self) -> Vec<ObjectRef> {
        self.inner.read().items.values().cloned().collect()
    }
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.read().items.keys().map(|k| k.to_string()).collect()
    }
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects whose index `index` yields `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<ObjectRef>, IndexError> {
        let inner = self.inner.read();
        let idx = inner.indices.get(index).ok_or_else(|| IndexError::NoSuchIndex(index.to_string()))?;
        Ok(idx
            .get(value)
            .map(|keys| keys.iter().filter_map(|k| inner.items.get(k).cloned()).collect())
            .unwrap_or_default())
    }

    /// The values an index currently holds.
    pub fn list_index_func_values(&self, index: &str) -> Vec<String> {
        self.inner.read().indices.get(index).map(|i| i.keys().cloned().collect()).unwrap_or_default()
    }
}

/// Moves `key` from the index values of `old` to those of `new`.
fn reindex(
    indexers: &HashMap<String, IndexFunc>,
    indices: &mut HashMap<String, HashMap<String, HashSet<Box<str>>>>,
    key: &str,
    old: Option<&ObjectRef>,
    new: Option<&ObjectRef>,
) {
    for (name, f) in indexers {
        // The namespace is part of the key: an update cannot move it.
        if old.is_some() && new.is_some() && name == NAMESPACE_INDEX {
            continue;
        }
        let old_values = old.map(|o| f(o)).unwrap_or_default();
        let new_values = new.map(|o| f(o)).unwrap_or_default();
        if old.is_some() && new.is_some() && old_values == new_values {
            continue;
        }
        if !indices.contains_key(name.as_str()) {
            indices.insert(name.clone(), HashMap::new());
        }
        let Some(index) = indices.get_mut(name.as_str()) else { continue };
        for v in old_values {
            if let Some(set) = index.get_mut(&v) {
                set.remove(key);
                if set.is_empty() {
                    index.remove(&v);
                }
            }
        }
        for v in new_values {
            index.entry(v).or_default().insert(key.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::Object;

    fn obj(ns: &str, name: &str, app: &str) -> ObjectRef {
        Arc::new(
            Object::from_json(format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"app":"{app}"}}}}}}"#
            ))
            .unwrap(),
        )
    }

    #[test]
    fn namespace_index_follows_updates_and_deletes() {
        let s = Indexer::new();
        s.add(obj("a", "x", "1"));
        s.add(obj("b", "y", "1"));
        assert_eq!(s.by_index(NAMESPACE_INDEX, "a").unwrap().len(), 1);
        s.delete("a/x");
        assert!(s.by_index(NAMESPACE_INDEX, "a").unwrap().is_empty());
        assert_eq!(s.list_keys(), vec!["b/y".to_string()]);
    }

    #[test]
    fn custom_index_indexes_existing_objects() {
        let s = Indexer::new();
        s.add(obj("a", "x", "web"));
        let f: IndexFunc = Arc::new(|o| o.label("app").map(str::to_string).into_iter().collect());
        s.add_indexers(HashMap::from([("app".to_string(), f.clone())])).unwrap();
        assert_eq!(s.by_index("app", "web").unwrap().len(), 1);
        s.add(obj("a", "x", "db"));
        assert!(s.by_index("app", "web").unwrap().is_empty());
        assert_eq!(s.add_indexers(HashMap::from([("app".to_string(), f)])), Err(IndexError::Conflict("app".into())));
        assert!(matches!(s.by_index("nope", "x"), Err(IndexError::NoSuchIndex(_))));
    }
}
