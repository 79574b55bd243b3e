//! What the API server answered, typed: `Status` bodies with their causes
//! and `Retry-After`, bodies that are not JSON, failures with no answer,
//! and what a DELETE's answer says about the object.

use http::StatusCode;
use serde_json::Value;

use crate::cluster::{Cause, WriteError};

/// The longest an error message taken from a response body may be.
const MAX_MESSAGE_BYTES: usize = 4096;

/// still there, marked for deletion (finalizers, foreground propagation,
/// graceful deletion); `None` when it is gone — the server answered a
/// `Success` Status, or the deleted object without a deletionTimestamp
/// (the generic store's `ReturnDeletedObject`, e.g. custom resources).
pub(super) fn still_there(answer: Value) -> Option<Value> {
    if answer["kind"] == "Status" {
        return None;
    }
    answer.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()).then_some(answer)
}

/// The typed error of a non-2xx answer, and whether its Status names an
/// object (`details.name`).
pub(super) fn error_of(code: StatusCode, retry_after: Option<u64>, body: &[u8]) -> (WriteError, bool) {
    let status: Option<Value> = serde_json::from_slice(body).ok().filter(|v: &Value| v["kind"] == "Status");
    let Some(status) = status else {
        // Not a Status: a filter, a proxy or a load balancer answered.
        let text = String::from_utf8_lossy(body);
        let mut message = cut(text.trim()).to_string();
        if message.is_empty() {
            message = code.canonical_reason().unwrap_or("no message").to_string();
        }
        return (with_retry_after(WriteError::from_status(code.as_u16(), "", message, Vec::new()), retry_after), false);
    };
    let text = |v: &Value| v.as_str().map(|s| cut(s).to_string()).unwrap_or_default();
    let causes = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Cause { reason: text(&c["reason"]), message: text(&c["message"]), field: text(&c["field"]) })
        .collect();
    let retry_after = retry_after.or_else(|| status["details"]["retryAfterSeconds"].as_u64());
    let names_object = status["details"]["name"].as_str().is_some_and(|n| !n.is_empty());
    // The HTTP code is authoritative; the Status' own `code` repeats it.
    let error = WriteError::from_status(code.as_u16(), &text(&status["reason"]), text(&status["message"]), causes);
    (with_retry_after(error, retry_after), names_object)
}

fn with_retry_after(error: WriteError, retry_after: Option<u64>) -> WriteError {
    match error {
        WriteError::RateLimited { message, retry_after_seconds } => {
            WriteError::RateLimited { message, retry_after_seconds: retry_after_seconds.or(retry_after) }
        }
        other => other,
    }
}

/// A failure of the client itself (no HTTP answer) or a discovery error
/// answer, typed.
pub(super) fn map_client_error(error: kube::Error) -> WriteError {
    if let kube::Error::Api(status) = &error {
        let causes = status
            .details
            .as_ref()
            .map(|d| {
                d.causes
                    .iter()
                    .map(|c| Cause { reason: c.reason.clone(), message: c.message.clone(), field: c.field.clone() })
                    .collect()
            })
            .unwrap_or_default();
        return WriteError::from_status(status.code, &status.reason, status.message.clone(), causes);
    }
    // The source chain says what went wrong on the way (refused, reset,
    // timed out connecting or reading).
    let mut message = error.to_string();
    let mut timed_out = false;
    let mut source = std::error::Error::source(&error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        let text = e.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = e.source();
    }
    if timed_out {
        WriteError::Timeout(message)
    } else {
        // Code 0: there was no HTTP answer.
        WriteError::ServerError { code: 0, message }
    }
}

pub(super) fn cut(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE_BYTES {
        return s;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
