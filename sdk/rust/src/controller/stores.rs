//! Read access to the caches of every informer the controller watches, by
//! the name the host's configuration gives them (the `stores` import).
//!
//! An `Err` names an informer the controller does not watch, or an index it
//! does not have. A tenant's controller sees only its tenant's objects.

use super::bindings::informer_host::plugin::stores as raw;
use crate::Object;

/// The cached object of `informer` with this key (`namespace/name`, or
/// `name`).
pub fn get(informer: &str, key: &str) -> Result<Option<Object>, String> {
    Ok(raw::get(informer, key)?.map(Object::from))
}

/// Every cached object of `informer` in a namespace, or in every visible
/// namespace.
pub fn list(informer: &str, namespace: Option<&str>) -> Result<Vec<Object>, String> {
    Ok(raw::list(informer, namespace)?.into_iter().map(Object::from).collect())
}

/// Objects of `informer` whose index `index` yields `value` (`namespace` is
/// built in).
pub fn by_index(informer: &str, index: &str, value: &str) -> Result<Vec<Object>, String> {
    Ok(raw::by_index(informer, index, value)?.into_iter().map(Object::from).collect())
}
