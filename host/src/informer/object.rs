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
    /// The parsed metadata, encoded exactly as `delivery.metadata` sends it
    /// to plugins (see `wit/plugin.wit`): a header of nine little-endian
    /// u32s (the record's size, then where each of the seven fields and the
    /// label count start, from the record's start), then key, namespace,
    /// name, uid, resourceVersion, apiVersion and kind, each a u32 length
    /// (`u32::MAX`: none) and that many UTF-8 bytes, then a u32 label count
    /// and each label's key and value, in key order, encoded the same way.
    /// Keeping it in that form makes a batch's metadata one copy per object
    /// for every plugin that reads it, instead of an encoding per plugin;
    /// the header lets a reader find any field without walking the others.
    meta: Box<[u8]>,
    /// Where each label's key length starts in `meta` (its value follows).
    labels: Box<[u32]>,
}

/// Metadata fields before the labels, in record order.
const FIELDS: usize = 7;
const KEY: usize = 0;
const NAMESPACE: usize = 1;
const NAME: usize = 2;
const UID: usize = 3;
const RESOURCE_VERSION: usize = 4;
const API_VERSION: usize = 5;
const KIND: usize = 6;
/// The length that stands for an absent field.
const NONE: u32 = u32::MAX;
/// Bytes of a record's header: its size, then the offsets of the seven
/// fields and of the label count.
const HEADER: usize = 4 * (FIELDS + 2);

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

/// Appends one length-prefixed field to a metadata record.
fn put(out: &mut Vec<u8>, s: Option<&str>) -> Result<u32, ObjectError> {
    let at = u32::try_from(out.len()).map_err(|_| ObjectError::TooLarge)?;
    match s {
        Some(s) => {
            out.extend_from_slice(&u32::try_from(s.len()).map_err(|_| ObjectError::TooLarge)?.to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
    Ok(at)
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
        let key = match namespace {
            Some(ns) => Cow::Owned(format!("{ns}/{name}")),
            None => Cow::Borrowed(&*name),
        };
        let len = HEADER
            + 4 * (FIELDS + 1 + 2 * labels.len())
            + key.len()
            + namespace.map_or(0, str::len)
            + name.len()
            + api_version.len()
            + kind.len()
            + meta.uid.as_deref().map_or(0, str::len)
            + meta.resource_version.as_deref().map_or(0, str::len)
            + labels.iter().map(|(k, v)| k.0.len() + v.0.len()).sum::<usize>();
        let mut buf = Vec::with_capacity(len);
        buf.resize(HEADER, 0);
        let mut at = [0u32; FIELDS + 1];
        at[KEY] = put(&mut buf, Some(&key))?;
        at[NAMESPACE] = put(&mut buf, namespace)?;
        at[NAME] = put(&mut buf, Some(&name))?;
        at[UID] = put(&mut buf, meta.uid.as_deref())?;
        at[RESOURCE_VERSION] = put(&mut buf, meta.resource_version.as_deref())?;
        at[API_VERSION] = put(&mut buf, Some(&api_version))?;
        at[KIND] = put(&mut buf, Some(&kind))?;
        at[FIELDS] = u32::try_from(buf.len()).map_err(|_| ObjectError::TooLarge)?;
        buf.extend_from_slice(&u32::try_from(labels.len()).map_err(|_| ObjectError::TooLarge)?.to_le_bytes());
        let mut label_at = Vec::with_capacity(labels.len());
        for (k, v) in &labels {
            label_at.push(put(&mut buf, Some(&k.0))?);
            put(&mut buf, Some(&v.0))?;
        }
        let size = u32::try_from(buf.len()).map_err(|_| ObjectError::TooLarge)?;
        for (i, word) in std::iter::once(size).chain(at).enumerate() {
            buf[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
        Ok(Object { meta: buf.into_boxed_slice(), labels: label_at.into_boxed_slice(), json })
    }

    /// Parses a raw JSON value taken from a list without copying it twice.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Object, ObjectError> {
        Object::from_json(Box::<str>::from(raw))
    }

    /// Serialises `value` once and wraps it.
    pub fn from_value(value: &impl serde::Serialize) -> Result<Object, ObjectError> {
        Object::from_json(serde_json::to_string(value)?)
    }

    /// The field whose length starts at `at`, and where the next begins.
    fn field_at(&self, at: u32) -> (Option<&str>, u32) {
        let at = at as usize;
        let len = u32::from_le_bytes(self.meta[at..at + 4].try_into().expect("4 bytes"));
        if len == NONE {
            return (None, at as u32 + 4);
        }
        let text = &self.meta[at + 4..at + 4 + len as usize];
        // SAFETY: `from_json` wrote every field from a `&str`, and nothing
        // changes `meta` afterwards; lengths and offsets are its own.
        (Some(unsafe { std::str::from_utf8_unchecked(text) }), (at + 4) as u32 + len)
    }

    /// Field `field` (`KEY` … `KIND`), found through the record's header.
    fn field(&self, field: usize) -> Option<&str> {
        let at = 4 + 4 * field;
        self.field_at(u32::from_le_bytes(self.meta[at..at + 4].try_into().expect("4 bytes"))).0
    }

    /// The `i`-th label as (key, value).
    fn label_at(&self, i: usize) -> (&str, &str) {
        let (k, next) = self.field_at(self.labels[i]);
        (k.unwrap_or_default(), self.field_at(next).0.unwrap_or_default())
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (client-go's
    /// `MetaNamespaceKeyFunc`).
    pub fn key(&self) -> &str {
        self.field(KEY).unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.field(NAME).unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.field(NAMESPACE)
    }
    pub fn uid(&self) -> Option<&str> {
        self.field(UID)
    }
    pub fn resource_version(&self) -> Option<&str> {
        self.field(RESOURCE_VERSION)
    }
    pub fn api_version(&self) -> &str {
        self.field(API_VERSION).unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.field(KIND).unwrap_or_default()
    }
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.labels.len()).map(|i| self.label_at(i))
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.labels.len());
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
    /// The metadata record as plugins receive it from `delivery.metadata`
    /// (the encoding is described on [`Object`]'s `meta` field and in
    /// `wit/plugin.wit`).
    pub fn metadata_record(&self) -> &[u8] {
        &self.meta
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

    /// Bytes this version holds (for memory accounting): the `Arc`
    /// allocation it lives in (counts and this struct) and its heap buffers
    /// (the JSON, the metadata, the label offsets). Allocator overhead is
    /// not included.
    pub fn bytes_held(&self) -> usize {
        2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<Object>()
            + self.json.len()
            + self.meta.len()
            + std::mem::size_of_val(&*self.labels)
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

    /// The record is what `delivery.metadata` promises plugins, field by
    /// field, read back with an independent decoder.
    #[test]
    fn metadata_record_is_the_wit_encoding() {
        fn decode(bytes: &[u8]) -> (Vec<Option<String>>, Vec<(String, String)>) {
            fn u32_at(bytes: &[u8], at: &mut usize) -> u32 {
                *at += 4;
                u32::from_le_bytes(bytes[*at - 4..*at].try_into().unwrap())
            }
            let next = |at: &mut usize| {
                let len = u32_at(bytes, at);
                (len != u32::MAX).then(|| {
                    *at += len as usize;
                    std::str::from_utf8(&bytes[*at - len as usize..*at]).unwrap().to_string()
                })
            };
            let mut at = 0;
            let header: Vec<u32> = (0..9).map(|_| u32_at(bytes, &mut at)).collect();
            assert_eq!(header[0] as usize, bytes.len(), "the header's size is the record's");
            let fields: Vec<_> = (0..7)
                .map(|i| {
                    assert_eq!(header[1 + i] as usize, at, "the header says where field {i} starts");
                    next(&mut at)
                })
                .collect();
            assert_eq!(header[8] as usize, at, "the header says where the label count starts");
            let count = u32_at(bytes, &mut at);
            let labels = (0..count).map(|_| (next(&mut at).unwrap(), next(&mut at).unwrap())).collect();
            assert_eq!(at, bytes.len(), "nothing after the labels");
            (fields, labels)
        }
        let o = Object::from_json(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7",
                "labels":{"b":"2","a":"1"}}}"#,
        )
        .unwrap();
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            decode(o.metadata_record()),
            (
                vec![some("ns/a"), some("ns"), some("a"), None, some("7"), some("v1"), some("ConfigMap")],
                vec![("a".into(), "1".into()), ("b".into(), "2".into())]
            )
        );
        let cluster = Object::from_json(r#"{"kind":"Namespace","metadata":{"name":"team-a","uid":"u"}}"#).unwrap();
        assert_eq!(
            decode(cluster.metadata_record()),
            (vec![some("team-a"), None, some("team-a"), some("u"), None, some(""), some("Namespace")], vec![])
        );
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
