//! `delivery.metadata`'s and `delivery.indexed-metadata`'s results,
//! lowered straight into the guest.
//!
//! Every object keeps its metadata in the WIT's record encoding, so a
//! batch's metadata is those records one after another. Returned as a
//! `Vec<u8>`, they would be concatenated in a host buffer and then copied
//! again into the guest's memory; [`MetadataList`] lowers as the same
//! `list<u8>` but copies each record once, from the object into the
//! memory the guest's `realloc` handed out. This module owns only that
//! copy: which objects are in the batch is `Progress`'s business.
//!
//! The `ComponentType`/`Lower` impls use wasmtime's `__internal` lowering
//! context, the interface its `bindgen!` output is written against. The
//! crate pins wasmtime's exact version, so a change there fails to build
//! rather than misbehaving.

use std::mem::MaybeUninit;

use wasmtime::ValRaw;
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext};
use wasmtime::component::{ComponentType, Lower};

/// The metadata records of a batch's objects, lowered as one `list<u8>`:
/// `delivery.metadata`'s records alone, or `delivery.indexed-metadata`'s
/// table of where each starts followed by the same records.
pub struct MetadataList {
    /// Each lent object's record, in slot order.
    records: Vec<*const [u8]>,
    /// Bytes of the records together (known when the objects were lent,
    /// so the lowering walks the objects once).
    records_len: usize,
    indexed: bool,
}

// SAFETY: the pointees are records owned by the batch's objects (`Arc`s,
// Send + Sync), only read, and outlive the list (see `new`).
unsafe impl Send for MetadataList {}
unsafe impl Sync for MetadataList {}

impl MetadataList {
    /// `records`, `records_len` bytes together; `indexed` puts the table
    /// of where each starts in front of them.
    ///
    /// # Safety
    ///
    /// Every pointer must stay valid until the list is lowered: the host
    /// call that returns it runs inside the `on-batch` call whose objects
    /// own the records (see `Progress::lend`).
    pub unsafe fn new(records: Vec<*const [u8]>, records_len: usize, indexed: bool) -> Self {
        MetadataList { records, records_len, indexed }
    }

    /// Bytes the list takes in the guest: what the host copies.
    pub fn byte_len(&self) -> usize {
        self.table_len() + self.records_len
    }

    fn table_len(&self) -> usize {
        if self.indexed { 4 * self.records.len() } else { 0 }
    }

    /// Allocates the list in the guest and copies every record into it
    /// (after the table, when indexed): its address and length there.
    fn lower<U>(&self, cx: &mut LowerContext<'_, U>) -> wasmtime::Result<(usize, usize)> {
        let len = self.byte_len();
        // `realloc` checks that what the guest returns lies in its memory.
        let ptr = cx.realloc(0, 0, 1, len)?;
        let memory = cx.as_slice_mut();
        let Some(dst) = memory.get_mut(ptr..).and_then(|m| m.get_mut(..len)) else {
            wasmtime::bail!("realloc returned a region outside the guest's memory");
        };
        let (table, records) = dst.split_at_mut(self.table_len());
        let mut table = table.chunks_exact_mut(4);
        let mut at = 0;
        for &record in &self.records {
            // SAFETY: see `new`.
            let record = unsafe { &*record };
            let Some(to) = records.get_mut(at..at + record.len()) else {
                wasmtime::bail!(
                    "a batch's metadata records outgrew the {} bytes they were counted at",
                    self.records_len
                );
            };
            to.copy_from_slice(record);
            if let Some(entry) = table.next() {
                // Each start is below `len`, which the guest's 32-bit
                // memory bounds.
                entry.copy_from_slice(&u32::try_from(self.table_len() + at)?.to_le_bytes());
            }
            at += record.len();
        }
        Ok((ptr, len))
    }
}

// SAFETY: the type checks and lowers exactly as `[u8]` (a `list<u8>`): the
// same ABI, the same flat form, and `lower` writes what `[u8]`'s lowering
// writes, a pointer/length pair to bytes the guest's `realloc` allocated.
unsafe impl ComponentType for MetadataList {
    type Lower = <[u8] as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <[u8] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: see `ComponentType` above.
unsafe impl Lower for MetadataList {
    fn linear_lower_to_flat<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        _ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        let (ptr, len) = self.lower(cx)?;
        // As wasmtime lowers any list: both halves as 64-bit values.
        dst.write([ValRaw::i64(ptr as i64), ValRaw::i64(len as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<U>(
        &self,
        cx: &mut LowerContext<'_, U>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let (ptr, len) = self.lower(cx)?;
        *cx.get::<4>(offset) = u32::try_from(ptr)?.to_le_bytes();
        *cx.get::<4>(offset + 4) = u32::try_from(len)?.to_le_bytes();
        Ok(())
    }
}
