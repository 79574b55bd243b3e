//! The contract between the engine and a source of objects.
//!
//! This module owns the `ListerWatcher` trait (client-go's
//! `cache.ListerWatcher`) and the events it yields. Sources (`crate::source`)
//! implement it; the reflector consumes it. It may not know any transport.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::object::ObjectRef;

/// A consistent snapshot: the objects and the resourceVersion to watch from.
#[derive(Debug, Clone, Default)]
pub struct ListResult {
    pub items: Vec<ObjectRef>,
    pub resource_version: String,
}

/// One event of a watch stream, as the API server sends it.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    Added(ObjectRef),
    Modified(ObjectRef),
    /// Carries the last state of the deleted object.
    Deleted(ObjectRef),
    /// The server has sent every event up to `resource_version`.
    Bookmark {
        resource_version: String,
        /// The bookmark annotated `k8s.io/initial-events-end`: a
        /// watch-list's initial state is complete.
        initial_events_end: bool,
    },
}

/// Why a list or watch failed, and so what the reflector does next (as
/// client-go's reflector decides it):
///
/// | failure                    | of a watch                                 | of a list            |
/// |----------------------------|--------------------------------------------|----------------------|
/// | [`SourceError::Gone`]      | relist                                     | back off, list again |
/// | [`SourceError::Retriable`] | back off, watch again from the same rv     | back off, list again |
/// | [`SourceError::Refused`]   | back off, relist                           | back off, list again |
/// | [`SourceError::Other`]     | back off, relist                           | back off, list again |
///
/// `Refused` differs from `Other` only for a watch-list: a server that
/// refuses one does not serve it, and is listed from then on; any other
/// failure of a watch-list lists this time and asks again at the next
/// relist (client-go falls back per attempt).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// `410 Gone`: the resourceVersion is older than the server keeps.
    #[error("resourceVersion {resource_version} is too old (410 Gone): {message}")]
    Gone { resource_version: String, message: String },
    /// The server was not reached (connection refused) or asked the client
    /// to slow down (`429 Too Many Requests`): nothing says the
    /// resourceVersion is no longer valid, so the reflector backs off and
    /// watches again from it, without a relist (client-go's
    /// `isWatchErrorRetriable`). `retry_after` is the server's `Retry-After`,
    /// the least time to wait, when it sent one.
    #[error("{message}")]
    Retriable { message: String, retry_after: Option<Duration> },
    /// The server answered with a client error other than `410` and `429`
    /// (`400`, `403`, `404`, `422`…): it understood the request and will
    /// not serve it as asked.
    #[error("{0}")]
    Refused(String),
    /// Any other failure; the reflector backs off and relists.
    #[error("{0}")]
    Other(String),
}

impl SourceError {
    pub fn other(e: impl std::fmt::Display) -> Self {
        SourceError::Other(e.to_string())
    }
    /// A [`SourceError::Retriable`] failure.
    pub fn retriable(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        SourceError::Retriable { message: message.into(), retry_after }
    }
    pub fn is_gone(&self) -> bool {
        matches!(self, SourceError::Gone { .. })
    }
    /// Whether a watch that failed so is retried from the same
    /// resourceVersion rather than relisting.
    pub fn is_retriable(&self) -> bool {
        matches!(self, SourceError::Retriable { .. })
    }
    /// Whether the server refused the request (see [`SourceError::Refused`]).
    pub fn is_refused(&self) -> bool {
        matches!(self, SourceError::Refused(_))
    }
    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SourceError::Retriable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A running watch. It ends when the server closes it.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, SourceError>>;

/// client-go's `ListerWatcher`: lists the current state, then watches for
/// changes after a resourceVersion.
pub trait ListerWatcher: Send + Sync + 'static {
    /// Lists every object the source selects.
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>>;
    /// Watches for changes after `resource_version`.
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>>;
    /// A watch-list, when the source has one: a watch whose first events
    /// are every current object as `Added`, up to a bookmark with
    /// `initial_events_end`, and then changes. `None` (the default): the
    /// reflector lists.
    fn watch_list(&self) -> Option<BoxFuture<'_, Result<WatchStream, SourceError>>> {
        None
    }
    /// A description for logs, e.g. `v1/ConfigMap in ns`.
    fn describe(&self) -> String;
    /// Delays between failed attempts. The default is client-go's
    /// reflector backoff: 800 ms doubling to 30 s.
    fn backoff(&self) -> Box<dyn Backoff> {
        Box::new(ExponentialBackoff::client_go())
    }
}

/// A source of retry delays that can be reset after success.
pub trait Backoff: Send {
    fn next_delay(&mut self) -> Duration;
    fn reset(&mut self);
}

/// Doubling delays between a floor and a ceiling.
#[derive(Debug, Clone)]
pub struct ExponentialBackoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl ExponentialBackoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        ExponentialBackoff { initial, max, current: initial }
    }
    /// client-go's reflector defaults (800 ms → 30 s, ×2).
    pub fn client_go() -> Self {
        Self::new(Duration::from_millis(800), Duration::from_secs(30))
    }
}

impl Backoff for ExponentialBackoff {
    fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d
    }
    fn reset(&mut self) {
        self.current = self.initial;
    }
}
