//! A listener's own queue, bounded by coalescing per key.
//!
//! client-go's listener buffer is unbounded: one stalled handler grows until
//! the process dies. This module owns the alternative: when the queue holds
//! more than its cap, the pending notifications of each key are merged into
//! one carrying the oldest old state and the newest new state (an add
//! followed by a delete cancels out), so memory stays bounded by the number
//! of distinct keys, the final state still arrives, and per-key order holds.
//! It knows nothing of handlers or the shared log.

use std::collections::{HashMap, VecDeque};

use super::handler::Notification;

/// A FIFO of notifications that coalesces by key above `cap`.
#[derive(Debug)]
pub(crate) struct BoundedQueue {
    queue: VecDeque<Notification>,
    cap: usize,
    /// Coalesce again only once the queue has grown past this, so the cost
    /// stays amortised O(1) per notification even with many distinct keys.
    next_coalesce_at: usize,
    /// Coalescing passes so far (for tests and diagnostics).
    passes: usize,
}

/// What one coalescing pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Coalesced {
    /// Notifications that were merged into another or cancelled.
    pub removed: usize,
    /// Initial-list adds among them (the sync tracker must forget them).
    pub removed_initial: usize,
}

impl BoundedQueue {
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        BoundedQueue { queue: VecDeque::new(), cap, next_coalesce_at: cap, passes: 0 }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Appends `n`, coalescing when the queue is over its cap.
    pub fn push(&mut self, n: Notification) -> Coalesced {
        self.queue.push_back(n);
        if self.queue.len() <= self.next_coalesce_at {
            return Coalesced::default();
        }
        let c = self.coalesce();
        self.next_coalesce_at = self.cap.max(self.queue.len() * 2);
        c
    }

    pub fn pop(&mut self) -> Option<Notification> {
        let n = self.queue.pop_front();
        if self.queue.len() < self.cap {
            self.next_coalesce_at = self.cap;
        }
        n
    }

    /// Puts back notifications popped but not delivered, in front of
    /// everything queued meanwhile, keeping their order.
    pub fn unpop(&mut self, ns: impl DoubleEndedIterator<Item = Notification>) {
        for n in ns.rev() {
            self.queue.push_front(n);
        }
    }

    pub fn clear(&mut self) {
        self.queue = VecDeque::new();
    }

    fn coalesce(&mut self) -> Coalesced {
        let before = self.queue.len();
        let initial_before = self.queue.iter().filter(|n| n.is_initial()).count();
        let mut slots: Vec<Option<Notification>> = Vec::with_capacity(before);
        let mut at: HashMap<String, usize> = HashMap::new();
        for n in self.queue.drain(..) {
            match at.get(n.key()).copied() {
                None => {
                    at.insert(n.key().to_string(), slots.len());
                    slots.push(Some(n));
                }
                Some(i) => {
                    let key = n.key().to_string();
                    let prev = slots[i].take().expect("an indexed slot holds a notification");
                    slots[i] = merge(prev, n);
                    if slots[i].is_none() {
                        // Cancelled: a later notification of the key starts afresh.
                        at.remove(&key);
                    }
                }
            }
        }
        self.passes += 1;
        self.queue = slots.into_iter().flatten().collect();
        let initial_after = self.queue.iter().filter(|n| n.is_initial()).count();
        Coalesced { removed: before - self.queue.len(), removed_initial: initial_before - initial_after }
    }
}

/// Merges two notifications of one key, oldest first; `None` when they
/// cancel out.
fn merge(prev: Notification, next: Notification) -> Option<Notification> {
    use Notification::{Add, Delete, Update};
    Some(match (prev, next) {
        // Created and gone again before the handler looked: nothing happened.
        (Add { .. }, Delete(_)) => return None,
        (Add { is_in_initial_list, .. }, Update { new, .. })
        | (Add { is_in_initial_list, .. }, Add { obj: new, .. }) => Add { obj: new, is_in_initial_list },
        (Update { old, .. }, Update { new, .. }) | (Update { old, .. }, Add { obj: new, .. }) => Update { old, new },
        (Update { .. }, Delete(d)) | (Delete(_), Delete(d)) => Delete(d),
        // Deleted and created again: to the handler, the object changed.
        (Delete(d), Add { obj, .. }) | (Delete(d), Update { new: obj, .. }) => {
            Update { old: d.object().clone(), new: obj }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::informer::{DeletedObject, Object, ObjectRef};

    fn obj(name: &str, rv: u32) -> ObjectRef {
        Arc::new(Object::from_json(format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#)).unwrap())
    }
    fn upd(name: &str, a: u32, b: u32) -> Notification {
        Notification::Update { old: obj(name, a), new: obj(name, b) }
    }
    fn describe(q: &BoundedQueue) -> Vec<String> {
        q.queue
            .iter()
            .map(|n| match n {
                Notification::Add { obj, is_in_initial_list } => {
                    format!("add {} {} {is_in_initial_list}", obj.key(), obj.resource_version().unwrap())
                }
                Notification::Update { old, new } => format!(
                    "update {} {}->{}",
                    new.key(),
                    old.resource_version().unwrap(),
                    new.resource_version().unwrap()
                ),
                Notification::Delete(d) => format!("delete {} {}", d.key(), d.object().resource_version().unwrap()),
            })
            .collect()
    }

    #[test]
    fn below_the_cap_nothing_is_merged() {
        let mut q = BoundedQueue::new(4);
        for i in 0..4 {
            assert_eq!(q.push(upd("a", i, i + 1)), Coalesced::default());
        }
        assert_eq!(q.len(), 4);
    }

    #[test]
    fn over_the_cap_each_key_keeps_oldest_old_and_newest_new_in_first_position() {
        let mut q = BoundedQueue::new(3);
        q.push(upd("a", 1, 2));
        q.push(upd("b", 1, 2));
        q.push(upd("a", 2, 3));
        let c = q.push(upd("b", 2, 5));
        assert_eq!(c, Coalesced { removed: 2, removed_initial: 0 });
        assert_eq!(describe(&q), ["update a 1->3", "update b 1->5"]);
    }

    #[test]
    fn add_then_delete_cancels_and_initial_adds_are_counted() {
        let mut q = BoundedQueue::new(1);
        q.push(Notification::Add { obj: obj("a", 1), is_in_initial_list: true });
        let c = q.push(Notification::Delete(DeletedObject::Object(obj("a", 2))));
        assert_eq!(c, Coalesced { removed: 2, removed_initial: 1 });
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn delete_then_add_becomes_an_update_and_updates_fold_into_an_add() {
        let mut q = BoundedQueue::new(1);
        q.push(Notification::Delete(DeletedObject::Object(obj("a", 2))));
        q.push(Notification::Add { obj: obj("a", 3), is_in_initial_list: false });
        assert_eq!(describe(&q), ["update a 2->3"]);
        let mut q = BoundedQueue::new(1);
        q.push(Notification::Add { obj: obj("b", 1), is_in_initial_list: true });
        q.push(upd("b", 1, 4));
        assert_eq!(describe(&q), ["add b 4 true"]);
    }

    #[test]
    fn many_distinct_keys_stay_amortised() {
        let mut q = BoundedQueue::new(10);
        for i in 0..1000 {
            q.push(upd(&format!("k{i}"), 1, 2));
        }
        assert_eq!(q.len(), 1000, "distinct keys are all kept");
        // Thresholds double: 10, 22, 46, ... — a handful of passes, not 990.
        assert!(q.passes <= 10, "{} coalescing passes", q.passes);
    }
}
