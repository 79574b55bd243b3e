//! One immutable object version as the cache holds it.
//!
//! This module owns the representation of an object: its JSON text exactly
//! as the source produced it, plus the few metadata fields the engine needs
//! for keys, indexes, selectors and resync decisions. Every holder (the
//! store, every listener buffer, every plugin call) shares one `Arc<Object>`,
//! so an object version is parsed once and never re-serialised per listener.
//! It may not know where objects come from or where they go.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

/// An object version shared by the store and every listener.
pub type ObjectRef = Arc<Object>;

/// Why bytes could not become an [`Object`].
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("not a Kubernetes object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no metadata.name")]
    MissingName,
}

/// One immutable version of a Kubernetes object.
///
/// ```
/// use informer_host::informer::Object;
/// let obj = Object::from_json(r#"{"apiVersion":"v1","kind":"ConfigMap",
///     "metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"}}}"#).unwrap();
/// assert_eq!(obj.key(), "ns/a");
/// assert_eq!(obj.label("app"), Some("x"));
/// assert_eq!(obj.resource_version(), Some("7"));
/// ```
#[derive(Debug)]
pub struct Object {
    json: Box<str>,
    key: Box<str>,
    /// Byte offset where the name starts inside `key` (0 when cluster-scoped).
    name_at: usize,
    api_version: Box<str>,
    kind: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    labels: Box<[(Box<str>, Box<str>)]>,
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "apiVersion", default, borrow)]
    api_version: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(default, borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    uid: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

impl Object {
    /// Parses the metadata of `json` and keeps the text as it is.
    pub fn from_json(json: impl Into<Box<str>>) -> Result<Object, ObjectError> {
        let json: Box<str> = json.into();
        let head: Head<'_> = serde_json::from_str(&json)?;
        let meta = head.metadata.ok_or(ObjectError::MissingName)?;
        let name = meta.name.filter(|n| !n.is_empty()).ok_or(ObjectError::MissingName)?;
        let (key, name_at) = match meta.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => (format!("{ns}/{name}"), ns.len() + 1),
            None => (name.to_string(), 0),
        };
        let labels = meta
            .labels
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect();
        let api_version = head.api_version.unwrap_or_default().into();
        let kind = head.kind.unwrap_or_default().into();
        let uid = meta.uid.map(Into::into);
        let resource_version = meta.resource_version.map(Into::into);
        Ok(Object { key: key.into_boxed_str(), name_at, api_version, kind, uid, resource_version, labels, json })
    }

    /// Parses a raw JSON value taken from a list without copying it twice.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Object, ObjectError> {
        Object::from_json(Box::<str>::from(raw))
    }

    /// Serialises `value` once and wraps it.
    pub fn from_value(value: &impl serde::Serialize) -> Result<Object, ObjectError> {
        Object::from_json(serde_json::to_string(value)?)
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (client-go's
    /// `MetaNamespaceKeyFunc`).
    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn name(&self) -> &str {
        &self.key[self.name_at..]
    }
    pub fn namespace(&self) -> Option<&str> {
        (self.name_at > 0).then(|| &self.key[..self.name_at - 1])
    }
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    pub fn api_version(&self) -> &str {
        &self.api_version
    }
    pub fn kind(&self) -> &str {
        &self.kind
    }
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.labels[i].1)
    }
    /// The JSON text of this version, as the source produced it.
    pub fn json(&self) -> &str {
        &self.json
    }
    /// The annotations, parsed from the JSON on demand (they are not kept).
    pub fn annotations(&self) -> Vec<(String, String)> {
        self.pointer_value("/metadata/annotations")
            .and_then(|v| serde_json::from_value::<std::collections::BTreeMap<String, String>>(v).ok())
            .map(|m| m.into_iter().collect())
            .unwrap_or_default()
    }
    /// The value at an RFC 6901 JSON pointer.
    pub fn pointer_value(&self, pointer: &str) -> Option<serde_json::Value> {
        let value: serde_json::Value = serde_json::from_str(&self.json).ok()?;
        value.pointer(pointer).cloned()
    }
    /// The whole object parsed into any serde type.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.json)
    }

    /// Heap and inline bytes this version holds (for memory accounting).
    pub fn bytes_held(&self) -> usize {
        std::mem::size_of::<Object>()
            + self.json.len()
            + self.key.len()
            + self.api_version.len()
            + self.kind.len()
            + self.uid.as_ref().map_or(0, |s| s.len())
            + self.resource_version.as_ref().map_or(0, |s| s.len())
            + self.labels.len() * std::mem::size_of::<(Box<str>, Box<str>)>()
            + self.labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }
}

/// What a delete notification carries: the last known state, or client-go's
/// `DeletedFinalStateUnknown` when the deletion was only noticed on relist.
#[derive(Debug, Clone)]
pub enum DeletedObject {
    Object(ObjectRef),
    /// The key vanished from a relist; `obj` is the last state the cache had.
    FinalStateUnknown {
        key: Box<str>,
        obj: ObjectRef,
    },
}

impl DeletedObject {
    pub fn key(&self) -> &str {
        match self {
            DeletedObject::Object(o) => o.key(),
            DeletedObject::FinalStateUnknown { key, .. } => key,
        }
    }
    /// The last known state in either case.
    pub fn object(&self) -> &ObjectRef {
        match self {
            DeletedObject::Object(o) | DeletedObject::FinalStateUnknown { obj: o, .. } => o,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_scoped_key_is_name() {
        let o = Object::from_json(r#"{"kind":"Namespace","metadata":{"name":"team-a"}}"#).unwrap();
        assert_eq!(o.key(), "team-a");
        assert_eq!(o.namespace(), None);
        assert_eq!(o.name(), "team-a");
    }

    #[test]
    fn missing_name_is_an_error() {
        assert!(matches!(Object::from_json(r#"{"kind":"Pod","metadata":{}}"#), Err(ObjectError::MissingName)));
    }

    #[test]
    fn pointer_and_annotations() {
        let o =
            Object::from_json(r#"{"metadata":{"name":"a","annotations":{"x":"1"}},"spec":{"replicas":3}}"#).unwrap();
        assert_eq!(o.pointer_value("/spec/replicas"), Some(serde_json::json!(3)));
        assert_eq!(o.annotations(), vec![("x".to_string(), "1".to_string())]);
    }
}
