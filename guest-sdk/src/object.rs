//! Host-owned object versions ([`Object`]) and what a delete delivers
//! ([`Deleted`], [`Tombstone`]).

use serde::de::DeserializeOwned;

use crate::__private::{self, RawObject};
use crate::bindings::informer_host::plugin::types as raw;

/// One immutable version of a Kubernetes object, owned by the host.
///
/// Metadata accessors copy only the field asked for; [`Object::json`] copies
/// the whole object. An object that arrives in a batch is a slot of the
/// batch until its first accessor call, so a handler that ignores it costs
/// no host call.
pub struct Object {
    slot: Option<u32>,
    handle: std::cell::OnceCell<RawObject>,
}

impl From<RawObject> for Object {
    fn from(handle: RawObject) -> Self {
        Object { slot: None, handle: handle.into() }
    }
}

impl Object {
    pub(crate) fn lent(slot: u32) -> Self {
        Object { slot: Some(slot), handle: std::cell::OnceCell::new() }
    }

    fn raw(&self) -> &RawObject {
        self.handle.get_or_init(|| {
            let slot = self.slot.expect("an object without a handle is a batch slot");
            __private::lend(slot)
        })
    }

    /// A metadata field from the batch's metadata (one host call per
    /// batch), or `None` for an object that is not a batch slot.
    fn field(&self, field: usize) -> Option<Option<String>> {
        let slot = self.slot?;
        Some(__private::with_metadata(|m| m.field(slot, field)))
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        self.field(0).map_or_else(|| self.raw().key(), Option::unwrap_or_default)
    }
    pub fn namespace(&self) -> Option<String> {
        self.field(1).unwrap_or_else(|| self.raw().namespace())
    }
    pub fn name(&self) -> String {
        self.field(2).map_or_else(|| self.raw().name(), Option::unwrap_or_default)
    }
    pub fn uid(&self) -> Option<String> {
        self.field(3).unwrap_or_else(|| self.raw().uid())
    }
    pub fn resource_version(&self) -> Option<String> {
        self.field(4).unwrap_or_else(|| self.raw().resource_version())
    }
    pub fn api_version(&self) -> String {
        self.field(5).map_or_else(|| self.raw().api_version(), Option::unwrap_or_default)
    }
    pub fn kind(&self) -> String {
        self.field(6).map_or_else(|| self.raw().kind(), Option::unwrap_or_default)
    }
    pub fn labels(&self) -> Vec<(String, String)> {
        match self.slot {
            Some(slot) => __private::with_metadata(|m| m.labels(slot).collect()),
            None => self.raw().labels(),
        }
    }
    /// The value of one label, without copying the others.
    pub fn label(&self, key: &str) -> Option<String> {
        match self.slot {
            Some(slot) => __private::with_metadata(|m| m.labels(slot).find(|(k, _)| k == key).map(|(_, v)| v)),
            None => self.raw().label(key),
        }
    }
    pub fn annotations(&self) -> Vec<(String, String)> {
        self.raw().annotations()
    }
    /// The whole object as JSON text.
    pub fn json(&self) -> String {
        self.raw().json()
    }
    /// The JSON text of the value at an RFC 6901 pointer such as
    /// `/spec/replicas`, or `None` when nothing is there.
    pub fn pointer(&self, pointer: &str) -> Option<String> {
        self.raw().pointer(pointer)
    }

    /// Deserializes the whole object (its [`json`](Object::json)) into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_str(&self.json()).map_err(|e| format!("cannot parse {}: {e}", self.key()))
    }

    /// Deserializes the value at an RFC 6901 pointer such as `/spec/replicas`,
    /// or `Ok(None)` when nothing is there. Only that value crosses the boundary.
    pub fn parse_at<T: DeserializeOwned>(&self, pointer: &str) -> Result<Option<T>, String> {
        match self.pointer(pointer) {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("cannot parse {pointer} of {}: {e}", self.key())),
        }
    }
}

/// client-go's `DeletedFinalStateUnknown`: the object was deleted while the
/// watch was disconnected, so its final state is unknown.
pub struct Tombstone {
    pub key: String,
    /// The last state the host had cached.
    pub last_known: Option<Object>,
}

/// What [`ResourceEventHandler::on_delete`](crate::ResourceEventHandler::on_delete) receives.
pub enum Deleted {
    /// The last known state of the deleted object.
    Object(Object),
    /// Deleted during a disconnection; found missing on relist.
    UnknownFinalState(Tombstone),
}

impl From<raw::Deleted> for Deleted {
    fn from(d: raw::Deleted) -> Self {
        match d {
            raw::Deleted::Object(obj) => Deleted::Object(obj.into()),
            raw::Deleted::UnknownFinalState(t) => {
                Deleted::UnknownFinalState(Tombstone { key: t.key, last_known: t.last_known.map(Object::from) })
            }
        }
    }
}

impl Deleted {
    /// The key of the deleted object.
    pub fn key(&self) -> String {
        match self {
            Deleted::Object(obj) => obj.key(),
            Deleted::UnknownFinalState(tombstone) => tombstone.key.clone(),
        }
    }

    /// The last known state: the deleted object, or a tombstone's last cached
    /// state when the host had one.
    pub fn last_known(&self) -> Option<&Object> {
        match self {
            Deleted::Object(obj) => Some(obj),
            Deleted::UnknownFinalState(tombstone) => tombstone.last_known.as_ref(),
        }
    }

    /// The name of the deleted object: from its last known state, or else the
    /// part of a tombstone's key after the namespace.
    pub fn name(&self) -> String {
        match self.last_known() {
            Some(obj) => obj.name(),
            None => {
                let key = self.key();
                key.rsplit_once('/').map_or(key.clone(), |(_, name)| name.to_owned())
            }
        }
    }

    /// True for a `DeletedFinalStateUnknown` tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Deleted::UnknownFinalState(_))
    }
}
