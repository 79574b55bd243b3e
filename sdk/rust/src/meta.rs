//! [`Meta`]: an object's metadata as `&str` views into one buffer, so a
//! handler that reads only metadata allocates nothing.
//!
//! The buffer is the batch's `delivery.indexed-metadata` (one host call
//! per batch, shared by every object of the batch: the table of where each
//! record starts, then the records), or, for an object that is not a batch
//! slot, the same layout built once from the object's own accessors. The encoding (described in the WIT) is the `metadata-record`
//! crate's, which the host writes with the same code: every offset and
//! length sits at a fixed place, so a view reads any field or label with
//! one read after finding its record.
//!
//! Reads are not bounds-checked. The records come from the host, which the
//! SDK trusts as the canonical ABI does (wit-bindgen lifts the host's
//! strings without validating them in release builds): the host writes
//! this memory directly and could break anything in it. Debug builds check
//! every record in full before reading it.

use metadata_record::{Field, Record};

use crate::bindings::informer_host::plugin::types::Object as RawObject;

/// Encoded metadata of one or more objects behind the table of where each
/// record starts (`delivery.indexed-metadata`'s layout).
pub struct Records {
    bytes: Vec<u8>,
    /// How many records the table lists.
    count: usize,
}

impl Records {
    /// Records as the host sends them: the table, then the records.
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        #[cfg(debug_assertions)]
        check_table(&bytes);
        let count = bytes.get(..4).map_or(0, |w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize / 4);
        Records { bytes, count }
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
        let labels = labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let record = metadata_record::encode(fields, labels).expect("one object's metadata is under 4 GiB");
        // A table of one start: the record follows it.
        let mut bytes = Vec::with_capacity(4 + record.len());
        bytes.extend_from_slice(&4u32.to_le_bytes());
        bytes.extend_from_slice(&record);
        Records { bytes, count: 1 }
    }

    /// The metadata of record `index`.
    ///
    /// # Panics
    ///
    /// When there is no record `index`.
    pub(crate) fn get(&self, index: usize) -> Meta<'_> {
        assert!(index < self.count, "no metadata record {index} in this batch of {}", self.count);
        // SAFETY: the table is the host's, trusted as its records are (see
        // the module documentation; debug builds check it in `new`), and
        // its first word, which `count` comes from, is its size.
        let start = unsafe { u32::from_le_bytes(*self.bytes.as_ptr().add(4 * index).cast::<[u8; 4]>()) } as usize;
        // SAFETY: the records are the host's or `encode`'s (see the module
        // documentation); `new_unchecked` checks them in debug builds.
        Meta(unsafe { Record::new_unchecked(&self.bytes, start) })
    }
}

/// Debug builds check that the table lists each record in turn, as the
/// records' sizes lay them out (a host bug shows here, not as wrong text).
#[cfg(debug_assertions)]
fn check_table(bytes: &[u8]) {
    let word = |at: usize| bytes.get(at..at + 4).map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize);
    let Some(table) = word(0) else { return };
    let expected: Vec<usize> = metadata_record::starts(&bytes[table..])
        .unwrap_or_else(|e| panic!("the batch's metadata records are malformed: {e}"))
        .into_iter()
        .map(|s| table + s as usize)
        .collect();
    let listed: Vec<usize> = (0..table / 4).filter_map(|i| word(4 * i)).collect();
    assert_eq!(listed, expected, "the metadata table does not list the records where they start");
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
pub struct Meta<'a>(Record<'a>);

impl<'a> Meta<'a> {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> &'a str {
        self.0.field(Field::Key).unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&'a str> {
        self.0.field(Field::Namespace)
    }
    pub fn name(&self) -> &'a str {
        self.0.field(Field::Name).unwrap_or_default()
    }
    pub fn uid(&self) -> Option<&'a str> {
        self.0.field(Field::Uid)
    }
    pub fn resource_version(&self) -> Option<&'a str> {
        self.0.field(Field::ResourceVersion)
    }
    pub fn api_version(&self) -> &'a str {
        self.0.field(Field::ApiVersion).unwrap_or_default()
    }
    pub fn kind(&self) -> &'a str {
        self.0.field(Field::Kind).unwrap_or_default()
    }
    /// The labels, in the object's order.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + use<'a> {
        self.0.labels()
    }
    /// The value of one label.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.0.label(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ns: Option<&str>, labels: &[(&str, &str)]) -> Vec<u8> {
        let key = ns.map_or("n".to_string(), |ns| format!("{ns}/n"));
        let fields = [Some(key.as_str()), ns, Some("n"), None, Some("7"), Some("v1"), Some("ConfigMap")];
        metadata_record::encode(fields, labels.iter().copied()).unwrap()
    }

    /// `records` as `delivery.indexed-metadata` sends them.
    fn indexed(records: &[Vec<u8>]) -> Vec<u8> {
        let mut at = 4 * records.len();
        let mut bytes = Vec::new();
        for r in records {
            bytes.extend((at as u32).to_le_bytes());
            at += r.len();
        }
        bytes.extend(records.concat());
        bytes
    }

    #[test]
    fn views_read_every_field_of_every_record() {
        let records =
            Records::new(indexed(&[record(Some("shop"), &[("app", "web"), ("tier", "")]), record(None, &[])]));
        let a = records.get(0);
        assert_eq!((a.key(), a.namespace(), a.name(), a.uid()), ("shop/n", Some("shop"), "n", None));
        assert_eq!((a.resource_version(), a.api_version(), a.kind()), (Some("7"), "v1", "ConfigMap"));
        assert_eq!(a.labels().collect::<Vec<_>>(), [("app", "web"), ("tier", "")]);
        assert_eq!((a.label("tier"), a.label("nope")), (Some(""), None));
        let b = records.get(1);
        assert_eq!((b.key(), b.namespace(), b.labels().count()), ("n", None, 0));
        assert_eq!(Records::new(Vec::new()).count, 0, "an empty batch has no records");
    }

    #[test]
    #[should_panic(expected = "no metadata record 2 in this batch of 2")]
    fn a_slot_past_the_table_panics() {
        Records::new(indexed(&[record(None, &[]), record(None, &[])])).get(2);
    }

    #[test]
    #[should_panic(expected = "the metadata table does not list the records where they start")]
    fn a_table_that_misplaces_a_record_panics_in_debug_builds() {
        let mut bytes = indexed(&[record(None, &[]), record(None, &[])]);
        bytes[4..8].copy_from_slice(&8u32.to_le_bytes());
        Records::new(bytes);
    }

    /// Debug builds (these tests) check a record before reading it, so a
    /// host bug shows as a panic naming the record, not as wrong text.
    #[test]
    #[should_panic(expected = "its label bounds are out of order")]
    fn a_malformed_record_panics_in_debug_builds() {
        let mut bytes = indexed(&[record(Some("shop"), &[("app", "web")])]);
        bytes[4 + 4 * 16..4 + 4 * 17].copy_from_slice(&0u32.to_le_bytes());
        Records::new(bytes).get(0);
    }
}
