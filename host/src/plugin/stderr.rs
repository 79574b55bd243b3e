//! The guest's stderr: last bytes kept, lines forwarded within the log budget.
//!
//! A Rust guest writes its panic message to stderr just before it traps;
//! keeping the tail lets the host name the panic in the crash report. Whole
//! lines go on to `tracing` only for a plugin granted `log`, and only
//! through its log budget (truncated, escaped, counted), so stderr is no
//! way around either. It owns only that byte sink.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::Level;
use super::log_budget::sanitize;
use super::sandbox::PluginShared;

/// Bytes of stderr kept for the crash report.
const TAIL: usize = 4096;

/// Most bytes one `write` may hand over (what `check_write` allows).
const MAX_WRITE: usize = 64 * 1024;

/// A stderr sink shared by one instance's streams.
#[derive(Clone)]
pub(crate) struct StderrCapture {
    shared: Arc<PluginShared>,
    inner: Arc<Mutex<Vec<u8>>>,
}

impl StderrCapture {
    pub fn new(shared: Arc<PluginShared>) -> Self {
        StderrCapture { shared, inner: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The last non-empty line written, e.g. a panic message (escaped, and
    /// no longer than the tail kept).
    pub fn last_line(&self) -> Option<String> {
        let buf = self.inner.lock();
        let text = String::from_utf8_lossy(&buf);
        text.lines().rev().find(|l| !l.trim().is_empty()).map(|l| sanitize(l.trim(), TAIL).into_owned())
    }

    fn push(&self, bytes: &[u8]) {
        let bytes = &bytes[..bytes.len().min(MAX_WRITE)];
        let mut buf = self.inner.lock();
        let start = buf.len();
        buf.extend_from_slice(bytes);
        // Forward whole new lines to the log, within the budget.
        let mut lines = Vec::new();
        if self.shared.log_granted
            && let Some(last_nl) = buf[start..].iter().rposition(|b| *b == b'\n')
        {
            let line_start = buf[..start].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let text = String::from_utf8_lossy(&buf[line_start..start + last_nl]);
            lines.extend(text.lines().filter(|l| !l.is_empty()).map(|l| format!("stderr: {l}")));
        }
        if buf.len() > TAIL {
            let cut = buf.len() - TAIL;
            buf.drain(..cut);
        }
        drop(buf);
        let s = &self.shared;
        for line in lines {
            s.log.emit(&s.name, s.tenant.as_deref().unwrap_or(""), Level::Warn, &line, &s.stats);
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for StderrCapture {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(MAX_WRITE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for StderrCapture {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for StderrCapture {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for StderrCapture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrCapture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}
