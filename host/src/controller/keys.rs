//! Primary keys: what may be queued, and the handle that queues them.
//!
//! This module owns the bounds on what a controller plugin can put into its
//! own workqueue: a key must look like an object key, one call may queue at
//! most [`MAX_ENQUEUES_PER_CALL`] keys, and the `enqueue` import stops
//! adding once the queue holds [`MAX_QUEUED_BY_IMPORT`] keys. Keys the host
//! derives from informers are never refused: they are bounded by the cache.
//! Without these bounds one guest call could grow the host's queue without
//! limit (the queue's memory is the host's, not the guest's).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::workqueue::RateLimitingQueue;

/// Longest key: a namespace (a DNS label, 63 bytes), `/`, a name (a DNS
/// subdomain, 253 bytes).
pub const MAX_KEY_BYTES: usize = 63 + 1 + 253;
/// Most `enqueue` calls in one guest call (`reconcile`, `map`, `init`);
/// the next one traps.
pub const MAX_ENQUEUES_PER_CALL: u32 = 1_000;
/// Queue depth (ready and waiting keys) past which the `enqueue` import
/// drops keys (counted in [`KeyQueue::dropped`]).
pub const MAX_QUEUED_BY_IMPORT: usize = 100_000;

/// Why a key is not a key: `namespace/name` or `name`, each part
/// non-empty, no control characters, at most [`MAX_KEY_BYTES`].
pub fn check_key(key: &str) -> Result<(), String> {
    let shown = || crate::plugin::log_budget::sanitize(key, 80).into_owned();
    if key.len() > MAX_KEY_BYTES {
        return Err(format!("a key of {} bytes (at most {MAX_KEY_BYTES}): {}", key.len(), shown()));
    }
    if key.chars().any(char::is_control) {
        return Err(format!("a key with control characters: {}", shown()));
    }
    let mut parts = key.split('/');
    let ok = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => !name.is_empty(),
        (Some(ns), Some(name), None) => !ns.is_empty() && !name.is_empty() && ns.len() <= 63,
        _ => false,
    };
    if ok { Ok(()) } else { Err(format!("not an object key (namespace/name or name): {:?}", shown())) }
}

/// Queues primary keys into a controller's workqueue; holds it weakly, so
/// a stopped controller's instances queue nothing.
#[derive(Clone, Default)]
pub struct KeyQueue {
    queue: Weak<RateLimitingQueue<String>>,
    dropped: Arc<AtomicU64>,
}

impl KeyQueue {
    pub fn new(queue: &Arc<RateLimitingQueue<String>>) -> Self {
        KeyQueue { queue: Arc::downgrade(queue), dropped: Arc::default() }
    }

    /// Queues a key the host derived (from an informer or a resync).
    pub fn add(&self, key: String, after: Duration) {
        if let Some(q) = self.queue.upgrade() {
            if after.is_zero() { q.add(key) } else { q.add_after(key, after) }
        }
    }

    /// Queues a key a guest asked for, unless the queue is already at
    /// [`MAX_QUEUED_BY_IMPORT`]; answers whether it was queued.
    pub fn add_from_guest(&self, key: String, after: Duration) -> bool {
        let Some(q) = self.queue.upgrade() else { return false };
        if q.len() + q.waiting_len() >= MAX_QUEUED_BY_IMPORT {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if after.is_zero() {
            q.add(key)
        } else {
            q.add_after(key, after)
        }
        true
    }

    /// Keys the `enqueue` import dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_pass() {
        for key in
            ["web", "shop/web", "kube-system/system:controller:x", &format!("{}/{}", "n".repeat(63), "a".repeat(253))]
        {
            assert_eq!(check_key(key), Ok(()), "{key}");
        }
    }

    #[test]
    fn what_cannot_be_a_key_is_refused() {
        for key in
            ["", "/", "a/", "/a", "a/b/c", "a\nb", &"x".repeat(MAX_KEY_BYTES + 1), &format!("{}/a", "n".repeat(64))]
        {
            assert!(check_key(key).is_err(), "{key:?}");
        }
    }
}
