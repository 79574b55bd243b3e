//! The `manifests` source: a directory of YAML/JSON manifests, watched for
//! changes; the embedded default that needs no cluster.
//!
//! # What it owns
//!
//! - Reading every `.yaml`, `.yml` and `.json` file under one directory
//!   (recursively, in sorted path order). A YAML file may hold several
//!   documents separated by `---`; a JSON file may hold several concatenated
//!   values. A document whose kind is `List` (or `<Kind>List`) with `items`
//!   contributes its items; items of a typed list (`ConfigMapList`) that lack
//!   `apiVersion`/`kind` get the list's.
//! - What one file may cost ([`ManifestLimits`]): a file over
//!   [`ManifestLimits::max_file_bytes`] is not read past the limit; a
//!   document over [`ManifestLimits::max_document_bytes`] or nested deeper
//!   than [`ManifestLimits::max_depth`] is rejected by one pass over its
//!   text before it is parsed; and no document is parsed twice, so a bad
//!   file costs time linear in its size.
//! - Turning each document into JSON (YAML → `serde_yaml::Value`, merge keys
//!   applied, → `serde_json::Value`) and validating what the engine needs:
//!   `apiVersion`, `kind`, `metadata.name`, string labels and annotations.
//! - Selecting documents with a [`ManifestFilter`] (apiVersion, kind,
//!   namespace, label selector) and serving them through a [`VersionedStore`],
//!   so every change gets a higher resourceVersion and watches resume from
//!   one. A file's `metadata.resourceVersion` is replaced by the store's.
//! - Watching the directory with `notify`'s recommended watcher. Events are
//!   bridged into a tokio task, coalesced until [`DEBOUNCE`] passes without a
//!   new one (at most [`MAX_DEBOUNCE`] after the first), and then only the
//!   changed files are re-read, on blocking threads, never on the task
//!   itself: files of [`OWN_THREAD_BYTES`] or more each on a thread of their
//!   own, the smaller ones of a rescan one after the other on one thread. The
//!   files of one rescan are applied together once all are read, or after
//!   [`BATCH_WAIT`] those that are ready, and each later one on its own when
//!   it is done: a slow file never holds up the others, and new events are
//!   handled while it is read. A file read again before an earlier read of
//!   it finished makes the earlier one stop and count for nothing. An edit
//!   yields `Modified` only for objects whose content changed (a
//!   reformatted file, a new comment or reordered keys yield nothing); a
//!   removed document, a removed file, or an object that no longer matches
//!   the filter yields `Deleted`; a new one `Added`. A renamed file yields
//!   nothing (unless it is so slow to read that the rename's two halves are
//!   applied apart). The changes applied together are applied deletes
//!   first, then additions and modifications, each in key order.
//! - Errors ([`ManifestError`]): a file that cannot be read, is too large,
//!   is not UTF-8 or does not parse, or a document that is too large, too
//!   deep or not a valid manifest, gets an error naming the file and line
//!   (for syntax errors and invalid UTF-8 the line and column of the
//!   problem, for document errors the first line of the document's
//!   content). A file keeps its first [`MAX_ERRORS_PER_FILE`] errors (and as
//!   many duplicate definitions) and counts the rest in one
//!   [`ManifestError::More`]. Errors are logged with `tracing::warn!` once
//!   when they appear and kept in [`ManifestsSource::errors`] until the file
//!   is fixed or removed. A file with any error is not applied at all: the
//!   objects it had before stay exactly as they were (a half-saved file
//!   deletes nothing), and other files are unaffected. The same key
//!   (`namespace/name`) defined twice is an error naming both places; the
//!   first definition in sorted path order (then document order) wins, and
//!   the other takes over if the winner goes away.
//!
//! # Policy choices
//!
//! - Namespaces are kept as the file says: a manifest without
//!   `metadata.namespace` stays without one (its key is just `name`). No
//!   `default` namespace is filled in, so cluster-scoped kinds work too. A
//!   namespace filter selects only objects that name that namespace.
//! - Keys are `namespace/name` as in the engine's store, whatever the kind:
//!   one source is one "resource", so use a kind filter when a directory
//!   holds several kinds with clashing names.
//! - An empty file (or one with only comments) is valid and holds no
//!   objects. Hidden files and directories (name starting with `.`) are
//!   skipped, symlinks to files are followed, symlinks to directories are
//!   not. A change to a hidden directory or symlink (e.g. the `..data` swap
//!   of a Kubernetes ConfigMap volume) rescans the directory holding it.
//! - [`ManifestsSource::open`] loads everything synchronously (blocking I/O)
//!   and starts watching when called inside a tokio runtime; otherwise call
//!   [`ManifestsSource::start_watching`] later from one, or use
//!   [`ManifestsSource::rescan`] to reload by hand. Watching stops when the
//!   last clone of the source is dropped, or with
//!   [`ManifestsSource::stop_watching`]. If the directory itself is removed,
//!   its objects are deleted and watching ends.
//!
//! # Feeding a store of every kind
//!
//! [`ManifestsSource::open_into`] opens the directory for a writable store
//! instead (the embedded cluster, `crate::cluster::embedded`): every
//! document is selected, keys are [`qualified_key`]s (`group/Kind/ns/name`,
//! so a ConfigMap and a Secret of one name do not clash), and the changes
//! go to a [`ManifestSink`] rather than to the source's own store, which
//! stays empty. Parsing, limits, errors, duplicates and watching are the
//! same. Only what the files change is passed on: an object the sink's
//! other writers changed is put again only when its file's definition of
//! it changes, and removed when its file no longer defines it.
//!
//! # What it may not touch
//!
//! It never writes to the directory, never changes the informer engine, and
//! knows nothing of handlers, plugins or the kube client: it only implements
//! [`ListerWatcher`] over its own [`VersionedStore`], or feeds a
//! [`ManifestSink`].
//!
//! # Layout
//!
//! This file holds the limits, the sink, the source's state and its
//! [`ListerWatcher`] side; `filter` and `errors` hold the public
//! [`ManifestFilter`] and [`ManifestError`]; `watch` turns directory events into rescans and
//! applies their reads; `parse` turns one file's text into documents;
//! `depth` is the linear pre-scan that keeps deep YAML away from libyaml.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use notify::{RecursiveMode, Watcher};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::versioned::VersionedStore;
use crate::informer::{ListResult, ListerWatcher, ObjectRef, SourceError, WatchStream};

pub use self::errors::ManifestError;
pub use self::filter::ManifestFilter;

/// Quiet time after a filesystem event before the changed files are read.
pub const DEBOUNCE: Duration = Duration::from_millis(75);
/// Longest a burst of events can delay a rescan.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(1);
/// How long the watch task waits for the files of one rescan before it
/// applies those that are ready; each later one is applied when it is done.
pub const BATCH_WAIT: Duration = Duration::from_millis(250);
/// Files at least this large are read and parsed on a blocking thread of
/// their own, so they never hold up the smaller files of the same rescan.
/// A smaller file parses in well under a second even at the depth limit.
pub const OWN_THREAD_BYTES: u64 = 256 * 1024;
/// File extensions read as manifests (case-insensitive).
pub const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];
/// Errors kept per file (and, separately, duplicate definitions); the rest
/// are counted in one [`ManifestError::More`].
pub const MAX_ERRORS_PER_FILE: usize = 10;
/// The deepest nesting [`ManifestLimits::max_depth`] allows, and its
/// default: 128 mappings and sequences, the document's own included.
///
/// It is the recursion limit serde_yaml and serde_json enforce themselves,
/// so no document deeper than this ever loaded. But serde_yaml checks it only
/// after libyaml has scanned the whole document, and libyaml's cost grows
/// with the square of the flow nesting (100 000 levels of `[`, 200 KB, take
/// tens of seconds), so the source checks it first, in one pass over the
/// text. For comparison, go-yaml (which kubectl and the API server use)
/// stops at 10 000; Kubernetes objects, CRD schemas included, stay far
/// below 128.
pub const MAX_DEPTH: usize = 128;
/// Default [`ManifestLimits::max_file_bytes`]: 8 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 8 << 20;
/// Default [`ManifestLimits::max_document_bytes`]: 3 MiB, the API server's
/// limit on a request body (`MaxRequestBodyBytes` in k8s.io/apiserver's
/// server config: twice etcd's recommended 1.5 MiB request, as JSON is
/// larger than the protobuf stored), so no object a cluster accepts is
/// larger.
pub const DEFAULT_MAX_DOCUMENT_BYTES: usize = 3 << 20;

/// What one file may cost to load. Over a limit, the file (or document) is
/// rejected with an error naming the limit, before anything is parsed.
///
/// ```
/// use informer_host::source::manifests::{ManifestLimits, ManifestFilter, ManifestsSource};
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("deep.yaml"), "a: [[[[x]]]]\n").unwrap();
/// let limits = ManifestLimits { max_depth: 4, ..ManifestLimits::default() };
/// let src = ManifestsSource::open_with(dir.path(), ManifestFilter::default(), limits).unwrap();
/// assert!(src.errors()[0].to_string().ends_with("deep.yaml:1:7: nested deeper than 4 levels"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Largest file, in bytes ([`ManifestError::FileTooLarge`]); a larger
    /// file is not read. Default [`DEFAULT_MAX_FILE_BYTES`] (8 MiB).
    pub max_file_bytes: u64,
    /// Largest document, in bytes: a YAML document with its comments, a
    /// JSON value ([`ManifestError::DocumentTooLarge`]). Default
    /// [`DEFAULT_MAX_DOCUMENT_BYTES`] (3 MiB).
    pub max_document_bytes: usize,
    /// Deepest nesting of mappings and sequences, the document's own
    /// included: `metadata.labels` is at depth 3 ([`ManifestError::TooDeep`]).
    /// Default and ceiling [`MAX_DEPTH`] (128); a larger value counts as 128.
    pub max_depth: usize,
}

impl Default for ManifestLimits {
    fn default() -> Self {
        ManifestLimits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_document_bytes: DEFAULT_MAX_DOCUMENT_BYTES,
            max_depth: MAX_DEPTH,
        }
    }
}

/// Where a source opened with [`ManifestsSource::open_into`] puts what its
/// files define. Called with the source's state locked, in the order of
/// the module docs (deletes first, then puts, each in key order).
pub trait ManifestSink: Send + Sync + 'static {
    /// The files define `value` (validated, unstamped) under `key` (a
    /// [`qualified_key`]), new or changed since the last put.
    ///
    /// # Errors
    ///
    /// Why the sink refused it (logged; the source keeps what it had).
    fn put(&self, key: &str, value: &Value) -> Result<(), String>;
    /// The files no longer define `key`.
    fn remove(&self, key: &str);
}

/// The key of an object among objects of every kind:
/// `group/Kind/namespace/name` (`namespace` empty for a cluster-scoped one;
/// the group is `""` for the core group, and the version is not part of it).
///
/// ```
/// use informer_host::source::manifests::qualified_key;
/// assert_eq!(qualified_key("apps/v1", "Deployment", Some("ns"), "web"), "apps/Deployment/ns/web");
/// assert_eq!(qualified_key("v1", "Namespace", None, "ns"), "/Namespace//ns");
/// ```
pub fn qualified_key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or(""))
}

/// [`qualified_key`] of a validated manifest.
fn qualified_key_of(value: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let ns = value["metadata"]["namespace"].as_str().filter(|ns| !ns.is_empty());
    qualified_key(&s(&value["apiVersion"]), &s(&value["kind"]), ns, &s(&value["metadata"]["name"]))
}

/// A [`ListerWatcher`] over a directory of manifests. Cheap to clone; the
/// watcher stops when the last clone is dropped.
///
/// ```
/// use informer_host::source::manifests::{ManifestsSource, ManifestFilter};
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n").unwrap();
/// let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
/// assert_eq!(src.keys(), ["a"]);
/// assert_eq!(src.get("a").unwrap().resource_version(), Some("1"));
/// ```
#[derive(Clone)]
pub struct ManifestsSource {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    watching: Mutex<Option<Watching>>,
}

/// A running watch: dropping it stops the notify watcher and the task, and
/// makes reads still running stop at their next document.
/// The task cancels `stop` itself when it ends (the directory is gone).
struct Watching {
    _watcher: notify::RecommendedWatcher,
    stop: CancellationToken,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the watch task and the reading threads share with the source.
struct Shared {
    dir: PathBuf,
    filter: ManifestFilter,
    limits: ManifestLimits,
    store: VersionedStore,
    /// Where changes go instead of `store` ([`ManifestsSource::open_into`]).
    sink: Option<Arc<dyn ManifestSink>>,
    state: Mutex<State>,
    /// Numbers reads in the order they start.
    reads: AtomicU64,
    /// The newest read started of each file whose read is not applied yet.
    /// Only that read is applied, so an older read never overwrites a
    /// newer one, however long it took.
    latest_read: Mutex<HashMap<PathBuf, u64>>,
    scans: AtomicU64,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileState>,
    /// Subdirectories that could not be read in the last walk.
    dir_errors: BTreeMap<PathBuf, ManifestError>,
    /// What the store holds: key → (file that defines it, unstamped value).
    current: BTreeMap<String, (PathBuf, Arc<Value>)>,
    duplicates: Vec<ManifestError>,
    watch_error: Option<ManifestError>,
}

struct FileState {
    /// Hash of the text last read (None after a read error).
    hash: Option<u64>,
    /// The selected documents of the last read that had no error.
    docs: Vec<Doc>,
    /// Errors of the last read; while non-empty, `docs` are older.
    errors: Vec<ManifestError>,
}

#[derive(Clone, Debug)]
struct Doc {
    key: String,
    line: usize,
    value: Arc<Value>,
}

impl ManifestsSource {
    /// Loads every manifest under `dir` now (blocking), then watches it if
    /// called inside a tokio runtime (see [`ManifestsSource::start_watching`]).
    /// Uses the default [`ManifestLimits`].
    ///
    /// # Errors
    ///
    /// [`ManifestError::Directory`] naming `dir` when it is missing, not a
    /// directory or unreadable; [`ManifestError::Watch`] when inside a
    /// runtime the watcher cannot start. Errors in files do not fail this:
    /// see [`ManifestsSource::errors`].
    pub fn open(dir: impl AsRef<Path>, filter: ManifestFilter) -> Result<Self, ManifestError> {
        Self::open_with(dir, filter, ManifestLimits::default())
    }

    /// [`ManifestsSource::open`] with other [`ManifestLimits`].
    ///
    /// # Errors
    ///
    /// As [`ManifestsSource::open`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        filter: ManifestFilter,
        limits: ManifestLimits,
    ) -> Result<Self, ManifestError> {
        Self::open_impl(dir.as_ref(), filter, limits, None)
    }

    /// Loads every manifest under `dir` into `sink` (see the module docs,
    /// "Feeding a store of every kind"), then watches as
    /// [`ManifestsSource::open`] does. The source's own list, watch, `get`
    /// and `keys` stay empty; [`ManifestsSource::errors`] works as usual.
    ///
    /// # Errors
    ///
    /// As [`ManifestsSource::open`].
    pub fn open_into(
        dir: impl AsRef<Path>,
        limits: ManifestLimits,
        sink: Arc<dyn ManifestSink>,
    ) -> Result<Self, ManifestError> {
        Self::open_impl(dir.as_ref(), ManifestFilter::default(), limits, Some(sink))
    }

    fn open_impl(
        given: &Path,
        filter: ManifestFilter,
        mut limits: ManifestLimits,
        sink: Option<Arc<dyn ManifestSink>>,
    ) -> Result<Self, ManifestError> {
        limits.max_depth = limits.max_depth.min(MAX_DEPTH);
        let dir_err =
            |source: io::Error| ManifestError::Directory { path: given.to_path_buf(), source: Arc::new(source) };
        let dir = std::fs::canonicalize(given).map_err(dir_err)?;
        if !std::fs::metadata(&dir).map_err(dir_err)?.is_dir() {
            return Err(dir_err(io::Error::new(io::ErrorKind::NotADirectory, "not a directory")));
        }
        std::fs::read_dir(&dir).map_err(dir_err)?;
        let description = format!("manifests {} ({filter})", dir.display());
        let shared = Arc::new(Shared {
            dir,
            filter,
            limits,
            store: VersionedStore::new(description),
            sink,
            state: Mutex::new(State::default()),
            reads: AtomicU64::new(0),
            latest_read: Mutex::new(HashMap::new()),
            scans: AtomicU64::new(0),
        });
        shared.rescan(vec![shared.dir.clone()]);
        let source = ManifestsSource { inner: Arc::new(Inner { shared, watching: Mutex::new(None) }) };
        if tokio::runtime::Handle::try_current().is_ok() {
            source.start_watching()?;
        }
        Ok(source)
    }

    /// Starts watching the directory (idempotent; restarts a watch that
    /// ended). Needs a tokio runtime: the watch task runs on the current
    /// one. The first thing it does is a full rescan, so nothing changed
    /// since [`ManifestsSource::open`] is missed.
    ///
    /// # Errors
    ///
    /// [`ManifestError::Watch`] without a runtime, or when the platform
    /// watcher cannot be created or cannot watch the directory (e.g. the
    /// inotify watch limit is reached).
    pub fn start_watching(&self) -> Result<(), ManifestError> {
        let mut watching = self.inner.watching.lock();
        if watching.as_ref().is_some_and(|w| !w.stop.is_cancelled()) {
            return Ok(());
        }
        let shared = &self.inner.shared;
        let watch_err = |message: String| ManifestError::Watch { path: shared.dir.clone(), message };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| watch_err("start_watching needs a tokio runtime".into()))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let config = notify::Config::default().with_follow_symlinks(false);
        let mut watcher = notify::RecommendedWatcher::new(
            move |ev: notify::Result<notify::Event>| {
                let _ = tx.send(ev);
            },
            config,
        )
        .map_err(|e| watch_err(e.to_string()))?;
        watcher.watch(&shared.dir, RecursiveMode::Recursive).map_err(|e| watch_err(e.to_string()))?;
        let stop = CancellationToken::new();
        runtime.spawn(watch_loop(shared.clone(), rx, stop.clone()));
        *watching = Some(Watching { _watcher: watcher, stop });
        Ok(())
    }

    /// Stops watching; the objects stay as they are.
    pub fn stop_watching(&self) {
        self.inner.watching.lock().take();
    }

    /// True while the watch task runs (false before it is started, after
    /// [`ManifestsSource::stop_watching`], and once the directory is gone).
    pub fn is_watching(&self) -> bool {
        self.inner.watching.lock().as_ref().is_some_and(|w| !w.stop.is_cancelled())
    }

    /// Re-reads the whole directory now (blocking) and applies the changes.
    pub fn rescan(&self) {
        let shared = &self.inner.shared;
        shared.rescan(vec![shared.dir.clone()]);
    }

    /// Every current problem: malformed, unreadable or over-limit files,
    /// duplicate keys, the last watcher failure. Ordered by file, then line.
    pub fn errors(&self) -> Vec<ManifestError> {
        let st = self.inner.shared.state.lock();
        let mut out: Vec<ManifestError> = st.dir_errors.values().cloned().collect();
        out.extend(st.files.values().flat_map(|f| f.errors.iter().cloned()));
        out.extend(st.duplicates.iter().cloned());
        // Errors without a line (a whole file's, "and N more") last.
        let line = |e: &ManifestError| e.line().unwrap_or(usize::MAX);
        out.sort_by(|a, b| a.path().cmp(b.path()).then(line(a).cmp(&line(b))));
        out.extend(st.watch_error.iter().cloned());
        out
    }

    /// The manifest files currently known (loaded or malformed), sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.inner.shared.state.lock().files.keys().cloned().collect()
    }

    /// The watched directory (canonicalised).
    pub fn dir(&self) -> &Path {
        &self.inner.shared.dir
    }

    pub fn filter(&self) -> &ManifestFilter {
        &self.inner.shared.filter
    }

    /// The limits in force ([`ManifestLimits::max_depth`] at most [`MAX_DEPTH`]).
    pub fn limits(&self) -> &ManifestLimits {
        &self.inner.shared.limits
    }

    /// How many times changes were applied: each rescan, and while watching
    /// each file applied on its own after its rescan's [`BATCH_WAIT`] (the
    /// initial load is the first).
    pub fn scan_count(&self) -> u64 {
        self.inner.shared.scans.load(Ordering::Acquire)
    }

    /// The current version of `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<ObjectRef> {
        self.inner.shared.store.get(key)
    }
    /// The current keys, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.inner.shared.store.keys()
    }
    /// The current objects, sorted by key.
    pub fn objects(&self) -> Vec<ObjectRef> {
        self.inner.shared.store.objects()
    }
    /// The resourceVersion of the latest change.
    pub fn resource_version(&self) -> u64 {
        self.inner.shared.store.resource_version()
    }
}

impl ListerWatcher for ManifestsSource {
    fn list(&self) -> BoxFuture<'_, Result<ListResult, SourceError>> {
        self.inner.shared.store.list()
    }
    fn watch(&self, resource_version: &str) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.inner.shared.store.watch(resource_version)
    }
    fn describe(&self) -> String {
        self.inner.shared.store.describe()
    }
}

mod depth;
mod errors;
mod filter;
mod parse;
mod watch;

use watch::watch_loop;

#[cfg(test)]
mod tests;
