//! Rust guest SDK for Informer Host plugins.
//!
//! A plugin is a WebAssembly component that is either a **handler**
//! (world `batched-plugin` of `wit/plugin.wit`: it receives informer
//! notifications) or a **controller** (world `controller` of
//! `wit/controller.wit`: it reconciles keys and writes to the cluster).
//! This crate hides the `wit-bindgen` plumbing: a plugin implements
//! [`ResourceEventHandler`] or [`controller::Reconciler`] on a type of its
//! own and hands that type to [`export_plugin!`] or [`export_controller!`],
//! which export the component functions and keep one value of the type per
//! instance.
//!
//! - **State**: the macro keeps the plugin value in a per-instance global.
//!   `init` creates it with [`Default`] and then calls the trait's `init` on
//!   it with the plugin's configuration; a call that arrives before `init`
//!   gets a `Default` value. A trapped instance is never called again, so
//!   state never outlives a panic.
//! - **Config**: [`Config`] is the JSON text the host passes to `init`;
//!   [`Config::parse`] deserializes it into any `serde` type of the plugin.
//! - **Objects**: [`Object`] is a host-owned object version. Metadata
//!   accessors (`key`, `name`, `namespace`, `resource_version`, `label`, ...)
//!   never copy the body; [`Object::meta`] borrows them all as `&str`
//!   without allocating (the fastest way to read metadata in a batch);
//!   [`Object::json`] returns the whole object and
//!   [`Object::parse`] deserializes it (k8s-openapi types work);
//!   [`Object::parse_at`] copies only the value at a JSON pointer.
//! - **Logging**: [`trace!`], [`debug!`], [`info!`], [`warn!`], [`error!`] call
//!   the host's `log` import, tagged by the host with plugin and tenant.
//! - **Cache**: [`cache::get`], [`cache::list`] and [`cache::by_index`] read the
//!   informer's cache (only when the host grants the capability).
//! - **Controllers**: [`controller`] has the [`Reconciler`](controller::Reconciler)
//!   trait and the imports only controllers have: [`controller::kube`]
//!   (host-checked writes), [`controller::stores`] (every watched informer's
//!   cache, by name) and [`controller::queue`] (more reconciles).
//!
//! An import the plugin never calls is not imported by its component, so a
//! plugin needs only the grants for what it uses.
//!
//! # Handlers
//!
//! The host hands a handler many notifications per call (`on-batch`); the
//! SDK calls the trait methods one at a time, in order, and tells the host
//! which one is running whenever it matters: before the first log line or
//! panic of a notification. A notification that neither logs nor fails
//! costs no host call, and an object it never looks at is never lent.
//!
//! Returning `Err` from a handler method is logged and counted by the host; a
//! panic traps the instance and the host skips that notification.
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
//! # Controllers
//!
//! The host calls `reconcile` with a key of the controller's primary
//! informer whenever its object, or a secondary object that maps to it
//! (through owner references or labels in the host, or through
//! [`Reconciler::map`](controller::Reconciler::map)), changes, and on every
//! resync. Reconcile reads the state from the caches and writes only what
//! differs from the desired state, so a reconcile with nothing to do writes
//! nothing. An `Err` or a panic requeues the key with exponential backoff.
//!
//! This one gives every ConfigMap labelled `mirror=true` a copy named
//! `<name>-mirror`, owned by it (so the garbage collector deletes the copy
//! with the original), and writes only when the copy's data differs:
//!
//! ```no_run
//! use informer_guest::controller::{Action, Reconciler, kube, stores};
//! use informer_guest::{Config, info};
//! use serde_json::json;
//!
//! #[derive(Default)]
//! struct Mirror;
//!
//! impl Reconciler for Mirror {
//!     fn reconcile(&mut self, key: &str) -> Result<Action, String> {
//!         let Some(cm) = stores::get("configmaps", key)? else {
//!             return Ok(Action::Done); // deleted: its copy goes with it
//!         };
//!         if cm.label("mirror").as_deref() != Some("true") {
//!             return Ok(Action::Done);
//!         }
//!         let data: serde_json::Value = cm.parse_at("/data")?.unwrap_or(json!({}));
//!         let copy = format!("{key}-mirror");
//!         if let Some(existing) = stores::get("configmaps", &copy)? {
//!             if existing.parse_at::<serde_json::Value>("/data")?.unwrap_or(json!({})) == data {
//!                 return Ok(Action::Done); // already right: no write
//!             }
//!         }
//!         let desired = json!({
//!             "apiVersion": "v1", "kind": "ConfigMap",
//!             "metadata": {
//!                 "namespace": cm.namespace(), "name": format!("{}-mirror", cm.name()),
//!                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": cm.name(),
//!                     "uid": cm.uid(), "controller": true}],
//!             },
//!             "data": data,
//!         });
//!         let target = kube::Target::of_json(&desired).ok_or("no target")?;
//!         kube::patch(&target, kube::Patch::apply(&desired).force())?;
//!         info!("mirrored {key}");
//!         Ok(Action::Done)
//!     }
//! }
//!
//! informer_guest::export_controller!(Mirror);
//! ```
//!
//! Build either as a `cdylib` with `cargo build --release --target
//! wasm32-wasip2`; the `.wasm` in `target/wasm32-wasip2/release/` is the
//! component. `docs/controllers.md` walks through a complete controller.

// Lets the generated export macros name this crate as `informer_guest::...`
// both here and in plugin crates.
extern crate self as informer_guest;

/// Bindings generated for the handler world `batched-plugin` (not part of
/// the stable API). The controller world's are in `controller::bindings`.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "batched-plugin",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_bindings",
        default_bindings_module: "informer_guest::bindings",
        runtime_path: "informer_guest::__private::wit_bindgen::rt",
    });
}

pub mod cache;
mod config;
pub mod controller;
pub mod describe;
mod handler;
mod logging;
mod meta;
mod object;

#[doc(hidden)]
#[path = "private/mod.rs"]
pub mod __private;

pub use bindings::informer_host::plugin::types::Level;
pub use config::Config;
pub use handler::ResourceEventHandler;
pub use logging::log;
pub use meta::Meta;
pub use object::{Deleted, Object, Tombstone};
