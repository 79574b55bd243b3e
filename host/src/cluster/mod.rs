//! Writes to the cluster: the contract every backend implements.
//!
//! This module owns the vocabulary of a write (what a controller plugin may
//! ask for through the `kube` import) and the typed errors that come back.
//! It does not decide whether a write is allowed (that is the controller's
//! write guard) and does not know HTTP: a backend turns a [`WriteRequest`]
//! into a real API call ([`kube::Client`]) or into a change of the embedded,
//! in-process store that serves the manifests directory.
//!
//! Objects travel as JSON values (`serde_json::Value`): the guest hands the
//! host JSON text, and the API server answers with JSON.

pub mod embedded;
pub mod kube_writer;

use std::fmt;

use futures::future::BoxFuture;
use serde_json::Value;

/// Names one object: `apiVersion`, `kind`, and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// `v1`, `apps/v1`, `example.com/v1alpha1`.
    pub api_version: String,
    pub kind: String,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
}

impl Target {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// The target of an object's JSON (its apiVersion, kind, namespace and
    /// name), or why it has none.
    pub fn of(object: &Value) -> Result<Target, WriteError> {
        Self::read(object, None)
    }

    /// The target of a create: as [`Target::of`], but an object with only
    /// `metadata.generateName` is named `<generateName>*` (the server
    /// picks the rest), so the host's checks and logs can name it.
    pub fn of_new(object: &Value) -> Result<Target, WriteError> {
        let prefix = object.pointer("/metadata/generateName").and_then(Value::as_str).filter(|p| !p.is_empty());
        Self::read(object, prefix.map(|p| format!("{p}*")))
    }

    /// Reads the target; `unnamed` names an object without a (non-empty)
    /// `metadata.name`.
    fn read(object: &Value, unnamed: Option<String>) -> Result<Target, WriteError> {
        let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_string);
        let missing = |what: &str| WriteError::Invalid {
            message: format!("the object has no {what}"),
            causes: vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: what.into(),
            }],
        };
        let name = match (field("/metadata/name"), unnamed) {
            (Some(name), Some(generated)) if name.is_empty() => Some(generated),
            (None, generated) => generated,
            (name, _) => name,
        };
        Ok(Target {
            api_version: field("/apiVersion").ok_or_else(|| missing("apiVersion"))?,
            kind: field("/kind").ok_or_else(|| missing("kind"))?,
            namespace: field("/metadata/namespace"),
            name: name.ok_or_else(|| missing("metadata.name"))?,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The body of a patch, by content type.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json` (RFC 7386).
    Merge(Value),
    /// `application/json-patch+json` (RFC 6902).
    Json(Value),
    /// `application/apply-patch+yaml`: server-side apply of this
    /// configuration, owned by the write's field manager; `force` takes
    /// fields other managers own instead of failing with a conflict.
    Apply { config: Value, force: bool },
}

/// `DeleteOptions.propagationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

impl Propagation {
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Orphan => "Orphan",
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
        }
    }
}

/// `DeleteOptions`: preconditions and propagation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    /// Delete only if the object still has this uid.
    pub uid: Option<String>,
    /// Delete only if the object is still at this resourceVersion.
    pub resource_version: Option<String>,
    pub propagation: Option<Propagation>,
}

/// `Normal` or `Warning`, as Events have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One write, as a controller asks for it.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteRequest {
    /// POST the object (its JSON names apiVersion, kind, namespace, name).
    Create(Value),
    /// PUT the object; its `metadata.resourceVersion`, when set, is a
    /// precondition (a stale one is a [`WriteError::Conflict`]).
    Replace(Value),
    Patch {
        target: Target,
        patch: Patch,
    },
    Delete {
        target: Target,
        options: DeleteOptions,
    },
    /// PUT the object's status subresource.
    ReplaceStatus(Value),
    /// PATCH the object's status subresource.
    PatchStatus {
        target: Target,
        patch: Patch,
    },
    /// Record an Event about `involved` (core/v1 Event).
    RecordEvent {
        involved: Target,
        event_type: EventType,
        reason: String,
        message: String,
    },
}

impl WriteRequest {
    /// The verb as RBAC names it (`create`, `update`, `patch`, `delete`);
    /// an Event is a `create` of `events`.
    pub fn verb(&self) -> &'static str {
        match self {
            WriteRequest::Create(_) | WriteRequest::RecordEvent { .. } => "create",
            WriteRequest::Replace(_) | WriteRequest::ReplaceStatus(_) => "update",
            WriteRequest::Patch { .. } | WriteRequest::PatchStatus { .. } => "patch",
            WriteRequest::Delete { .. } => "delete",
        }
    }

    /// `Some("status")` for a write to the status subresource.
    pub fn subresource(&self) -> Option<&'static str> {
        matches!(self, WriteRequest::ReplaceStatus(_) | WriteRequest::PatchStatus { .. }).then_some("status")
    }

    /// The object the write is about (for an Event: the Event's own
    /// target is in the involved object's namespace, named by the backend).
    pub fn target(&self) -> Result<Target, WriteError> {
        match self {
            WriteRequest::Create(v) => Target::of_new(v),
            WriteRequest::Replace(v) | WriteRequest::ReplaceStatus(v) => Target::of(v),
            WriteRequest::Patch { target, .. }
            | WriteRequest::PatchStatus { target, .. }
            | WriteRequest::Delete { target, .. } => Ok(target.clone()),
            WriteRequest::RecordEvent { involved, .. } => Ok(Target {
                api_version: "v1".into(),
                kind: "Event".into(),
                namespace: Some(involved.namespace.clone().unwrap_or_else(|| "default".into())),
                name: involved.name.clone(),
            }),
        }
    }
}

/// How a write is sent, beyond what it changes.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteParams {
    /// `fieldManager` (the plugin's name).
    pub field_manager: String,
    /// Send `dryRun=All`: validated and answered, nothing stored.
    pub dry_run: bool,
    /// Impersonate this user (`Impersonate-User`), so the API server's own
    /// RBAC judges the write as the tenant's.
    pub impersonate: Option<String>,
}

/// The largest body the API server decodes for a write
/// (`MaxRequestBodyBytes`, 3 MiB); a larger one is answered `413` ("Request
/// entity too large: limit is 3145728").
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// One `details.causes` entry of a 422 Invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// Why a write did not happen, typed as the API conventions' `Status`
/// reasons (what the guest receives, never a trap).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 404 `NotFound`.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409 `AlreadyExists`.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// 409 `Conflict`: a stale resourceVersion, a failed precondition, or
    /// a server-side apply conflict.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 403 `Forbidden`, from the host's write checks or from the server.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 422 `Invalid`, with the fields at fault.
    #[error("invalid: {message}")]
    Invalid { message: String, causes: Vec<Cause> },
    /// 429, or the plugin's own QPS cap; retry after this many seconds when
    /// known.
    #[error("rate limited: {message}")]
    RateLimited { message: String, retry_after_seconds: Option<u64> },
    /// The request did not finish within its timeout (or 504).
    #[error("timeout: {0}")]
    Timeout(String),
    /// 400 `BadRequest` (e.g. a malformed patch) or 415.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Anything else: 5xx, a refused connection. `code` is the HTTP
    /// status, or 0 when no HTTP answer came (refused, reset).
    #[error("server error ({code}): {message}")]
    ServerError { code: u16, message: String },
}

impl WriteError {
    /// The API server's answer to a body over [`MAX_REQUEST_BODY_BYTES`].
    pub fn body_too_large() -> WriteError {
        WriteError::ServerError {
            code: 413,
            message: format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"),
        }
    }

    /// Maps a Kubernetes `Status` (code, reason, message, causes) to the
    /// typed error, reason first (as the API conventions advise), then code.
    pub fn from_status(code: u16, reason: &str, message: String, causes: Vec<Cause>) -> WriteError {
        match (reason, code) {
            ("NotFound", _) | (_, 404) => WriteError::NotFound(message),
            ("AlreadyExists", _) => WriteError::AlreadyExists(message),
            ("Conflict", _) | (_, 409) => WriteError::Conflict(message),
            ("Forbidden", _) | (_, 403) => WriteError::Forbidden(message),
            ("Invalid", _) | (_, 422) => WriteError::Invalid { message, causes },
            ("TooManyRequests", _) | (_, 429) => WriteError::RateLimited { message, retry_after_seconds: None },
            ("Timeout", _) | (_, 504) => WriteError::Timeout(message),
            ("BadRequest", _) | (_, 400) | (_, 415) => WriteError::BadRequest(message),
            _ => WriteError::ServerError { code, message },
        }
    }
}

/// A backend that carries out writes: the API server or the embedded store.
pub trait ClusterWriter: Send + Sync + 'static {
    /// Carries out `request`; answers the object as the server returned it
    /// (for a delete: the object when it was only marked for deletion, or
    /// `None`; for an Event: the Event).
    fn write(&self, request: WriteRequest, params: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>>;
}
