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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use notify::{EventKind, RecursiveMode, Watcher};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::selector::Selector;
use super::versioned::VersionedStore;
use crate::informer::{ListResult, ListerWatcher, ObjectRef, SourceError, WatchStream};

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

/// Which manifests a [`ManifestsSource`] serves. `None` selects everything.
///
/// ```
/// use informer_host::source::manifests::ManifestFilter;
/// let f = ManifestFilter::default().kind("ConfigMap").namespace("team-a").labels("app=web").unwrap();
/// assert_eq!(f.to_string(), "kind=ConfigMap namespace=team-a labels=app=web");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestFilter {
    /// Exact `apiVersion`, e.g. `apps/v1`.
    pub api_version: Option<String>,
    /// Exact `kind`, e.g. `ConfigMap`.
    pub kind: Option<String>,
    /// Exact `metadata.namespace`; objects without one never match.
    pub namespace: Option<String>,
    /// Matched against `metadata.labels`.
    pub label_selector: Option<Selector>,
}

impl ManifestFilter {
    pub fn api_version(mut self, api_version: impl Into<String>) -> Self {
        self.api_version = Some(api_version.into());
        self
    }
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
    /// Parses and sets the label selector.
    pub fn labels(mut self, selector: &str) -> Result<Self, super::selector::SelectorError> {
        self.label_selector = Some(Selector::parse(selector)?);
        Ok(self)
    }

    /// Whether a (validated) manifest is selected.
    pub fn matches(&self, manifest: &Value) -> bool {
        let meta = &manifest["metadata"];
        let eq = |want: &Option<String>, got: &Value| want.as_deref().is_none_or(|w| got.as_str() == Some(w));
        eq(&self.api_version, &manifest["apiVersion"])
            && eq(&self.kind, &manifest["kind"])
            && eq(&self.namespace, &meta["namespace"])
            && self.label_selector.as_ref().is_none_or(|s| s.matches_with(|k| meta["labels"][k].as_str()))
    }
}

impl fmt::Display for ManifestFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(v) = &self.api_version {
            parts.push(format!("apiVersion={v}"));
        }
        if let Some(v) = &self.kind {
            parts.push(format!("kind={v}"));
        }
        if let Some(v) = &self.namespace {
            parts.push(format!("namespace={v}"));
        }
        if let Some(s) = self.label_selector.as_ref().filter(|s| !s.is_everything()) {
            parts.push(format!("labels={s}"));
        }
        if parts.is_empty() { f.write_str("everything") } else { f.write_str(&parts.join(" ")) }
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

/// A problem with the manifest directory, a file, or a document.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ManifestError {
    /// The directory is missing or is not a readable directory.
    #[error("manifest directory {}: {source}", path.display())]
    Directory {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// A file (or subdirectory) could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// YAML or JSON that does not parse, or text that is not UTF-8;
    /// `line`/`column` are 1-based.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },
    /// A document that parses but is not a valid manifest; `line` is where
    /// the document's content starts.
    #[error("{}:{line}: {message}", path.display())]
    Document { path: PathBuf, line: usize, message: String },
    /// A file larger than [`ManifestLimits::max_file_bytes`]; it was not read.
    #[error("{}: the file is {size} bytes, over the limit of {limit} bytes per file", path.display())]
    FileTooLarge { path: PathBuf, size: u64, limit: u64 },
    /// A document larger than [`ManifestLimits::max_document_bytes`]; `line`
    /// is where its content starts. It was not parsed.
    #[error("{}:{line}: the document is {size} bytes, over the limit of {limit} bytes per document", path.display())]
    DocumentTooLarge { path: PathBuf, line: usize, size: usize, limit: usize },
    /// Mappings and sequences nested deeper than [`ManifestLimits::max_depth`]:
    /// `line` and `column` (1-based) are where the first level too many
    /// opens, or, without a column, where the document's content starts.
    #[error("{}:{}: nested deeper than {limit} levels", path.display(), line_column(*line, *column))]
    TooDeep { path: PathBuf, line: usize, column: Option<usize>, limit: usize },
    /// `count` more `what` ("errors", "duplicate definitions") of the file
    /// than the [`MAX_ERRORS_PER_FILE`] reported before this one.
    #[error("{}: and {count} more {what}", path.display())]
    More { path: PathBuf, count: usize, what: &'static str },
    /// `key` is defined at `path:line` and already at `first_path:first_line`,
    /// which wins.
    #[error(
        "{}:{line}: {key} is already defined in {}:{first_line}; that definition is used",
        path.display(),
        first_path.display()
    )]
    Duplicate { key: String, path: PathBuf, line: usize, first_path: PathBuf, first_line: usize },
    /// The filesystem watcher failed or could not start.
    #[error("watching {}: {message}", path.display())]
    Watch { path: PathBuf, message: String },
}

fn line_column(line: usize, column: Option<usize>) -> String {
    match column {
        Some(column) => format!("{line}:{column}"),
        None => line.to_string(),
    }
}

impl ManifestError {
    /// The file (or directory) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Directory { path, .. }
            | ManifestError::Read { path, .. }
            | ManifestError::Syntax { path, .. }
            | ManifestError::Document { path, .. }
            | ManifestError::FileTooLarge { path, .. }
            | ManifestError::DocumentTooLarge { path, .. }
            | ManifestError::TooDeep { path, .. }
            | ManifestError::More { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::Watch { path, .. } => path,
        }
    }
    /// The 1-based line the error points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ManifestError::Syntax { line, .. }
            | ManifestError::Document { line, .. }
            | ManifestError::DocumentTooLarge { line, .. }
            | ManifestError::TooDeep { line, .. }
            | ManifestError::Duplicate { line, .. } => Some(*line),
            _ => None,
        }
    }
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

// ---------------------------------------------------------------------------
// Watching.

/// The reads of one rescan, applied together once all are done, or those
/// that are done at `deadline`.
struct Batch {
    roots: Vec<PathBuf>,
    dir_errors: Vec<(PathBuf, io::Error)>,
    reads: Vec<FileRead>,
    /// Reads not done yet: path → read number.
    waiting: HashMap<PathBuf, u64>,
    deadline: Instant,
}

/// Receives notify events, coalesces bursts, and rescans what they touched.
/// Reading and parsing run on blocking threads and come back as
/// [`FileRead`]s, so events are handled (and other files read and applied)
/// while a slow file is still being read.
async fn watch_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    stop: CancellationToken,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<FileRead>();
    let mut roots = BTreeSet::from([shared.dir.clone()]);
    // While events come in: (when to rescan, the latest it may be).
    let mut debounce: Option<(Instant, Instant)> = None;
    let mut batch: Option<Batch> = None;
    loop {
        if debounce.is_none() && !roots.is_empty() {
            // A new rescan: what is done of the previous one is applied
            // first, the rest of it when it is done.
            if let Some(b) = batch.take()
                && !apply_batch(&shared, b, &stop).await
            {
                return;
            }
            let todo: Vec<PathBuf> = std::mem::take(&mut roots).into_iter().collect();
            let s = shared.clone();
            let Ok(plan) = tokio::task::spawn_blocking(move || s.plan(todo)).await else { return };
            let mut waiting = HashMap::new();
            let mut small = Vec::new();
            for (path, size) in plan.files {
                let n = shared.begin_read(&path);
                waiting.insert(path.clone(), n);
                if size >= OWN_THREAD_BYTES {
                    spawn_reads(&shared, vec![(path, n)], &done_tx, &stop);
                } else {
                    small.push((path, n));
                }
            }
            if !small.is_empty() {
                spawn_reads(&shared, small, &done_tx, &stop);
            }
            let b = Batch {
                roots: plan.roots,
                dir_errors: plan.dir_errors,
                reads: Vec::new(),
                waiting,
                deadline: Instant::now() + BATCH_WAIT,
            };
            if b.waiting.is_empty() {
                if !apply_batch(&shared, b, &stop).await {
                    return;
                }
            } else {
                batch = Some(b);
            }
        }
        let idle = Instant::now() + Duration::from_secs(3600);
        let rescan_at = debounce.map_or(idle, |(at, _)| at);
        let batch_at = batch.as_ref().map_or(idle, |b| b.deadline);
        tokio::select! {
            _ = stop.cancelled() => return,
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                shared.collect(ev, &mut roots);
                let now = Instant::now();
                let latest = debounce.map_or(now + MAX_DEBOUNCE, |(_, latest)| latest);
                debounce = Some(((now + DEBOUNCE).min(latest), latest));
            }
            Some(read) = done_rx.recv() => {
                let of_batch = batch.as_ref().is_some_and(|b| b.waiting.get(&read.path) == Some(&read.number));
                if let Some(b) = batch.as_mut().filter(|_| of_batch) {
                    b.waiting.remove(&read.path);
                    b.reads.push(read);
                    if b.waiting.is_empty()
                        && let Some(b) = batch.take()
                        && !apply_batch(&shared, b, &stop).await
                    {
                        return;
                    }
                } else {
                    // A read of an earlier rescan, done after its BATCH_WAIT.
                    let s = shared.clone();
                    if tokio::task::spawn_blocking(move || s.apply(&[], Vec::new(), vec![read])).await.is_err() {
                        return;
                    }
                }
            }
            _ = tokio::time::sleep_until(rescan_at), if debounce.is_some() => debounce = None,
            _ = tokio::time::sleep_until(batch_at), if batch.is_some() => {
                if let Some(b) = batch.take()
                    && !apply_batch(&shared, b, &stop).await
                {
                    return;
                }
            }
        }
    }
}

/// Applies a rescan's reads; false (and `stop` cancelled) when the
/// directory is gone or the task failed.
async fn apply_batch(shared: &Arc<Shared>, b: Batch, stop: &CancellationToken) -> bool {
    let s = shared.clone();
    let applied = tokio::task::spawn_blocking(move || {
        s.apply(&b.roots, b.dir_errors, b.reads);
        s.dir.is_dir()
    })
    .await;
    match applied {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(dir = %shared.dir.display(), "manifest directory is gone; its objects were deleted");
            stop.cancel();
            false
        }
        Err(_) => false,
    }
}

/// Reads `files` one after the other on a blocking thread and sends each
/// result to the watch task.
fn spawn_reads(
    shared: &Arc<Shared>,
    files: Vec<(PathBuf, u64)>,
    done: &mpsc::UnboundedSender<FileRead>,
    stop: &CancellationToken,
) {
    let (shared, done, stop) = (shared.clone(), done.clone(), stop.clone());
    tokio::task::spawn_blocking(move || {
        for (path, number) in files {
            if stop.is_cancelled() || done.send(shared.read_file(path, number, Some(&stop))).is_err() {
                return;
            }
        }
    });
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn is_manifest_path(path: &Path) -> bool {
    let visible = path.file_name().is_some_and(|n| !is_hidden(n));
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    visible && ext.is_some_and(|e| EXTENSIONS.contains(&e.as_str()))
}

/// What a rescan of some roots reads.
struct Plan {
    roots: Vec<PathBuf>,
    /// Subdirectories that could not be read.
    dir_errors: Vec<(PathBuf, io::Error)>,
    /// The files to read, with their size (0 when unknown), in path order.
    files: Vec<(PathBuf, u64)>,
}

/// One file read (or not) and parsed; `number` orders reads of a file.
struct FileRead {
    path: PathBuf,
    number: u64,
    outcome: Outcome,
}

enum Outcome {
    /// The file is gone, or is a directory now.
    Gone,
    /// Unreadable, too large or not UTF-8: its objects stay as they were.
    Failed(ManifestError),
    /// The same text as the last read applied.
    Unchanged,
    /// Parsed: the text's hash, and its selected documents or its errors.
    Parsed { hash: u64, result: Result<Vec<Doc>, Vec<ManifestError>> },
    /// Given up: a newer read of the file started, or watching stopped.
    Abandoned,
}

impl Shared {
    /// Adds what an event touched to the set of paths to rescan.
    fn collect(&self, ev: notify::Result<notify::Event>, roots: &mut BTreeSet<PathBuf>) {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "manifest watcher error; rescanning");
                self.state.lock().watch_error =
                    Some(ManifestError::Watch { path: self.dir.clone(), message: e.to_string() });
                roots.insert(self.dir.clone());
                return;
            }
        };
        if ev.need_rescan() {
            roots.insert(self.dir.clone());
            return;
        }
        // Opening and reading (ours included) changes nothing.
        if let EventKind::Access(a) = ev.kind
            && a != notify::event::AccessKind::Close(notify::event::AccessMode::Write)
        {
            return;
        }
        for path in ev.paths {
            let Ok(rel) = path.strip_prefix(&self.dir) else {
                roots.insert(self.dir.clone());
                continue;
            };
            // A change under a hidden entry: a hidden regular file (editor
            // swap files) is ignored; a hidden directory or symlink may be
            // what visible files point through, so rescan its parent.
            let mut prefix = self.dir.clone();
            let mut target = Some(path.clone());
            for c in rel.components() {
                if let Component::Normal(name) = c
                    && is_hidden(name)
                {
                    let hidden = prefix.join(name);
                    let is_file = std::fs::symlink_metadata(&hidden).is_ok_and(|m| m.is_file());
                    target = (!is_file).then_some(prefix);
                    break;
                }
                prefix.push(c);
            }
            if let Some(t) = target {
                roots.insert(t);
            }
        }
    }

    /// Finds the files under each root (a file or a directory): the files
    /// known there and those there now.
    fn plan(&self, roots: Vec<PathBuf>) -> Plan {
        let known: Vec<PathBuf> = self.state.lock().files.keys().cloned().collect();
        let mut candidates = BTreeSet::new();
        let mut dir_errors = Vec::new();
        for root in &roots {
            candidates.extend(known.iter().filter(|f| f.starts_with(root)).cloned());
            match std::fs::symlink_metadata(root) {
                Ok(m) if m.is_dir() => walk(root, &mut candidates, &mut dir_errors),
                _ if is_manifest_path(root) => {
                    candidates.insert(root.clone());
                }
                _ => {}
            }
        }
        let files = candidates
            .into_iter()
            .map(|p| {
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                (p, size)
            })
            .collect();
        Plan { roots, dir_errors, files }
    }

    /// Re-reads the files under each root now, on this thread, and applies
    /// the differences to the store.
    fn rescan(&self, roots: Vec<PathBuf>) {
        let plan = self.plan(roots);
        let reads = plan
            .files
            .into_iter()
            .map(|(path, _)| {
                let number = self.begin_read(&path);
                self.read_file(path, number, None)
            })
            .collect();
        self.apply(&plan.roots, plan.dir_errors, reads);
    }

    /// Numbers a read of `path` that is about to start; from now on, no
    /// earlier read of it is applied.
    fn begin_read(&self, path: &Path) -> u64 {
        let number = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        self.latest_read.lock().insert(path.to_path_buf(), number);
        number
    }

    fn is_latest_read(&self, path: &Path, number: u64) -> bool {
        self.latest_read.lock().get(path) == Some(&number)
    }

    /// Reads and parses one file (blocking). Gives up at the next document
    /// once a newer read of the file has started or `stop` is cancelled.
    fn read_file(&self, path: PathBuf, number: u64, stop: Option<&CancellationToken>) -> FileRead {
        #[cfg(test)]
        tests::gate::before_read(&path);
        let limit = self.limits.max_file_bytes;
        let outcome = match read_at_most(&path, limit) {
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::IsADirectory) => Outcome::Gone,
            Err(e) => Outcome::Failed(ManifestError::Read { path: path.clone(), source: Arc::new(e) }),
            Ok(Err(size)) => Outcome::Failed(ManifestError::FileTooLarge { path: path.clone(), size, limit }),
            Ok(Ok(bytes)) => match String::from_utf8(bytes) {
                Err(e) => Outcome::Failed(utf8_error(&path, e.as_bytes(), e.utf8_error())),
                Ok(text) => {
                    let hash = hash_text(&text);
                    if self.state.lock().files.get(&path).is_some_and(|f| f.hash == Some(hash)) {
                        Outcome::Unchanged
                    } else {
                        let keep_going =
                            || stop.is_none_or(|s| !s.is_cancelled()) && self.is_latest_read(&path, number);
                        match parse_file(&path, &text, &self.filter, &self.limits, &keep_going) {
                            Some(Ok(mut docs)) if self.sink.is_some() => {
                                for d in &mut docs {
                                    d.key = qualified_key_of(&d.value);
                                }
                                Outcome::Parsed { hash, result: Ok(docs) }
                            }
                            Some(result) => Outcome::Parsed { hash, result },
                            None => Outcome::Abandoned,
                        }
                    }
                }
            },
        };
        FileRead { path, number, outcome }
    }

    /// Applies finished reads, and a rescan's directory errors under its
    /// roots, to the state and the store.
    fn apply(&self, roots: &[PathBuf], dir_errors: Vec<(PathBuf, io::Error)>, reads: Vec<FileRead>) {
        let mut st = self.state.lock();
        st.dir_errors.retain(|d, _| !roots.iter().any(|r| d.starts_with(r)));
        for (dir, e) in dir_errors {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read manifest directory");
            st.dir_errors.insert(dir.clone(), ManifestError::Read { path: dir, source: Arc::new(e) });
        }
        for read in reads {
            self.apply_read(&mut st, read);
        }
        self.reconcile(&mut st);
        drop(st);
        self.scans.fetch_add(1, Ordering::Release);
    }

    fn apply_read(&self, st: &mut State, read: FileRead) {
        let FileRead { path, number, outcome } = read;
        {
            let mut latest = self.latest_read.lock();
            if latest.get(&path) != Some(&number) {
                return; // a newer read of the file started: it decides
            }
            latest.remove(&path);
        }
        match outcome {
            Outcome::Unchanged | Outcome::Abandoned => {}
            Outcome::Gone => {
                st.files.remove(&path);
            }
            Outcome::Failed(e) => {
                tracing::warn!(error = %e, "cannot load manifest file; keeping its previous objects");
                let entry = st.files.entry(path).or_insert_with(FileState::empty);
                entry.hash = None;
                entry.errors = vec![e];
            }
            Outcome::Parsed { hash, result } => {
                let entry = st.files.entry(path).or_insert_with(FileState::empty);
                entry.hash = Some(hash);
                match result {
                    Ok(docs) => {
                        entry.docs = docs;
                        entry.errors.clear();
                    }
                    Err(errors) => {
                        for e in &errors {
                            tracing::warn!(error = %e, "malformed manifest; keeping the file's previous objects");
                        }
                        entry.errors = errors;
                    }
                }
            }
        }
    }

    /// Makes the store hold what the files define now.
    fn reconcile(&self, st: &mut State) {
        let mut desired: BTreeMap<&str, (&PathBuf, usize, &Arc<Value>)> = BTreeMap::new();
        let mut duplicates = Vec::new();
        // Per file: duplicate definitions found (only the first
        // MAX_ERRORS_PER_FILE are reported).
        let mut per_file: BTreeMap<&PathBuf, usize> = BTreeMap::new();
        for (path, file) in &st.files {
            for doc in &file.docs {
                match desired.get(doc.key.as_str()) {
                    None => {
                        desired.insert(&doc.key, (path, doc.line, &doc.value));
                    }
                    Some((first_path, first_line, _)) => {
                        let found = per_file.entry(path).or_default();
                        *found += 1;
                        if *found <= MAX_ERRORS_PER_FILE {
                            duplicates.push(ManifestError::Duplicate {
                                key: doc.key.clone(),
                                path: path.clone(),
                                line: doc.line,
                                first_path: (*first_path).clone(),
                                first_line: *first_line,
                            });
                        }
                    }
                }
            }
        }
        for (path, found) in per_file {
            if found > MAX_ERRORS_PER_FILE {
                let count = found - MAX_ERRORS_PER_FILE;
                duplicates.push(ManifestError::More { path: path.clone(), count, what: "duplicate definitions" });
            }
        }
        // Deletes first, then creations and modifications, each in key order.
        for key in st.current.keys() {
            if !desired.contains_key(key.as_str()) {
                match &self.sink {
                    Some(sink) => sink.remove(key),
                    None => {
                        self.store.delete(key);
                    }
                }
            }
        }
        let mut next = BTreeMap::new();
        for (key, (path, _, value)) in &desired {
            let current = st.current.get(*key);
            if current.is_some_and(|(_, v)| v == *value) {
                next.insert(key.to_string(), ((*path).clone(), Arc::clone(value)));
            } else if let Err(e) = match &self.sink {
                Some(sink) => sink.put(key, value),
                None => self.store.apply(Value::clone(value)).map(drop).map_err(|e| e.to_string()),
            } {
                // Documents are validated when parsed, so this is a bug;
                // the store keeps what it had.
                tracing::warn!(file = %path.display(), key, error = %e, "manifest rejected by the store");
                if let Some(old) = current {
                    next.insert(key.to_string(), old.clone());
                }
            } else {
                next.insert(key.to_string(), ((*path).clone(), Arc::clone(value)));
            }
        }
        let known: HashSet<String> = st.duplicates.iter().map(ToString::to_string).collect();
        for d in &duplicates {
            if !known.contains(&d.to_string()) {
                tracing::warn!(error = %d, "duplicate manifest");
            }
        }
        st.current = next;
        st.duplicates = duplicates;
    }
}

impl FileState {
    fn empty() -> Self {
        FileState { hash: None, docs: Vec::new(), errors: Vec::new() }
    }
}

fn hash_text(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Reads a file unless it is larger than `limit` bytes: then `Ok(Err(size))`
/// and at most `limit + 1` bytes were read.
fn read_at_most(path: &Path, limit: u64) -> io::Result<Result<Vec<u8>, u64>> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size > limit {
        return Ok(Err(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut file = file.take(limit.saturating_add(1));
    file.read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        // It grew while being read.
        let size = file.into_inner().metadata().map_or(0, |m| m.len());
        return Ok(Err(size.max(bytes.len() as u64)));
    }
    Ok(Ok(bytes))
}

/// Text that is not UTF-8: the line and column (in characters) of the
/// first bad byte, and its byte offset.
fn utf8_error(path: &Path, bytes: &[u8], e: std::str::Utf8Error) -> ManifestError {
    let offset = e.valid_up_to();
    let valid = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
    let line_start = valid.rfind('\n').map_or(0, |i| i + 1);
    ManifestError::Syntax {
        path: path.to_path_buf(),
        line: valid.bytes().filter(|b| *b == b'\n').count() + 1,
        column: valid[line_start..].chars().count() + 1,
        message: format!("invalid UTF-8: byte {:#04x} at byte offset {offset}", bytes[offset]),
    }
}

/// Collects manifest files under `dir`, skipping hidden entries and
/// symlinked directories; collects the directories that cannot be read.
fn walk(dir: &Path, out: &mut BTreeSet<PathBuf>, errors: &mut Vec<(PathBuf, io::Error)>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                errors.push((dir.to_path_buf(), e));
            }
            return;
        }
    };
    let mut subdirs = Vec::new();
    for entry in entries.flatten() {
        if is_hidden(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            subdirs.push(path);
        } else if (ft.is_file() || (ft.is_symlink() && path.is_file())) && is_manifest_path(&path) {
            out.insert(path);
        }
    }
    subdirs.sort();
    for d in subdirs {
        walk(&d, out, errors);
    }
}

// ---------------------------------------------------------------------------
// Parsing.

/// Parses one file into its selected documents, or its errors (the first
/// [`MAX_ERRORS_PER_FILE`] and a count of the rest). One pass over the
/// text: a document is checked against the limits, then parsed once. None
/// when `keep_going` turned false between two documents.
fn parse_file(
    path: &Path,
    text: &str,
    filter: &ManifestFilter,
    limits: &ManifestLimits,
    keep_going: &dyn Fn() -> bool,
) -> Option<Result<Vec<Doc>, Vec<ManifestError>>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_json = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let mut sink = Sink { path, filter, limits, docs: Vec::new(), errors: Vec::new(), more: 0 };
    let done =
        if is_json { json_documents(text, &mut sink, keep_going) } else { yaml_documents(text, &mut sink, keep_going) };
    done.then(|| sink.finish())
}

/// Where the documents of one file go.
struct Sink<'a> {
    path: &'a Path,
    filter: &'a ManifestFilter,
    limits: &'a ManifestLimits,
    docs: Vec<Doc>,
    errors: Vec<ManifestError>,
    /// Errors beyond MAX_ERRORS_PER_FILE, counted.
    more: usize,
}

impl Sink<'_> {
    fn error(&mut self, e: ManifestError) {
        if self.errors.len() < MAX_ERRORS_PER_FILE {
            self.errors.push(e);
        } else {
            self.more += 1;
        }
    }

    fn doc_error(&mut self, line: usize, message: String) {
        self.error(ManifestError::Document { path: self.path.to_path_buf(), line, message });
    }

    /// A parsed document whose content starts at `line`.
    fn document(&mut self, line: usize, value: Value) {
        // Exact, for what the pass before parsing cannot see (a sequence
        // at its key's indentation, a one-pair mapping in a flow sequence).
        if too_deep(&value, self.limits.max_depth) {
            let limit = self.limits.max_depth;
            self.error(ManifestError::TooDeep { path: self.path.to_path_buf(), line, column: None, limit });
            return;
        }
        manifests_of(self, line, value);
    }

    fn finish(mut self) -> Result<Vec<Doc>, Vec<ManifestError>> {
        if self.more > 0 {
            let (path, count) = (self.path.to_path_buf(), self.more);
            self.errors.push(ManifestError::More { path, count, what: "errors" });
        }
        if self.errors.is_empty() { Ok(self.docs) } else { Err(self.errors) }
    }
}

/// Whether arrays and objects nest deeper than `limit` in `value`.
fn too_deep(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(_) | Value::Object(_) if depth > limit => return true,
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth + 1))),
            Value::Object(m) => stack.extend(m.values().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    false
}

/// Removes the " at line L column C" libyaml and serde_json add to messages.
fn strip_location(message: String, line: usize, column: usize) -> String {
    message.replacen(&format!(" at line {line} column {column}"), "", 1)
}

/// Adds `shift` to every "at line N" of a message about a document parsed
/// on its own, so that its lines are the file's.
fn shift_lines(message: &str, shift: usize) -> String {
    const AT: &str = " at line ";
    let mut out = String::with_capacity(message.len() + 8);
    let mut rest = message;
    while let Some(i) = rest.find(AT) {
        let (head, tail) = rest.split_at(i + AT.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        match tail[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + shift).to_string()),
            Err(_) => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// Line numbers of increasing byte offsets, counted once.
struct Lines<'a> {
    text: &'a [u8],
    offset: usize,
    line: usize,
}

impl Lines<'_> {
    /// The 1-based line of `offset`, which is not before the last one asked.
    fn at(&mut self, offset: usize) -> usize {
        self.line += self.text[self.offset..offset].iter().filter(|b| **b == b'\n').count();
        self.offset = offset;
        self.line
    }
}

/// The documents of a JSON file (one or more concatenated values), each
/// with the line where it starts. False when `keep_going` turned false.
fn json_documents(text: &str, sink: &mut Sink<'_>, keep_going: &dyn Fn() -> bool) -> bool {
    if let Err(e) = json_check(sink.path, text, sink.limits) {
        sink.error(e);
        return true;
    }
    let mut lines = Lines { text: text.as_bytes(), offset: 0, line: 1 };
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    loop {
        if !keep_going() {
            return false;
        }
        let offset = stream.byte_offset();
        match stream.next() {
            None => return true,
            Some(Ok(v)) => {
                let rest = &text[offset..];
                let start = offset + (rest.len() - rest.trim_start().len());
                sink.document(lines.at(start), v);
            }
            Some(Err(e)) => {
                let message = strip_location(e.to_string(), e.line(), e.column());
                let (path, line, column) = (sink.path.to_path_buf(), e.line(), e.column());
                sink.error(ManifestError::Syntax { path, line, column, message });
                return true;
            }
        }
    }
}

/// One pass over JSON text before it is parsed: the first value nested
/// deeper than the limit, or larger than the limit for one document.
fn json_check(path: &Path, text: &str, limits: &ManifestLimits) -> Result<(), ManifestError> {
    let (mut depth, mut in_string, mut escaped) = (0, false, false);
    let (mut line, mut line_start) = (1, 0);
    let (mut start, mut start_line) = (0, 1);
    let too_large = |size: usize, line: usize| ManifestError::DocumentTooLarge {
        path: path.to_path_buf(),
        line,
        size,
        limit: limits.max_document_bytes,
    };
    for (i, &c) in text.as_bytes().iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'\n' => (line, line_start) = (line + 1, i + 1),
            b'[' | b'{' => {
                if depth == 0 {
                    (start, start_line) = (i, line);
                }
                depth += 1;
                if depth > limits.max_depth {
                    let column = Some(text[line_start..i].chars().count() + 1);
                    return Err(ManifestError::TooDeep {
                        path: path.to_path_buf(),
                        line,
                        column,
                        limit: limits.max_depth,
                    });
                }
            }
            b']' | b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 && i + 1 - start > limits.max_document_bytes {
                    return Err(too_large(i + 1 - start, start_line));
                }
            }
            _ => {}
        }
    }
    if depth > 0 && text.len() - start > limits.max_document_bytes {
        return Err(too_large(text.len() - start, start_line));
    }
    Ok(())
}

/// A line that is `---` or `...` followed by nothing or whitespace.
fn marker(line: &str, m: &str) -> bool {
    line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Splits YAML text at document markers. Per YAML, `---`/`...` at the
/// start of a line cannot be content, so this agrees with the parser.
/// Yields (0-based first line, byte range) per chunk.
fn yaml_chunks(text: &str) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut chunks = Vec::new();
    let (mut start, mut start_line) = (0, 0);
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let end = offset + line.len();
        if marker(line, "---") {
            if offset > start {
                chunks.push((start_line, start..offset));
            }
            (start, start_line) = (offset, i);
        } else if marker(line, "...") {
            chunks.push((start_line, start..end));
            (start, start_line) = (end, i + 1);
        }
        offset = end;
    }
    if text.len() > start {
        chunks.push((start_line, start..text.len()));
    }
    chunks
}

/// The 1-based line of the first content of a chunk (skipping blank
/// lines, comments, directives and bare markers), if it has any.
fn first_content_line(chunk: &str, first_line: usize) -> Option<usize> {
    for (i, line) in chunk.lines().enumerate() {
        let content = if marker(line, "---") {
            &line[3..]
        } else if marker(line, "...") || line.starts_with('%') {
            continue;
        } else {
            line
        };
        let content = content.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        return Some(first_line + i + 1);
    }
    None
}

/// The documents of a YAML file, each with the line where its content
/// starts. Each is checked against the size and depth limits, then parsed
/// on its own, once, and its errors moved to the file's lines. False when
/// `keep_going` turned false.
fn yaml_documents(text: &str, sink: &mut Sink<'_>, keep_going: &dyn Fn() -> bool) -> bool {
    let limits = *sink.limits;
    for (first_line, range) in yaml_chunks(text) {
        if !keep_going() {
            return false;
        }
        let chunk = &text[range];
        let Some(line) = first_content_line(chunk, first_line) else { continue };
        let path = sink.path.to_path_buf();
        if chunk.len() > limits.max_document_bytes {
            let (size, limit) = (chunk.len(), limits.max_document_bytes);
            sink.error(ManifestError::DocumentTooLarge { path, line, size, limit });
            continue;
        }
        if let Some((l, c)) = yaml_too_deep(chunk, limits.max_depth) {
            let (line, column, limit) = (first_line + l + 1, Some(c + 1), limits.max_depth);
            sink.error(ManifestError::TooDeep { path, line, column, limit });
            continue;
        }
        let mut yaml: serde_yaml::Value = match serde_yaml::from_str(chunk) {
            Ok(v) => v,
            Err(e) => {
                sink.error(yaml_error(path, &e, first_line, line, limits.max_depth));
                continue;
            }
        };
        if let Err(e) = yaml.apply_merge() {
            sink.doc_error(line, format!("merge key (<<): {e}"));
            continue;
        }
        match serde_json::to_value(&yaml) {
            Ok(v) => sink.document(line, v),
            Err(e) => sink.doc_error(line, format!("not representable as JSON: {e}")),
        }
    }
    true
}

/// An error of serde_yaml about a document parsed on its own, which starts
/// on the file's line `shift` + 1 and whose content starts on `line`.
fn yaml_error(path: PathBuf, e: &serde_yaml::Error, shift: usize, line: usize, limit: usize) -> ManifestError {
    let message = e.to_string();
    match e.location() {
        // serde_yaml's own limit (128), past levels the check before
        // parsing does not count.
        Some(loc) if message.starts_with("recursion limit exceeded") => {
            ManifestError::TooDeep { path, line: loc.line() + shift, column: Some(loc.column()), limit }
        }
        Some(loc) => ManifestError::Syntax {
            path,
            line: loc.line() + shift,
            column: loc.column(),
            message: shift_lines(&strip_location(message, loc.line(), loc.column()), shift),
        },
        None => ManifestError::Document { path, line, message },
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Validates one document (expanding Lists) and keeps the selected ones.
fn manifests_of(sink: &mut Sink<'_>, line: usize, value: Value) {
    let mut obj = match value {
        Value::Null => return,
        Value::Object(m) => m,
        other => {
            sink.doc_error(line, format!("a manifest must be a mapping, found {}", type_name(&other)));
            return;
        }
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let is_list = kind == "List" || (kind.ends_with("List") && obj.get("items").is_some_and(Value::is_array));
    if is_list {
        let items = match obj.remove("items") {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                sink.doc_error(line, format!("items of a {kind} must be a list, found {}", type_name(&other)));
                return;
            }
        };
        // Items of a typed list (`ConfigMapList`) may omit apiVersion and kind.
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        let list_api_version = obj.get("apiVersion").cloned();
        for (i, item) in items.into_iter().enumerate() {
            let mut item = match item {
                Value::Object(m) => m,
                other => {
                    sink.doc_error(line, format!("items[{i}] must be a mapping, found {}", type_name(&other)));
                    continue;
                }
            };
            if let Some(k) = item_kind {
                item.entry("kind").or_insert_with(|| Value::String(k.to_string()));
                if let Some(av) = &list_api_version {
                    item.entry("apiVersion").or_insert_with(|| av.clone());
                }
            }
            match validate(&item) {
                Ok(key) => select(key, line, Value::Object(item), sink.filter, &mut sink.docs),
                Err(m) => sink.doc_error(line, format!("items[{i}] of the {kind}: {m}")),
            }
        }
        return;
    }
    match validate(&obj) {
        Ok(key) => select(key, line, Value::Object(obj), sink.filter, &mut sink.docs),
        Err(m) => sink.doc_error(line, m),
    }
}

fn select(key: String, line: usize, value: Value, filter: &ManifestFilter, docs: &mut Vec<Doc>) {
    if filter.matches(&value) {
        docs.push(Doc { key, line, value: Arc::new(value) });
    }
}

/// Checks what the engine relies on; returns the key.
fn validate(obj: &Map<String, Value>) -> Result<String, String> {
    for field in ["apiVersion", "kind"] {
        match obj.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            None | Some(Value::Null) => return Err(format!("manifest has no {field}")),
            Some(Value::String(_)) => return Err(format!("{field} is empty")),
            Some(other) => return Err(format!("{field} must be a string, found {}", type_name(other))),
        }
    }
    let meta = match obj.get("metadata") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => return Err("manifest has no metadata.name".into()),
        Some(other) => return Err(format!("metadata must be a mapping, found {}", type_name(other))),
    };
    let name = match meta.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        None | Some(Value::Null) | Some(Value::String(_)) => return Err("manifest has no metadata.name".into()),
        Some(other) => return Err(format!("metadata.name must be a string, found {}", type_name(other))),
    };
    for field in ["namespace", "uid", "resourceVersion"] {
        match meta.get(field) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(other) => return Err(format!("metadata.{field} must be a string, found {}", type_name(other))),
        }
    }
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!("metadata.{field}.{k} must be a string, found {}", type_name(v)));
                }
            }
            Some(other) => return Err(format!("metadata.{field} must be a mapping, found {}", type_name(other))),
        }
    }
    Ok(match meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    })
}

// ---------------------------------------------------------------------------
// The depth of YAML before it is parsed.

/// Where a YAML document first nests deeper than `limit`, as a 0-based
/// line and column (in characters) of `text`; None when it never does, or
/// when libyaml would stop at a syntax error before.
///
/// libyaml, which serde_yaml runs, spends time on every token in proportion
/// to the flow nesting around it, and serde_yaml counts levels only once
/// libyaml has scanned the whole document: 100 000 levels of `[` (200 KB)
/// cost tens of seconds before serde_yaml refuses them. This pass follows
/// the structure of libyaml's scanner, linearly: its flow level and its
/// stack of block indentation columns, skipping comments, scalars (plain,
/// quoted, block), anchors, aliases and tags the way it does. Each flow
/// level and each block indentation level is a mapping or sequence of its
/// own, so in a document libyaml accepts their sum is never more than the
/// real depth; the few collections that open no level of their own (a
/// sequence at its key's indentation, a one-pair mapping inside a flow
/// sequence) are counted exactly after parsing, where they cost nothing.
fn yaml_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut scan = DepthScan {
        b: text.as_bytes(),
        i: 0,
        line: 0,
        col: 0,
        index: 0,
        limit,
        flow: 0,
        indent: -1,
        indents: Vec::new(),
        simple_key_allowed: true,
        keys: vec![None],
    };
    match scan.run() {
        Err(Stop::TooDeep(line, col)) => Some((line, col)),
        Ok(()) | Err(Stop::SyntaxError) => None,
    }
}

enum Stop {
    /// The first level too many opens here (line, column).
    TooDeep(usize, usize),
    /// libyaml stops with an error here.
    SyntaxError,
}

/// A possible simple key (a mapping key without `?`): libyaml's
/// `yaml_simple_key_t`.
#[derive(Clone, Copy)]
struct SimpleKey {
    line: usize,
    index: usize,
    col: usize,
}

/// The part of libyaml's scanner state that decides nesting.
struct DepthScan<'a> {
    b: &'a [u8],
    /// Byte offset.
    i: usize,
    line: usize,
    /// Column and index in characters, as libyaml counts them.
    col: usize,
    index: usize,
    limit: usize,
    flow: usize,
    /// Column of the innermost block collection (-1: none).
    indent: isize,
    indents: Vec<isize>,
    simple_key_allowed: bool,
    /// The possible simple key of the block context, then of each flow level.
    keys: Vec<Option<SimpleKey>>,
}

impl DepthScan<'_> {
    fn byte(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }
    /// The end of the text (libyaml also ends at a NUL).
    fn at_end(&self, i: usize) -> bool {
        self.byte(i) == 0
    }
    /// Length of the line break at `i` (0 when none): LF, CR, CRLF, NEL, LS, PS.
    fn break_len(&self, i: usize) -> usize {
        match (self.byte(i), self.byte(i + 1), self.byte(i + 2)) {
            (b'\r', b'\n', _) => 2,
            (b'\r' | b'\n', _, _) => 1,
            (0xC2, 0x85, _) => 2,
            (0xE2, 0x80, 0xA8 | 0xA9) => 3,
            _ => 0,
        }
    }
    fn is_blank(&self, i: usize) -> bool {
        matches!(self.byte(i), b' ' | b'\t')
    }
    fn is_breakz(&self, i: usize) -> bool {
        self.break_len(i) > 0 || self.at_end(i)
    }
    fn is_blankz(&self, i: usize) -> bool {
        self.is_blank(i) || self.is_breakz(i)
    }
    /// `---` or `...` at the start of a line, followed by a blank or a break.
    fn document_marker(&self) -> bool {
        self.col == 0
            && self.b.get(self.i..).is_some_and(|rest| rest.starts_with(b"---") || rest.starts_with(b"..."))
            && self.is_blankz(self.i + 3)
    }

    /// Skips one character.
    fn skip(&mut self) {
        if self.i >= self.b.len() {
            return;
        }
        let width = match self.byte(self.i) {
            0..0x80 => 1,
            0x80..0xE0 => 2,
            0xE0..0xF0 => 3,
            _ => 4,
        };
        self.i += width;
        self.col += 1;
        self.index += 1;
    }
    /// Skips one line break.
    fn skip_break(&mut self) {
        self.i += self.break_len(self.i);
        self.line += 1;
        self.col = 0;
        self.index += 1;
    }

    fn too_deep(&self) -> Result<(), Stop> {
        if self.indents.len() + self.flow > self.limit {
            return Err(Stop::TooDeep(self.line, self.col));
        }
        Ok(())
    }
    /// A block collection starts at `col` if it is right of the current one.
    fn roll_indent(&mut self, col: usize) -> Result<(), Stop> {
        if self.flow == 0 && self.indent < col as isize {
            self.indents.push(self.indent);
            self.indent = col as isize;
            if self.indents.len() > self.limit {
                // A key is on the line of its `:`.
                return Err(Stop::TooDeep(self.line, col));
            }
        }
        Ok(())
    }
    /// Block collections right of `col` end.
    fn unroll_indent(&mut self, col: isize) {
        while self.flow == 0 && self.indent > col {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }
    fn save_simple_key(&mut self) {
        if self.simple_key_allowed {
            let key = SimpleKey { line: self.line, index: self.index, col: self.col };
            *self.keys.last_mut().expect("one per level") = Some(key);
        }
    }
    fn remove_simple_key(&mut self) {
        *self.keys.last_mut().expect("one per level") = None;
    }

    fn run(&mut self) -> Result<(), Stop> {
        loop {
            self.skip_to_token();
            if self.at_end(self.i) {
                return Ok(());
            }
            self.unroll_indent(self.col as isize);
            let c = self.byte(self.i);
            let blankz_after = self.is_blankz(self.i + 1);
            if self.col == 0 && c == b'%' {
                // A directive: to the end of the line.
                while !self.is_breakz(self.i) {
                    self.skip();
                }
                continue;
            }
            if self.document_marker() {
                self.unroll_indent(-1);
                self.remove_simple_key();
                self.simple_key_allowed = false;
                (0..3).for_each(|_| self.skip());
                continue;
            }
            match c {
                b'[' | b'{' => {
                    self.save_simple_key();
                    self.flow += 1;
                    self.keys.push(None);
                    self.too_deep()?;
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_simple_key();
                    if self.flow > 0 {
                        self.flow -= 1;
                        self.keys.pop();
                    }
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if blankz_after => {
                    if self.flow == 0 {
                        if !self.simple_key_allowed {
                            return Err(Stop::SyntaxError);
                        }
                        self.roll_indent(self.col)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if self.flow > 0 || blankz_after => {
                    if self.flow == 0 {
                        if !self.simple_key_allowed {
                            return Err(Stop::SyntaxError);
                        }
                        self.roll_indent(self.col)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = self.flow == 0;
                    self.skip();
                }
                b':' if self.flow > 0 || blankz_after => {
                    self.value()?;
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    while self.byte(self.i).is_ascii_alphanumeric() || matches!(self.byte(self.i), b'_' | b'-') {
                        self.skip();
                    }
                }
                b'!' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    // A tag ends at a blank, or in a flow collection at a `,`.
                    while !self.is_blankz(self.i) && (self.flow == 0 || self.byte(self.i) != b',') {
                        self.skip();
                    }
                }
                b'|' | b'>' if self.flow == 0 => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.block_scalar()?;
                }
                b'\'' | b'"' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.quoted_scalar(c)?;
                }
                _ if self.plain_start(c, blankz_after) => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.plain_scalar()?;
                }
                _ => return Err(Stop::SyntaxError),
            }
        }
    }

    /// Skips blanks, comments and line breaks before the next token.
    fn skip_to_token(&mut self) {
        loop {
            if self.col == 0 && self.b.get(self.i..).is_some_and(|rest| rest.starts_with("\u{feff}".as_bytes())) {
                self.skip();
            }
            while self.byte(self.i) == b' '
                || ((self.flow > 0 || !self.simple_key_allowed) && self.byte(self.i) == b'\t')
            {
                self.skip();
            }
            if self.byte(self.i) == b'#' {
                while !self.is_breakz(self.i) {
                    self.skip();
                }
            }
            if self.break_len(self.i) == 0 {
                return;
            }
            self.skip_break();
            if self.flow == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    /// `:` after a key: the key (if still possible: on this line and at
    /// most 1024 characters back) starts a block mapping at its column.
    fn value(&mut self) -> Result<(), Stop> {
        let key = self.keys.last().copied().flatten();
        if let Some(key) = key.filter(|k| k.line == self.line && k.index + 1024 >= self.index) {
            self.remove_simple_key();
            self.roll_indent(key.col)?;
            self.simple_key_allowed = false;
        } else {
            if self.flow == 0 {
                if !self.simple_key_allowed {
                    return Err(Stop::SyntaxError);
                }
                self.roll_indent(self.col)?;
            }
            self.simple_key_allowed = self.flow == 0;
        }
        Ok(())
    }

    /// Whether a plain scalar starts with `c` (libyaml's test).
    fn plain_start(&self, c: u8, blankz_after: bool) -> bool {
        let indicator = matches!(
            c,
            b'-' | b'?'
                | b':'
                | b','
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'#'
                | b'&'
                | b'*'
                | b'!'
                | b'|'
                | b'>'
                | b'\''
                | b'"'
                | b'%'
                | b'@'
                | b'`'
        );
        !(self.is_blankz(self.i) || indicator)
            || (c == b'-' && !self.is_blank(self.i + 1))
            || (self.flow == 0 && matches!(c, b'?' | b':') && !blankz_after)
    }

    /// A plain scalar, over several lines while they are indented more than
    /// the current block collection (any lines in a flow collection).
    fn plain_scalar(&mut self) -> Result<(), Stop> {
        let indent = self.indent + 1;
        let mut leading_blanks = false;
        loop {
            if self.document_marker() || self.byte(self.i) == b'#' {
                break;
            }
            while !self.is_blankz(self.i) {
                let c = self.byte(self.i);
                let next = self.byte(self.i + 1);
                if self.flow > 0 && c == b':' && matches!(next, b',' | b'?' | b'[' | b']' | b'{' | b'}') {
                    return Err(Stop::SyntaxError);
                }
                if (c == b':' && self.is_blankz(self.i + 1))
                    || (self.flow > 0 && matches!(c, b',' | b'[' | b']' | b'{' | b'}'))
                {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !self.is_blank(self.i) && self.break_len(self.i) == 0 {
                break;
            }
            while self.is_blank(self.i) || self.break_len(self.i) > 0 {
                if self.is_blank(self.i) {
                    if leading_blanks && (self.col as isize) < indent && self.byte(self.i) == b'\t' {
                        return Err(Stop::SyntaxError);
                    }
                    self.skip();
                } else {
                    self.skip_break();
                    leading_blanks = true;
                }
            }
            if self.flow == 0 && (self.col as isize) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        Ok(())
    }

    /// A single- or double-quoted scalar, over any number of lines.
    fn quoted_scalar(&mut self, quote: u8) -> Result<(), Stop> {
        self.skip();
        loop {
            if self.at_end(self.i) || self.document_marker() {
                return Err(Stop::SyntaxError);
            }
            let c = self.byte(self.i);
            if c == quote && quote == b'\'' && self.byte(self.i + 1) == b'\'' {
                self.skip();
                self.skip();
            } else if c == quote {
                self.skip();
                return Ok(());
            } else if quote == b'"' && c == b'\\' {
                self.skip();
                if self.break_len(self.i) > 0 {
                    self.skip_break();
                } else if !self.at_end(self.i) {
                    self.skip();
                }
            } else if self.break_len(self.i) > 0 {
                self.skip_break();
            } else {
                self.skip();
            }
        }
    }

    /// A literal (`|`) or folded (`>`) scalar: its header, then every line
    /// indented as much as its first (or its indentation indicator says).
    fn block_scalar(&mut self) -> Result<(), Stop> {
        self.skip();
        // Chomping (`+`, `-`) and indentation (1-9) indicators, in either order.
        let mut increment = 0;
        let c = self.byte(self.i);
        if matches!(c, b'+' | b'-') {
            self.skip();
            match self.byte(self.i) {
                b'0' => return Err(Stop::SyntaxError),
                d @ b'1'..=b'9' => {
                    increment = isize::from(d - b'0');
                    self.skip();
                }
                _ => {}
            }
        } else if c == b'0' {
            return Err(Stop::SyntaxError);
        } else if c.is_ascii_digit() {
            increment = isize::from(c - b'0');
            self.skip();
            if matches!(self.byte(self.i), b'+' | b'-') {
                self.skip();
            }
        }
        while self.is_blank(self.i) {
            self.skip();
        }
        if self.byte(self.i) == b'#' {
            while !self.is_breakz(self.i) {
                self.skip();
            }
        }
        if !self.is_breakz(self.i) {
            return Err(Stop::SyntaxError);
        }
        if self.break_len(self.i) > 0 {
            self.skip_break();
        }
        let mut indent = match increment {
            0 => 0,
            n if self.indent >= 0 => self.indent + n,
            n => n,
        };
        self.block_scalar_breaks(&mut indent)?;
        while self.col as isize == indent && !self.at_end(self.i) {
            while !self.is_breakz(self.i) {
                self.skip();
            }
            if self.break_len(self.i) > 0 {
                self.skip_break();
            }
            self.block_scalar_breaks(&mut indent)?;
        }
        Ok(())
    }

    /// Empty lines and indentation in a block scalar; without an indicator,
    /// the first line with content sets the indentation.
    fn block_scalar_breaks(&mut self, indent: &mut isize) -> Result<(), Stop> {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || (self.col as isize) < *indent) && self.byte(self.i) == b' ' {
                self.skip();
            }
            max_indent = max_indent.max(self.col as isize);
            if (*indent == 0 || (self.col as isize) < *indent) && self.byte(self.i) == b'\t' {
                return Err(Stop::SyntaxError);
            }
            if self.break_len(self.i) == 0 {
                break;
            }
            self.skip_break();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> Result<Vec<(String, usize)>, Vec<String>> {
        parse_limited(name, text, ManifestLimits::default())
            .map(|docs| docs.into_iter().map(|d| (d.key, d.line)).collect())
            .map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect())
    }

    fn parse_limited(name: &str, text: &str, limits: ManifestLimits) -> Result<Vec<Doc>, Vec<ManifestError>> {
        parse_file(Path::new(name), text, &ManifestFilter::default(), &limits, &|| true).expect("not abandoned")
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n";

    #[test]
    fn multi_document_yaml_with_lines() {
        let text = format!(
            "# leading comment\n{CM}---\n# about b\n\nkind: Secret\napiVersion: v1\nmetadata: {{name: b}}\n---\n---\n...\n"
        );
        assert_eq!(parse("f.yaml", &text).unwrap(), vec![("ns/a".into(), 2), ("b".into(), 10)]);
    }

    #[test]
    fn document_markers_with_content_and_end_markers() {
        let text =
            "--- {apiVersion: v1, kind: A, metadata: {name: x}}\n...\napiVersion: v1\nkind: A\nmetadata: {name: y}\n";
        assert_eq!(parse("f.yml", text).unwrap(), vec![("x".into(), 1), ("y".into(), 3)]);
    }

    #[test]
    fn empty_and_comment_only_files_hold_nothing() {
        assert_eq!(parse("f.yaml", "").unwrap(), vec![]);
        assert_eq!(parse("f.yaml", "# nothing\n---\n# here\n").unwrap(), vec![]);
        assert_eq!(parse("f.json", " \n").unwrap(), vec![]);
    }

    #[test]
    fn syntax_error_lines_are_file_lines() {
        let text = format!("{CM}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n");
        let errs = parse("bad.yaml", &text).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        // The flow sequence opened on line 10 runs to the end of the file.
        assert_eq!(
            errs[0],
            "bad.yaml:11:1: did not find expected ',' or ']', while parsing a flow sequence at line 10 column 9"
        );
    }

    #[test]
    fn a_syntax_error_mid_file_names_its_line_and_other_documents_still_parse() {
        let text = "apiVersion: v1\nkind: A\nmetadata: {name: a}\n---\napiVersion: v1\nkind: A\nmetadata:\n  name: b\n bad: x\n---\napiVersion: v1\nkind: A\nmetadata: {}\n";
        let errs = parse("m.yaml", text).unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("m.yaml:9:"), "{}", errs[0]);
        assert_eq!(errs[1], "m.yaml:11: manifest has no metadata.name");
    }

    #[test]
    fn crlf_line_endings() {
        let text = "apiVersion: v1\r\nkind: A\r\nmetadata: {name: a}\r\n---\r\n\r\napiVersion: v1\r\nkind: A\r\nmetadata: {name: b}\r\n";
        assert_eq!(parse("f.yaml", text).unwrap(), vec![("a".into(), 1), ("b".into(), 6)]);
    }

    #[test]
    fn document_errors_name_the_document_line() {
        let text = format!("{CM}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: x\n");
        assert_eq!(parse("f.yaml", &text).unwrap_err(), vec!["f.yaml:7: manifest has no metadata.name"]);
        assert_eq!(
            parse("f.yaml", "- a\n- b\n").unwrap_err(),
            vec!["f.yaml:1: a manifest must be a mapping, found a list"]
        );
        let labels = "apiVersion: v1\nkind: A\nmetadata:\n  name: a\n  labels: {n: 1}\n";
        assert_eq!(
            parse("f.yaml", labels).unwrap_err(),
            vec!["f.yaml:1: metadata.labels.n must be a string, found a number"]
        );
        assert_eq!(
            parse("f.yaml", "kind: A\nmetadata: {name: a}\n").unwrap_err(),
            vec!["f.yaml:1: manifest has no apiVersion"]
        );
    }

    #[test]
    fn json_files_and_streams() {
        let text = "{\"apiVersion\":\"v1\",\"kind\":\"A\",\"metadata\":{\"name\":\"a\"}}\n\n  {\"apiVersion\":\"v1\",\"kind\":\"A\",\"metadata\":{\"name\":\"b\"}}";
        assert_eq!(parse("f.json", text).unwrap(), vec![("a".into(), 1), ("b".into(), 3)]);
        let errs = parse("f.json", "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \n}").unwrap_err();
        assert_eq!(errs, vec!["f.json:4:1: expected value"]);
    }

    #[test]
    fn lists_expand_and_typed_lists_fill_kind() {
        let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- metadata: {name: a, namespace: n}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n";
        let docs = parse_limited("l.yaml", text, ManifestLimits::default()).unwrap();
        assert_eq!(docs.iter().map(|d| d.key.as_str()).collect::<Vec<_>>(), ["n/a", "b"]);
        assert_eq!(docs[0].value["kind"], "ConfigMap");
        assert_eq!(docs[0].value["apiVersion"], "v1");
        let bad = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: A\n  metadata: {}\n";
        assert_eq!(
            parse("l.yaml", bad).unwrap_err(),
            vec!["l.yaml:1: items[0] of the List: manifest has no metadata.name"]
        );
    }

    #[test]
    fn merge_keys_and_anchors() {
        let text = "apiVersion: v1\nkind: A\nmetadata:\n  name: a\n  labels: &l {x: y}\ndata:\n  <<: *l\n  z: w\n";
        let docs = parse_limited("m.yaml", text, ManifestLimits::default()).unwrap();
        assert_eq!(docs[0].value["data"], serde_json::json!({"x": "y", "z": "w"}));
    }

    #[test]
    fn filter_selects() {
        let f = ManifestFilter::default()
            .api_version("v1")
            .kind("ConfigMap")
            .namespace("ns")
            .labels("app in (a,b)")
            .unwrap();
        let v = |av: &str, k: &str, ns: Option<&str>, app: &str| {
            let mut m =
                serde_json::json!({"apiVersion": av, "kind": k, "metadata": {"name": "x", "labels": {"app": app}}});
            if let Some(ns) = ns {
                m["metadata"]["namespace"] = ns.into();
            }
            m
        };
        assert!(f.matches(&v("v1", "ConfigMap", Some("ns"), "a")));
        assert!(!f.matches(&v("v2", "ConfigMap", Some("ns"), "a")));
        assert!(!f.matches(&v("v1", "Secret", Some("ns"), "a")));
        assert!(!f.matches(&v("v1", "ConfigMap", None, "a")));
        assert!(!f.matches(&v("v1", "ConfigMap", Some("ns"), "c")));
        assert!(ManifestFilter::default().matches(&v("v9", "X", None, "q")));
        assert_eq!(ManifestFilter::default().to_string(), "everything");
        assert_eq!(f.to_string(), "apiVersion=v1 kind=ConfigMap namespace=ns labels=app in (a,b)");
    }

    /// Test-only: holds the reads of chosen files in flight, as a slow
    /// parse would, until the test releases them.
    pub(super) mod gate {
        use std::collections::BTreeMap;
        use std::path::{Path, PathBuf};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        use parking_lot::{Condvar, Mutex};

        static GATES: Mutex<BTreeMap<PathBuf, Arc<Gate>>> = Mutex::new(BTreeMap::new());

        #[derive(Default)]
        pub struct Gate {
            entered: AtomicBool,
            open: Mutex<bool>,
            opened: Condvar,
        }

        /// Releases the gate when dropped, so a failing test never leaves
        /// a blocking thread behind.
        pub struct Hold(PathBuf, Arc<Gate>);

        impl Hold {
            pub fn entered(&self) -> bool {
                self.1.entered.load(Ordering::SeqCst)
            }
            pub fn release(&self) {
                GATES.lock().remove(&self.0);
                *self.1.open.lock() = true;
                self.1.opened.notify_all();
            }
        }

        impl Drop for Hold {
            fn drop(&mut self) {
                self.release();
            }
        }

        /// Every read of `path` from now on blocks until the hold is released.
        pub fn hold(path: &Path) -> Hold {
            let gate = Arc::new(Gate::default());
            GATES.lock().insert(path.to_path_buf(), gate.clone());
            Hold(path.to_path_buf(), gate)
        }

        /// Called by the source before it reads a file.
        pub fn before_read(path: &Path) {
            let Some(gate) = GATES.lock().get(path).cloned() else { return };
            gate.entered.store(true, Ordering::SeqCst);
            let mut open = gate.open.lock();
            while !*open {
                gate.opened.wait(&mut open);
            }
        }
    }

    async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
        // The integration tests' bound: filesystem events need real time.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(tokio::time::Instant::now() < deadline, "timed out after 10s waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A file whose read and parse is still running (held by a gate, as a
    /// slow parse would be) does not hold up another file's update: the
    /// other file's change is applied while the first is in flight, and the
    /// first is applied once it finishes. The held file is large (300 KB),
    /// as a slow one would be.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_in_flight_does_not_hold_up_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let cm = |name: &str, value: &str| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{value: {value}}}\n")
        };
        let big = |value: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: slow}}\ndata:\n  value: {value}\n  padding: {}\n",
                "p".repeat(300_000)
            )
        };
        std::fs::write(dir.path().join("a.yaml"), cm("a", "one")).unwrap();
        std::fs::write(dir.path().join("slow.yaml"), big("one")).unwrap();
        let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
        let value = |key: &str| {
            src.get(key).and_then(|o| o.pointer_value("/data/value")).and_then(|v| v.as_str().map(String::from))
        };
        assert_eq!((value("a").as_deref(), value("slow").as_deref()), (Some("one"), Some("one")), "{:?}", src.errors());
        // The watch task's first full rescan is done before the gate goes up.
        eventually("the watch task's first rescan", || src.scan_count() >= 2).await;

        let slow = src.dir().join("slow.yaml");
        let held = gate::hold(&slow);
        std::fs::write(&slow, big("two")).unwrap();
        eventually("the read of slow.yaml to start", || held.entered()).await;
        std::fs::write(src.dir().join("a.yaml"), cm("a", "two")).unwrap();
        eventually("a's update while slow.yaml is in flight", || value("a").as_deref() == Some("two")).await;
        assert_eq!(value("slow").as_deref(), Some("one"), "slow.yaml is still being read");

        held.release();
        eventually("slow.yaml's update once released", || value("slow").as_deref() == Some("two")).await;
        assert!(src.errors().is_empty(), "{:?}", src.errors());
    }

    /// Depth of a YAML document as serde_yaml loads it, keys included.
    fn serde_depth(text: &str) -> usize {
        fn depth(v: &serde_yaml::Value) -> usize {
            match v {
                serde_yaml::Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
                serde_yaml::Value::Mapping(m) => 1 + m.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
                serde_yaml::Value::Tagged(t) => depth(&t.value),
                _ => 0,
            }
        }
        depth(&serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}")))
    }

    /// The pass before parsing never counts more levels than a document
    /// has (no valid document is refused), and counts every level where
    /// flow collections and block indentation nest, whatever is skipped in
    /// between: comments, quoted, plain and block scalars full of brackets.
    #[test]
    fn depth_check_counts_levels_as_libyaml_nests_them() {
        // (text, whether every level opens a flow or indentation level)
        let cases: &[(&str, bool)] = &[
            ("a:\n  b:\n    c: [1, {d: [x]}]\n", true),
            ("data:\n  script: |\n    [[[[[[ {{{{\n     [[[[\n\n    ]]\n  other: [x]\n", true),
            ("data:\n  f: >-2\n      [[[[[[\n  g: {h: 1}\n", true),
            ("a: \"[[[\n  {{{ \\\" [[\"\nb: '[[[[ '' [[['\nc: [x]\n", true),
            ("a: some text [\n  [[ more {{\nb: [x]\n", true),
            ("# [[[[\na: 1 # {{{{\nb: [[1]] # [[[[\n", true),
            ("- - - - x\n", true),
            ("{a: [b], c: {d: e}}\n", true),
            ("a: &x !!seq [1, [2]]\n", true),
            ("a: [\n  [\n    1\n  ]\n]\n", true),
            ("a:\r\n  b: [x]\r\n", true),
            ("k: 'it''s [ok'\nl: \"[\" # ]\nm: a[0]\nn: [a(0), b]\n", true),
            ("%YAML 1.1\n---\na: [b, [c]]\n...\n", true),
            ("? [a]\n: [b, [c]]\n", true),
            // Levels that open no level of their own: fewer counted.
            ("a:\n- - x\n", false),
            ("[a, b]: c\n", false),
            ("[a: [b]]\n", false),
        ];
        for (text, exact) in cases {
            let depth = serde_depth(text);
            assert_eq!(yaml_too_deep(text, depth), None, "refused at its own depth {depth}: {text:?}");
            if *exact {
                assert!(yaml_too_deep(text, depth - 1).is_some(), "depth {depth} not counted: {text:?}");
            }
        }
        // Where the first level too many opens.
        assert_eq!(yaml_too_deep(&"[".repeat(200), 128), Some((0, 128)));
        assert_eq!(yaml_too_deep(&format!("a: {}", "{b: ".repeat(200)), 128), Some((0, 3 + 4 * 127)));
        assert_eq!(yaml_too_deep(&format!("{}x\n", "- ".repeat(200)), 128), Some((0, 256)));
        let indented: String = (0..200).map(|i| format!("{}k:\n", "  ".repeat(i))).collect();
        assert_eq!(yaml_too_deep(&indented, 128), Some((128, 256)));
        // After a syntax error libyaml stops, and so does the check.
        assert_eq!(yaml_too_deep(&format!("a: b: {}", "[".repeat(200)), 128), None);
    }

    #[test]
    fn too_deep_documents_name_the_line_column_and_limit() {
        let deep = format!("{CM}---\n# deep\nitems: {}\n", "[".repeat(200));
        let errs = parse("d.yaml", &deep).unwrap_err();
        assert_eq!(errs, vec!["d.yaml:8:135: nested deeper than 128 levels"]);
        // A lower limit; a sequence at its key's indentation is counted
        // after parsing, at the document's line.
        let limits = ManifestLimits { max_depth: 2, ..ManifestLimits::default() };
        let errs = parse_limited("d.yaml", "a: [[x]]\n", limits).unwrap_err();
        assert_eq!(errs[0].to_string(), "d.yaml:1:5: nested deeper than 2 levels");
        let errs = parse_limited("d.yaml", "# c\na:\n- - x\n", limits).unwrap_err();
        assert_eq!(errs[0].to_string(), "d.yaml:2: nested deeper than 2 levels");
        // JSON: checked in the same pass as document sizes.
        let errs = parse_limited("d.json", "{\"a\": 1}\n{\"b\":\n [[1]]}", limits).unwrap_err();
        assert_eq!(errs[0].to_string(), "d.json:3:3: nested deeper than 2 levels");
        assert_eq!(
            parse("d.json", &format!("{}{}", "[".repeat(129), "]".repeat(129))).unwrap_err(),
            vec!["d.json:1:129: nested deeper than 128 levels"]
        );
    }

    #[test]
    fn documents_over_the_size_limit_are_not_parsed() {
        let limits = ManifestLimits { max_document_bytes: 100, ..ManifestLimits::default() };
        let big = format!("{CM}data: {{v: {}}}\n", "x".repeat(100));
        let errs = parse_limited("s.yaml", &format!("{CM}---\n{big}"), limits).unwrap_err();
        let size = big.len() + 4; // with its `---` line
        assert_eq!(
            errs[0].to_string(),
            format!("s.yaml:7: the document is {size} bytes, over the limit of 100 bytes per document")
        );
        let json = format!("{{\"a\": 1}}\n\n{{\"b\": \"{}\"}}", "y".repeat(100));
        let errs = parse_limited("s.json", &json, limits).unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "s.json:3: the document is 109 bytes, over the limit of 100 bytes per document"
        );
    }

    #[test]
    fn a_file_keeps_ten_errors_and_counts_the_rest() {
        let text: String =
            (0..25).map(|i| format!("apiVersion: v1\nkind: A\nmetadata: {{name: [n{i}\n---\n")).collect();
        let errs = parse("e.yaml", &text).unwrap_err();
        assert_eq!(errs.len(), 11);
        assert!(errs[9].starts_with("e.yaml:40:1: "), "{}", errs[9]);
        assert_eq!(errs[10], "e.yaml: and 15 more errors");
    }

    #[test]
    fn duplicates_are_reported_ten_per_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), CM).unwrap();
        std::fs::write(dir.path().join("b.yaml"), vec![CM; 14].join("---\n")).unwrap();
        let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
        let errors: Vec<String> = src.errors().iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 11, "{errors:?}");
        assert!(errors[0].contains("b.yaml:1: ns/a is already defined in "), "{}", errors[0]);
        assert!(errors[10].ends_with("b.yaml: and 4 more duplicate definitions"), "{}", errors[10]);
    }

    #[test]
    fn syntax_errors_of_later_documents_shift_every_line_in_the_message() {
        assert_eq!(
            shift_lines("x at line 2 column 9, y at line 3 column 1", 10),
            "x at line 12 column 9, y at line 13 column 1"
        );
        assert_eq!(shift_lines("no location", 10), "no location");
    }

    /// Reads of one file apply in the order they started, whatever order
    /// they finish in.
    #[test]
    fn an_older_read_never_overwrites_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let cm =
            |value: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {{value: {value}}}\n");
        std::fs::write(dir.path().join("a.yaml"), cm("one")).unwrap();
        let src = ManifestsSource::open(dir.path(), ManifestFilter::default()).unwrap();
        let shared = &src.inner.shared;
        let path = src.dir().join("a.yaml");
        let value =
            || src.get("a").and_then(|o| o.pointer_value("/data/value")).and_then(|v| v.as_str().map(String::from));

        std::fs::write(&path, cm("two")).unwrap();
        let first = shared.begin_read(&path);
        let older = shared.read_file(path.clone(), first, None);
        std::fs::write(&path, cm("three")).unwrap();
        let second = shared.begin_read(&path);
        let newer = shared.read_file(path.clone(), second, None);
        shared.apply(&[], Vec::new(), vec![newer]);
        shared.apply(&[], Vec::new(), vec![older]);
        assert_eq!(value().as_deref(), Some("three"));
        // The other order: the older one is dropped as soon as the newer starts.
        std::fs::write(&path, cm("four")).unwrap();
        let first = shared.begin_read(&path);
        let older = shared.read_file(path.clone(), first, None);
        let second = shared.begin_read(&path);
        let newer = shared.read_file(path.clone(), second, None);
        shared.apply(&[], Vec::new(), vec![older]);
        assert_eq!(value().as_deref(), Some("three"));
        shared.apply(&[], Vec::new(), vec![newer]);
        assert_eq!(value().as_deref(), Some("four"));
        assert!(shared.latest_read.lock().is_empty());
    }

    #[test]
    fn manifest_paths() {
        assert!(is_manifest_path(Path::new("/a/b.yaml")));
        assert!(is_manifest_path(Path::new("/a/b.YML")));
        assert!(is_manifest_path(Path::new("b.json")));
        assert!(!is_manifest_path(Path::new("/a/.b.yaml")));
        assert!(!is_manifest_path(Path::new("/a/b.yaml.swp")));
        assert!(!is_manifest_path(Path::new("/a/b")));
    }
}
