//! client-go's `Reflector`: keeps a queue in step with a `ListerWatcher`.
//!
//! This module owns the list → watch → relist cycle: a relist on `410 Gone`
//! or a failed watch, a re-watch from the last resourceVersion when a watch
//! closes normally, backoff between failures, bookmarks, and the watch
//! error handler. It writes only to the queue and `last_sync_resource_version`.

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

enum Next {
    Relist,
    Backoff,
    Stop,
}

impl<Q: Queue + 'static> Reflector<Q> {
    fn set_rv(&self, rv: Option<&str>) {
        if let Some(rv) = rv.filter(|rv| !rv.is_empty()) {
            let mut last = self.last_sync_resource_version.lock();
            last.clear();
            last.push_str(rv);
        }
    }

    fn failed(&self, e: &SourceError) -> Next {
        (self.on_error)(e);
        if e.is_gone() { Next::Relist } else { Next::Backoff }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut backoff = self.lw.backoff();
        let mut last_relist: Option<Instant> = None;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => Next::Stop,
                n = self.list_and_watch(&mut *backoff) => n,
            };
            match next {
                Next::Stop => return,
                // A `410 Gone` relists at once, unless the previous relist was
                // less than a second ago: then it backs off like any failure,
                // so a server that expires every watch is not hammered with
                // lists (client-go backs off before every relist).
                Next::Relist if last_relist.is_none_or(|t: Instant| t.elapsed() >= SHORT_WATCH) => {
                    last_relist = Some(Instant::now());
                }
                Next::Relist | Next::Backoff => {
                    let delay = backoff.next_delay();
                    tracing::debug!(informer = %self.name, ?delay, "backing off before relist");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    last_relist = Some(Instant::now());
                }
            }
        }
    }

    async fn list_and_watch(&self, backoff: &mut dyn Backoff) -> Next {
        let list = match self.lw.list().await {
            Ok(l) => l,
            Err(e) => {
                (self.on_error)(&e);
                return Next::Backoff;
            }
        };
        tracing::debug!(informer = %self.name, items = list.items.len(), rv = %list.resource_version, "listed");
        self.queue.replace(list.items);
        self.set_rv(Some(&list.resource_version));
        loop {
            let rv = self.last_sync_resource_version.lock().clone();
            let mut stream = match self.lw.watch(&rv).await {
                Ok(s) => s,
                Err(e) => return self.failed(&e),
            };
            let started = Instant::now();
            let mut events = 0usize;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        events += 1;
                        backoff.reset();
                        self.apply(ev);
                        // A stream that is always ready must not hog its thread.
                        tokio::task::coop::consume_budget().await;
                    }
                    Err(e) => return self.failed(&e),
                }
            }
            if events == 0 && started.elapsed() < SHORT_WATCH {
                return self.failed(&SourceError::Other(format!(
                    "very short watch: {}: unexpected watch close - watch lasted less than a second and no items received",
                    self.lw.describe()
                )));
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
