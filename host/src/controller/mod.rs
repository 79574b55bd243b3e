//! Controllers: plugins that act on the cluster.
//!
//! A controller plugin targets the `controller` world (`wit/controller.wit`):
//! it exports `reconcile(key)`, reads the caches of the informers it
//! watches, writes through the host-checked `kube` import, and may ask for
//! more reconciles with `queue.enqueue`. Keys come from a workqueue with
//! client-go's semantics ([`crate::workqueue`]): its primary informer
//! enqueues each object's own key, secondary informers map their objects to
//! primary keys (owner references, a label, or the plugin's `map`), and
//! resyncs enqueue every key.
//!
//! - [`bindings`]: the world's host bindings and imports.
//! - [`instance`]: loading a controller and running its instances.
//! - [`guard`]: the checks every write passes before it leaves.
//! - [`keys`]: what a key may be, and how many a guest may queue.
//! - [`runner`]: the workqueue, the workers and what feeds them.

pub mod bindings;
mod feed;
pub mod guard;
pub mod instance;
pub mod keys;
pub mod runner;

use std::collections::HashMap;
use std::sync::Arc;

use crate::plugin::CacheView;

pub use bindings::Outcome;
pub use guard::{GuardConfig, NamespaceScope, WriteGuard, WriteRule, WriteStats};
pub use instance::{CONTROLLER_WORLD, ControllerInstance, LoadedController, ReconcileError};
pub use keys::{KeyQueue, MAX_QUEUED_BY_IMPORT, check_key};
pub use runner::{ControllerError, ControllerOptions, ControllerRunner, Mapping, Secondary};

/// What a controller's instances reach through their imports; shared by
/// every instance of one controller.
pub struct ControllerCtx {
    /// Where the `kube` import's writes are awaited (from the blocking
    /// thread the call runs on).
    pub runtime: tokio::runtime::Handle,
    pub guard: Arc<WriteGuard>,
    /// The primary informer's cache (the `cache` import).
    pub primary: Option<CacheView>,
    /// Every watched informer's cache by name (the `stores` import).
    pub stores: HashMap<String, CacheView>,
    /// The controller's workqueue (the `queue` import, the informers).
    pub keys: KeyQueue,
}

impl ControllerCtx {
    /// The cache of the watched informer `informer`.
    pub fn store(&self, informer: &str) -> Result<&CacheView, String> {
        self.stores.get(informer).ok_or_else(|| {
            let mut known: Vec<&str> = self.stores.keys().map(String::as_str).collect();
            known.sort();
            format!("no informer {informer:?} is watched by this controller (it watches: {})", known.join(", "))
        })
    }
}
