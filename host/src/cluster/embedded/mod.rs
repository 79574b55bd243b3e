//! The embedded cluster: without an API server, a manifests directory
//! becomes a writable, in-process store that controllers write to and
//! informers read from.
//!
//! # What it owns
//!
//! - One [`ClusterStore`] per directory holding objects of every kind, with
//!   one resourceVersion counter (as etcd has), seeded from the directory
//!   by the manifests source ([`ManifestsSource::open_into`]: its parsing,
//!   limits, errors and watching, unchanged) and kept up to date as files
//!   change: a file's changed definition of an object is stored again
//!   (keeping the uid, creationTimestamp and, when the file has none, the
//!   status), an object its file no longer defines is deleted. Objects
//!   controllers create live until deleted or until a file defines the same
//!   key. The files are never written.
//! - [`ClusterView`]s: the list-and-watch of one informer (apiVersion,
//!   kind, namespace, label selector), so every informer of the directory
//!   sees each write at once, as a watch event with a new resourceVersion.
//! - [`ClusterWriter`] for [`EmbeddedCluster`]: writes as the API server
//!   does them (`writes`, [`semantics`], [`managed`], [`patch`]): create
//!   with uid, creationTimestamp, generation and `generateName`;
//!   `AlreadyExists`; replace with a resourceVersion precondition
//!   (`Conflict`); merge patch, JSON patch and server-side apply with field
//!   managers (conflicts unless forced); delete with uid/resourceVersion
//!   preconditions, finalizers (a `deletionTimestamp` until the last one is
//!   removed) and garbage collection of dependents; the status subresource;
//!   `metadata.generation` on spec changes only; dry runs; Events;
//!   `Invalid` with causes. The rules are pure functions over JSON
//!   ([`semantics`], [`managed`], [`patch`], [`events`]) so the HTTP test
//!   server can share them.
//!
//! # What it may not touch
//!
//! It does not check whether a write is allowed (the controller's write
//! guard does, before the write gets here), never writes the directory,
//! and knows nothing of informers' insides or plugins: informers read it
//! through [`ListerWatcher`](crate::informer::ListerWatcher).
//!
//! # Simplified
//!
//! No schemas: which kinds have a status subresource and a generation is
//! decided by [`semantics::KindRules`]; no namespace existence check;
//! namespaces are kept as written (no defaulting, as the manifests source);
//! no admission, no defaulting of fields, no strategic merge patch (not in
//! the write contract); garbage collection is synchronous (see `writes`);
//! objects from files have no managed fields (they are nobody's, so an
//! apply never conflicts with a file).

pub mod events;
pub mod managed;
pub mod patch;
pub mod semantics;
mod store;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use serde_json::Value;

pub use store::{ClusterStore, ClusterView, HISTORY_BYTES, MAX_OBJECT_BYTES, QUOTA_BYTES};

use super::{ClusterWriter, Propagation, Target, WriteError, WriteParams, WriteRequest};
use crate::source::manifests::{
    ManifestError, ManifestFilter, ManifestLimits, ManifestSink, ManifestsSource, qualified_key,
};

/// A writable in-process cluster, seeded from a manifests directory (or
/// empty). Share it with `Arc`: its views and its writer all see one store.
///
/// ```
/// use informer_host::cluster::embedded::EmbeddedCluster;
/// use informer_host::source::manifests::ManifestFilter;
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n").unwrap();
/// let cluster = EmbeddedCluster::open(dir.path()).unwrap();
/// let _informer_source = cluster.view(ManifestFilter::default().kind("ConfigMap"));
/// let _writer = cluster.writer();
/// assert_eq!(cluster.store().keys(), ["/ConfigMap//a"]);
/// ```
pub struct EmbeddedCluster {
    store: Arc<ClusterStore>,
    /// Keeps the directory watched; None for an empty, in-memory cluster.
    source: Option<ManifestsSource>,
    dir: Option<PathBuf>,
}

/// The manifests source's way into the store: file definitions are put,
/// and removals collect dependents as a delete does.
struct Files(Arc<ClusterStore>);

impl ManifestSink for Files {
    fn put(&self, key: &str, value: &Value) -> Result<(), String> {
        self.0.put_file(key, value)
    }
    fn remove(&self, key: &str) {
        // As `kubectl delete`, but at once: a file's object is not kept
        // for its finalizers.
        let now = semantics::rfc3339(SystemTime::now());
        writes::remove_and_collect(&mut self.0.lock(), key, None, Propagation::Background, &now);
        self.0.notify();
    }
}

impl EmbeddedCluster {
    /// Seeds a cluster from `dir` (blocking) and watches it when called in
    /// a tokio runtime, as [`ManifestsSource::open`] does.
    ///
    /// # Errors
    ///
    /// As [`ManifestsSource::open`]: the directory is missing or unreadable,
    /// or the watcher cannot start. Errors in files do not fail this; see
    /// [`EmbeddedCluster::source`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Arc<Self>, ManifestError> {
        Self::open_with(dir, ManifestLimits::default())
    }

    /// [`EmbeddedCluster::open`] with other [`ManifestLimits`].
    ///
    /// # Errors
    ///
    /// As [`EmbeddedCluster::open`].
    pub fn open_with(dir: impl AsRef<Path>, limits: ManifestLimits) -> Result<Arc<Self>, ManifestError> {
        let description = format!("embedded cluster {}", dir.as_ref().display());
        let store = Arc::new(ClusterStore::new(description));
        let source = ManifestsSource::open_into(dir, limits, Arc::new(Files(store.clone())))?;
        let dir = Some(source.dir().to_path_buf());
        Ok(Arc::new(EmbeddedCluster { store, source: Some(source), dir }))
    }

    /// An empty cluster with no directory (for tests).
    pub fn in_memory() -> Arc<Self> {
        Arc::new(EmbeddedCluster { store: Arc::new(ClusterStore::new("embedded cluster")), source: None, dir: None })
    }

    /// The list-and-watch of the objects `filter` selects, for an informer.
    pub fn view(&self, filter: ManifestFilter) -> ClusterView {
        ClusterView { store: self.store.clone(), filter, _source: self.source.clone() }
    }

    /// This cluster as the writer controllers use.
    pub fn writer(self: &Arc<Self>) -> Arc<dyn ClusterWriter> {
        self.clone()
    }

    /// The store (keys are [`qualified_key`]s).
    pub fn store(&self) -> &Arc<ClusterStore> {
        &self.store
    }

    /// The manifests source that feeds the store (its errors, a rescan).
    pub fn source(&self) -> Option<&ManifestsSource> {
        self.source.as_ref()
    }

    /// The directory (canonicalised), if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The stored state of `target`.
    pub fn get(&self, target: &Target) -> Option<Arc<Value>> {
        self.store.get(&qualified_key(&target.api_version, &target.kind, target.namespace.as_deref(), &target.name))
    }

    /// Carries out one write now (see the module docs).
    ///
    /// # Errors
    ///
    /// The typed [`WriteError`] the API server would answer.
    pub fn write_now(&self, request: WriteRequest, params: &WriteParams) -> Result<Option<Value>, WriteError> {
        let clock = SystemTime::now();
        let now = semantics::rfc3339(clock);
        let mut st = self.store.lock();
        let result = match request {
            WriteRequest::Create(obj) => writes::create(&mut st, obj, params, &now),
            WriteRequest::Replace(obj) => writes::replace(&mut st, obj, false, params, &now),
            WriteRequest::ReplaceStatus(obj) => writes::replace(&mut st, obj, true, params, &now),
            WriteRequest::Patch { target, patch } => writes::patch(&mut st, &target, patch, false, params, &now),
            WriteRequest::PatchStatus { target, patch } => writes::patch(&mut st, &target, patch, true, params, &now),
            WriteRequest::Delete { target, options } => {
                writes::delete(&mut st, &target, &options, params.dry_run, &now)
            }
            WriteRequest::RecordEvent { involved, event_type, reason, message } => {
                let nanos = clock.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
                writes::record_event(&mut st, &involved, event_type, &reason, &message, params, &now, nanos)
            }
        };
        drop(st);
        self.store.notify();
        result
    }
}

impl ClusterWriter for EmbeddedCluster {
    fn write(&self, request: WriteRequest, params: WriteParams) -> BoxFuture<'_, Result<Option<Value>, WriteError>> {
        let result = self.write_now(request, &params);
        Box::pin(async move { result })
    }
}
