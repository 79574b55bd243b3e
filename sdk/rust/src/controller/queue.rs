//! Asking for more reconciles than the informers cause (the `queue` import).

use std::time::Duration;

use super::bindings::informer_host::plugin::queue as raw;

/// Queues `key` of the controller's primary resource for a reconcile after
/// `after` (rounded up to a millisecond; zero: as soon as a worker is free).
/// A key already queued is reconciled once, at the earliest time asked.
///
/// The host traps the call on a key that is not an object key
/// (`namespace/name` or `name`, at most 317 bytes) and on the 1001st
/// `enqueue` within one `reconcile`; it drops keys while the queue holds
/// 100 000.
pub fn enqueue(key: &str, after: Duration) {
    raw::enqueue(key, super::millis(after));
}
