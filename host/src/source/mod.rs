//! Sources: implementations of [`crate::informer::ListerWatcher`].
//!
//! - [`MemorySource`]: scripted, in-process; for tests and benchmarks.
//! - [`manifests`]: a watched directory of YAML/JSON manifests; the default.
//! - [`kube`]: a real Kubernetes API server through `kube::Client`.

pub mod kube;
pub mod manifests;
mod memory;
pub mod selector;
mod versioned;

pub use memory::MemorySource;
pub use versioned::{DEFAULT_HISTORY, VersionedStore, stamp};
