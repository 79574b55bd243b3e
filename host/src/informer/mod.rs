//! The informer engine: client-go's shared informer in Rust and tokio.
//!
//! It owns list/watch bookkeeping, the cache and per-handler delivery. It
//! knows nothing of wasm (see `crate::plugin`) nor of any transport (see
//! `crate::source`): sources implement [`ListerWatcher`], handlers implement
//! [`ResourceEventHandler`].

mod bounded_queue;
mod delta_fifo;
mod handler;
mod indexers;
mod listener;
mod lister_watcher;
mod notification_log;
mod object;
mod processor;
mod real_fifo;
mod reflector;
mod shared_informer;
mod store;
mod transform;

pub use delta_fifo::{Delta, DeltaFifo, DeltaObject, DeltaType, Deltas, Popped, Queue, TransformFunc};
pub use handler::{
    Delivered, Delivery, FnHandler, HandlerError, HandlerFuncs, Notification, ResourceEventHandler, deliver_each,
};
pub use indexers::{MAX_FIELD_INDEX_VALUES, field_index, field_indexers, label_index, parse_field_path};
pub use listener::{CRASH_BACKOFF, ListenerStats, ObjectFilter, Registration};
pub use lister_watcher::{
    Backoff, ExponentialBackoff, ListResult, ListerWatcher, SourceError, WatchEvent, WatchStream,
};
pub use object::{DeletedObject, Object, ObjectError, ObjectRef};
pub use processor::{MINIMUM_RESYNC_PERIOD, determine_resync_period};
pub use real_fifo::{Fifo, FifoKind, RealFifo};
pub use reflector::{ReflectorStats, WatchErrorHandler};
pub use shared_informer::{HandlerOptions, InformerError, InformerOptions, SharedIndexInformer};
pub use store::{IndexError, IndexFunc, Indexer, NAMESPACE_INDEX};
pub use transform::{LAST_APPLIED, Strip, strip_fields};
