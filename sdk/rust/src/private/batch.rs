//! The `on-batch` fast path of handler plugins: the batch's metadata, lent
//! objects, and `delivery.begin`/`done` around items with visible effects.
//!
//! Code that every plugin links (`Object` accessors, `log`) reaches the
//! `delivery` import only through pointers that [`on_batch`] installs. A
//! controller never calls `on_batch`, so its component does not import
//! `delivery`: the `controller` world has no such import and the host would
//! refuse a component that asked for it.

use std::cell::{Cell, OnceCell};
use std::thread::LocalKey;

use super::{RawObject, State, with};
use crate::bindings::informer_host::plugin::delivery;
use crate::meta::Records;
use crate::{Deleted, Object, ResourceEventHandler, Tombstone};

/// The `delivery` functions called from outside [`on_batch`].
#[derive(Clone, Copy)]
struct Delivery {
    begin: fn(u32),
    lend: fn(u32) -> RawObject,
    metadata: fn() -> Vec<u8>,
}

/// The batch item being handled: its index, and whether the host was
/// told it is having a visible effect (`delivery.begin`).
#[derive(Clone, Copy)]
struct Current {
    index: u32,
    begun: bool,
}

thread_local! {
    static DELIVERY: Cell<Option<Delivery>> = const { Cell::new(None) };
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

fn installed() -> Delivery {
    DELIVERY.get().expect("batch slots exist only inside on-batch")
}

/// The object in `slot` of the batch in flight.
pub(crate) fn lend(slot: u32) -> RawObject {
    (installed().lend)(slot)
}

/// The batch's metadata (`delivery.indexed-metadata`).
pub(crate) fn fetch_metadata() -> Records {
    Records::new((installed().metadata)())
}

/// Tells the host, once per batch item, that the item is about to have a
/// visible effect, so a trap from here on skips exactly this item. Outside
/// a batch (and in controllers) it does nothing.
pub fn before_visible_effect() {
    CURRENT.with(|c| {
        if let Some(Current { index, begun: false }) = c.get() {
            (installed().begin)(index);
            c.set(Some(Current { index, begun: true }));
        }
    })
}

/// Handles a batch in order (`kinds` and slots as in the WIT). Items
/// that have no visible effect and succeed cost no host call.
pub fn on_batch<T: ResourceEventHandler>(
    state: &'static LocalKey<State<T>>,
    kinds: Vec<u8>,
    tombstone_keys: Vec<String>,
) {
    DELIVERY.set(Some(Delivery { begin: delivery::begin, lend: delivery::lend, metadata: delivery::indexed_metadata }));
    // Fetched by the first object whose metadata is read, shared by all;
    // it outlives every object below, each dropped with its item.
    let metadata: OnceCell<Records> = OnceCell::new();
    with(state, |handler| {
        let mut keys = tombstone_keys.into_iter();
        let mut slot = 0u32;
        let mut next = || {
            slot += 1;
            // SAFETY: each object is a temporary of its item, lent to the
            // handler by reference, and dropped before `metadata`.
            unsafe { Object::lent(slot - 1, &metadata) }
        };
        for (index, kind) in (0u32..).zip(kinds) {
            CURRENT.with(|c| c.set(Some(Current { index, begun: false })));
            let result = match kind {
                0 | 1 => handler.on_add(&next(), kind == 1),
                2 => {
                    let old = next();
                    handler.on_update(&old, &next())
                }
                3 => handler.on_delete(&Deleted::Object(next())),
                4 => {
                    let key = keys.next().unwrap_or_default();
                    handler.on_delete(&Deleted::UnknownFinalState(Tombstone { key, last_known: Some(next()) }))
                }
                other => Err(format!("unknown notification kind {other} from the host")),
            };
            let begun = CURRENT.with(|c| c.take()).is_some_and(|c| c.begun);
            if begun || result.is_err() {
                delivery::done(index, result.as_ref().err().map(String::as_str));
            }
        }
    });
}
