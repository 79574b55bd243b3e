//! Writes to the cluster (the `kube` import).
//!
//! The host checks every write before a request leaves (the plugin's
//! declared rules, its tenant's namespaces, its QPS), sends it with the
//! plugin's name as field manager, and answers refusals and API errors as a
//! [`KubeError`], never as a trap. Reads go through the caches
//! ([`stores`](super::stores)), not through this module.
//!
//! Bodies are JSON: pass a `serde_json::Value` (e.g. from `json!`), or JSON
//! text as `&str`/`String` (see [`Body`]); a typed value (k8s-openapi)
//! becomes a body through `serde_json::to_value`. Successful writes answer
//! the object as stored, as JSON text: parse it only when you need it.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use super::bindings::informer_host::plugin::kube as raw;
use crate::Object;

/// JSON text of a request body: text passes through unchanged, a
/// `serde_json::Value` is serialized.
pub trait Body {
    fn json(&self) -> Cow<'_, str>;
}

impl Body for str {
    fn json(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl Body for String {
    fn json(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl Body for serde_json::Value {
    fn json(&self) -> Cow<'_, str> {
        Cow::Owned(self.to_string())
    }
}

impl<T: Body + ?Sized> Body for &T {
    fn json(&self) -> Cow<'_, str> {
        (**self).json()
    }
}

/// Names one object.
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
    /// A namespaced object.
    pub fn namespaced(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Target {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// A cluster-scoped object.
    pub fn cluster(api_version: &str, kind: &str, name: &str) -> Self {
        Target { api_version: api_version.to_owned(), kind: kind.to_owned(), namespace: None, name: name.to_owned() }
    }

    /// The object a cached version belongs to.
    pub fn of(obj: &Object) -> Self {
        Target { api_version: obj.api_version(), kind: obj.kind(), namespace: obj.namespace(), name: obj.name() }
    }

    /// The object a JSON manifest names (`apiVersion`, `kind`,
    /// `metadata.namespace`, `metadata.name`), or `None` when one of
    /// `apiVersion`, `kind` and `metadata.name` is missing.
    pub fn of_json(manifest: &serde_json::Value) -> Option<Self> {
        let text = |pointer| manifest.pointer(pointer).and_then(serde_json::Value::as_str).map(str::to_owned);
        Some(Target {
            api_version: text("/apiVersion")?,
            kind: text("/kind")?,
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name")?,
        })
    }

    fn raw(&self) -> raw::Target {
        raw::Target {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A patch body by content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386): `null` removes a field, objects merge,
    /// lists are replaced whole.
    Merge(String),
    /// JSON patch (RFC 6902): a list of operations; a `test` operation makes
    /// the patch conditional.
    Json(String),
    /// Server-side apply of `config`, with the plugin's name as field
    /// manager. `config` is a partial object naming `apiVersion`, `kind` and
    /// `metadata.name` (and `namespace`), with only the fields the
    /// controller owns: a field it owned and leaves out is removed. `force`
    /// takes fields other managers own instead of failing with
    /// [`KubeError::Conflict`].
    Apply { config: String, force: bool },
}

impl Patch {
    /// A JSON merge patch.
    pub fn merge(body: impl Body) -> Self {
        Patch::Merge(body.json().into_owned())
    }

    /// A JSON patch.
    pub fn json(body: impl Body) -> Self {
        Patch::Json(body.json().into_owned())
    }

    /// A server-side apply that fails with a conflict on fields another
    /// manager owns; [`force`](Self::force) it to take them.
    pub fn apply(config: impl Body) -> Self {
        Patch::Apply { config: config.json().into_owned(), force: false }
    }

    /// The same apply, taking fields other managers own (what a controller
    /// that is the authority on these fields does). Other patches are
    /// unchanged.
    pub fn force(self) -> Self {
        match self {
            Patch::Apply { config, .. } => Patch::Apply { config, force: true },
            other => other,
        }
    }

    fn raw(self) -> raw::PatchBody {
        match self {
            Patch::Merge(body) => raw::PatchBody::Merge(body),
            Patch::Json(body) => raw::PatchBody::Json(body),
            Patch::Apply { config, force } => raw::PatchBody::Apply(raw::Apply { config, force }),
        }
    }
}

/// How a delete treats the object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// Preconditions and propagation of a [`delete`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// Delete only if the object still has this uid.
    pub uid: Option<String>,
    /// Delete only if the object is still at this resourceVersion.
    pub resource_version: Option<String>,
    /// The server's default for the kind when `None`.
    pub propagation: Option<Propagation>,
}

impl DeleteOptions {
    /// Deletes only the version that was read: the same uid and
    /// resourceVersion (else [`KubeError::Conflict`]).
    pub fn exactly(obj: &Object) -> Self {
        DeleteOptions { uid: obj.uid(), resource_version: obj.resource_version(), propagation: None }
    }
}

/// The type of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One field at fault in an [`KubeError::Invalid`] (`details.causes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// Why a write did not happen (the `Status` reasons of the API
/// conventions).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KubeError {
    NotFound(String),
    AlreadyExists(String),
    /// A stale resourceVersion, a failed precondition or an apply conflict:
    /// read again from the cache and retry (returning the error from
    /// `reconcile` does exactly that, after a backoff).
    Conflict(String),
    /// Refused by the host's checks (no request was sent) or by the API
    /// server.
    Forbidden(String),
    Invalid {
        message: String,
        causes: Vec<Cause>,
    },
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    Timeout(String),
    BadRequest(String),
    ServerError {
        code: u16,
        message: String,
    },
}

impl KubeError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, KubeError::NotFound(_))
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, KubeError::AlreadyExists(_))
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, KubeError::Conflict(_))
    }
}

impl From<raw::KubeError> for KubeError {
    fn from(e: raw::KubeError) -> Self {
        match e {
            raw::KubeError::NotFound(m) => KubeError::NotFound(m),
            raw::KubeError::AlreadyExists(m) => KubeError::AlreadyExists(m),
            raw::KubeError::Conflict(m) => KubeError::Conflict(m),
            raw::KubeError::Forbidden(m) => KubeError::Forbidden(m),
            raw::KubeError::Invalid(raw::Invalid { message, causes }) => KubeError::Invalid {
                message,
                causes: causes
                    .into_iter()
                    .map(|c| Cause { reason: c.reason, message: c.message, field: c.field })
                    .collect(),
            },
            raw::KubeError::RateLimited(raw::RateLimited { message, retry_after_seconds }) => {
                KubeError::RateLimited { message, retry_after: retry_after_seconds.map(Duration::from_secs) }
            }
            raw::KubeError::Timeout(m) => KubeError::Timeout(m),
            raw::KubeError::BadRequest(m) => KubeError::BadRequest(m),
            raw::KubeError::ServerError(raw::ServerError { code, message }) => KubeError::ServerError { code, message },
        }
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeError::NotFound(m) => write!(f, "not found: {m}"),
            KubeError::AlreadyExists(m) => write!(f, "already exists: {m}"),
            KubeError::Conflict(m) => write!(f, "conflict: {m}"),
            KubeError::Forbidden(m) => write!(f, "forbidden: {m}"),
            KubeError::Invalid { message, causes } => {
                write!(f, "invalid: {message}")?;
                for c in causes {
                    write!(f, "; {}: {}", c.field, c.message)?;
                }
                Ok(())
            }
            KubeError::RateLimited { message, retry_after: Some(after) } => {
                write!(f, "rate limited (retry after {}s): {message}", after.as_secs())
            }
            KubeError::RateLimited { message, retry_after: None } => write!(f, "rate limited: {message}"),
            KubeError::Timeout(m) => write!(f, "timeout: {m}"),
            KubeError::BadRequest(m) => write!(f, "bad request: {m}"),
            KubeError::ServerError { code, message } => write!(f, "server error {code}: {message}"),
        }
    }
}

impl std::error::Error for KubeError {}

/// Lets `reconcile` (which returns `Result<_, String>`) use `?` on writes.
impl From<KubeError> for String {
    fn from(e: KubeError) -> Self {
        e.to_string()
    }
}

type Written = Result<String, KubeError>;

/// Creates the object (its JSON names apiVersion, kind, namespace, name);
/// answers it as stored. [`KubeError::AlreadyExists`] when it exists.
pub fn create(object: impl Body) -> Written {
    Ok(raw::create(&object.json())?)
}

/// Replaces the object; its `metadata.resourceVersion`, when set, must be
/// current (else [`KubeError::Conflict`]).
pub fn replace(object: impl Body) -> Written {
    Ok(raw::replace(&object.json())?)
}

/// Patches the object; answers it as stored.
pub fn patch(target: &Target, patch: Patch) -> Written {
    Ok(raw::patch(&target.raw(), &patch.raw())?)
}

/// Deletes the object. Answers it when it was only marked for deletion (it
/// has finalizers), `None` when it is gone.
pub fn delete(target: &Target, options: &DeleteOptions) -> Result<Option<String>, KubeError> {
    let options = raw::DeleteOptions {
        uid: options.uid.clone(),
        resource_version: options.resource_version.clone(),
        propagation: options.propagation.map(|p| match p {
            Propagation::Orphan => raw::Propagation::Orphan,
            Propagation::Background => raw::Propagation::Background,
            Propagation::Foreground => raw::Propagation::Foreground,
        }),
    };
    Ok(raw::delete(&target.raw(), &options)?)
}

/// Replaces the object's status subresource (its resourceVersion, when set,
/// must be current).
pub fn replace_status(object: impl Body) -> Written {
    Ok(raw::replace_status(&object.json())?)
}

/// Patches the object's status subresource.
pub fn patch_status(target: &Target, patch: Patch) -> Written {
    Ok(raw::patch_status(&target.raw(), &patch.raw())?)
}

/// Records an Event about `involved` (`reason`: UpperCamelCase, e.g.
/// `ConfigChanged`; `message`: for people).
pub fn record_event(involved: &Target, event_type: EventType, reason: &str, message: &str) -> Result<(), KubeError> {
    let event_type = match event_type {
        EventType::Normal => raw::EventType::Normal,
        EventType::Warning => raw::EventType::Warning,
    };
    Ok(raw::record_event(&involved.raw(), event_type, reason, message)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_pass_text_through_and_serialize_values() {
        let value = serde_json::json!({"a": 1});
        assert_eq!(value.json(), r#"{"a":1}"#);
        assert_eq!("{ }".json(), "{ }");
        assert_eq!(String::from("[]").json(), "[]");
        assert_eq!(Patch::merge(&value), Patch::Merge(r#"{"a":1}"#.into()));
    }

    #[test]
    fn only_apply_is_forced() {
        assert_eq!(Patch::apply("{}").force(), Patch::Apply { config: "{}".into(), force: true });
        assert_eq!(Patch::merge("{}").force(), Patch::Merge("{}".into()));
    }

    #[test]
    fn targets_come_from_manifests() {
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "team-a", "name": "app"}
        });
        let target = Target::of_json(&manifest).unwrap();
        assert_eq!(target, Target::namespaced("v1", "ConfigMap", "team-a", "app"));
        assert_eq!(target.to_string(), "ConfigMap team-a/app");
        let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}});
        assert_eq!(Target::of_json(&namespace).unwrap(), Target::cluster("v1", "Namespace", "a"));
        assert_eq!(Target::of_json(&serde_json::json!({"kind": "Namespace"})), None);
    }

    #[test]
    fn errors_read_like_the_api_status() {
        let invalid = KubeError::Invalid {
            message: "ResourceQuota \"q\" is invalid".into(),
            causes: vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "must be a quantity".into(),
                field: "spec.hard.pods".into(),
            }],
        };
        assert_eq!(invalid.to_string(), "invalid: ResourceQuota \"q\" is invalid; spec.hard.pods: must be a quantity");
        let text: String = KubeError::Conflict("stale".into()).into();
        assert_eq!(text, "conflict: stale");
    }
}
