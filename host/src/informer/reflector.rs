//! client-go's `Reflector`: keeps a queue in step with a `ListerWatcher`.
//!
//! This module owns the list → watch → relist cycle, deciding as client-go's
//! reflector does (`ListAndWatch`, `watch`, `isWatchErrorRetriable`):
//!
//! - a watch that cannot be opened because the server refused the
//!   connection, or answered `429 Too Many Requests`, is opened again from
//!   the last resourceVersion after a backoff (at least the server's
//!   `Retry-After`): no list, so handlers see nothing again after a short
//!   outage ([`SourceError::Retriable`]);
//! - a watch stream that ends normally is opened again from the last
//!   resourceVersion at once; one that ends within a second without an
//!   event counts as a failure ("very short watch");
//! - a `429` on a running watch backs off and watches again;
//! - `410 Gone` (or `Expired`), at the start of a watch or on a running
//!   one, relists: at once the first time, after the backoff when the
//!   previous relist was less than a second ago;
//! - any other failure of a watch backs off and relists; a failed list
//!   backs off and lists again.
//!
//! One backoff (800 ms doubling to 30 s by default, reset by every event)
//! paces all of it. Every failure reaches the watch error handler and is
//! logged once, naming the informer, the cause and what happens next; a
//! watch that simply ends and is resumed is logged at `debug`. The reflector
//! writes only to the queue and `last_sync_resource_version`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::delta_fifo::Queue;
use super::lister_watcher::{Backoff, ListResult, ListerWatcher, SourceError, WatchEvent, WatchStream};
use super::object::ObjectRef;

/// Called with every list or watch failure (client-go's `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&SourceError) + Send + Sync>;

/// A watch that ends this fast with no event counts as a failure.
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// What a reflector did: client-go's reflector metrics (lists, watches,
/// items per list, list duration, last event) and why it relisted. Read by
/// `/metrics` and `/readyz`; written only by the reflector.
#[derive(Debug)]
pub struct ReflectorStats {
    /// Lists started (the first one and every relist).
    pub lists: AtomicU64,
    pub list_failures: AtomicU64,
    /// Items in the last successful list.
    pub last_list_items: AtomicU64,
    /// Sum of the durations of successful lists, in microseconds.
    pub list_micros: AtomicU64,
    /// Watches opened.
    pub watches: AtomicU64,
    /// Watches opened again from the last resourceVersion after a refused
    /// connection or a `429`, without a list.
    pub watch_retries: AtomicU64,
    /// Relists after `410 Gone`/`Expired`.
    pub relists_gone: AtomicU64,
    /// Relists after another watch failure (including a very short watch).
    pub relists_watch_failed: AtomicU64,
    /// Watch events applied.
    pub events: AtomicU64,
    /// When the last watch event or list arrived, in milliseconds since
    /// `base` (0: never).
    last_event_ms: AtomicU64,
    base: std::time::Instant,
    /// The last failure, until a list succeeds: why an informer is not
    /// synced.
    last_error: Mutex<Option<String>>,
}

impl Default for ReflectorStats {
    fn default() -> Self {
        ReflectorStats {
            lists: AtomicU64::new(0),
            list_failures: AtomicU64::new(0),
            last_list_items: AtomicU64::new(0),
            list_micros: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            watch_retries: AtomicU64::new(0),
            relists_gone: AtomicU64::new(0),
            relists_watch_failed: AtomicU64::new(0),
            events: AtomicU64::new(0),
            last_event_ms: AtomicU64::new(0),
            base: std::time::Instant::now(),
            last_error: Mutex::new(None),
        }
    }
}

impl ReflectorStats {
    /// Seconds since the last watch event or list; `None` before any.
    pub fn seconds_since_last_event(&self) -> Option<f64> {
        let at = self.last_event_ms.load(Ordering::Relaxed);
        (at > 0).then(|| (self.base.elapsed().as_millis() as u64).saturating_sub(at) as f64 / 1000.0)
    }

    /// The last list or watch failure, until a list succeeds.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    fn saw_event(&self) {
        // At least 1: 0 means never.
        let now = (self.base.elapsed().as_millis() as u64).max(1);
        self.last_event_ms.store(now, Ordering::Relaxed);
    }
}

pub(crate) struct Reflector<Q: Queue> {
    pub name: String,
    pub lw: Arc<dyn ListerWatcher>,
    pub queue: Arc<Q>,
    pub last_sync_resource_version: Arc<Mutex<String>>,
    pub on_error: WatchErrorHandler,
    pub stats: Arc<ReflectorStats>,
    /// Set once the server refused the source's watch-list (or ended it
    /// before its initial state [`WATCH_LIST_ENDED_EARLY`] times in a row):
    /// it lists from then on.
    pub watch_list_failed: std::sync::atomic::AtomicBool,
    /// Watch-lists in a row whose stream ended before the initial-events-end
    /// bookmark.
    pub watch_list_ended_early: std::sync::atomic::AtomicU32,
}

/// How many watch-lists in a row may end before their initial state before
/// the reflector stops asking. One is a dropped connection (an API server
/// restarting, a load balancer's idle timeout): the next relist asks again,
/// as client-go does. Several are a server that ignores `sendInitialEvents`
/// (older than 1.27), which streams no bookmark and ends the watch only at
/// its timeout, minutes on, every time.
pub const WATCH_LIST_ENDED_EARLY: u32 = 3;

/// What `list_and_watch` ended with, and why.
enum Next {
    /// The watch failed with `410 Gone`: list again.
    Relist(SourceError),
    /// The list failed: back off, then list again.
    ListFailed(SourceError),
    /// The watch failed otherwise: back off, then relist.
    WatchFailed(SourceError),
}

impl<Q: Queue + 'static> Reflector<Q> {
    fn set_rv(&self, rv: Option<&str>) {
        if let Some(rv) = rv.filter(|rv| !rv.is_empty()) {
            let mut last = self.last_sync_resource_version.lock();
            last.clear();
            last.push_str(rv);
        }
    }

    /// The backoff delay before the next attempt after `e`: the next step of
    /// the backoff, or the server's `Retry-After` if that is longer.
    fn delay(backoff: &mut dyn Backoff, e: &SourceError) -> Duration {
        let delay = backoff.next_delay();
        e.retry_after().map_or(delay, |at_least| delay.max(at_least))
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut backoff = self.lw.backoff();
        let mut last_relist: Option<Instant> = None;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                n = self.list_and_watch(&mut *backoff) => n,
            };
            let delay = match &next {
                // A `410 Gone` relists at once, unless the previous relist was
                // less than a second ago: then it backs off like any failure,
                // so a server that expires every watch is not hammered with
                // lists (client-go backs off before every relist).
                Next::Relist(e) if last_relist.is_none_or(|t: Instant| t.elapsed() >= SHORT_WATCH) => {
                    self.stats.relists_gone.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(informer = %self.name, "watch expired, relisting: {e}");
                    None
                }
                Next::Relist(e) => {
                    self.stats.relists_gone.fetch_add(1, Ordering::Relaxed);
                    let delay = Self::delay(&mut *backoff, e);
                    tracing::info!(informer = %self.name, ?delay, "watch expired again, relisting after backoff: {e}");
                    Some(delay)
                }
                Next::ListFailed(e) => {
                    let delay = Self::delay(&mut *backoff, e);
                    tracing::warn!(informer = %self.name, ?delay, "list failed, listing again after backoff: {e}");
                    Some(delay)
                }
                Next::WatchFailed(e) => {
                    self.stats.relists_watch_failed.fetch_add(1, Ordering::Relaxed);
                    let delay = Self::delay(&mut *backoff, e);
                    tracing::warn!(informer = %self.name, ?delay, "watch failed, relisting after backoff: {e}");
                    Some(delay)
                }
            };
            if let Some(delay) = delay {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            last_relist = Some(Instant::now());
        }
    }

    /// Reports a failure to the watch error handler and passes it on.
    fn failed(&self, e: SourceError, next: fn(SourceError) -> Next) -> Next {
        *self.stats.last_error.lock() = Some(e.to_string());
        (self.on_error)(&e);
        next(e)
    }

    /// A watch failed, but its resourceVersion is still good (connection
    /// refused, `429`): reports it, then waits for the backoff before the
    /// caller watches again from `rv`.
    async fn retry_watch(&self, e: SourceError, rv: &str, backoff: &mut dyn Backoff) {
        self.stats.watch_retries.fetch_add(1, Ordering::Relaxed);
        *self.stats.last_error.lock() = Some(e.to_string());
        (self.on_error)(&e);
        let delay = Self::delay(backoff, &e);
        tracing::warn!(informer = %self.name, ?delay, resource_version = %rv, "watch failed, watching again after backoff: {e}");
        tokio::time::sleep(delay).await;
    }

    /// The initial state through the source's watch-list: the objects up
    /// to the initial-events-end bookmark, its resourceVersion, and the
    /// stream, which goes on with changes. `None` when the source has no
    /// watch-list or it failed (then the caller lists; client-go: "making
    /// progress is better than deadlocking").
    async fn watch_list(&self) -> Option<(ListResult, WatchStream)> {
        if self.watch_list_failed.load(Ordering::Relaxed) {
            return None;
        }
        let opened = self.lw.watch_list()?.await;
        let failed = |e: &dyn std::fmt::Display, refused: bool| {
            if refused {
                // Refused by the server (a 4xx: no watch-list there, or not
                // for this client): lists from now on, as every relist's
                // attempt would be refused again.
                self.watch_list_failed.store(true, Ordering::Relaxed);
                tracing::warn!(informer = %self.name, "watch-list refused, listing instead from now on: {e}");
            } else {
                // A connection refused, a 429, a 5xx, a dropped stream:
                // this attempt lists; the next relist tries watch-list
                // again (client-go's `fallbackToList` is per attempt).
                tracing::info!(informer = %self.name, "watch-list failed, listing instead this time: {e}");
            }
            None
        };
        let mut stream = match opened {
            Ok(s) => s,
            Err(e) => return failed(&e, e.is_refused()),
        };
        // Keyed, in arrival order: an object changed before the end is
        // listed once, in its latest state.
        let mut order: Vec<ObjectRef> = Vec::new();
        let mut at: std::collections::HashMap<Box<str>, usize> = std::collections::HashMap::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => match at.get(o.key()) {
                    Some(&i) => order[i] = o,
                    None => {
                        at.insert(o.key().into(), order.len());
                        order.push(o);
                    }
                },
                Ok(WatchEvent::Deleted(o)) => {
                    if let Some(i) = at.remove(o.key()) {
                        order.remove(i);
                        at.values_mut().filter(|j| **j > i).for_each(|j| *j -= 1);
                    }
                }
                Ok(WatchEvent::Bookmark { resource_version, initial_events_end: true }) => {
                    self.watch_list_ended_early.store(0, Ordering::Relaxed);
                    return Some((ListResult { items: order, resource_version }, stream));
                }
                Ok(WatchEvent::Bookmark { .. }) => {}
                Err(e) => return failed(&e, e.is_refused()),
            }
            tokio::task::coop::consume_budget().await;
        }
        let in_a_row = self.watch_list_ended_early.fetch_add(1, Ordering::Relaxed) + 1;
        failed(
            &format_args!("the stream ended before the initial-events-end bookmark ({in_a_row} in a row)"),
            in_a_row >= WATCH_LIST_ENDED_EARLY,
        )
    }

    async fn list_and_watch(&self, backoff: &mut dyn Backoff) -> Next {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let listing = std::time::Instant::now();
        let (list, mut streamed) = match self.watch_list().await {
            Some((list, stream)) => (list, Some(stream)),
            None => match self.lw.list().await {
                Ok(l) => (l, None),
                Err(e) => {
                    self.stats.list_failures.fetch_add(1, Ordering::Relaxed);
                    return self.failed(e, Next::ListFailed);
                }
            },
        };
        self.stats.list_micros.fetch_add(listing.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.stats.last_list_items.store(list.items.len() as u64, Ordering::Relaxed);
        self.stats.saw_event();
        *self.stats.last_error.lock() = None;
        tracing::debug!(informer = %self.name, items = list.items.len(), rv = %list.resource_version, "listed");
        self.queue.replace(list.items);
        self.set_rv(Some(&list.resource_version));
        loop {
            let rv = self.last_sync_resource_version.lock().clone();
            let opened = match streamed.take() {
                // The watch-list's stream goes on with changes.
                Some(s) => Ok(s),
                None => self.lw.watch(&rv).await,
            };
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) if e.is_gone() => return self.failed(e, Next::Relist),
                Err(e) if e.is_retriable() => {
                    self.retry_watch(e, &rv, backoff).await;
                    continue;
                }
                Err(e) => return self.failed(e, Next::WatchFailed),
            };
            self.stats.watches.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            let mut events = 0usize;
            let mut retry = None;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        events += 1;
                        self.stats.events.fetch_add(1, Ordering::Relaxed);
                        self.stats.saw_event();
                        backoff.reset();
                        self.apply(ev);
                        // A stream that is always ready must not hog its thread.
                        tokio::task::coop::consume_budget().await;
                    }
                    Err(e) if e.is_gone() => return self.failed(e, Next::Relist),
                    Err(e) if e.is_retriable() => {
                        retry = Some(e);
                        break;
                    }
                    Err(e) => return self.failed(e, Next::WatchFailed),
                }
            }
            drop(stream);
            if let Some(e) = retry {
                let rv = self.last_sync_resource_version.lock().clone();
                self.retry_watch(e, &rv, backoff).await;
                continue;
            }
            if events == 0 && started.elapsed() < SHORT_WATCH {
                return self.failed(
                    SourceError::Other(format!(
                        "very short watch: {}: unexpected watch close - watch lasted less than a second and no items received",
                        self.lw.describe()
                    )),
                    Next::WatchFailed,
                );
            }
            tracing::debug!(informer = %self.name, events, "watch closed, watching again");
        }
    }

    fn apply(&self, ev: WatchEvent) {
        match ev {
            WatchEvent::Added(o) => {
                self.set_rv(o.resource_version());
                self.queue.add(o);
            }
            WatchEvent::Modified(o) => {
                self.set_rv(o.resource_version());
                self.queue.update(o);
            }
            WatchEvent::Deleted(o) => {
                self.set_rv(o.resource_version());
                self.queue.delete(o);
            }
            WatchEvent::Bookmark { resource_version, .. } => self.set_rv(Some(&resource_version)),
        }
    }
}
