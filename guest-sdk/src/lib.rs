//! Rust guest SDK for Informer Host plugins.
//!
//! A plugin is a WebAssembly component targeting the `informer-host:plugin`
//! world `batched-plugin` (`wit/plugin.wit`). This crate hides the `wit-bindgen` plumbing: a
//! plugin implements [`ResourceEventHandler`] on a type of its own and hands
//! that type to [`export_plugin!`], which exports the component functions and
//! keeps one value of the type per instance.
//!
//! - **State**: the macro keeps the plugin value in a per-instance global.
//!   `init` creates it with [`Default`] and then calls
//!   [`ResourceEventHandler::init`] on it with the plugin's configuration; a
//!   notification that arrives before `init` gets a `Default` value. A trapped
//!   instance is never called again, so state never outlives a panic.
//! - **Config**: [`Config`] is the JSON text the host passes to `init`;
//!   [`Config::parse`] deserializes it into any `serde` type of the plugin.
//! - **Objects**: [`Object`] is a host-owned object version. Metadata
//!   accessors (`key`, `name`, `namespace`, `resource_version`, `label`, ...)
//!   never copy the body; [`Object::json`] returns the whole object and
//!   [`Object::parse`] deserializes it (k8s-openapi types work).
//! - **Logging**: [`trace!`], [`debug!`], [`info!`], [`warn!`], [`error!`] call
//!   the host's `log` import, tagged by the host with plugin and tenant.
//! - **Cache**: [`cache::get`], [`cache::list`] and [`cache::by_index`] read the
//!   informer's cache (only when the host grants the capability).
//!
//! - **Batches**: the host hands the plugin many notifications per call
//!   (`on-batch`); the SDK calls the trait methods one at a time, in order,
//!   and tells the host which one is running whenever it matters: before the
//!   first log line or panic of a notification. A notification that neither
//!   logs nor fails costs no host call, and an object it never looks at is
//!   never lent.
//!
//! Returning `Err` from a handler method is logged and counted by the host; a
//! panic traps the instance and the host skips that notification.
//!
//! # Example
//!
//! ```no_run
//! use informer_guest::{Config, Object, ResourceEventHandler, info};
//!
//! #[derive(serde::Deserialize)]
//! struct Settings { prefix: String }
//!
//! #[derive(Default)]
//! struct Greeter { prefix: String }
//!
//! impl ResourceEventHandler for Greeter {
//!     fn init(&mut self, config: &Config) -> Result<(), String> {
//!         self.prefix = config.parse::<Settings>()?.prefix;
//!         Ok(())
//!     }
//!
//!     fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<(), String> {
//!         info!("{} {}", self.prefix, obj.key());
//!         Ok(())
//!     }
//! }
//!
//! informer_guest::export_plugin!(Greeter);
//! ```
//!
//! Build it as a `cdylib` with `cargo build --release --target wasm32-wasip2`;
//! the `.wasm` in `target/wasm32-wasip2/release/` is the component.

// Lets the generated export macro name this crate as `informer_guest::...`
// both here and in plugin crates.
extern crate self as informer_guest;

/// Bindings generated from `wit/` (not part of the stable API).
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "batched-plugin",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_bindings",
        default_bindings_module: "informer_guest::bindings",
        runtime_path: "informer_guest::__private::wit_bindgen::rt",
    });
}

use serde::de::DeserializeOwned;

use bindings::informer_host::plugin::types as raw;
pub use bindings::informer_host::plugin::types::Level;

/// Read-only access to the informer's cache (the `cache` import).
///
/// The host links this capability only when the plugin's configuration grants
/// it; a plugin that never calls these functions does not import it.
pub mod cache {
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
}

/// One immutable version of a Kubernetes object, owned by the host.
///
/// Metadata accessors copy only the field asked for; [`Object::json`] copies
/// the whole object. An object that arrives in a batch is a slot of the
/// batch until its first accessor call, so a handler that ignores it costs
/// no host call.
pub struct Object {
    slot: Option<u32>,
    handle: std::cell::OnceCell<raw::Object>,
}

impl From<raw::Object> for Object {
    fn from(handle: raw::Object) -> Self {
        Object { slot: None, handle: handle.into() }
    }
}

impl Object {
    fn lent(slot: u32) -> Self {
        Object { slot: Some(slot), handle: std::cell::OnceCell::new() }
    }

    fn raw(&self) -> &raw::Object {
        self.handle.get_or_init(|| {
            let slot = self.slot.expect("an object without a handle is a batch slot");
            bindings::informer_host::plugin::delivery::lend(slot)
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
}

/// client-go's `DeletedFinalStateUnknown`: the object was deleted while the
/// watch was disconnected, so its final state is unknown.
pub struct Tombstone {
    pub key: String,
    /// The last state the host had cached.
    pub last_known: Option<Object>,
}

/// What [`ResourceEventHandler::on_delete`] receives.
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

/// A handler of informer notifications, implemented by the plugin's own type.
///
/// Every method has a no-op default. The value is created with [`Default`]
/// when the host calls `init`, then [`init`](Self::init) configures it.
/// Notifications arrive one at a time, in order, as client-go's
/// `ResourceEventHandler` would receive them.
pub trait ResourceEventHandler: Default + 'static {
    /// Called once per instance with the plugin's configuration.
    fn init(&mut self, config: &Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// An object was added; `is_in_initial_list` is true for adds from the
    /// initial list (or the synthetic adds a late-joining handler receives).
    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        let _ = (obj, is_in_initial_list);
        Ok(())
    }

    /// An object changed (or was resynced: then `old` and `new` carry the same
    /// resource version).
    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        let _ = (old, new);
        Ok(())
    }

    /// An object was deleted: its last known state, or a tombstone.
    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        let _ = obj;
        Ok(())
    }
}

/// The plugin's configuration: JSON text from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    text: String,
}

impl Config {
    /// Wraps configuration text (the host's `init` argument).
    pub fn new(text: impl Into<String>) -> Self {
        Config { text: text.into() }
    }

    /// The raw JSON text, exactly as the host passed it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the host passed no configuration (empty or blank text).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// Deserializes the configuration into the plugin's own type.
    ///
    /// Empty or blank text parses as `{}`, so a struct whose fields all have
    /// `#[serde(default)]` works without any configuration.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let text = if self.is_empty() { "{}" } else { self.text.as_str() };
        serde_json::from_str(text).map_err(|e| format!("invalid plugin configuration: {e}"))
    }
}

impl Object {
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

/// One-line descriptions of notifications, in a stable format that the host's
/// end-to-end tests parse (the `recorder` plugin logs exactly these lines).
///
/// `<rv>` is the resource version, or `none` when the object has none.
pub mod describe {
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
}

/// Sends one line to the host's log at `level` (the `log` import).
///
/// Prefer the [`info!`] family of macros.
pub fn log(level: Level, message: &str) {
    __private::before_visible_effect();
    bindings::informer_host::plugin::log::log(level, message);
}

/// Logs a `format!` message at the given [`Level`].
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

/// Logs a `format!` message at trace level.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) };
}

/// Logs a `format!` message at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) };
}

/// Logs a `format!` message at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) };
}

/// Logs a `format!` message at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) };
}

/// Logs a `format!` message at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) };
}

/// Exports a [`ResourceEventHandler`] type as the plugin's
/// `resource-event-handler`. Use it once, at the crate root of a `cdylib`.
///
/// ```no_run
/// #[derive(Default)]
/// struct MyPlugin;
/// impl informer_guest::ResourceEventHandler for MyPlugin {}
/// informer_guest::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        const _: () = {
            ::std::thread_local! {
                static __INFORMER_GUEST_STATE: $crate::__private::State<$ty> = const { $crate::__private::State::new() };
            }

            struct __InformerGuestExport;

            impl $crate::bindings::exports::informer_host::plugin::resource_event_handler::Guest
                for __InformerGuestExport
            {
                fn init(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::init(&__INFORMER_GUEST_STATE, config)
                }

                fn on_add(
                    obj: $crate::__private::RawObject,
                    is_in_initial_list: bool,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_add(handler, &obj.into(), is_in_initial_list)
                    })
                }

                fn on_update(
                    old: $crate::__private::RawObject,
                    new: $crate::__private::RawObject,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_update(handler, &old.into(), &new.into())
                    })
                }

                fn on_delete(
                    obj: $crate::__private::RawDeleted,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_delete(handler, &obj.into())
                    })
                }
            }

            impl $crate::bindings::exports::informer_host::plugin::batch_handler::Guest for __InformerGuestExport {
                fn on_batch(
                    kinds: ::std::vec::Vec<u8>,
                    tombstone_keys: ::std::vec::Vec<::std::string::String>,
                ) {
                    $crate::__private::on_batch(&__INFORMER_GUEST_STATE, kinds, tombstone_keys)
                }
            }

            $crate::bindings::__export_plugin_bindings!(__InformerGuestExport with_types_in $crate::bindings);
        };
    };
}

/// Support for [`export_plugin!`] (not part of the stable API).
#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;
    use std::thread::LocalKey;

    pub use wit_bindgen;

    use std::cell::Cell;

    pub use crate::bindings::informer_host::plugin::types::{Deleted as RawDeleted, Object as RawObject};

    use crate::bindings::informer_host::plugin::delivery::{begin, done, metadata};
    use crate::{Config, Deleted, Object, ResourceEventHandler, Tombstone};

    /// The per-instance plugin value (`None` until `init` or the first call).
    pub struct State<T>(RefCell<Option<T>>);

    impl<T> State<T> {
        pub const fn new() -> Self {
            State(RefCell::new(None))
        }
    }

    impl<T> Default for State<T> {
        fn default() -> Self {
            Self::new()
        }
    }

    pub fn init<T: ResourceEventHandler>(state: &'static LocalKey<State<T>>, config: String) -> Result<(), String> {
        // A panic message is a visible effect: tell the host which batch item
        // panicked before the message is written and the instance traps.
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                before_visible_effect();
                default(info)
            }));
        });
        let mut handler = T::default();
        handler.init(&Config::new(config))?;
        state.with(|state| *state.0.borrow_mut() = Some(handler));
        Ok(())
    }

    /// The batch item being handled: its index, and whether the host was
    /// told it is having a visible effect (`delivery.begin`).
    #[derive(Clone, Copy)]
    struct Current {
        index: u32,
        begun: bool,
    }

    thread_local! {
        static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
    }

    /// The batch's metadata (`delivery.metadata`), fetched on first use.
    pub struct Metadata {
        bytes: Vec<u8>,
        /// Where each slot's record starts.
        starts: Vec<usize>,
    }

    /// Fields before the labels in a slot's record.
    const FIELDS: usize = 7;

    impl Metadata {
        fn fetch() -> Self {
            let bytes = metadata();
            let mut starts = Vec::new();
            let mut at = 0;
            while at < bytes.len() {
                starts.push(at);
                for _ in 0..FIELDS {
                    at = Self::skip(&bytes, at);
                }
                let labels = Self::u32_at(&bytes, at);
                at += 4;
                for _ in 0..2 * labels {
                    at = Self::skip(&bytes, at);
                }
            }
            Metadata { bytes, starts }
        }

        fn u32_at(bytes: &[u8], at: usize) -> usize {
            u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
        }

        /// The position after the string at `at`.
        fn skip(bytes: &[u8], at: usize) -> usize {
            match Self::u32_at(bytes, at) {
                0xffff_ffff => at + 4,
                len => at + 4 + len,
            }
        }

        fn string(&self, at: usize) -> Option<String> {
            match Self::u32_at(&self.bytes, at) {
                0xffff_ffff => None,
                len => Some(String::from_utf8_lossy(&self.bytes[at + 4..at + 4 + len]).into_owned()),
            }
        }

        /// Field `field` (0..7, in the WIT's order) of `slot`.
        pub fn field(&self, slot: u32, field: usize) -> Option<String> {
            let mut at = self.starts[slot as usize];
            for _ in 0..field {
                at = Self::skip(&self.bytes, at);
            }
            self.string(at)
        }

        /// The labels of `slot`.
        pub fn labels(&self, slot: u32) -> impl Iterator<Item = (String, String)> + '_ {
            let mut at = self.starts[slot as usize];
            for _ in 0..FIELDS {
                at = Self::skip(&self.bytes, at);
            }
            let count = Self::u32_at(&self.bytes, at);
            at += 4;
            (0..count).map(move |_| {
                let k = self.string(at).unwrap_or_default();
                at = Self::skip(&self.bytes, at);
                let v = self.string(at).unwrap_or_default();
                at = Self::skip(&self.bytes, at);
                (k, v)
            })
        }
    }

    thread_local! {
        static METADATA: RefCell<Option<Metadata>> = const { RefCell::new(None) };
    }

    /// Runs `f` on the current batch's metadata, fetching it on first use.
    pub fn with_metadata<R>(f: impl FnOnce(&Metadata) -> R) -> R {
        METADATA.with(|m| f(m.borrow_mut().get_or_insert_with(Metadata::fetch)))
    }

    /// Tells the host, once per batch item, that the item is about to have a
    /// visible effect, so a trap from here on skips exactly this item.
    pub fn before_visible_effect() {
        CURRENT.with(|c| {
            if let Some(Current { index, begun: false }) = c.get() {
                begin(index);
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
        METADATA.with(|m| m.borrow_mut().take());
        with(state, |handler| {
            let mut keys = tombstone_keys.into_iter();
            let mut slot = 0u32;
            let mut next = || {
                slot += 1;
                Object::lent(slot - 1)
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
                    done(index, result.as_ref().err().map(String::as_str));
                }
            }
        });
        METADATA.with(|m| m.borrow_mut().take());
    }

    pub fn with<T: ResourceEventHandler, R>(state: &'static LocalKey<State<T>>, f: impl FnOnce(&mut T) -> R) -> R {
        state.with(|state| f(state.0.borrow_mut().get_or_insert_with(T::default)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default)]
    struct Settings {
        name: String,
        required: Vec<String>,
    }

    #[test]
    fn config_parses_into_the_plugins_type() {
        let config = Config::new(r#"{"name": "x", "required": ["app", "team"]}"#);
        assert!(!config.is_empty());
        let settings: Settings = config.parse().unwrap();
        assert_eq!(settings, Settings { name: "x".into(), required: vec!["app".into(), "team".into()] });
    }

    #[test]
    fn blank_config_parses_as_an_empty_object() {
        for text in ["", "  \n"] {
            let config = Config::new(text);
            assert!(config.is_empty());
            assert_eq!(config.as_str(), text);
            assert_eq!(config.parse::<Settings>().unwrap(), Settings::default());
        }
    }

    #[test]
    fn bad_config_names_the_problem() {
        let err = Config::new(r#"{"name": 3}"#).parse::<Settings>().unwrap_err();
        assert!(err.starts_with("invalid plugin configuration:"), "{err}");
    }
}
