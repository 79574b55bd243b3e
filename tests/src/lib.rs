//! End-to-end fixtures shared by the suites in `tests/tests/`.
//!
//! - [`apiserver`]: a loopback Kubernetes API server speaking the real
//!   list/watch wire protocol.
//! - [`eventually`] / [`wait_until`]: bounded polling for tests that run
//!   against real sockets, where waiting for a condition is unavoidable but a
//!   fixed sleep must never be an assertion.

use std::time::Duration;

pub mod apiserver;
pub mod oci_registry;
pub mod plugins;

/// How long [`eventually`] waits before failing.
pub const EVENTUALLY_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the polling helpers check their condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Polls `condition` every [`POLL_INTERVAL`] until it holds or `timeout`
/// passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Waits until `condition` holds, for at most [`EVENTUALLY_TIMEOUT`];
/// panics naming `what` otherwise.
///
/// ```no_run
/// # async fn demo(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
/// e2e::eventually("the flag", || flag.load(std::sync::atomic::Ordering::SeqCst)).await;
/// # }
/// ```
pub async fn eventually(what: impl std::fmt::Display, condition: impl FnMut() -> bool) {
    if !wait_until(EVENTUALLY_TIMEOUT, condition).await {
        panic!("timed out after {EVENTUALLY_TIMEOUT:?} waiting for {what}");
    }
}

/// A plain HTTP/1.1 GET of `path` (the host's `/metrics`, `/readyz`): the
/// status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}
