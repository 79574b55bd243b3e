//! client-go's `DeltaFIFO`: per-key lists of changes, popped key by key.
//!
//! This module owns the queue between the reflector and the informer's
//! process loop: it accumulates deltas per key, collapses duplicate deletes,
//! turns a relist into `Replaced` deltas plus tombstones, and queues `Sync`
//! deltas on resync. It reads the cache (`known_objects`) but never writes
//! it. The [`Queue`] trait keeps the FIFO swappable (client-go 1.33+ has an
//! in-order `RealFIFO`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::object::{DeletedObject, ObjectRef};
use super::store::Indexer;

/// The kind of change a [`Delta`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaType {
    Added,
    Updated,
    Deleted,
    /// The object was seen in a relist.
    Replaced,
    /// A periodic resync of an unchanged object.
    Sync,
}

/// The object a delta carries: an object, or a tombstone for deletes.
#[derive(Debug, Clone)]
pub enum DeltaObject {
    Object(ObjectRef),
    Tombstone(DeletedObject),
}

impl DeltaObject {
    pub fn object(&self) -> &ObjectRef {
        match self {
            DeltaObject::Object(o) => o,
            DeltaObject::Tombstone(t) => t.object(),
        }
    }
    pub(crate) fn is_tombstone(&self) -> bool {
        matches!(self, DeltaObject::Tombstone(DeletedObject::FinalStateUnknown { .. }))
    }
}

/// One change to one object.
#[derive(Debug, Clone)]
pub struct Delta {
    pub kind: DeltaType,
    pub object: DeltaObject,
}

/// All queued changes of one key, oldest first.
pub type Deltas = Vec<Delta>;

/// What a pop hands to the process function.
#[derive(Debug)]
pub struct Popped {
    pub key: Arc<str>,
    pub deltas: Deltas,
    /// True while this pop belongs to the first list (client-go's
    /// `isInInitialList`).
    pub is_in_initial_list: bool,
}

/// A transform applied to every object before it is queued.
pub type TransformFunc = Arc<dyn Fn(ObjectRef) -> ObjectRef + Send + Sync>;

/// The queue the informer pops from. [`DeltaFifo`] is the reference
/// implementation.
pub trait Queue: Send + Sync {
    fn add(&self, obj: ObjectRef);
    fn update(&self, obj: ObjectRef);
    fn delete(&self, obj: ObjectRef);
    fn replace(&self, list: Vec<ObjectRef>);
    fn resync(&self);
    /// Waits for the next key; `None` once closed.
    fn pop(&self) -> impl std::future::Future<Output = Option<Popped>> + Send;
    /// The next key if one is queued, without waiting.
    fn try_pop(&self) -> Option<Popped>;
    /// Marks a popped item processed (so `has_synced` can flip).
    fn done(&self, popped_was_initial: bool);
    fn has_synced(&self) -> bool;
    fn close(&self);
}

/// What both FIFOs keep of their first list (client-go's `populated` and
/// `initialPopulationCount`), and whether the queue is closed.
#[derive(Default)]
pub(crate) struct Population {
    pub populated: bool,
    /// Items of the first replace not yet processed.
    pub initial_population_count: usize,
    pub closed: bool,
}

impl Population {
    pub fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }
    /// Whether what is popped now belongs to the first list.
    pub fn is_in_initial_list(&self) -> bool {
        !self.has_synced()
    }
    /// A replace of `n` items: the first one sets what `has_synced` waits for.
    pub fn replaced(&mut self, n: usize) {
        if !self.populated {
            self.populated = true;
            self.initial_population_count = n;
        }
    }
    /// A popped item was processed.
    pub fn done(&mut self, popped_was_initial: bool) {
        if popped_was_initial && self.initial_population_count > 0 {
            self.initial_population_count -= 1;
        }
    }
}

/// A FIFO's state behind its lock.
pub(crate) trait FifoState: Send {
    fn population(&mut self) -> &mut Population;
    /// The next item, if one is queued.
    fn pop(&mut self) -> Option<Popped>;
}

/// Waits for the next item of `state`; `None` once closed and empty.
pub(crate) async fn pop_waiting<S: FifoState>(state: &Mutex<S>, notify: &Notify) -> Option<Popped> {
    loop {
        let notified = notify.notified();
        {
            let mut st = state.lock();
            if let Some(p) = st.pop() {
                return Some(p);
            }
            if st.population().closed {
                return None;
            }
        }
        notified.await;
    }
}

/// Closes `state` and wakes every waiting pop.
pub(crate) fn close(state: &Mutex<impl FifoState>, notify: &Notify) {
    state.lock().population().closed = true;
    notify.notify_waiters();
    notify.notify_one();
}

#[derive(Default)]
struct State {
    items: HashMap<Arc<str>, Deltas>,
    queue: VecDeque<Arc<str>>,
    sync: Population,
}

impl FifoState for State {
    fn population(&mut self) -> &mut Population {
        &mut self.sync
    }
    fn pop(&mut self) -> Option<Popped> {
        while let Some(key) = self.queue.pop_front() {
            let is_in_initial_list = self.sync.is_in_initial_list();
            if let Some(deltas) = self.items.remove(&key) {
                return Some(Popped { key, deltas, is_in_initial_list });
            }
            if self.sync.initial_population_count > 0 {
                self.sync.initial_population_count -= 1;
            }
        }
        None
    }
}

/// client-go's `DeltaFIFO` with `EmitDeltaTypeReplaced: true`.
pub struct DeltaFifo {
    state: Mutex<State>,
    notify: Notify,
    known_objects: Indexer,
    transform: Option<TransformFunc>,
}

impl DeltaFifo {
    /// A FIFO that consults `known_objects` (the informer's store) on relist
    /// and resync.
    pub fn new(known_objects: Indexer, transform: Option<TransformFunc>) -> Self {
        DeltaFifo { state: Mutex::new(State::default()), notify: Notify::new(), known_objects, transform }
    }

    fn transformed(&self, obj: ObjectRef) -> ObjectRef {
        match &self.transform {
            Some(t) => t(obj),
            None => obj,
        }
    }

    fn queue_action(&self, st: &mut State, kind: DeltaType, object: DeltaObject) {
        let key = match &object {
            DeltaObject::Object(o) => o.key(),
            DeltaObject::Tombstone(t) => t.key(),
        };
        if let Some(deltas) = st.items.get_mut(key) {
            deltas.push(Delta { kind, object });
            dedup_deltas(deltas);
            return;
        }
        // A key's first delta: it joins the end of the queue (and wakes a
        // waiting pop; later deltas of a queued key cannot be waited for).
        let key: Arc<str> = key.into();
        st.items.insert(key.clone(), vec![Delta { kind, object }]);
        st.queue.push_back(key);
        self.notify.notify_one();
    }

    /// Keys with queued deltas, for tests and diagnostics.
    pub fn list_keys(&self) -> Vec<String> {
        self.state.lock().queue.iter().map(|k| k.to_string()).collect()
    }

    /// The queued deltas of one key.
    pub fn get(&self, key: &str) -> Option<Deltas> {
        self.state.lock().items.get(key).cloned()
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Two consecutive deletes collapse into one, keeping the one that is not a
/// tombstone (client-go's `isDeletionDup`).
fn dedup_deltas(deltas: &mut Deltas) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    let (a, b) = (&deltas[n - 2], &deltas[n - 1]);
    if a.kind == DeltaType::Deleted && b.kind == DeltaType::Deleted {
        let keep = if b.object.is_tombstone() { a.clone() } else { b.clone() };
        deltas.truncate(n - 2);
        deltas.push(keep);
    }
}

impl Queue for DeltaFifo {
    fn add(&self, obj: ObjectRef) {
        let obj = self.transformed(obj);
        let mut st = self.state.lock();
        st.sync.populated = true;
        self.queue_action(&mut st, DeltaType::Added, DeltaObject::Object(obj));
    }

    fn update(&self, obj: ObjectRef) {
        let obj = self.transformed(obj);
        let mut st = self.state.lock();
        st.sync.populated = true;
        self.queue_action(&mut st, DeltaType::Updated, DeltaObject::Object(obj));
    }

    fn delete(&self, obj: ObjectRef) {
        let mut st = self.state.lock();
        st.sync.populated = true;
        // A delete of a key that is neither cached nor queued was already
        // reported (presumably by a relist): do not report it twice. Like
        // client-go, this is decided before the transform runs.
        if !self.known_objects.contains(obj.key()) && !st.items.contains_key(obj.key()) {
            return;
        }
        let obj = self.transformed(obj);
        self.queue_action(&mut st, DeltaType::Deleted, DeltaObject::Object(obj));
    }

    fn replace(&self, list: Vec<ObjectRef>) {
        let mut st = self.state.lock();
        let mut keys: HashSet<Box<str>> = HashSet::with_capacity(list.len());
        for obj in list {
            let obj = self.transformed(obj);
            keys.insert(obj.key().into());
            self.queue_action(&mut st, DeltaType::Replaced, DeltaObject::Object(obj));
        }
        // Queued keys missing from the new list: deleted while disconnected.
        let queued_missing: Vec<(Box<str>, ObjectRef)> = st
            .items
            .iter()
            .filter(|(k, _)| !keys.contains(&***k))
            .filter_map(|(k, d)| d.last().map(|d| (Box::from(&**k), d.object.object().clone())))
            .collect();
        let mut queued_deletions = 0;
        for (key, obj) in queued_missing {
            queued_deletions += 1;
            let t = DeletedObject::FinalStateUnknown { key, obj };
            self.queue_action(&mut st, DeltaType::Deleted, DeltaObject::Tombstone(t));
        }
        // Cached keys missing from the new list and not queued.
        for obj in self.known_objects.list() {
            let key = obj.key();
            if keys.contains(key) || st.items.get(key).is_some_and(|d| !d.is_empty()) {
                continue;
            }
            queued_deletions += 1;
            let t = DeletedObject::FinalStateUnknown { key: key.into(), obj };
            self.queue_action(&mut st, DeltaType::Deleted, DeltaObject::Tombstone(t));
        }
        st.sync.replaced(keys.len() + queued_deletions);
    }

    fn resync(&self) {
        let mut st = self.state.lock();
        for obj in self.known_objects.list() {
            // A queued delta would be newer than the cache: resyncing with the
            // cached state would go back in time.
            if st.items.get(obj.key()).is_some_and(|d| !d.is_empty()) {
                continue;
            }
            self.queue_action(&mut st, DeltaType::Sync, DeltaObject::Object(obj));
        }
    }

    async fn pop(&self) -> Option<Popped> {
        pop_waiting(&self.state, &self.notify).await
    }

    fn try_pop(&self) -> Option<Popped> {
        self.state.lock().pop()
    }

    fn done(&self, popped_was_initial: bool) {
        self.state.lock().sync.done(popped_was_initial);
    }

    fn has_synced(&self) -> bool {
        self.state.lock().sync.has_synced()
    }

    fn close(&self) {
        close(&self.state, &self.notify);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::Object;

    fn obj(name: &str, rv: u32) -> ObjectRef {
        Arc::new(Object::from_json(format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#)).unwrap())
    }

    fn kinds(d: &Deltas) -> Vec<DeltaType> {
        d.iter().map(|d| d.kind).collect()
    }

    #[tokio::test]
    async fn test_delta_fifo_replace_makes_deletions() {
        let known = Indexer::new();
        known.add(obj("foo", 1));
        known.add(obj("bar", 1));
        known.add(obj("baz", 1));
        let f = DeltaFifo::new(known, None);
        f.delete(obj("baz", 1));
        f.replace(vec![obj("foo", 2)]);
        let mut got = HashMap::new();
        for _ in 0..3 {
            let p = f.pop().await.unwrap();
            got.insert(p.key.to_string(), p.deltas);
        }
        assert_eq!(kinds(&got["foo"]), vec![DeltaType::Replaced]);
        // baz: the explicit delete, then the relist's tombstone collapses into it.
        assert_eq!(kinds(&got["baz"]), vec![DeltaType::Deleted]);
        assert!(!got["baz"][0].object.is_tombstone());
        // bar: only the cache knew it, so it gets a tombstone with its last state.
        assert_eq!(kinds(&got["bar"]), vec![DeltaType::Deleted]);
        match &got["bar"][0].object {
            DeltaObject::Tombstone(DeletedObject::FinalStateUnknown { key, obj }) => {
                assert_eq!(&**key, "bar");
                assert_eq!(obj.resource_version(), Some("1"));
            }
            other => panic!("expected tombstone, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn test_delta_fifo_resync_skips_queued_keys() {
        let known = Indexer::new();
        known.add(obj("a", 1));
        known.add(obj("b", 1));
        let f = DeltaFifo::new(known, None);
        f.update(obj("a", 2));
        f.resync();
        let mut got = HashMap::new();
        for _ in 0..2 {
            let p = f.pop().await.unwrap();
            got.insert(p.key.to_string(), p.deltas);
        }
        assert_eq!(kinds(&got["a"]), vec![DeltaType::Updated]);
        assert_eq!(kinds(&got["b"]), vec![DeltaType::Sync]);
        assert!(f.is_empty());
    }

    #[tokio::test]
    async fn test_delta_fifo_delete_of_non_existing_key_is_dropped() {
        let f = DeltaFifo::new(Indexer::new(), None);
        f.delete(obj("ghost", 1));
        assert!(f.is_empty());
    }

    #[tokio::test]
    async fn test_delta_fifo_dedups_consecutive_deletes() {
        let known = Indexer::new();
        known.add(obj("a", 1));
        let f = DeltaFifo::new(known, None);
        f.delete(obj("a", 1));
        f.delete(obj("a", 1));
        let p = f.pop().await.unwrap();
        assert_eq!(kinds(&p.deltas), vec![DeltaType::Deleted]);
    }

    #[tokio::test]
    async fn initial_list_pops_are_marked_and_sync_waits_for_processing() {
        let f = DeltaFifo::new(Indexer::new(), None);
        assert!(!f.has_synced());
        f.replace(vec![obj("a", 1), obj("b", 1)]);
        let p = f.pop().await.unwrap();
        assert!(p.is_in_initial_list);
        f.done(p.is_in_initial_list);
        assert!(!f.has_synced());
        let p = f.pop().await.unwrap();
        assert!(p.is_in_initial_list);
        f.done(p.is_in_initial_list);
        assert!(f.has_synced());
        f.add(obj("c", 2));
        assert!(!f.pop().await.unwrap().is_in_initial_list);
    }

    #[tokio::test]
    async fn close_unblocks_a_waiting_pop() {
        let f = Arc::new(DeltaFifo::new(Indexer::new(), None));
        let f2 = f.clone();
        let waiter = tokio::spawn(async move { f2.pop().await.is_none() });
        tokio::task::yield_now().await;
        f.close();
        assert!(waiter.await.unwrap());
    }
}
