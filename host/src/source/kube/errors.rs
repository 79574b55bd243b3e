//! What a failure becomes: the reflector relists on [`SourceError::Gone`],
//! watches again from the same resourceVersion after a
//! [`SourceError::Retriable`] (a refused connection, a `429`), and backs
//! off and relists on anything else. Errors name the verb and the source.

use std::time::Duration;

use ::kube::client::Body;
use ::kube::core::Status;
use http::header::RETRY_AFTER;

use super::Meta;
use crate::informer::SourceError;

impl Meta {
    /// A failure the server answered with: `410` is [`SourceError::Gone`];
    /// `429` is [`SourceError::Retriable`] after `Retry-After` (the header,
    /// else `details.retryAfterSeconds`); another `4xx` is
    /// [`SourceError::Refused`]; anything else is [`SourceError::Other`].
    pub(super) fn status(
        &self,
        verb: &str,
        resource_version: &str,
        s: &Status,
        retry_after: Option<Duration>,
    ) -> SourceError {
        if s.code == 410 {
            return SourceError::Gone { resource_version: resource_version.into(), message: s.message.clone() };
        }
        let message = format!(
            "{verb} {} failed: {} ({}code {})",
            self.describe,
            if s.message.is_empty() { "no message" } else { &s.message },
            if s.reason.is_empty() { String::new() } else { format!("reason {:?}, ", s.reason) },
            s.code
        );
        if s.code == 429 || s.reason == "TooManyRequests" {
            let details = s.details.as_ref().map(|d| d.retry_after_seconds).filter(|s| *s > 0);
            let retry_after = retry_after.or(details.map(|s| Duration::from_secs(s.into())));
            return SourceError::Retriable { message, retry_after };
        }
        if (400..500).contains(&s.code) {
            return SourceError::Refused(message);
        }
        SourceError::Other(message)
    }

    /// A non-2xx answer read off the response: its Status body (or, as kube
    /// does for a body that is not one, a Status made of its text) and its
    /// `Retry-After` header.
    pub(super) async fn response_error(
        &self,
        verb: &str,
        resource_version: &str,
        res: http::Response<Body>,
    ) -> SourceError {
        let code = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match res.into_body().collect_bytes().await {
            Ok(body) => body,
            Err(e) => return self.other(verb, e),
        };
        let mut status = serde_json::from_slice::<Status>(&body).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&body);
            Status::failure(text.trim(), "").with_code(code)
        });
        // Any JSON parses as a Status (every field has a default): a proxy's
        // JSON error page has no `code`, and the response's is the truth.
        if status.code == 0 {
            status.code = code;
        }
        self.status(verb, resource_version, &status, retry_after)
    }

    pub(super) fn error(&self, verb: &str, resource_version: &str, e: ::kube::Error) -> SourceError {
        match e {
            ::kube::Error::Api(s) => self.status(verb, resource_version, &s, None),
            e if is_connection_refused(&e) => match self.other(verb, e) {
                SourceError::Other(message) => SourceError::Retriable { message, retry_after: None },
                other => other,
            },
            e => self.other(verb, e),
        }
    }

    pub(super) fn other(&self, verb: &str, e: impl std::error::Error) -> SourceError {
        SourceError::Other(format!("{verb} {} failed: {}", self.describe, chain(&e)))
    }
}

/// An error and its sources, each once: `a: b: c`.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !msg.contains(&s_text) {
            msg.push_str(": ");
            msg.push_str(&s_text);
        }
        source = s.source();
    }
    msg
}

/// Whether an `io::Error` of one of `kinds` is in `e`'s source chain.
fn chain_has_io(e: &(dyn std::error::Error + 'static), kinds: &[std::io::ErrorKind]) -> bool {
    let mut source = Some(e);
    // HTTP and TLS stacks nest a handful of errors; stop on a cycle.
    for _ in 0..16 {
        let Some(s) = source else { return false };
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if kinds.contains(&io.kind()) {
                return true;
            }
            // An io::Error's own source is its inner error.
            if let Some(inner) = io.get_ref()
                && chain_has_io(inner, kinds)
            {
                return true;
            }
        }
        source = s.source();
    }
    false
}

/// client-go's `net.IsConnectionRefused`: the server was not reached.
pub(super) fn is_connection_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    chain_has_io(e, &[std::io::ErrorKind::ConnectionRefused])
        || chain(e).to_ascii_lowercase().contains("connection refused")
}

/// client-go's `net.IsTimeout`: the client's read timeout fired.
pub(super) fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    chain_has_io(e, &[std::io::ErrorKind::TimedOut])
}

/// client-go's `net.IsProbableEOF`: the connection ended, not the protocol.
pub(super) fn is_probable_eof(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::*;
    if chain_has_io(e, &[UnexpectedEof, ConnectionReset, ConnectionAborted, BrokenPipe]) {
        return true;
    }
    let text = chain(e);
    ["unexpected EOF", "connection reset", "broken pipe", "use of closed network connection", "connection closed"]
        .iter()
        .any(|needle| text.contains(needle))
}
