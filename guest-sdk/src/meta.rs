//! [`Meta`]: an object's metadata as `&str` views into one buffer, so a
//! handler that reads only metadata allocates nothing.
//!
//! The buffer is the batch's `delivery.metadata` (one host call per batch,
//! shared by every object of the batch), or, for an object that is not a
//! batch slot, the same encoding built once from the object's own
//! accessors. The encoding is the WIT's: per object, key, namespace, name,
//! uid, resource-version, api-version and kind, each a little-endian u32
//! length then that many UTF-8 bytes (length `0xffffffff`: none); then a
//! u32 label count and that many key/value pairs encoded the same way.

use crate::bindings::informer_host::plugin::types::Object as RawObject;

/// Fields before the labels in an object's record.
const FIELDS: usize = 7;
const NONE: u32 = u32::MAX;

/// Encoded metadata of one or more objects, and where each record's fields
/// start.
pub struct Records {
    bytes: Vec<u8>,
    /// Per record, where each of its 7 fields starts, then where its labels
    /// start: found in the one pass that indexes the buffer, so reading a
    /// record's field walks nothing.
    fields: Vec<[u32; FIELDS + 1]>,
}

impl Records {
    /// Indexes `bytes` (records as the WIT encodes them).
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        let mut records = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let mut fields = [0; FIELDS + 1];
            for f in &mut fields[..FIELDS] {
                *f = at as u32;
                at = skip(&bytes, at);
            }
            fields[FIELDS] = at as u32;
            let labels = u32_at(&bytes, at);
            at += 4;
            for _ in 0..2 * labels {
                at = skip(&bytes, at);
            }
            records.push(fields);
        }
        Records { bytes, fields: records }
    }

    /// One record built from an object's own accessors (an object that is
    /// not a batch slot: `init`, a replay, one-at-a-time delivery).
    pub(crate) fn of(raw: &RawObject) -> Self {
        let mut bytes = Vec::with_capacity(256);
        let put = |out: &mut Vec<u8>, s: Option<&str>| match s {
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            None => out.extend_from_slice(&NONE.to_le_bytes()),
        };
        put(&mut bytes, Some(&raw.key()));
        put(&mut bytes, raw.namespace().as_deref());
        put(&mut bytes, Some(&raw.name()));
        put(&mut bytes, raw.uid().as_deref());
        put(&mut bytes, raw.resource_version().as_deref());
        put(&mut bytes, Some(&raw.api_version()));
        put(&mut bytes, Some(&raw.kind()));
        let labels = raw.labels();
        bytes.extend_from_slice(&(labels.len() as u32).to_le_bytes());
        for (k, v) in &labels {
            put(&mut bytes, Some(k));
            put(&mut bytes, Some(v));
        }
        Records::new(bytes)
    }

    /// The metadata of record `index`.
    pub(crate) fn get(&self, index: usize) -> Meta<'_> {
        Meta { bytes: &self.bytes, fields: self.fields[index] }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
}

/// The position after the string at `at`.
fn skip(bytes: &[u8], at: usize) -> usize {
    match u32_at(bytes, at) as u32 {
        NONE => at + 4,
        len => at + 4 + len as usize,
    }
}

/// The string at `at` and the position after it.
fn string(bytes: &[u8], at: usize) -> (Option<&str>, usize) {
    match u32_at(bytes, at) as u32 {
        NONE => (None, at + 4),
        len => {
            let end = at + 4 + len as usize;
            let text = &bytes[at + 4..end];
            debug_assert!(std::str::from_utf8(text).is_ok(), "the host sends UTF-8");
            // SAFETY: every string in the buffer is a Rust `&str` the host
            // copied (or one this SDK encoded from canonical-ABI strings, which
            // the component model guarantees are UTF-8). wit-bindgen lifts
            // strings the same way: validated in debug builds only.
            (Some(unsafe { std::str::from_utf8_unchecked(text) }), end)
        }
    }
}

/// An object's metadata, borrowed: every accessor returns a view into the
/// buffer the host sent, without allocating.
///
/// ```ignore
/// fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<(), String> {
///     let meta = obj.meta();
///     if meta.label("app") == Some("web") {
///         informer_guest::log::info(&format!("web: {}", meta.key()));
///     }
///     Ok(())
/// }
/// ```
#[derive(Clone, Copy)]
pub struct Meta<'a> {
    bytes: &'a [u8],
    /// Where each of the 7 fields starts, then where the labels start.
    fields: [u32; FIELDS + 1],
}

impl<'a> Meta<'a> {
    fn field(&self, field: usize) -> Option<&'a str> {
        string(self.bytes, self.fields[field] as usize).0
    }
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> &'a str {
        self.field(0).unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&'a str> {
        self.field(1)
    }
    pub fn name(&self) -> &'a str {
        self.field(2).unwrap_or_default()
    }
    pub fn uid(&self) -> Option<&'a str> {
        self.field(3)
    }
    pub fn resource_version(&self) -> Option<&'a str> {
        self.field(4)
    }
    pub fn api_version(&self) -> &'a str {
        self.field(5).unwrap_or_default()
    }
    pub fn kind(&self) -> &'a str {
        self.field(6).unwrap_or_default()
    }
    /// The labels, in the object's order.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let bytes = self.bytes;
        let mut at = self.fields[FIELDS] as usize;
        let count = u32_at(bytes, at);
        at += 4;
        (0..count).map(move |_| {
            let (k, next) = string(bytes, at);
            let (v, next) = string(bytes, next);
            at = next;
            (k.unwrap_or_default(), v.unwrap_or_default())
        })
    }
    /// The value of one label.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            None => out.extend_from_slice(&NONE.to_le_bytes()),
        }
    }

    #[test]
    fn views_read_every_field_of_every_record() {
        let mut bytes = Vec::new();
        for (ns, labels) in [(Some("shop"), &[("app", "web"), ("tier", "")][..]), (None, &[][..])] {
            let key = ns.map_or("n".to_string(), |ns| format!("{ns}/n"));
            put(&mut bytes, Some(&key));
            put(&mut bytes, ns);
            put(&mut bytes, Some("n"));
            put(&mut bytes, None);
            put(&mut bytes, Some("7"));
            put(&mut bytes, Some("v1"));
            put(&mut bytes, Some("ConfigMap"));
            bytes.extend_from_slice(&(labels.len() as u32).to_le_bytes());
            for (k, v) in labels {
                put(&mut bytes, Some(k));
                put(&mut bytes, Some(v));
            }
        }
        let records = Records::new(bytes);
        let a = records.get(0);
        assert_eq!((a.key(), a.namespace(), a.name(), a.uid()), ("shop/n", Some("shop"), "n", None));
        assert_eq!((a.resource_version(), a.api_version(), a.kind()), (Some("7"), "v1", "ConfigMap"));
        assert_eq!(a.labels().collect::<Vec<_>>(), [("app", "web"), ("tier", "")]);
        assert_eq!((a.label("tier"), a.label("nope")), (Some(""), None));
        let b = records.get(1);
        assert_eq!((b.key(), b.namespace(), b.labels().count()), ("n", None, 0));
    }
}
