//! `delivery.metadata`'s result, lowered straight into the guest.
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

use crate::informer::ObjectRef;

/// The metadata records of a batch's objects, lowered as one `list<u8>`.
pub struct MetadataList(Vec<*const ObjectRef>);

// SAFETY: the pointees are `Arc`s (Send + Sync), only read, and outlive the
// list (see `new`).
unsafe impl Send for MetadataList {}
unsafe impl Sync for MetadataList {}

impl MetadataList {
    /// # Safety
    ///
    /// Every pointer must stay valid until the list is lowered: the host
    /// call that returns it runs inside the `on-batch` call its objects
    /// are lent to (see `Progress::lend`).
    pub unsafe fn new(objects: Vec<*const ObjectRef>) -> Self {
        MetadataList(objects)
    }

    fn records(&self) -> impl Iterator<Item = &[u8]> {
        // SAFETY: see `new`.
        self.0.iter().map(|obj| unsafe { &**obj }.metadata_record())
    }

    /// Allocates the list in the guest and copies every record into it:
    /// its address and length there.
    fn lower<U>(&self, cx: &mut LowerContext<'_, U>) -> wasmtime::Result<(usize, usize)> {
        let len: usize = self.records().map(<[u8]>::len).sum();
        // `realloc` checks that what the guest returns lies in its memory.
        let ptr = cx.realloc(0, 0, 1, len)?;
        let memory = cx.as_slice_mut();
        let Some(dst) = memory.get_mut(ptr..).and_then(|m| m.get_mut(..len)) else {
            wasmtime::bail!("realloc returned a region outside the guest's memory");
        };
        let mut at = 0;
        for record in self.records() {
            dst[at..at + record.len()].copy_from_slice(record);
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
