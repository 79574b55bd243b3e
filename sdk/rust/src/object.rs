//! Host-owned object versions ([`Object`]) and what a delete delivers
//! ([`Deleted`], [`Tombstone`]).

use std::cell::OnceCell;

use serde::de::DeserializeOwned;

use crate::__private::{self, RawObject};
use crate::bindings::informer_host::plugin::types as raw;
use crate::meta::{Meta, Records};

/// One immutable version of a Kubernetes object, owned by the host.
///
/// [`Object::meta`] borrows the metadata without allocating; the owned
/// accessors ([`Object::key`], [`Object::labels`], …) copy only the field
/// asked for; [`Object::json`] copies the whole object. An object that
/// arrives in a batch is a slot of the batch until its first call that
/// needs more than metadata, so a handler that ignores it, or reads only
/// its metadata, costs no host call of its own.
pub struct Object {
    handle: OnceCell<RawObject>,
    metadata: Metadata,
}

/// Where an object's metadata comes from.
enum Metadata {
    /// A batch slot: the batch's metadata (fetched once per batch, on
    /// first use, shared by its objects), by address: `on_batch` keeps it
    /// and outlives every object it makes (see [`Object::lent`]). A
    /// reference count per object cost the batch loop of every plugin,
    /// no-op included, about 0.5 ns a notification.
    Slot(u32, *const OnceCell<Records>),
    /// Not a batch slot: its own, once asked for.
    Own(OnceCell<Records>),
}

impl From<RawObject> for Object {
    fn from(handle: RawObject) -> Self {
        Object { handle: handle.into(), metadata: Metadata::Own(OnceCell::new()) }
    }
}

impl Object {
    /// Batch slot `slot`, whose metadata `metadata` will hold.
    ///
    /// # Safety
    ///
    /// The object must be dropped before `metadata` is: `on_batch` makes
    /// its objects as temporaries of one item and lends them to the
    /// handler only by reference, so none outlives the batch.
    pub(crate) unsafe fn lent(slot: u32, metadata: &OnceCell<Records>) -> Self {
        Object { handle: OnceCell::new(), metadata: Metadata::Slot(slot, metadata) }
    }

    fn raw(&self) -> &RawObject {
        self.handle.get_or_init(|| {
            let Metadata::Slot(slot, _) = &self.metadata else {
                unreachable!("an object without a handle is a batch slot")
            };
            __private::lend(*slot)
        })
    }

    /// The metadata, borrowed: `&str` views, no allocation. In a batch it
    /// reads the batch's one metadata buffer; otherwise the first call
    /// fetches every field once.
    pub fn meta(&self) -> Meta<'_> {
        match &self.metadata {
            Metadata::Slot(slot, metadata) => {
                // SAFETY: see `lent`: the batch's metadata outlives its objects.
                let metadata = unsafe { &**metadata };
                metadata.get_or_init(__private::fetch_metadata).get(*slot as usize)
            }
            Metadata::Own(own) => own.get_or_init(|| Records::of(self.raw())).get(0),
        }
    }

    /// The batch's view when this is a batch slot (owned accessors of other
    /// objects ask the host for just the field).
    fn slot_meta(&self) -> Option<Meta<'_>> {
        matches!(self.metadata, Metadata::Slot(..)).then(|| self.meta())
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        self.slot_meta().map_or_else(|| self.raw().key(), |m| m.key().to_owned())
    }
    pub fn namespace(&self) -> Option<String> {
        self.slot_meta().map_or_else(|| self.raw().namespace(), |m| m.namespace().map(str::to_owned))
    }
    pub fn name(&self) -> String {
        self.slot_meta().map_or_else(|| self.raw().name(), |m| m.name().to_owned())
    }
    pub fn uid(&self) -> Option<String> {
        self.slot_meta().map_or_else(|| self.raw().uid(), |m| m.uid().map(str::to_owned))
    }
    pub fn resource_version(&self) -> Option<String> {
        self.slot_meta().map_or_else(|| self.raw().resource_version(), |m| m.resource_version().map(str::to_owned))
    }
    pub fn api_version(&self) -> String {
        self.slot_meta().map_or_else(|| self.raw().api_version(), |m| m.api_version().to_owned())
    }
    pub fn kind(&self) -> String {
        self.slot_meta().map_or_else(|| self.raw().kind(), |m| m.kind().to_owned())
    }
    pub fn labels(&self) -> Vec<(String, String)> {
        match self.slot_meta() {
            Some(m) => m.labels().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
            None => self.raw().labels(),
        }
    }
    /// The value of one label, without copying the others.
    pub fn label(&self, key: &str) -> Option<String> {
        match self.slot_meta() {
            Some(m) => m.label(key).map(str::to_owned),
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
