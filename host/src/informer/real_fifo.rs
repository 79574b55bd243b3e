//! client-go's `RealFIFO` (the default FIFO of informers since client-go
//! 1.33): every change the reflector reports, popped one at a time in the
//! order it arrived.
//!
//! This module owns that queue. Unlike [`super::DeltaFifo`] it keeps no
//! per-key list: an object updated twice is popped twice, and a delete is
//! queued even for a key the cache does not know. A relist queues its
//! tombstones (for queued keys whose last change is not a delete, then for
//! cached keys missing from the list and not queued) *before* the listed
//! objects as `Replaced`. A resync queues `Sync` for cached keys with
//! nothing queued. It reads the cache (`known_objects`), never writes it.
//! Not ported: client-go's optional atomic replace and batch pops.

use std::collections::{HashMap, HashSet, VecDeque};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::delta_fifo::{
    Delta, DeltaObject, DeltaType, FifoState, Popped, Population, Queue, TransformFunc, close, pop_waiting,
};
use super::object::{DeletedObject, ObjectRef};
use super::store::Indexer;

#[derive(Default)]
struct State {
    items: VecDeque<Delta>,
    sync: Population,
}

impl FifoState for State {
    fn population(&mut self) -> &mut Population {
        &mut self.sync
    }
    fn pop(&mut self) -> Option<Popped> {
        let is_in_initial_list = self.sync.is_in_initial_list();
        let d = self.items.pop_front()?;
        Some(Popped { key: key_of(&d).into(), deltas: vec![d], is_in_initial_list })
    }
}

/// client-go's `RealFIFO`.
pub struct RealFifo {
    state: Mutex<State>,
    notify: Notify,
    known_objects: Indexer,
    transform: Option<TransformFunc>,
}

fn key_of(d: &Delta) -> &str {
    match &d.object {
        DeltaObject::Object(o) => o.key(),
        DeltaObject::Tombstone(t) => t.key(),
    }
}

impl RealFifo {
    /// A FIFO that consults `known_objects` (the informer's store) on relist
    /// and resync.
    pub fn new(known_objects: Indexer, transform: Option<TransformFunc>) -> Self {
        RealFifo { state: Mutex::new(State::default()), notify: Notify::new(), known_objects, transform }
    }

    fn push(&self, st: &mut State, kind: DeltaType, object: DeltaObject) {
        st.items.push_back(Delta { kind, object });
        self.notify.notify_one();
    }

    fn push_object(&self, kind: DeltaType, obj: ObjectRef) {
        let obj = match &self.transform {
            Some(t) => t(obj),
            None => obj,
        };
        let mut st = self.state.lock();
        st.sync.populated = true;
        self.push(&mut st, kind, DeltaObject::Object(obj));
    }

    /// Queued changes, oldest first (tests and diagnostics).
    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Queue for RealFifo {
    fn add(&self, obj: ObjectRef) {
        self.push_object(DeltaType::Added, obj);
    }

    fn update(&self, obj: ObjectRef) {
        self.push_object(DeltaType::Updated, obj);
    }

    fn delete(&self, obj: ObjectRef) {
        self.push_object(DeltaType::Deleted, obj);
    }

    fn replace(&self, list: Vec<ObjectRef>) {
        let list: Vec<ObjectRef> = match &self.transform {
            Some(t) => list.into_iter().map(|o| t(o)).collect(),
            None => list,
        };
        let mut st = self.state.lock();
        let new_keys: HashSet<&str> = list.iter().map(|o| o.key()).collect();
        // The last queued change of each key, keys in first-queued order.
        let mut order: Vec<Box<str>> = Vec::new();
        let mut last: HashMap<Box<str>, (DeltaType, ObjectRef)> = HashMap::new();
        for d in &st.items {
            let key: Box<str> = key_of(d).into();
            if !last.contains_key(&key) {
                order.push(key.clone());
            }
            last.insert(key, (d.kind, d.object.object().clone()));
        }
        let mut tombstones = Vec::new();
        // Queued keys missing from the list: deleted while disconnected,
        // unless their last queued change already is a delete.
        for key in order {
            if new_keys.contains(&*key) {
                continue;
            }
            let (kind, obj) = last[&key].clone();
            if kind != DeltaType::Deleted {
                tombstones.push(DeletedObject::FinalStateUnknown { key, obj });
            }
        }
        // Cached keys missing from the list and not queued.
        for obj in self.known_objects.list() {
            if new_keys.contains(obj.key()) || last.contains_key(obj.key()) {
                continue;
            }
            tombstones.push(DeletedObject::FinalStateUnknown { key: obj.key().into(), obj });
        }
        for t in tombstones {
            self.push(&mut st, DeltaType::Deleted, DeltaObject::Tombstone(t));
        }
        for obj in list {
            self.push(&mut st, DeltaType::Replaced, DeltaObject::Object(obj));
        }
        let queued = st.items.len();
        st.sync.replaced(queued);
    }

    fn resync(&self) {
        let mut st = self.state.lock();
        let queued: HashSet<Box<str>> = st.items.iter().map(|d| key_of(d).into()).collect();
        for obj in self.known_objects.list() {
            // A queued change is newer than the cache: a resync with the
            // cached state would go back in time.
            if queued.contains(obj.key()) {
                continue;
            }
            self.push(&mut st, DeltaType::Sync, DeltaObject::Object(obj));
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

/// The FIFO an informer runs with.
pub enum Fifo {
    Delta(super::DeltaFifo),
    Real(RealFifo),
}

/// Which FIFO an informer runs with (`fifo` of an `[[informer]]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FifoKind {
    /// client-go's `DeltaFIFO`: changes collected per key, popped key by key.
    #[default]
    Delta,
    /// client-go's `RealFIFO`: every change popped in arrival order.
    Real,
}

impl Fifo {
    pub fn new(kind: FifoKind, known_objects: Indexer, transform: Option<TransformFunc>) -> Fifo {
        match kind {
            FifoKind::Delta => Fifo::Delta(super::DeltaFifo::new(known_objects, transform)),
            FifoKind::Real => Fifo::Real(RealFifo::new(known_objects, transform)),
        }
    }
}

macro_rules! each {
    ($self:ident, $f:ident => $e:expr) => {
        match $self {
            Fifo::Delta($f) => $e,
            Fifo::Real($f) => $e,
        }
    };
}

impl Queue for Fifo {
    fn add(&self, obj: ObjectRef) {
        each!(self, f => f.add(obj))
    }
    fn update(&self, obj: ObjectRef) {
        each!(self, f => f.update(obj))
    }
    fn delete(&self, obj: ObjectRef) {
        each!(self, f => f.delete(obj))
    }
    fn replace(&self, list: Vec<ObjectRef>) {
        each!(self, f => f.replace(list))
    }
    fn resync(&self) {
        each!(self, f => f.resync())
    }
    async fn pop(&self) -> Option<Popped> {
        each!(self, f => f.pop().await)
    }
    fn try_pop(&self) -> Option<Popped> {
        each!(self, f => f.try_pop())
    }
    fn done(&self, popped_was_initial: bool) {
        each!(self, f => f.done(popped_was_initial))
    }
    fn has_synced(&self) -> bool {
        each!(self, f => f.has_synced())
    }
    fn close(&self) {
        each!(self, f => f.close())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::informer::Object;

    fn obj(name: &str, rv: u32) -> ObjectRef {
        Arc::new(Object::from_json(format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#)).unwrap())
    }

    async fn drain(f: &RealFifo) -> Vec<(String, DeltaType, bool)> {
        let mut out = Vec::new();
        while let Some(p) = f.try_pop() {
            assert_eq!(p.deltas.len(), 1, "one change per pop");
            let d = &p.deltas[0];
            out.push((p.key.to_string(), d.kind, d.object.is_tombstone()));
        }
        out
    }

    #[tokio::test]
    async fn test_real_fifo_every_change_is_popped_in_order() {
        let f = RealFifo::new(Indexer::new(), None);
        f.add(obj("a", 1));
        f.update(obj("b", 2));
        f.update(obj("a", 3));
        f.delete(obj("a", 3));
        let got = drain(&f).await;
        let kinds: Vec<_> = got.iter().map(|(k, t, _)| (k.as_str(), *t)).collect();
        assert_eq!(
            kinds,
            [("a", DeltaType::Added), ("b", DeltaType::Updated), ("a", DeltaType::Updated), ("a", DeltaType::Deleted)]
        );
    }

    #[tokio::test]
    async fn test_real_fifo_delete_of_an_unknown_key_is_queued() {
        // DeltaFIFO drops it; RealFIFO passes every change on.
        let f = RealFifo::new(Indexer::new(), None);
        f.delete(obj("ghost", 1));
        assert_eq!(drain(&f).await, [("ghost".to_string(), DeltaType::Deleted, false)]);
    }

    #[tokio::test]
    async fn test_real_fifo_replace_queues_tombstones_before_the_list() {
        let known = Indexer::new();
        known.add(obj("foo", 1));
        known.add(obj("bar", 1));
        known.add(obj("baz", 1));
        let f = RealFifo::new(known, None);
        f.delete(obj("baz", 1));
        f.update(obj("qux", 4));
        f.replace(vec![obj("foo", 2)]);
        let got = drain(&f).await;
        assert_eq!(
            got,
            [
                // Queued before the relist, in order.
                ("baz".to_string(), DeltaType::Deleted, false),
                ("qux".to_string(), DeltaType::Updated, false),
                // qux is queued and missing from the list: a tombstone;
                // baz's last change already is a delete: none.
                ("qux".to_string(), DeltaType::Deleted, true),
                // bar: only the cache knew it.
                ("bar".to_string(), DeltaType::Deleted, true),
                // Then the list.
                ("foo".to_string(), DeltaType::Replaced, false),
            ]
        );
    }

    #[tokio::test]
    async fn test_real_fifo_resync_skips_queued_keys_and_sync_waits_for_processing() {
        let known = Indexer::new();
        known.add(obj("a", 1));
        known.add(obj("b", 1));
        let f = RealFifo::new(known, None);
        assert!(!f.has_synced());
        f.replace(vec![obj("a", 1), obj("b", 1)]);
        for _ in 0..2 {
            let p = f.try_pop().unwrap();
            assert!(p.is_in_initial_list);
            assert!(!f.has_synced(), "synced only once processed");
            f.done(p.is_in_initial_list);
        }
        assert!(f.has_synced());
        f.update(obj("a", 2));
        f.resync();
        let got = drain(&f).await;
        assert_eq!(got, [("a".to_string(), DeltaType::Updated, false), ("b".to_string(), DeltaType::Sync, false)]);
    }
}
