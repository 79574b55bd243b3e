//! Read-only access to the informer's cache (the `cache` import).
//!
//! The host links this capability only when the plugin's configuration grants
//! it; a plugin that never calls these functions does not import it. For a
//! controller this is its primary informer's cache; it reads every informer
//! it watches, the primary included, by name through
//! [`controller::stores`](crate::controller::stores).

use crate::Object;
use crate::bindings::informer_host::plugin::cache as raw;

/// The cached object with this key.
pub fn get(key: &str) -> Option<Object> {
    raw::get(key).map(Object::from)
}

/// Every cached object of a namespace, or of every visible namespace.
pub fn list(namespace: Option<&str>) -> Vec<Object> {
    raw::list(namespace).into_iter().map(Object::from).collect()
}

/// Objects whose index `index` yields `value` (`namespace` is built in).
pub fn by_index(index: &str, value: &str) -> Result<Vec<Object>, String> {
    Ok(raw::by_index(index, value)?.into_iter().map(Object::from).collect())
}
