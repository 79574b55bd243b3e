//! The metadata record: how an object's metadata is laid out in the bytes
//! the host sends plugins (`delivery.metadata`, see `wit/plugin.wit`), and
//! in the host's cache, which keeps every object's record in this form so
//! a batch's metadata is one copy per object.
//!
//! This crate owns the encoding and nothing else: [`encode`] writes a
//! record, [`Record`] reads one, [`starts`] finds the records of a buffer.
//! The host (`Object`) and the Rust guest SDK (`Meta`) both use it, so the
//! two sides cannot drift; the Python, JavaScript, C and Go SDKs parse the
//! same layout from the WIT's description.
//!
//! # Layout
//!
//! Per object, all integers little-endian u32:
//!
//! - a header of sixteen words: the record's size in bytes; for each of key,
//!   namespace, name, uid, resourceVersion, apiVersion and kind its offset
//!   from the record's start and its length ([`NONE`] for an absent field);
//!   the label count `n`;
//! - a label table of `2n + 1` offsets: label `i`'s key is the bytes between
//!   offsets `2i` and `2i + 1`, its value those between `2i + 1` and `2i + 2`;
//! - the UTF-8 bytes: the fields in order, then the labels. Fields may
//!   share bytes: when the key is `namespace/name` (or a cluster-scoped
//!   object's name), [`encode`] writes the namespace and the name only
//!   inside the key, so a reader must find every field by its offset.
//!
//! Every offset and length sits at a fixed place in the header or the label
//! table, so a reader finds any field or label with one read, never by
//! walking the strings before it.
//!
//! ```
//! use metadata_record::{Field, Record, encode};
//! let bytes = encode(
//!     [Some("shop/web"), Some("shop"), Some("web"), None, Some("7"), Some("v1"), Some("ConfigMap")],
//!     [("app", "web")].into_iter(),
//! )
//! .unwrap();
//! let record = Record::at(&bytes, 0).unwrap();
//! assert_eq!(record.field(Field::Key), Some("shop/web"));
//! assert_eq!(record.field(Field::Uid), None);
//! assert_eq!(record.labels().collect::<Vec<_>>(), [("app", "web")]);
//! ```

use std::fmt;

/// The fields of a record, in record order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Field {
    Key = 0,
    Namespace = 1,
    Name = 2,
    Uid = 3,
    ResourceVersion = 4,
    ApiVersion = 5,
    Kind = 6,
}

/// Fields before the labels.
pub const FIELDS: usize = 7;
/// The length that stands for an absent field.
pub const NONE: u32 = u32::MAX;
/// The header word that holds the label count (after the size and each
/// field's offset and length).
const LABEL_COUNT: usize = 1 + 2 * FIELDS;
/// Bytes of a record's header; the label table follows it.
pub const HEADER: usize = 4 * (LABEL_COUNT + 1);

/// A record that would pass 4 GiB, which the u32 offsets cannot address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata is larger than 4 GiB")
    }
}

impl std::error::Error for TooLarge {}

/// Bytes that are not records in this encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Where the bad record starts in the buffer.
    pub at: usize,
    pub reason: &'static str,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed metadata record at byte {}: {}", self.at, self.reason)
    }
}

impl std::error::Error for Malformed {}

/// Sets word `i` of a record.
fn set(out: &mut [u8], i: usize, word: usize) {
    // `encode` checked the whole record's size fits a u32 first.
    out[4 * i..4 * i + 4].copy_from_slice(&(word as u32).to_le_bytes());
}

/// One record: `fields` in [`Field`] order, `labels` in the order readers
/// will see them (the host writes them in key order).
///
/// When the key is `namespace/name` (or, without a namespace, the name),
/// the namespace and the name are written once, inside the key: every
/// reader finds a field by its offset, so fields may share bytes.
pub fn encode<'s>(
    fields: [Option<&str>; FIELDS],
    labels: impl ExactSizeIterator<Item = (&'s str, &'s str)> + Clone,
) -> Result<Vec<u8>, TooLarge> {
    let inside_key = inside_key(&fields);
    let table = 4 * (2 * labels.len() + 1);
    let len = HEADER
        + table
        + fields
            .iter()
            .enumerate()
            .filter(|(f, _)| inside_key[*f].is_none())
            .flat_map(|(_, t)| *t)
            .map(str::len)
            .sum::<usize>()
        + labels.clone().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    u32::try_from(len).map_err(|_| TooLarge)?;
    let mut out = Vec::with_capacity(len);
    out.resize(HEADER + table, 0);
    let key_at = out.len();
    for (f, field) in fields.into_iter().enumerate() {
        let at = match inside_key[f] {
            Some(within) => key_at + within,
            None => out.len(),
        };
        set(&mut out, 1 + 2 * f, at);
        match field {
            Some(text) => {
                set(&mut out, 2 + 2 * f, text.len());
                if inside_key[f].is_none() {
                    out.extend_from_slice(text.as_bytes());
                }
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
    let size = out.len();
    set(&mut out, 0, size);
    debug_assert_eq!(out.len(), len);
    Ok(out)
}

/// For each field, where it lies inside the key when it is not written on
/// its own: the namespace and the name of a key `namespace/name`, the name
/// of a cluster-scoped key.
fn inside_key(fields: &[Option<&str>; FIELDS]) -> [Option<usize>; FIELDS] {
    let mut within = [None; FIELDS];
    let (Some(key), namespace, Some(name)) =
        (fields[Field::Key as usize], fields[Field::Namespace as usize], fields[Field::Name as usize])
    else {
        return within;
    };
    match namespace {
        Some(ns) if key.strip_prefix(ns).and_then(|rest| rest.strip_prefix('/')) == Some(name) => {
            within[Field::Namespace as usize] = Some(0);
            within[Field::Name as usize] = Some(ns.len() + 1);
        }
        None if key == name => within[Field::Name as usize] = Some(0),
        _ => {}
    }
    within
}

/// The word at byte `at`, if four bytes are there.
fn word(bytes: &[u8], at: usize) -> Option<usize> {
    let w = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(w.try_into().ok()?) as usize)
}

/// Where each record of `bytes` starts (records one after another, as
/// `delivery.metadata` sends them), each checked with [`Record::at`].
pub fn starts(bytes: &[u8]) -> Result<Vec<u32>, Malformed> {
    let mut starts = Vec::with_capacity(bytes.len() / HEADER);
    let mut at = 0;
    while at < bytes.len() {
        let record = Record::at(bytes, at)?;
        starts.push(at as u32);
        at += record.size();
    }
    Ok(starts)
}

/// One record, read in place: every accessor is a few loads, without
/// bounds checks, since [`Record::at`] checked the whole record once.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    /// The buffer holding the record. Reads index the whole buffer from
    /// `start` rather than a slice of the record: slicing would need the
    /// record's size first, one more load in front of every field read.
    bytes: &'a [u8],
    start: usize,
}

impl<'a> Record<'a> {
    /// The record starting at byte `start` of `bytes`, after checking that
    /// it lies in `bytes` and that every field and label it bounds lies in
    /// it, at character boundaries of valid UTF-8.
    pub fn at(bytes: &'a [u8], start: usize) -> Result<Self, Malformed> {
        let bad = |reason| Malformed { at: start, reason };
        let rest = bytes.get(start..).ok_or(bad("starts past the end of the buffer"))?;
        let size = word(rest, 0).ok_or(bad("no room for a header"))?;
        let record = rest.get(..size).ok_or(bad("its size runs past the end of the buffer"))?;
        if size < HEADER {
            return Err(bad("its size is smaller than the header"));
        }
        let text = |from: usize, to: usize| {
            let text = record.get(from..to).ok_or(bad("a field or label lies outside the record"))?;
            std::str::from_utf8(text).map(drop).map_err(|_| bad("a field or label is not UTF-8"))
        };
        for f in 0..FIELDS {
            let (offset, len) = (word(record, 4 + 8 * f), word(record, 8 + 8 * f));
            let (offset, len) = (offset.expect("in the header"), len.expect("in the header"));
            if len != NONE as usize {
                text(offset, offset.checked_add(len).ok_or(bad("a field's end overflows"))?)?;
            }
        }
        let count = word(record, 4 * LABEL_COUNT).expect("in the header");
        let table_end = count
            .checked_mul(8)
            .and_then(|t| t.checked_add(HEADER + 4))
            .filter(|&end| end <= size)
            .ok_or(bad("its label table runs past the record"))?;
        let bound = |j: usize| word(record, HEADER + 4 * j).expect("in the table");
        for i in 0..count {
            let (k, v, end) = (bound(2 * i), bound(2 * i + 1), bound(2 * i + 2));
            if k < table_end || k > v || v > end {
                return Err(bad("its label bounds are out of order"));
            }
            text(k, v)?;
            text(v, end)?;
        }
        Ok(Record { bytes, start })
    }

    /// A record that is trusted to be well formed, read without checks.
    ///
    /// # Safety
    ///
    /// `bytes[start..]` must begin a record that [`Record::at`] accepts:
    /// one written by [`encode`] and not changed since, or one the host
    /// sent (the guest SDK trusts the host's records as the canonical ABI
    /// trusts the host's list lengths and strings: the host writes the
    /// guest's memory directly and could break anything it holds).
    pub unsafe fn new_unchecked(bytes: &'a [u8], start: usize) -> Self {
        debug_assert!(Record::at(bytes, start).is_ok(), "{:?}", Record::at(bytes, start).err());
        Record { bytes, start }
    }

    /// The word at byte `at` of the record.
    fn word(&self, at: usize) -> usize {
        let at = self.start + at;
        // SAFETY: `at`/`new_unchecked` established that every word read
        // here (header and label table) lies inside the record.
        unsafe { u32::from_le_bytes(*self.bytes.as_ptr().add(at).cast::<[u8; 4]>()) as usize }
    }

    /// The record's bytes `from..to` as text.
    fn text(&self, from: usize, to: usize) -> &'a str {
        // SAFETY: as for `word`: every field and label lies in the record,
        // bounded at UTF-8 character boundaries.
        unsafe {
            let bytes = self.bytes.get_unchecked(self.start + from..self.start + to);
            std::str::from_utf8_unchecked(bytes)
        }
    }

    /// The record's size in bytes.
    pub fn size(&self) -> usize {
        self.word(0)
    }

    /// The record's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        &self.bytes[self.start..self.start + self.size()]
    }

    /// A field, `None` when the object has none.
    pub fn field(&self, field: Field) -> Option<&'a str> {
        let f = field as usize;
        let (offset, len) = (self.word(4 + 8 * f), self.word(8 + 8 * f));
        (len != NONE as usize).then(|| self.text(offset, offset + len))
    }

    /// The number of labels.
    pub fn label_count(&self) -> usize {
        self.word(4 * LABEL_COUNT)
    }

    /// Label `i` as (key, value).
    ///
    /// # Panics
    ///
    /// When `i` is not below [`Record::label_count`].
    pub fn label_at(&self, i: usize) -> (&'a str, &'a str) {
        assert!(i < self.label_count(), "label {i} of {}", self.label_count());
        self.label_unchecked(i)
    }

    /// Label `i`, `i` known to be below the count.
    fn label_unchecked(&self, i: usize) -> (&'a str, &'a str) {
        let at = HEADER + 8 * i;
        let (k, v, end) = (self.word(at), self.word(at + 4), self.word(at + 8));
        (self.text(k, v), self.text(v, end))
    }

    /// The labels, in record order.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + use<'a> {
        let record = *self;
        (0..self.label_count()).map(move |i| record.label_unchecked(i))
    }

    /// The value of label `key`, looked up in record order.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of label `key` by binary search, for records whose labels
    /// are in key order (every record the host writes).
    pub fn label_in_key_order(&self, key: &str) -> Option<&'a str> {
        let (mut lo, mut hi) = (0, self.label_count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, v) = self.label_unchecked(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }
}

impl fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Record");
        for (name, field) in [
            ("key", Field::Key),
            ("namespace", Field::Namespace),
            ("name", Field::Name),
            ("uid", Field::Uid),
            ("resource_version", Field::ResourceVersion),
            ("api_version", Field::ApiVersion),
            ("kind", Field::Kind),
        ] {
            d.field(name, &self.field(field));
        }
        d.field("labels", &self.labels().collect::<Vec<_>>()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ns: Option<&str>, labels: &[(&str, &str)]) -> Vec<u8> {
        let key = ns.map_or("n".to_string(), |ns| format!("{ns}/n"));
        encode([Some(&key), ns, Some("n"), None, Some("7"), Some("v1"), Some("ConfigMap")], labels.iter().copied())
            .unwrap()
    }

    #[test]
    fn every_field_and_label_reads_back_from_a_buffer_of_records() {
        let mut bytes = sample(Some("shop"), &[("app", "web"), ("tier", ""), ("ü", "ß".repeat(300).as_str())]);
        let first = bytes.len();
        bytes.extend(sample(None, &[]));
        assert_eq!(starts(&bytes).unwrap(), [0, first as u32]);
        let a = Record::at(&bytes, 0).unwrap();
        assert_eq!(a.size(), first);
        assert_eq!(a.field(Field::Key), Some("shop/n"));
        assert_eq!(a.field(Field::Namespace), Some("shop"));
        assert_eq!(a.field(Field::Uid), None);
        assert_eq!(a.field(Field::ResourceVersion), Some("7"));
        assert_eq!(a.field(Field::Kind), Some("ConfigMap"));
        assert_eq!(a.label_count(), 3);
        assert_eq!(a.label_at(1), ("tier", ""));
        assert_eq!(a.labels().nth(2).unwrap().1.chars().count(), 300);
        assert_eq!((a.label("tier"), a.label("nope")), (Some(""), None));
        assert_eq!((a.label_in_key_order("app"), a.label_in_key_order("ü")), (Some("web"), Some(&*"ß".repeat(300))));
        assert_eq!(a.label_in_key_order("b"), None);
        let b = Record::at(&bytes, first).unwrap();
        assert_eq!((b.field(Field::Key), b.field(Field::Namespace), b.label_count()), (Some("n"), None, 0));
        assert_eq!(b.bytes(), &bytes[first..]);
    }

    #[test]
    fn the_namespace_and_name_are_written_inside_the_key_only_when_they_spell_it() {
        let text = |key: &str, ns: Option<&str>, name: &str| {
            let bytes = encode([Some(key), ns, Some(name), None, None, Some(""), Some("")], [].into_iter()).unwrap();
            let r = Record::at(&bytes, 0).unwrap();
            let fields = (r.field(Field::Key), r.field(Field::Namespace), r.field(Field::Name));
            assert_eq!(fields, (Some(key), ns, Some(name)));
            bytes.len() - HEADER - 4
        };
        assert_eq!(text("shop/web", Some("shop"), "web"), "shop/web".len());
        assert_eq!(text("web", None, "web"), "web".len());
        // Keys a custom key function made: every field written on its own.
        assert_eq!(text("shop:web", Some("shop"), "web"), "shop:webshopweb".len());
        assert_eq!(text("shop/web", Some("sho"), "p/web"), "shop/webshop/web".len());
        assert_eq!(text("shop/webs", Some("shop"), "web"), "shop/websshopweb".len());
        assert_eq!(text("x", None, "web"), "xweb".len());
    }

    #[test]
    fn malformed_records_are_refused_with_where_and_why() {
        let good = sample(Some("shop"), &[("app", "web")]);
        let patched = |word: usize, value: u32| {
            let mut b = good.clone();
            b[4 * word..4 * word + 4].copy_from_slice(&value.to_le_bytes());
            b
        };
        let reason = |bytes: &[u8]| Record::at(bytes, 0).unwrap_err().reason;
        assert_eq!(reason(&good[..10]), "its size runs past the end of the buffer");
        assert_eq!(reason(&patched(0, 8)), "its size is smaller than the header");
        assert_eq!(reason(&patched(0, good.len() as u32 + 1)), "its size runs past the end of the buffer");
        // The key's length reaching past the record.
        assert_eq!(reason(&patched(2, 10_000)), "a field or label lies outside the record");
        assert_eq!(reason(&patched(2, u32::MAX - 1)), "a field or label lies outside the record");
        assert_eq!(reason(&patched(LABEL_COUNT, 1_000)), "its label table runs past the record");
        assert_eq!(reason(&patched(LABEL_COUNT + 2, 0)), "its label bounds are out of order");
        // A field cut inside a multi-byte character.
        let mut split = encode([Some("ü"), None, Some("ü"), None, None, Some(""), Some("")], [].into_iter()).unwrap();
        split[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(reason(&split), "a field or label is not UTF-8");
        let mut two = good.clone();
        two.extend(patched(0, 3));
        assert_eq!(
            starts(&two).unwrap_err(),
            Malformed { at: good.len(), reason: "its size is smaller than the header" }
        );
        assert!(Malformed { at: 3, reason: "x" }.to_string().contains("at byte 3: x"));
    }

    #[test]
    fn a_record_past_4_gib_is_refused() {
        // Not allocated: the length is summed before anything is written.
        let huge = "x".repeat(1 << 20);
        let labels: Vec<(&str, &str)> = (0..4096).map(|_| (huge.as_str(), "")).collect();
        assert_eq!(encode([Some("k"); FIELDS], labels.into_iter()), Err(TooLarge));
    }
}
