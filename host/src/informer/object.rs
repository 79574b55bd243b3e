//! One immutable object version as the cache holds it.
//!
//! This module owns the representation of an object: its JSON text exactly
//! as the source produced it, plus the few metadata fields the engine needs
//! for keys, indexes, selectors and resync decisions. Every holder (the
//! store, every listener buffer, every plugin call) shares one `Arc<Object>`,
//! so an object version is parsed once and never re-serialised per listener.
//! It may not know where objects come from or where they go.

use std::borrow::Cow;
use std::collections::BTreeMap;
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
    #[error("object metadata is larger than 4 GiB")]
    TooLarge,
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
    /// The parsed metadata, back to back in one allocation: key,
    /// apiVersion, kind, uid, resourceVersion, then each label's key and
    /// value in key order.
    meta: Box<str>,
    /// End offsets in `meta` of key, apiVersion, kind, uid, resourceVersion.
    ends: [u32; 5],
    /// End offsets in `meta` of each label key and value, in turn.
    label_ends: Box<[u32]>,
    /// Byte offset where the name starts inside the key (0 when cluster-scoped).
    name_at: u32,
    has_uid: bool,
    has_resource_version: bool,
}

/// A string that borrows from the input unless it has escapes.
#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "apiVersion", default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    labels: Option<BTreeMap<Text<'a>, Text<'a>>>,
}

fn offset(meta: &str) -> Result<u32, ObjectError> {
    u32::try_from(meta.len()).map_err(|_| ObjectError::TooLarge)
}

impl Object {
    /// Parses the metadata of `json` and keeps the text as it is.
    pub fn from_json(json: impl Into<Box<str>>) -> Result<Object, ObjectError> {
        let json: Box<str> = json.into();
        let head: Head<'_> = serde_json::from_str(&json)?;
        let meta = head.metadata.ok_or(ObjectError::MissingName)?;
        let name = meta.name.filter(|n| !n.is_empty()).ok_or(ObjectError::MissingName)?;
        let namespace = meta.namespace.as_deref().filter(|n| !n.is_empty());
        let labels = meta.labels.unwrap_or_default();
        let api_version = head.api_version.unwrap_or_default();
        let kind = head.kind.unwrap_or_default();
        let len = namespace.map_or(0, |ns| ns.len() + 1)
            + name.len()
            + api_version.len()
            + kind.len()
            + meta.uid.as_deref().map_or(0, str::len)
            + meta.resource_version.as_deref().map_or(0, str::len)
            + labels.iter().map(|(k, v)| k.0.len() + v.0.len()).sum::<usize>();
        let mut buf = String::with_capacity(len);
        let mut ends = [0u32; 5];
        let mut name_at = 0;
        if let Some(ns) = namespace {
            buf.push_str(ns);
            buf.push('/');
            name_at = offset(&buf)?;
        }
        buf.push_str(&name);
        ends[0] = offset(&buf)?;
        buf.push_str(&api_version);
        ends[1] = offset(&buf)?;
        buf.push_str(&kind);
        ends[2] = offset(&buf)?;
        buf.push_str(meta.uid.as_deref().unwrap_or(""));
        ends[3] = offset(&buf)?;
        buf.push_str(meta.resource_version.as_deref().unwrap_or(""));
        ends[4] = offset(&buf)?;
        let mut label_ends = Vec::with_capacity(labels.len() * 2);
        for (k, v) in &labels {
            buf.push_str(&k.0);
            label_ends.push(offset(&buf)?);
            buf.push_str(&v.0);
            label_ends.push(offset(&buf)?);
        }
        Ok(Object {
            meta: buf.into_boxed_str(),
            ends,
            label_ends: label_ends.into_boxed_slice(),
            name_at,
            has_uid: meta.uid.is_some(),
            has_resource_version: meta.resource_version.is_some(),
            json,
        })
    }

    /// Parses a raw JSON value taken from a list without copying it twice.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Object, ObjectError> {
        Object::from_json(Box::<str>::from(raw))
    }

    /// Serialises `value` once and wraps it.
    pub fn from_value(value: &impl serde::Serialize) -> Result<Object, ObjectError> {
        Object::from_json(serde_json::to_string(value)?)
    }

    /// `meta[from..to]`.
    fn part(&self, from: u32, to: u32) -> &str {
        &self.meta[from as usize..to as usize]
    }

    /// The `i`-th label as (key, value).
    fn label_at(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { self.ends[4] } else { self.label_ends[2 * i - 1] };
        let (k, v) = (self.label_ends[2 * i], self.label_ends[2 * i + 1]);
        (self.part(start, k), self.part(k, v))
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (client-go's
    /// `MetaNamespaceKeyFunc`).
    pub fn key(&self) -> &str {
        self.part(0, self.ends[0])
    }
    pub fn name(&self) -> &str {
        self.part(self.name_at, self.ends[0])
    }
    pub fn namespace(&self) -> Option<&str> {
        (self.name_at > 0).then(|| self.part(0, self.name_at - 1))
    }
    pub fn uid(&self) -> Option<&str> {
        self.has_uid.then(|| self.part(self.ends[2], self.ends[3]))
    }
    pub fn resource_version(&self) -> Option<&str> {
        self.has_resource_version.then(|| self.part(self.ends[3], self.ends[4]))
    }
    pub fn api_version(&self) -> &str {
        self.part(self.ends[0], self.ends[1])
    }
    pub fn kind(&self) -> &str {
        self.part(self.ends[1], self.ends[2])
    }
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.label_ends.len() / 2).map(|i| self.label_at(i))
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        let n = self.label_ends.len() / 2;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, v) = self.label_at(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }
    /// The JSON text of this version, as the source produced it.
    pub fn json(&self) -> &str {
        &self.json
    }
    /// Bytes this version holds in memory as a cache entry: the struct and
    /// its `Arc` counts, plus what it owns on the heap (the JSON text, the
    /// parsed metadata, the label offsets).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Object>()
            + 2 * std::mem::size_of::<usize>()
            + self.json.len()
            + self.meta.len()
            + std::mem::size_of_val(&*self.label_ends)
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

    /// Bytes this version holds (for memory accounting): the `Arc`
    /// allocation it lives in (counts and this struct) and its heap buffers
    /// (the JSON, the metadata, the label offsets). Allocator overhead is
    /// not included.
    pub fn bytes_held(&self) -> usize {
        2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<Object>()
            + self.json.len()
            + self.meta.len()
            + std::mem::size_of_val(&*self.label_ends)
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
    fn metadata_accessors() {
        let o = Object::from_json(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"prod",
                "uid":"u-1","resourceVersion":"42","labels":{"tier":"front","app":"w\u00e9b","z":""}}}"#,
        )
        .unwrap();
        assert_eq!((o.key(), o.name(), o.namespace()), ("prod/web", "web", Some("prod")));
        assert_eq!((o.api_version(), o.kind()), ("apps/v1", "Deployment"));
        assert_eq!((o.uid(), o.resource_version()), (Some("u-1"), Some("42")));
        assert_eq!(o.labels().collect::<Vec<_>>(), vec![("app", "wéb"), ("tier", "front"), ("z", "")]);
        assert_eq!(
            (o.label("app"), o.label("tier"), o.label("z"), o.label("nope")),
            (Some("wéb"), Some("front"), Some(""), None)
        );
        let bare = Object::from_json(r#"{"metadata":{"name":"n"}}"#).unwrap();
        assert_eq!((bare.uid(), bare.resource_version(), bare.api_version(), bare.kind()), (None, None, "", ""));
        assert_eq!(bare.labels().count(), 0);
        assert_eq!(bare.label("a"), None);
        let empty_rv = Object::from_json(r#"{"metadata":{"name":"n","resourceVersion":""}}"#).unwrap();
        assert_eq!(empty_rv.resource_version(), Some(""));
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
