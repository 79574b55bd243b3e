//! [`Meta`]: an object's metadata as `&str` views into one buffer, so a
//! handler that reads only metadata allocates nothing.
//!
//! The buffer is the batch's `delivery.metadata` (one host call per batch,
//! shared by every object of the batch), or, for an object that is not a
//! batch slot, the same encoding built once from the object's own
//! accessors. The encoding is the WIT's: per object, a header of nine
//! little-endian u32s (the record's size, then where each of the seven
//! fields and the label count start, counted from the record's start), then
//! key, namespace, name, uid, resource-version, api-version and kind, each a
//! u32 length then that many UTF-8 bytes (length `0xffffffff`: none); then a
//! u32 label count and that many key/value pairs encoded the same way.
//!
//! The header is what makes a view cheap: finding a record is one read per
//! record before it, and a field is two reads, where walking every field's
//! length cost more than the copy of the whole buffer. What a view costs
//! then is how long those reads wait on one another (each field's length
//! waits for its offset, each label's for the string before it), so a view
//! reads through the buffer without first slicing out its record, which
//! would add one more read to every chain.

use crate::bindings::informer_host::plugin::types::Object as RawObject;

/// Fields before the labels in an object's record.
const FIELDS: usize = 7;
/// Bytes of a record's header.
const HEADER: usize = 4 * (FIELDS + 2);
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
            // A size below the header's would never advance: the host never
            // sends one, and the record's own reads would fail on it anyway.
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
    fn put(out: &mut Vec<u8>, s: Option<&str>) -> u32 {
        let at = out.len() as u32;
        match s {
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            None => out.extend_from_slice(&NONE.to_le_bytes()),
        }
        at
    }
    let mut out = vec![0; HEADER];
    let mut header = [0u32; FIELDS + 2];
    for (i, field) in fields.into_iter().enumerate() {
        header[1 + i] = put(&mut out, field);
    }
    header[FIELDS + 1] = out.len() as u32;
    out.extend_from_slice(&(labels.len() as u32).to_le_bytes());
    for (k, v) in labels {
        put(&mut out, Some(k));
        put(&mut out, Some(v));
    }
    header[0] = out.len() as u32;
    for (i, word) in header.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
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
    /// The buffer holding this object's record.
    bytes: &'a [u8],
    /// Where the record starts in `bytes`. Reads go through the whole
    /// buffer rather than a slice of the record: slicing would need the
    /// record's size first, one more load every field read waits for.
    start: usize,
}

impl<'a> Meta<'a> {
    /// Field `field` (0 key … 6 kind), where the header says it starts.
    fn field(&self, field: usize) -> Option<&'a str> {
        string(self.bytes, self.start + u32_at(self.bytes, self.start + 4 + 4 * field)).0
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
        let mut at = self.start + u32_at(bytes, self.start + 4 * (FIELDS + 1));
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
