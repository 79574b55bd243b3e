//! `metav1.Status` bodies: the error objects the API server answers with.

use super::*;

/// A `metav1.Status` failure object.
pub(super) fn status_object(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

pub(super) fn status_response(code: u16, reason: &str, message: String) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, status_object(code, reason, message).to_string())
}

/// The `StatusReason` the API server uses for an HTTP code.
pub(super) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}
