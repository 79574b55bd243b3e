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

use metadata_record::{Field, Record};
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
    /// The parsed metadata as one record in the encoding `delivery.metadata`
    /// sends plugins (the `metadata-record` crate; `wit/plugin.wit`).
    /// Keeping it in that form makes a batch's metadata one copy per object
    /// for every plugin that reads it, instead of an encoding per plugin.
    meta: Box<[u8]>,
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
        let fields = [
            Some(&*key),
            namespace,
            Some(&*name),
            meta.uid.as_deref(),
            meta.resource_version.as_deref(),
            Some(&*api_version),
            Some(&*kind),
        ];
        let labels = labels.iter().map(|(k, v)| (&*k.0, &*v.0));
        let meta = metadata_record::encode(fields, labels).map_err(|_| ObjectError::TooLarge)?;
        Ok(Object { meta: meta.into_boxed_slice(), json })
    }

    /// Parses a raw JSON value taken from a list without copying it twice.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Object, ObjectError> {
        Object::from_json(Box::<str>::from(raw))
    }

    /// Serialises `value` once and wraps it.
    pub fn from_value(value: &impl serde::Serialize) -> Result<Object, ObjectError> {
        Object::from_json(serde_json::to_string(value)?)
    }

    /// The metadata record, read in place.
    fn record(&self) -> Record<'_> {
        // SAFETY: `from_json` wrote `meta` with `metadata_record::encode`
        // and nothing changes it after.
        unsafe { Record::new_unchecked(&self.meta, 0) }
    }

    fn field(&self, field: Field) -> Option<&str> {
        self.record().field(field)
    }

    /// `namespace/name`, or `name` for cluster-scoped objects (client-go's
    /// `MetaNamespaceKeyFunc`).
    pub fn key(&self) -> &str {
        self.field(Field::Key).unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.field(Field::Name).unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.field(Field::Namespace)
    }
    pub fn uid(&self) -> Option<&str> {
        self.field(Field::Uid)
    }
    pub fn resource_version(&self) -> Option<&str> {
        self.field(Field::ResourceVersion)
    }
    pub fn api_version(&self) -> &str {
        self.field(Field::ApiVersion).unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.field(Field::Kind).unwrap_or_default()
    }
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.record().labels()
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        // `from_json` writes the labels in key order (a BTreeMap's).
        self.record().label_in_key_order(key)
    }
    /// The metadata record as plugins receive it from `delivery.metadata`
    /// (the encoding is the `metadata-record` crate's, described in
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
    /// (the JSON, the metadata). Allocator overhead is not included.
    pub fn bytes_held(&self) -> usize {
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<Object>() + self.json.len() + self.meta.len()
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
            let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as usize;
            let text = |a: usize, b: usize| std::str::from_utf8(&bytes[a..b]).unwrap().to_string();
            assert_eq!(word(0), bytes.len(), "the header's size is the record's");
            let count = word(15);
            let table_end = 64 + 4 * (2 * count + 1);
            let fields: Vec<Option<(usize, usize)>> = (0..7)
                .map(|f| {
                    let (offset, len) = (word(1 + 2 * f), word(2 + 2 * f));
                    (len != u32::MAX as usize).then_some((offset, offset + len))
                })
                .collect();
            // The key follows the table; the namespace and the name lie
            // inside it when it is `namespace/name` (or the name); the
            // other fields and then the labels follow, back to back.
            let mut at = table_end;
            for (f, span) in fields.iter().enumerate() {
                let Some((from, to)) = *span else { continue };
                if (f == 1 || f == 2) && from >= table_end && to <= fields[0].map_or(0, |k| k.1) {
                    continue;
                }
                assert_eq!(from, at, "field {f} starts where the one before ended");
                at = to;
            }
            let bounds: Vec<usize> = (0..2 * count + 1).map(|j| word(16 + j)).collect();
            assert_eq!(bounds[0], at, "the first label starts after the fields");
            let labels = (0..count)
                .map(|i| (text(bounds[2 * i], bounds[2 * i + 1]), text(bounds[2 * i + 1], bounds[2 * i + 2])));
            let labels = labels.collect();
            assert_eq!(bounds[2 * count], bytes.len(), "nothing after the labels");
            (fields.into_iter().map(|span| span.map(|(from, to)| text(from, to))).collect(), labels)
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
        // The namespace and the name are written once, inside the key.
        let text_bytes = |o: &Object| o.metadata_record().len() - 64 - 4 * (2 * o.labels().count() + 1);
        assert_eq!(text_bytes(&o), "ns/a7v1ConfigMapa1b2".len());
        assert_eq!(text_bytes(&cluster), "team-auNamespace".len());
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
