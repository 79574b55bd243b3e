//! Watches: the request (a watch from a resourceVersion, or the
//! watch-list), and the response read line by line into events.

use std::pin::Pin;
use std::sync::Arc;

use ::kube::api::{WatchEvent as KubeEvent, WatchParams};
use ::kube::client::Body;
use ::kube::core::Status;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::HeaderValue;
use http::header::ACCEPT_ENCODING;
use http_body_util::BodyExt;
use serde_json::value::RawValue;

use super::errors::{chain, is_probable_eof, is_timeout};
use super::{INITIAL_EVENTS_END, KubeSource, Meta};
use crate::informer::{SourceError, WatchEvent, WatchStream};

impl KubeSource {
    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            timeout: self.options.watch_timeout,
            bookmarks: self.options.bookmarks,
            send_initial_events: false,
        }
    }

    pub(super) async fn watch_from(&self, resource_version: String) -> Result<WatchStream, SourceError> {
        self.open_watch(self.watch_params(), resource_version).await
    }

    /// The watch-list: every current object as `ADDED`, then the bookmark
    /// annotated `k8s.io/initial-events-end`, then changes (kube's
    /// `WatchParams::streaming_lists`: `resourceVersionMatch=NotOlderThan`
    /// from the most recent state, bookmarks on).
    pub(super) async fn watch_list_stream(&self) -> Result<WatchStream, SourceError> {
        let wp = WatchParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            timeout: self.options.watch_timeout,
            ..WatchParams::streaming_lists()
        };
        self.open_watch(wp, String::new()).await
    }

    async fn open_watch(&self, wp: WatchParams, resource_version: String) -> Result<WatchStream, SourceError> {
        let resolved = self.resolve().await?;
        let (request, meta) = (&resolved.request, &resolved.meta);
        let mut req = request.watch(&wp, &resource_version).map_err(|e| meta.other("watch", e))?;
        // As kube's `request_events`: a watch stream is never compressed.
        req.headers_mut().entry(ACCEPT_ENCODING).or_insert(HeaderValue::from_static("identity"));
        let res = self.client.send(req.map(Body::from)).await.map_err(|e| meta.error("watch", &resource_version, e))?;
        if !res.status().is_success() {
            return Err(meta.response_error("watch", &resource_version, res).await);
        }
        let state = WatchState {
            body: Box::pin(res.into_body().into_data_stream()),
            buf: BytesMut::new(),
            scanned: 0,
            ended: false,
            meta: meta.clone(),
            resource_version,
        };
        Ok(futures::stream::unfold(state, WatchState::next).boxed())
    }
}

/// A watch response being read: newline-delimited JSON events, as kube's
/// `request_events` decodes them, read here so that the reflector, not the
/// client, decides what a dropped connection means and how it is logged.
struct WatchState {
    body: Pin<Box<dyn futures::Stream<Item = Result<Bytes, ::kube::Error>> + Send>>,
    buf: BytesMut,
    /// Bytes of `buf` known to hold no newline.
    scanned: usize,
    /// The stream has ended (cleanly, dropped, or after an error).
    ended: bool,
    meta: Arc<Meta>,
    resource_version: String,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(self.scanned + i + 1);
                self.scanned = 0;
                match self.decode(&line[..line.len() - 1]) {
                    Some(item) => return self.emit(item),
                    None => continue,
                }
            }
            self.scanned = self.buf.len();
            if self.ended {
                // A last line without a newline, then the end.
                let rest = std::mem::take(&mut self.buf);
                self.scanned = 0;
                let item = self.decode(&rest)?;
                return self.emit(item);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                None => self.ended = true,
                Some(Err(e)) if is_probable_eof(&e) || is_timeout(&e) => {
                    // client-go's StreamWatcher ends the watch on these
                    // (`IsProbableEOF || IsTimeout`); the reflector resumes
                    // from the last resourceVersion.
                    tracing::debug!(source = %self.meta.describe, "watch connection ended: {}", chain(&e));
                    self.ended = true;
                    self.buf.clear();
                }
                Some(Err(e)) => {
                    self.ended = true;
                    self.buf.clear();
                    let e = self.meta.other("watch", e);
                    return self.emit(Err(e));
                }
            }
        }
    }

    /// An error ends the stream after it is delivered.
    fn emit(mut self, item: Result<WatchEvent, SourceError>) -> Option<(Result<WatchEvent, SourceError>, Self)> {
        if item.is_err() {
            self.ended = true;
            self.buf.clear();
        }
        Some((item, self))
    }

    /// One line: an event, an error, or `None` for a blank line.
    fn decode(&self, line: &[u8]) -> Option<Result<WatchEvent, SourceError>> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let (meta, rv) = (&self.meta, self.resource_version.as_str());
        Some(match serde_json::from_slice::<KubeEvent<Box<RawValue>>>(line) {
            Ok(KubeEvent::Added(raw)) => meta.object(raw).map(WatchEvent::Added),
            Ok(KubeEvent::Modified(raw)) => meta.object(raw).map(WatchEvent::Modified),
            Ok(KubeEvent::Deleted(raw)) => meta.object(raw).map(WatchEvent::Deleted),
            Ok(KubeEvent::Bookmark(b)) => Ok(WatchEvent::Bookmark {
                initial_events_end: b.metadata.annotations.get(INITIAL_EVENTS_END).is_some_and(|v| v == "true"),
                resource_version: b.metadata.resource_version,
            }),
            Ok(KubeEvent::Error(status)) => Err(meta.status("watch", rv, &status, None)),
            Err(e) => match serde_json::from_slice::<Status>(line) {
                // A bare Status line: the server's error, as kube reads it.
                Ok(status) => Err(meta.status("watch", rv, &status, None)),
                Err(_) => Err(meta.other("watch: undecodable event", e)),
            },
        })
    }
}
