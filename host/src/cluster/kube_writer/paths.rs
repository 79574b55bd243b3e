//! Where a write goes: the paths of a resolved kind's collection, items
//! and subresources, with names and namespaces checked as path segments.

use kube::discovery::ApiResource;

use crate::cluster::{Target, WriteError};

/// What discovery says about one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedKind {
    /// Group, version, kind and plural as the server serves them.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// The subresources served (`status`, `scale`, ...).
    pub subresources: Vec<String>,
}

impl ResolvedKind {
    /// `/api/v1` or `/apis/{group}/{version}`.
    pub(super) fn root(&self) -> String {
        let r = &self.resource;
        if r.group.is_empty() { format!("/api/{}", r.version) } else { format!("/apis/{}/{}", r.group, r.version) }
    }

    /// The collection path of `target`, after checking that its namespace
    /// fits the kind's scope.
    pub(super) fn collection(&self, target: &Target) -> Result<String, WriteError> {
        let namespace = target.namespace.as_deref().filter(|ns| !ns.is_empty());
        match (self.namespaced, namespace) {
            (true, Some(ns)) => {
                Ok(format!("{}/namespaces/{}/{}", self.root(), path_segment(ns)?, self.resource.plural))
            }
            (false, None) => Ok(format!("{}/{}", self.root(), self.resource.plural)),
            (true, None) => Err(WriteError::BadRequest(format!(
                "{target}: {} is namespaced and no namespace was given",
                self.resource.kind
            ))),
            (false, Some(ns)) => Err(WriteError::BadRequest(format!(
                "{target}: {} is cluster-scoped, but namespace {ns:?} was given",
                self.resource.kind
            ))),
        }
    }

    /// The path of `target` itself, or of its `subresource`. A subresource
    /// discovery does not list is refused before sending: the server would
    /// answer `404` for a route it does not have, which would read as "no
    /// such object" (a status write to a ConfigMap, say).
    pub(super) fn item(&self, target: &Target, subresource: Option<&str>) -> Result<String, WriteError> {
        let mut path = format!("{}/{}", self.collection(target)?, path_segment(&target.name)?);
        if let Some(sub) = subresource {
            if !self.subresources.iter().any(|s| s == sub) {
                return Err(WriteError::BadRequest(format!(
                    "{target}: {} has no {sub} subresource",
                    self.resource.kind
                )));
            }
            path.push('/');
            path.push_str(sub);
        }
        Ok(path)
    }
}

/// A name or namespace as one path segment. The API server refuses
/// `.`, `..` and names containing `/` or `%` (`IsValidPathSegmentName`);
/// so does this, before sending, as the path would otherwise point
/// elsewhere. Anything else is percent-encoded and judged by the server.
pub(super) fn path_segment(s: &str) -> Result<String, WriteError> {
    if s.is_empty() {
        return Err(WriteError::BadRequest("an empty name or namespace".into()));
    }
    if s == "." || s == ".." {
        return Err(WriteError::BadRequest(format!("{s:?} may not be a name or namespace")));
    }
    if let Some(c) = s.chars().find(|c| matches!(c, '/' | '%')) {
        return Err(WriteError::BadRequest(format!("{s:?}: a name or namespace may not contain '{c}'")));
    }
    Ok(percent_encode(s))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(super) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
