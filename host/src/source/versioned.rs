//! An in-process, versioned object store that serves list and watch.
//!
//! This module owns what an API server's storage does for the in-process
//! sources (`memory`, `manifests`): it stamps every change with an
//! increasing resourceVersion, keeps a bounded event history so watches can
//! resume from a resourceVersion, answers `410 Gone` for a compacted one,
//! and can end every open watch (a dropped connection).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;

use crate::informer::{
    ListResult, ListerWatcher, Object, ObjectError, ObjectRef, SourceError, WatchEvent, WatchStream,
};

/// Events kept for resuming watches before the oldest are compacted.
pub const DEFAULT_HISTORY: usize = 100_000;

struct State {
    objects: BTreeMap<Box<str>, ObjectRef>,
    rv: u64,
    /// (sequence, resourceVersion, event), oldest first. Bookmarks repeat a
    /// resourceVersion, so watches follow the sequence number.
    history: VecDeque<(u64, u64, WatchEvent)>,
    next_seq: u64,
    /// Watches from a resourceVersion below this get `410 Gone`.
    compacted_below: u64,
    history_limit: usize,
    /// Bumped to end every open watch stream.
    generation: u64,
    /// Errors the next list calls return, in order.
    list_errors: VecDeque<SourceError>,
    /// Errors the next watch calls return, in order.
    watch_errors: VecDeque<SourceError>,
}

/// A versioned store shared by a source and its watches. Cheap to clone.
#[derive(Clone)]
pub struct VersionedStore {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    description: Arc<str>,
}

/// Sets `metadata.resourceVersion` and builds the object.
pub fn stamp(mut value: Value, rv: u64) -> Result<ObjectRef, ObjectError> {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    Ok(Arc::new(Object::from_value(&value)?))
}

impl VersionedStore {
    pub fn new(description: impl Into<String>) -> Self {
        VersionedStore {
            state: Arc::new(Mutex::new(State {
                objects: BTreeMap::new(),
                rv: 0,
                history: VecDeque::new(),
                next_seq: 0,
                compacted_below: 0,
                history_limit: DEFAULT_HISTORY,
                generation: 0,
                list_errors: VecDeque::new(),
                watch_errors: VecDeque::new(),
            })),
            changed: Arc::new(Notify::new()),
            description: description.into().into(),
        }
    }

    /// Keeps at most `limit` events for resuming watches.
    pub fn set_history_limit(&self, limit: usize) {
        self.state.lock().history_limit = limit.max(1);
    }

    /// Creates or replaces the object (Added or Modified); returns its
    /// stamped version.
    pub fn apply(&self, value: Value) -> Result<ObjectRef, ObjectError> {
        let mut st = self.state.lock();
        let rv = st.rv + 1;
        let obj = stamp(value, rv)?;
        st.rv = rv;
        let key: Box<str> = obj.key().into();
        let ev = match st.objects.insert(key, obj.clone()) {
            Some(_) => WatchEvent::Modified(obj.clone()),
            None => WatchEvent::Added(obj.clone()),
        };
        self.record(&mut st, rv, ev);
        Ok(obj)
    }

    /// Deletes the key; the Deleted event carries the last state stamped
    /// with the deletion's resourceVersion.
    pub fn delete(&self, key: &str) -> Option<ObjectRef> {
        let mut st = self.state.lock();
        let old = st.objects.remove(key)?;
        let rv = st.rv + 1;
        st.rv = rv;
        let value: Value = serde_json::from_str(old.json()).ok()?;
        let obj = stamp(value, rv).ok()?;
        self.record(&mut st, rv, WatchEvent::Deleted(obj.clone()));
        Some(obj)
    }

    /// Sends a BOOKMARK at the current resourceVersion to open watches.
    pub fn bookmark(&self) {
        let mut st = self.state.lock();
        let rv = st.rv;
        self.record(&mut st, rv, WatchEvent::Bookmark { resource_version: rv.to_string(), initial_events_end: false });
    }

    fn record(&self, st: &mut State, rv: u64, ev: WatchEvent) {
        let seq = st.next_seq;
        st.next_seq += 1;
        st.history.push_back((seq, rv, ev));
        while st.history.len() > st.history_limit {
            if let Some((_, rv, _)) = st.history.pop_front() {
                st.compacted_below = rv;
            }
        }
        self.changed.notify_waiters();
    }

    /// Forgets the whole event history: watches from any older
    /// resourceVersion get `410 Gone` and the reflector must relist.
    pub fn compact(&self) {
        let mut st = self.state.lock();
        st.history.clear();
        st.compacted_below = st.rv;
        st.generation += 1;
        self.changed.notify_waiters();
    }

    /// Deletes the key while every watch is disconnected, and compacts
    /// history past the deletion: watchers never see the Deleted event, get
    /// `410 Gone` on resuming, and must find the deletion by relisting.
    pub fn delete_while_disconnected(&self, key: &str) -> Option<ObjectRef> {
        let mut st = self.state.lock();
        let old = st.objects.remove(key)?;
        st.rv += 1;
        st.history.clear();
        st.compacted_below = st.rv;
        st.generation += 1;
        self.changed.notify_waiters();
        Some(old)
    }

    /// Ends every open watch stream, as a dropped connection would.
    pub fn drop_watches(&self) {
        self.state.lock().generation += 1;
        self.changed.notify_waiters();
    }

    /// Makes the next list call fail with `e`.
    pub fn fail_next_list(&self, e: SourceError) {
        self.state.lock().list_errors.push_back(e);
    }
    /// Makes the next watch call fail with `e`.
    pub fn fail_next_watch(&self, e: SourceError) {
        self.state.lock().watch_errors.push_back(e);
    }

    pub fn get(&self, key: &str) -> Option<ObjectRef> {
        self.state.lock().objects.get(key).cloned()
    }
    pub fn keys(&self) -> Vec<String> {
        self.state.lock().objects.keys().map(|k| k.to_string()).collect()
    }
    pub fn objects(&self) -> Vec<ObjectRef> {
        self.state.lock().objects.values().cloned().collect()
    }
    pub fn resource_version(&self) -> u64 {
        self.state.lock().rv
    }

    fn list_now(&self) -> Result<ListResult, SourceError> {
        let mut st = self.state.lock();
        if let Some(e) = st.list_errors.pop_front() {
            return Err(e);
        }
        Ok(ListResult { items: st.objects.values().cloned().collect(), resource_version: st.rv.to_string() })
    }

    fn watch_now(&self, resource_version: &str) -> Result<WatchStream, SourceError> {
        let from: u64 = resource_version
            .parse()
            .map_err(|_| SourceError::Other(format!("invalid resourceVersion {resource_version:?}")))?;
        let (generation, first_seq) = {
            let mut st = self.state.lock();
            if let Some(e) = st.watch_errors.pop_front() {
                return Err(e);
            }
            if from < st.compacted_below {
                return Err(SourceError::Gone {
                    resource_version: resource_version.to_string(),
                    message: format!("too old resource version: {from} ({})", st.compacted_below),
                });
            }
            let first = st.history.iter().find(|(_, rv, _)| *rv > from).map_or(st.next_seq, |(seq, _, _)| *seq);
            (st.generation, first)
        };
        let store = self.clone();
        let stream = futures::stream::unfold(first_seq, move |cursor| {
            let store = store.clone();
            async move {
                loop {
                    let notified = store.changed.notified();
                    {
                        let st = store.state.lock();
                        if st.generation != generation {
                            return None;
                        }
                        let start = st.history.partition_point(|(seq, _, _)| *seq < cursor);
                        if let Some((seq, _, ev)) = st.history.get(start) {
                            return Some((Ok(ev.clone()), seq + 1));
                        }
                    }
                    notified.await;
                }
            }
        });
        Ok(Box::pin(stream))
    }
}

impl ListerWatcher for VersionedStore {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        Box::pin(async move { self.list_now() })
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let r = self.watch_now(resource_version);
        Box::pin(async move { r })
    }
    fn describe(&self) -> String {
        self.description.to_string()
    }
}
