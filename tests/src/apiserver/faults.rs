//! Fault injection: failures answered instead of the real response, `429`
//! throttling with `Retry-After`, and refused connections.
//!
//! A `429` comes in the two forms the API server sends ([`ThrottleStyle`]):
//! by default the one its max-in-flight and priority-and-fairness filters
//! send (`tooManyRequests` in `k8s.io/apiserver/pkg/server/filters`):
//! `Retry-After` and a plain-text body, not a Status, because the request
//! never reached a handler that speaks the API's content types; or a
//! handler's `apierrors.NewTooManyRequests` (the watch cache answers watches
//! so while it (re)initializes): a `Status` with reason `TooManyRequests`
//! and `details.retryAfterSeconds`, and the `Retry-After` header
//! `responsewriters.ErrorNegotiated` sets from it.

use super::*;

/// How a `429 Too Many Requests` is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThrottleStyle {
    /// The flow-control filters' answer: plain text and `Retry-After`.
    #[default]
    FlowControl,
    /// A handler's answer: a `Status` (reason `TooManyRequests`,
    /// `details.retryAfterSeconds`) and `Retry-After`.
    Status,
}

pub(super) type FailureMatcher = Box<dyn Fn(&RecordedRequest) -> bool + Send>;

pub(super) struct Failure {
    pub(super) matches: FailureMatcher,
    pub(super) code: u16,
}

/// `429`s still to answer, to requests matching `matches`.
pub(super) struct Throttle {
    pub(super) matches: FailureMatcher,
    pub(super) remaining: usize,
    pub(super) retry_after: u64,
    pub(super) style: ThrottleStyle,
}

/// Takes one `429` for `rec` if a throttle applies; returns its
/// `Retry-After` and style.
pub(super) fn take_throttle(throttles: &mut Vec<Throttle>, rec: &RecordedRequest) -> Option<(u64, ThrottleStyle)> {
    let i = throttles.iter().position(|t| t.remaining > 0 && (t.matches)(rec))?;
    throttles[i].remaining -= 1;
    let answer = (throttles[i].retry_after, throttles[i].style);
    throttles.retain(|t| t.remaining > 0);
    Some(answer)
}

pub(super) fn too_many_requests(retry_after: u64, style: ThrottleStyle) -> Response<Body> {
    if style == ThrottleStyle::Status {
        // apierrors.NewTooManyRequests("storage is (re)initializing", retryAfter).
        let mut status =
            status_object(429, "TooManyRequests", "Too many requests: storage is (re)initializing".to_string());
        status["details"] = json!({"retryAfterSeconds": retry_after});
        let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, status.to_string());
        response.headers_mut().insert(header::RETRY_AFTER, retry_after.into());
        return response;
    }
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .header(header::RETRY_AFTER, retry_after.to_string())
        .body(
            Full::new(Bytes::from_static(b"Too many requests, please try again later.\n"))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("response")
}

impl ApiServer {
    /// Answers the next `n` requests with `429 Too Many Requests` and
    /// `Retry-After: retry_after_secs` (plain-text body, as the API server's
    /// flow-control filters send it). The requests are recorded.
    pub fn throttle(&self, n: usize, retry_after_secs: u64) {
        self.throttle_where(|_| true, n, retry_after_secs);
    }
    /// As [`ApiServer::throttle`], for the next `n` requests matching `matches`
    /// (e.g. only watches).
    pub fn throttle_where(
        &self,
        matches: impl Fn(&RecordedRequest) -> bool + Send + 'static,
        n: usize,
        retry_after_secs: u64,
    ) {
        self.throttle_styled_where(matches, n, retry_after_secs, ThrottleStyle::FlowControl);
    }
    /// As [`ApiServer::throttle_where`], answered in `style`.
    pub fn throttle_styled_where(
        &self,
        matches: impl Fn(&RecordedRequest) -> bool + Send + 'static,
        n: usize,
        retry_after_secs: u64,
        style: ThrottleStyle,
    ) {
        self.shared.state.lock().throttles.push(Throttle {
            matches: Box::new(matches),
            remaining: n,
            retry_after: retry_after_secs,
            style,
        });
    }

    /// Closes the listening socket and every open connection (open watches
    /// end abruptly): connecting now fails with "connection refused", as
    /// against a server that is down. The store and history are kept.
    pub async fn refuse_connections(&self) {
        let task = self.shared.accept_task.lock().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same address after
    /// [`ApiServer::refuse_connections`]; a no-op while accepting.
    pub async fn accept_connections(&self) {
        resume(&self.shared, self.addr).await;
    }

    /// Refuses connections now and accepts them again after `outage`
    /// (measured on the tokio clock).
    pub async fn refuse_connections_for(&self, outage: Duration) {
        self.refuse_connections().await;
        let (shared, addr) = (self.shared.clone(), self.addr);
        tokio::spawn(async move {
            tokio::time::sleep(outage).await;
            resume(&shared, addr).await;
        });
    }

    /// Whether the server is accepting connections.
    pub fn is_accepting(&self) -> bool {
        self.shared.accept_task.lock().is_some()
    }
}

async fn resume(shared: &Arc<Shared>, addr: SocketAddr) {
    if shared.accept_task.lock().is_some() {
        return;
    }
    // The old socket is closed; tokio sets SO_REUSEADDR, so connections of the
    // old listener in TIME_WAIT do not hold the port. Retry briefly anyway.
    let mut tries = 0;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if tries < 50 => {
                tries += 1;
                tracing::debug!("rebinding {addr}: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("rebinding {addr}: {e}"),
        }
    };
    let mut slot = shared.accept_task.lock();
    if slot.is_none() {
        *slot = Some(tokio::spawn(accept_loop(listener, shared.clone())));
    }
}
