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
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::delta_fifo::Queue;
use super::lister_watcher::{Backoff, ListerWatcher, SourceError, WatchEvent};

/// Called with every list or watch failure (client-go's `WatchErrorHandler`).
pub type WatchErrorHandler = Arc<dyn Fn(&SourceError) + Send + Sync>;

/// A watch that ends this fast with no event counts as a failure.
const SHORT_WATCH: Duration = Duration::from_secs(1);

pub(crate) struct Reflector<Q: Queue> {
    pub name: String,
    pub lw: Arc<dyn ListerWatcher>,
    pub queue: Arc<Q>,
    pub last_sync_resource_version: Arc<Mutex<String>>,
    pub on_error: WatchErrorHandler,
}

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
                    tracing::info!(informer = %self.name, "watch expired, relisting: {e}");
                    None
                }
                Next::Relist(e) => {
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
        (self.on_error)(&e);
        next(e)
    }

    /// A watch failed, but its resourceVersion is still good (connection
    /// refused, `429`): reports it, then waits for the backoff before the
    /// caller watches again from `rv`.
    async fn retry_watch(&self, e: SourceError, rv: &str, backoff: &mut dyn Backoff) {
        (self.on_error)(&e);
        let delay = Self::delay(backoff, &e);
        tracing::warn!(informer = %self.name, ?delay, resource_version = %rv, "watch failed, watching again after backoff: {e}");
        tokio::time::sleep(delay).await;
    }

    async fn list_and_watch(&self, backoff: &mut dyn Backoff) -> Next {
        let list = match self.lw.list().await {
            Ok(l) => l,
            Err(e) => return self.failed(e, Next::ListFailed),
        };
        tracing::debug!(informer = %self.name, items = list.items.len(), rv = %list.resource_version, "listed");
        self.queue.replace(list.items);
        self.set_rv(Some(&list.resource_version));
        loop {
            let rv = self.last_sync_resource_version.lock().clone();
            let mut stream = match self.lw.watch(&rv).await {
                Ok(s) => s,
                Err(e) if e.is_gone() => return self.failed(e, Next::Relist),
                Err(e) if e.is_retriable() => {
                    self.retry_watch(e, &rv, backoff).await;
                    continue;
                }
                Err(e) => return self.failed(e, Next::WatchFailed),
            };
            let started = Instant::now();
            let mut events = 0usize;
            let mut retry = None;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        events += 1;
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
            WatchEvent::Bookmark { resource_version } => self.set_rv(Some(&resource_version)),
        }
    }
}
