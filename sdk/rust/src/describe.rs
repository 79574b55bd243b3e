//! One-line descriptions of notifications, in a stable format that the host's
//! end-to-end tests parse (the `recorder` plugin logs exactly these lines).
//!
//! `<rv>` is the resource version, or `none` when the object has none.

use crate::{Deleted, Object};

fn rv(obj: Option<&Object>) -> String {
    obj.and_then(Object::resource_version).unwrap_or_else(|| "none".to_owned())
}

/// `add <key> rv=<rv> initial=<true|false>`
pub fn add(obj: &Object, is_in_initial_list: bool) -> String {
    format!("add {} rv={} initial={is_in_initial_list}", obj.key(), rv(Some(obj)))
}

/// `update <key> rv=<old rv>-><new rv>`
pub fn update(old: &Object, new: &Object) -> String {
    format!("update {} rv={}->{}", new.key(), rv(Some(old)), rv(Some(new)))
}

/// `delete <key> rv=<rv>` for a plain delete, `delete-tombstone <key>
/// rv=<rv>` for a tombstone (the rv of the last known state, or `none`).
pub fn delete(obj: &Deleted) -> String {
    let kind = if obj.is_tombstone() { "delete-tombstone" } else { "delete" };
    format!("{kind} {} rv={}", obj.key(), rv(obj.last_known()))
}
