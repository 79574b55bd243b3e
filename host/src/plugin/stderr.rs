//! The guest's stderr: forwarded to `tracing`, last bytes kept.
//!
//! A Rust guest writes its panic message to stderr just before it traps;
//! keeping the tail lets the host name the panic in the crash report. It
//! owns only that byte sink.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

const TAIL: usize = 4096;

/// A stderr sink shared by one instance's streams.
#[derive(Clone)]
pub(crate) struct StderrCapture {
    plugin: Arc<str>,
    inner: Arc<Mutex<Vec<u8>>>,
}

impl StderrCapture {
    pub fn new(plugin: Arc<str>) -> Self {
        StderrCapture { plugin, inner: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The last non-empty line written, e.g. a panic message.
    pub fn last_line(&self) -> Option<String> {
        let buf = self.inner.lock();
        let text = String::from_utf8_lossy(&buf);
        text.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.inner.lock();
        let start = buf.len();
        buf.extend_from_slice(bytes);
        // Forward whole new lines to the log.
        if let Some(last_nl) = buf[start..].iter().rposition(|b| *b == b'\n') {
            let line_start = buf[..start].iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            let text = String::from_utf8_lossy(&buf[line_start..start + last_nl]).into_owned();
            for line in text.lines().filter(|l| !l.is_empty()) {
                tracing::warn!(plugin = %self.plugin, "stderr: {line}");
            }
        }
        if buf.len() > TAIL {
            let cut = buf.len() - TAIL;
            buf.drain(..cut);
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
        Ok(64 * 1024)
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
