//! The one store of an embedded cluster: objects of every kind under
//! [`qualified_key`]s, one resourceVersion counter for all of them (as etcd
//! has), and a bounded history of changes from which watches resume.
//!
//! This module owns storing and serving: stamping resourceVersions,
//! recording changes, and [`ClusterView`], the filtered list-and-watch an
//! informer reads (one kind, namespace, label selector). It also stores
//! the files' definitions ([`ClusterStore::put_file`]). It does not decide what a write
//! does to an object (that is [`super::semantics`], driven by
//! [`super::EmbeddedCluster`]) and never touches the files.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::semantics::{self, KindRules};
use crate::informer::{ListResult, ListerWatcher, Object, ObjectRef, SourceError, WatchEvent, WatchStream};
use crate::source::DEFAULT_HISTORY;
use crate::source::manifests::{ManifestFilter, ManifestsSource, qualified_key};

/// The largest object the store keeps, in bytes of JSON: etcd's default
/// request limit (`--max-request-bytes`, 1.5 MiB). A larger one is answered
/// as the API server answers etcd's refusal: `500` "etcdserver: request is
/// too large".
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;
/// The most bytes of JSON the store's objects may hold together, as etcd's
/// backend quota (`--quota-backend-bytes`) bounds a cluster: a write that
/// would grow the store past it fails with etcd's "database space
/// exceeded" (`500`); writes that shrink or delete still succeed. It keeps
/// a controller that creates objects for ever from growing the host.
pub const QUOTA_BYTES: usize = 256 * 1024 * 1024;
/// The most bytes of JSON the change history keeps for resuming watches
/// (besides its count limit): older changes are compacted, and a watch
/// from before them gets `410 Gone` and relists.
pub const HISTORY_BYTES: usize = 64 * 1024 * 1024;

/// A stored object: its JSON (for the write rules and view filters) and
/// the engine's parsed form (what informers receive).
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) value: Arc<Value>,
    pub(super) object: ObjectRef,
}

/// One change, at one resourceVersion.
struct Change {
    rv: u64,
    /// The state before (None: created).
    old: Option<Arc<Value>>,
    /// The state after (None: deleted).
    new: Option<Arc<Value>>,
    /// What watchers receive: the new state, or for a delete the last
    /// state stamped with the deletion's resourceVersion.
    object: ObjectRef,
}

pub(super) struct State {
    objects: BTreeMap<String, Entry>,
    rv: u64,
    history: VecDeque<Change>,
    /// Watches from a resourceVersion below this get `410 Gone`.
    compacted_below: u64,
    history_limit: usize,
    /// Bytes of JSON of the stored objects, at most `quota`.
    bytes: usize,
    quota: usize,
    /// Bytes of JSON of the changes in `history`, kept to at most
    /// `history_bytes_limit` (but always the latest change).
    history_bytes: usize,
    history_bytes_limit: usize,
    /// Numbers uids and generated names.
    counter: u64,
    /// Makes this store's uids differ from another's.
    salt: u64,
}

/// The shared store. See the module docs.
pub struct ClusterStore {
    state: Mutex<State>,
    changed: Notify,
    description: String,
}

/// The key of a stored object's JSON.
pub(super) fn key_of(value: &Value) -> String {
    let s = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = Some(s("/metadata/namespace")).filter(|ns| !ns.is_empty());
    qualified_key(s("/apiVersion"), s("/kind"), ns, s("/metadata/name"))
}

fn stamped(mut value: Value, rv: u64) -> Result<(Arc<Value>, ObjectRef), String> {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    let object = Object::from_value(&value).map_err(|e| e.to_string())?;
    Ok((Arc::new(value), Arc::new(object)))
}

impl State {
    pub(super) fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.objects.get(key).map(|e| e.value.clone())
    }

    /// The stored objects whose JSON satisfies `pred`.
    pub(super) fn find(&self, pred: impl Fn(&Value) -> bool) -> Vec<Arc<Value>> {
        self.objects.values().filter(|e| pred(&e.value)).map(|e| e.value.clone()).collect()
    }

    /// A fresh uid.
    pub(super) fn new_uid(&mut self) -> String {
        self.counter += 1;
        semantics::uid(self.salt, self.counter)
    }

    /// A fresh number (for generated names and Event names).
    pub(super) fn next_number(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Stores `value` under its key at the next resourceVersion (Added or
    /// Modified); returns the stored state.
    pub(super) fn put(&mut self, value: Value) -> Result<Arc<Value>, String> {
        let key = key_of(&value);
        let rv = self.rv + 1;
        let (value, object) = stamped(value, rv)?;
        let size = object.json().len();
        if size > MAX_OBJECT_BYTES {
            return Err("etcdserver: request is too large".into());
        }
        let before = self.objects.get(&key).map_or(0, |e| e.object.json().len());
        if size > before && self.bytes - before + size > self.quota {
            return Err("etcdserver: mvcc: database space exceeded".into());
        }
        self.bytes = self.bytes - before + size;
        self.rv = rv;
        let old = self.objects.insert(key, Entry { value: value.clone(), object: object.clone() }).map(|e| e.value);
        self.record(Change { rv, old, new: Some(value.clone()), object });
        Ok(value)
    }

    /// Removes `key` at the next resourceVersion; returns its last state,
    /// stamped with the deletion's resourceVersion.
    pub(super) fn remove(&mut self, key: &str) -> Option<Arc<Value>> {
        self.remove_as(key, None)
    }

    /// [`State::remove`], with `last` (when given) as the last state
    /// watchers see (the update that removed the last finalizer).
    pub(super) fn remove_as(&mut self, key: &str, last: Option<Value>) -> Option<Arc<Value>> {
        let old = self.objects.remove(key)?;
        self.bytes -= old.object.json().len();
        let rv = self.rv + 1;
        self.rv = rv;
        let (last, object) = match stamped(last.unwrap_or_else(|| Value::clone(&old.value)), rv) {
            Ok(s) => s,
            Err(_) => (old.value.clone(), old.object.clone()),
        };
        self.record(Change { rv, old: Some(old.value), new: None, object });
        Some(last)
    }

    fn record(&mut self, change: Change) {
        self.history_bytes += change.object.json().len();
        self.history.push_back(change);
        while self.history.len() > self.history_limit
            || (self.history_bytes > self.history_bytes_limit && self.history.len() > 1)
        {
            if let Some(c) = self.history.pop_front() {
                self.history_bytes -= c.object.json().len();
                self.compacted_below = c.rv;
            }
        }
    }
}

impl ClusterStore {
    pub fn new(description: impl Into<String>) -> Self {
        let salt = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        ClusterStore {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                compacted_below: 0,
                history_limit: DEFAULT_HISTORY,
                bytes: 0,
                quota: QUOTA_BYTES,
                history_bytes: 0,
                history_bytes_limit: HISTORY_BYTES,
                counter: 0,
                salt: salt.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            }),
            changed: Notify::new(),
            description: description.into(),
        }
    }

    /// Locks the store for one write (read, decide, store), so writes are
    /// atomic; watchers are woken by [`ClusterStore::notify`].
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Wakes watchers after a write.
    pub(super) fn notify(&self) {
        self.changed.notify_waiters();
    }

    /// Keeps at most `limit` changes for resuming watches.
    pub fn set_history_limit(&self, limit: usize) {
        self.state.lock().history_limit = limit.max(1);
    }

    /// Keeps at most `bytes` of changes for resuming watches (default
    /// [`HISTORY_BYTES`]).
    pub fn set_history_bytes(&self, bytes: usize) {
        self.state.lock().history_bytes_limit = bytes;
    }

    /// Lets the objects hold at most `bytes` of JSON together (default
    /// [`QUOTA_BYTES`]).
    pub fn set_quota_bytes(&self, bytes: usize) {
        self.state.lock().quota = bytes;
    }

    /// Bytes of JSON the stored objects hold together.
    pub fn bytes(&self) -> usize {
        self.state.lock().bytes
    }

    /// The stored JSON of the object under `key` ([`qualified_key`]).
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.state.lock().get(key)
    }

    /// Every stored key, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.state.lock().objects.keys().cloned().collect()
    }

    /// The resourceVersion of the latest change.
    pub fn resource_version(&self) -> u64 {
        self.state.lock().rv
    }

    /// A file's definition of `key`, new or changed: stored as the file
    /// says, keeping what the server set before (uid, creationTimestamp,
    /// generation, bumped on a spec change; managed fields) and the stored
    /// status when the file has none.
    pub(super) fn put_file(&self, key: &str, value: &Value) -> Result<(), String> {
        let now = semantics::rfc3339(SystemTime::now());
        let mut st = self.state.lock();
        let mut new = value.clone();
        if let Some(meta) = new["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let api_version = value["apiVersion"].as_str().unwrap_or("").to_string();
        let kind = value["kind"].as_str().unwrap_or("").to_string();
        let old = st.get(key);
        let given_uid = value["metadata"]["uid"].as_str().filter(|u| !u.is_empty());
        let old = match old {
            // A file that gives another uid defines another object.
            Some(o) if given_uid.is_some_and(|u| Some(u) != o["metadata"]["uid"].as_str()) => {
                st.remove(key);
                None
            }
            o => o,
        };
        let new = match old {
            None => {
                let rules = KindRules::of(&api_version, &kind, Some(&new));
                if given_uid.is_none() {
                    new["metadata"]["uid"] = json!(st.new_uid());
                }
                if !new["metadata"]["creationTimestamp"].is_string() {
                    new["metadata"]["creationTimestamp"] = json!(now);
                }
                if rules.generation && new["metadata"]["generation"].as_i64().is_none() {
                    new["metadata"]["generation"] = json!(1);
                }
                new
            }
            Some(old) => {
                let rules = KindRules::of(&api_version, &kind, Some(&old));
                let file_status = new.get("status").cloned();
                let managed = old["metadata"].get("managedFields").cloned();
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                let mut updated =
                    semantics::prepare_update(&old, new, rules, rules.scope(false)).map_err(|e| e.to_string())?;
                if let Some(s) = file_status {
                    updated["status"] = s;
                }
                if let Some(mf) = managed {
                    updated["metadata"]["managedFields"] = mf;
                }
                if semantics::unchanged(&old, &updated) {
                    return Ok(());
                }
                updated
            }
        };
        st.put(new)?;
        drop(st);
        self.notify();
        Ok(())
    }

    fn list_now(&self, filter: &ManifestFilter) -> ListResult {
        let st = self.state.lock();
        let items = st.objects.values().filter(|e| filter.matches(&e.value)).map(|e| e.object.clone()).collect();
        ListResult { items, resource_version: st.rv.to_string() }
    }

    /// The next change after `cursor` that `filter` sees, as its watch
    /// event, and the new cursor; None when there is none yet.
    fn next_event(&self, filter: &ManifestFilter, mut cursor: u64) -> (Option<WatchEvent>, u64) {
        let st = self.state.lock();
        let start = st.history.partition_point(|c| c.rv <= cursor);
        for c in st.history.range(start..) {
            cursor = c.rv;
            let was = c.old.as_ref().is_some_and(|o| filter.matches(o));
            let is = c.new.as_ref().is_some_and(|n| filter.matches(n));
            let ev = match (was, is) {
                (false, true) => WatchEvent::Added(c.object.clone()),
                (true, true) => WatchEvent::Modified(c.object.clone()),
                (true, false) => WatchEvent::Deleted(c.object.clone()),
                (false, false) => continue,
            };
            return (Some(ev), cursor);
        }
        (None, cursor)
    }

    fn watch_now(
        self: &Arc<Self>,
        filter: &ManifestFilter,
        resource_version: &str,
    ) -> Result<WatchStream, SourceError> {
        let from: u64 = resource_version
            .parse()
            .map_err(|_| SourceError::Other(format!("invalid resourceVersion {resource_version:?}")))?;
        {
            let st = self.state.lock();
            if from < st.compacted_below {
                return Err(SourceError::Gone {
                    resource_version: resource_version.to_string(),
                    message: format!("too old resource version: {from} ({})", st.compacted_below),
                });
            }
        }
        let (store, filter) = (self.clone(), filter.clone());
        let stream = futures::stream::unfold(from, move |cursor| {
            let (store, filter) = (store.clone(), filter.clone());
            async move {
                let mut cursor = cursor;
                loop {
                    let notified = store.changed.notified();
                    let (ev, next) = store.next_event(&filter, cursor);
                    cursor = next;
                    if let Some(ev) = ev {
                        return Some((Ok(ev), cursor));
                    }
                    notified.await;
                }
            }
        });
        Ok(Box::pin(stream))
    }
}

/// What one informer reads: the objects of the store that match a filter
/// (apiVersion, kind, namespace, label selector), listed and watched. A
/// change that makes an object match is `Added`, one that makes it stop
/// matching is `Deleted`.
#[derive(Clone)]
pub struct ClusterView {
    pub(super) store: Arc<ClusterStore>,
    pub(super) filter: ManifestFilter,
    /// Keeps the directory watched while an informer reads the view,
    /// whoever else let go of the cluster.
    pub(super) _source: Option<ManifestsSource>,
}

impl ClusterView {
    pub fn filter(&self) -> &ManifestFilter {
        &self.filter
    }
}

impl ListerWatcher for ClusterView {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        let r = self.store.list_now(&self.filter);
        Box::pin(async move { Ok(r) })
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let r = self.store.watch_now(&self.filter, resource_version);
        Box::pin(async move { r })
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.store.description, self.filter)
    }
}
