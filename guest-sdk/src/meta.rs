//! [`Meta`]: an object's metadata as `&str` views into one buffer, so a
//! handler that reads only metadata allocates nothing.
//!
//! The buffer is the batch's `delivery.metadata` (one host call per batch,
//! shared by every object of the batch), or, for an object that is not a
//! batch slot, the same encoding built once from the object's own
//! accessors. The encoding is the WIT's: per object, a header of sixteen
//! little-endian u32s (the record's size; the offset, from the record's
//! start, and length of each of key, namespace, name, uid,
//! resource-version, api-version and kind, length `0xffffffff` for none;
//! the label count `n`), then `2n + 1` offsets bounding each label's key
//! and value, then the UTF-8 bytes.
//!
//! Every offset and length sits at a fixed place in the header or in the
//! label table, so a view reads any field or label with one read after
//! finding its record, never by walking the strings before it. A view
//! reads through the whole buffer rather than first slicing out its record,
//! which would put a read of the record's size in front of every other.

use crate::bindings::informer_host::plugin::types::Object as RawObject;

/// Fields before the labels in an object's record.
const FIELDS: usize = 7;
/// The header's u32 that holds the label count.
const LABEL_COUNT: usize = 1 + 2 * FIELDS;
/// Bytes of a record's header; the label table follows it.
const HEADER: usize = 4 * (LABEL_COUNT + 1);
const NONE: u32 = u32::MAX;

/// Encoded metadata of one or more objects, and where each record starts.
pub struct Records {
    bytes: Vec<u8>,
    /// Where each record starts, found by following the records' sizes.
    starts: Vec<u32>,
}

impl Records {
    /// Indexes `bytes` (records as the WIT encodes them).
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        let mut starts = Vec::with_capacity(bytes.len() / HEADER);
        let mut at = 0;
        while at < bytes.len() {
            starts.push(at as u32);
            // A size below the header's would never advance. The host never
            // sends one; reads through a malformed record stay inside the
            // buffer (they are bounds-checked) and at worst read a
            // neighbour's bytes.
            at += u32_at(&bytes, at).max(HEADER);
        }
        Records { bytes, starts }
    }

    /// One record built from an object's own accessors (an object that is
    /// not a batch slot: `init`, a replay, one-at-a-time delivery).
    pub(crate) fn of(raw: &RawObject) -> Self {
        let (key, namespace, name, uid) = (raw.key(), raw.namespace(), raw.name(), raw.uid());
        let (resource_version, api_version, kind) = (raw.resource_version(), raw.api_version(), raw.kind());
        let fields = [
            Some(key.as_str()),
            namespace.as_deref(),
            Some(name.as_str()),
            uid.as_deref(),
            resource_version.as_deref(),
            Some(api_version.as_str()),
            Some(kind.as_str()),
        ];
        let labels = raw.labels();
        Records::new(encode(fields, labels.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
    }

    /// The metadata of record `index`.
    pub(crate) fn get(&self, index: usize) -> Meta<'_> {
        Meta { bytes: &self.bytes, start: self.starts[index] as usize }
    }
}

/// One record in the WIT's encoding, header first: `fields` are key,
/// namespace, name, uid, resource-version, api-version and kind.
fn encode<'s>(fields: [Option<&str>; FIELDS], labels: impl ExactSizeIterator<Item = (&'s str, &'s str)>) -> Vec<u8> {
    fn set(out: &mut [u8], i: usize, word: usize) {
        out[4 * i..4 * i + 4].copy_from_slice(&(word as u32).to_le_bytes());
    }
    let mut out = vec![0; HEADER + 4 * (2 * labels.len() + 1)];
    for (f, field) in fields.into_iter().enumerate() {
        let at = out.len();
        set(&mut out, 1 + 2 * f, at);
        match field {
            Some(text) => {
                set(&mut out, 2 + 2 * f, text.len());
                out.extend_from_slice(text.as_bytes());
            }
            None => set(&mut out, 2 + 2 * f, NONE as usize),
        }
    }
    set(&mut out, LABEL_COUNT, labels.len());
    let at = out.len();
    set(&mut out, LABEL_COUNT + 1, at);
    for (i, (k, v)) in labels.enumerate() {
        out.extend_from_slice(k.as_bytes());
        let at = out.len();
        set(&mut out, LABEL_COUNT + 2 + 2 * i, at);
        out.extend_from_slice(v.as_bytes());
        let at = out.len();
        set(&mut out, LABEL_COUNT + 3 + 2 * i, at);
    }
    let at = out.len();
    set(&mut out, 0, at);
    out
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
}

/// The bytes `start..end` as text.
fn text(bytes: &[u8], start: usize, end: usize) -> &str {
    let text = &bytes[start..end];
    debug_assert!(std::str::from_utf8(text).is_ok(), "the host sends UTF-8");
    // SAFETY: every string in the buffer is a Rust `&str` the host copied
    // (or one this SDK encoded from canonical-ABI strings, which the
    // component model guarantees are UTF-8). wit-bindgen lifts strings the
    // same way: validated in debug builds only.
    unsafe { std::str::from_utf8_unchecked(text) }
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
    /// The buffer holding this object's record.
    bytes: &'a [u8],
    /// Where the record starts in `bytes`. Reads go through the whole
    /// buffer rather than a slice of the record: slicing would need the
    /// record's size first, one more load every field read waits for.
    start: usize,
}

impl<'a> Meta<'a> {
    /// Field `field` (0 key … 6 kind), where the header says it is.
    fn field(&self, field: usize) -> Option<&'a str> {
        let at = self.start + 4 + 8 * field;
        let (offset, len) = (u32_at(self.bytes, at), u32_at(self.bytes, at + 4));
        let start = self.start + offset;
        (len != NONE as usize).then(|| text(self.bytes, start, start + len))
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
        let (bytes, start) = (self.bytes, self.start);
        let count = u32_at(bytes, start + 4 * LABEL_COUNT);
        (0..count).map(move |i| {
            // Label i's key and value lie between bounds 2i, 2i + 1, 2i + 2.
            let at = start + HEADER + 8 * i;
            let (k, v, end) = (u32_at(bytes, at), u32_at(bytes, at + 4), u32_at(bytes, at + 8));
            (text(bytes, start + k, start + v), text(bytes, start + v, start + end))
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

    #[test]
    fn views_read_every_field_of_every_record() {
        let mut bytes = Vec::new();
        for (ns, labels) in [(Some("shop"), &[("app", "web"), ("tier", "")][..]), (None, &[][..])] {
            let key = ns.map_or("n".to_string(), |ns| format!("{ns}/n"));
            bytes.extend(encode(
                [Some(&key), ns, Some("n"), None, Some("7"), Some("v1"), Some("ConfigMap")],
                labels.iter().copied(),
            ));
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
