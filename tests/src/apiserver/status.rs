//! `metav1.Status` bodies: the error objects the API server answers with, and
//! the constructors of `k8s.io/apimachinery/pkg/api/errors` they mirror
//! (`NewNotFound`, `NewAlreadyExists`, `NewConflict`, `NewInvalid`,
//! `NewForbidden`, `NewBadRequest`,
//! `NewApplyConflict`): same `reason`, `code`, `message` wording and
//! `details` (`kind` is the *resource* for most reasons and the *kind* for
//! `Invalid`, as upstream does it).

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
    ApiError::new(code, reason, message).response()
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
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// A failure answered as a Status with its HTTP code.
#[derive(Debug, Clone)]
pub(super) struct ApiError(pub(super) Value);

pub(super) type ApiResult<T> = Result<T, ApiError>;

/// One `details.causes` entry: `reason` (a `CauseType`), `message`, `field`.
pub(super) struct Cause {
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) field: String,
}

impl Cause {
    /// `field.Required(path, detail)`.
    pub(super) fn required(field: &str, detail: &str) -> Cause {
        let message = if detail.is_empty() { "Required value".into() } else { format!("Required value: {detail}") };
        Cause { reason: "FieldValueRequired", message, field: field.into() }
    }
    /// `field.Invalid(path, value, detail)`; `value` already rendered as Go's `%#v` would.
    pub(super) fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause { reason: "FieldValueInvalid", message: format!("Invalid value: {value}: {detail}"), field: field.into() }
    }
    /// `field.NotSupported(path, value, valid)`.
    pub(super) fn not_supported(field: &str, value: &str, valid: &[&str]) -> Cause {
        let valid: Vec<String> = valid.iter().map(|v| format!("{v:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!("Unsupported value: {value}: supported values: {}", valid.join(", ")),
            field: field.into(),
        }
    }
    /// `field.Forbidden(path, detail)`.
    pub(super) fn forbidden(field: &str, detail: &str) -> Cause {
        Cause { reason: "FieldValueForbidden", message: format!("Forbidden: {detail}"), field: field.into() }
    }
}

/// `details` with the fields upstream omits when empty left out.
fn details(name: &str, group: &str, kind: &str) -> serde_json::Map<String, Value> {
    let mut d = serde_json::Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    d
}

impl ApiError {
    pub(super) fn new(code: u16, reason: &str, message: String) -> ApiError {
        ApiError(status_object(code, reason, message))
    }
    fn with_details(mut self, details: serde_json::Map<String, Value>) -> ApiError {
        if !details.is_empty() {
            self.0["details"] = Value::Object(details);
        }
        self
    }
    pub(super) fn code(&self) -> u16 {
        self.0["code"].as_u64().unwrap_or(500) as u16
    }
    pub(super) fn response(&self) -> Response<Body> {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, self.0.to_string())
    }

    /// `NewNotFound`: `configmaps "a" not found`.
    pub(super) fn not_found(ty: &ResourceType, name: &str) -> ApiError {
        Self::new(404, "NotFound", format!("{} {name:?} not found", ty.qualified_resource()))
            .with_details(details(name, &ty.group, &ty.plural))
    }
    /// `NewNotFound` for a namespace: `namespaces "x" not found`.
    pub(super) fn namespace_not_found(name: &str) -> ApiError {
        Self::new(404, "NotFound", format!("namespaces {name:?} not found")).with_details(details(
            name,
            "",
            "namespaces",
        ))
    }
    /// `NewAlreadyExists`: `configmaps "a" already exists`.
    pub(super) fn already_exists(ty: &ResourceType, name: &str) -> ApiError {
        Self::new(409, "AlreadyExists", format!("{} {name:?} already exists", ty.qualified_resource()))
            .with_details(details(name, &ty.group, &ty.plural))
    }
    /// `NewConflict`: `Operation cannot be fulfilled on configmaps "a": <why>`.
    pub(super) fn conflict(ty: &ResourceType, name: &str, why: &str) -> ApiError {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} {name:?}: {why}", ty.qualified_resource()),
        )
        .with_details(details(name, &ty.group, &ty.plural))
    }
    /// The optimistic-concurrency conflict of an update with a stale
    /// resourceVersion (`OptimisticLockErrorMsg`).
    pub(super) fn stale(ty: &ResourceType, name: &str) -> ApiError {
        Self::conflict(
            ty,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    /// `NewInvalid`: `ConfigMap "a" is invalid: metadata.name: ...` with one
    /// cause per field error; `details.kind` is the kind.
    pub(super) fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let rendered: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        // utilerrors.NewAggregate: one error as is, several as "[a, b]".
        let all = if rendered.len() == 1 { rendered[0].clone() } else { format!("[{}]", rendered.join(", ")) };
        let mut d = details(name, group, kind);
        d.insert(
            "causes".into(),
            Value::Array(
                causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect(),
            ),
        );
        Self::new(422, "Invalid", format!("{qualified} {name:?} is invalid: {all}")).with_details(d)
    }
    /// An `Invalid` error about request options (`CreateOptions`,
    /// `PatchOptions`, ...), which upstream reports against `meta.k8s.io`.
    pub(super) fn invalid_options(options_kind: &str, causes: Vec<Cause>) -> ApiError {
        Self::invalid("meta.k8s.io", options_kind, "", causes)
    }
    /// `NewBadRequest`.
    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(400, "BadRequest", message.into())
    }
    /// `415`: a patch content type this resource does not accept.
    pub(super) fn unsupported_patch(accepted: &[&str]) -> ApiError {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }
    /// `NewForbidden` from the authorizer's denial: `configmaps "a" is
    /// forbidden: User "bob" cannot update resource "configmaps" in API group
    /// "" in the namespace "ns"` (`forbiddenMessage` in the API server's
    /// `responsewriters`).
    pub(super) fn forbidden(
        ty: &ResourceType,
        name: &str,
        user: &str,
        verb: &str,
        subresource: Option<&str>,
        namespace: Option<&str>,
    ) -> ApiError {
        let resource = match subresource {
            Some(sub) => format!("{}/{sub}", ty.plural),
            None => ty.plural.clone(),
        };
        let why = match namespace {
            Some(ns) if !ns.is_empty() => format!(
                "User {user:?} cannot {verb} resource {resource:?} in API group {:?} in the namespace {ns:?}",
                ty.group
            ),
            _ => format!(
                "User {user:?} cannot {verb} resource {resource:?} in API group {:?} at the cluster scope",
                ty.group
            ),
        };
        let message = if name.is_empty() {
            format!("{} is forbidden: {why}", ty.qualified_resource())
        } else {
            format!("{} {name:?} is forbidden: {why}", ty.qualified_resource())
        };
        Self::new(403, "Forbidden", message).with_details(details(name, &ty.group, &ty.plural))
    }
    /// `NewApplyConflict`: the server-side apply conflict, one cause per
    /// conflicting field (`FieldManagerConflict`), message as
    /// `internal.NewConflictError` words it.
    pub(super) fn apply_conflict(conflicts: &[(String, String)]) -> ApiError {
        // (manager as printed, field path)
        let message = if conflicts.len() == 1 {
            format!("Apply failed with 1 conflict: conflict with {}: {}", conflicts[0].0, conflicts[0].1)
        } else {
            let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (m, p) in conflicts {
                by_manager.entry(m.as_str()).or_default().push(p.as_str());
            }
            let mut lines = Vec::new();
            for (m, paths) in by_manager {
                lines.push(format!("conflicts with {m}:"));
                lines.extend(paths.iter().map(|p| format!("- {p}")));
            }
            format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(
                |(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": p}),
            )
            .collect();
        let mut d = serde_json::Map::new();
        d.insert("causes".into(), Value::Array(causes));
        Self::new(409, "Conflict", message).with_details(d)
    }
}
