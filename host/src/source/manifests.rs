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
//!   changed files are re-read. An edit yields `Modified` only for objects
//!   whose content changed (a reformatted file, a new comment or reordered
//!   keys yield nothing); a removed document, a removed file, or an object
//!   that no longer matches the filter yields `Deleted`; a new one `Added`.
//!   A renamed file yields nothing. The changes of one rescan are applied
//!   deletes first, then additions and modifications, each in key order.
//! - Errors ([`ManifestError`]): a file that cannot be read or parsed, or a
//!   document that is not a valid manifest, gets an error naming the file
//!   and line (for syntax errors the line and column of the problem, for
//!   document errors the first line of the document's content). Errors are
//!   logged with `tracing::warn!` once when they appear and kept in
//!   [`ManifestsSource::errors`] until the file is fixed or removed. A file
//!   with any error is not applied at all: the objects it had before stay
//!   exactly as they were (a half-saved file deletes nothing), and other
//!   files are unaffected. The same key (`namespace/name`) defined twice is
//!   an error naming both places; the first definition in sorted path order
//!   (then document order) wins, and the other takes over if the winner
//!   goes away.
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
//! # What it may not touch
//!
//! It never writes to the directory, never changes the informer engine, and
//! knows nothing of handlers, plugins or the kube client: it only implements
//! [`ListerWatcher`] over its own [`VersionedStore`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use notify::{EventKind, RecursiveMode, Watcher};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::selector::Selector;
use super::versioned::VersionedStore;
use crate::informer::{ListResult, ListerWatcher, ObjectRef, SourceError, WatchStream};

/// Quiet time after a filesystem event before the changed files are read.
pub const DEBOUNCE: Duration = Duration::from_millis(75);
/// Longest a burst of events can delay a rescan.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(1);
/// File extensions read as manifests (case-insensitive).
pub const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

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
    /// YAML or JSON that does not parse; `line`/`column` are 1-based.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },
    /// A document that parses but is not a valid manifest; `line` is where
    /// the document's content starts.
    #[error("{}:{line}: {message}", path.display())]
    Document { path: PathBuf, line: usize, message: String },
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

impl ManifestError {
    /// The file (or directory) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Directory { path, .. }
            | ManifestError::Read { path, .. }
            | ManifestError::Syntax { path, .. }
            | ManifestError::Document { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::Watch { path, .. } => path,
        }
    }
    /// The 1-based line the error points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ManifestError::Syntax { line, .. }
            | ManifestError::Document { line, .. }
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

/// A running watch: dropping it stops the notify watcher and the task.
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

/// What the watch task shares with the source.
struct Shared {
    dir: PathBuf,
    filter: ManifestFilter,
    store: VersionedStore,
    state: Mutex<State>,
    /// Serialises rescans so an older read never overwrites a newer one.
    scanning: Mutex<()>,
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

#[derive(Clone)]
struct Doc {
    key: String,
    line: usize,
    value: Arc<Value>,
}

impl ManifestsSource {
    /// Loads every manifest under `dir` now (blocking), then watches it if
    /// called inside a tokio runtime (see [`ManifestsSource::start_watching`]).
    ///
    /// # Errors
    ///
    /// [`ManifestError::Directory`] naming `dir` when it is missing, not a
    /// directory or unreadable; [`ManifestError::Watch`] when inside a
    /// runtime the watcher cannot start. Errors in files do not fail this:
    /// see [`ManifestsSource::errors`].
    pub fn open(dir: impl AsRef<Path>, filter: ManifestFilter) -> Result<Self, ManifestError> {
        let given = dir.as_ref();
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
            store: VersionedStore::new(description),
            state: Mutex::new(State::default()),
            scanning: Mutex::new(()),
            scans: AtomicU64::new(0),
        });
        shared.rescan(std::slice::from_ref(&shared.dir));
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
        shared.rescan(std::slice::from_ref(&shared.dir));
    }

    /// Every current problem: malformed or unreadable files, duplicate
    /// keys, the last watcher failure. Ordered by file.
    pub fn errors(&self) -> Vec<ManifestError> {
        let st = self.inner.shared.state.lock();
        let mut out: Vec<ManifestError> = st.dir_errors.values().cloned().collect();
        out.extend(st.files.values().flat_map(|f| f.errors.iter().cloned()));
        out.extend(st.duplicates.iter().cloned());
        out.sort_by(|a, b| a.path().cmp(b.path()).then(a.line().cmp(&b.line())));
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

    /// How many rescans have completed (the initial load is the first).
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

/// Receives notify events, coalesces bursts, and rescans what they touched.
async fn watch_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<notify::Result<notify::Event>>,
    stop: CancellationToken,
) {
    let mut roots = BTreeSet::from([shared.dir.clone()]);
    loop {
        let todo: Vec<PathBuf> = std::mem::take(&mut roots).into_iter().collect();
        if !todo.is_empty() {
            let s = shared.clone();
            if tokio::task::spawn_blocking(move || s.rescan(&todo)).await.is_err() {
                return;
            }
            if !shared.dir.is_dir() {
                tracing::warn!(dir = %shared.dir.display(), "manifest directory is gone; its objects were deleted");
                stop.cancel();
                return;
            }
        }
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
        };
        shared.collect(first, &mut roots);
        let deadline = tokio::time::Instant::now() + MAX_DEBOUNCE;
        loop {
            let quiet = (tokio::time::Instant::now() + DEBOUNCE).min(deadline);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(quiet) => break,
                ev = rx.recv() => match ev {
                    Some(ev) => shared.collect(ev, &mut roots),
                    None => break,
                },
            }
        }
    }
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn is_manifest_path(path: &Path) -> bool {
    let visible = path.file_name().is_some_and(|n| !is_hidden(n));
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    visible && ext.is_some_and(|e| EXTENSIONS.contains(&e.as_str()))
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

    /// Re-reads the files under each root (a file or a directory) and
    /// applies the differences to the store.
    fn rescan(&self, roots: &[PathBuf]) {
        let _one_at_a_time = self.scanning.lock();
        let known: Vec<PathBuf> = self.state.lock().files.keys().cloned().collect();
        let mut candidates = BTreeSet::new();
        let mut dir_errors = Vec::new();
        for root in roots {
            candidates.extend(known.iter().filter(|f| f.starts_with(root)).cloned());
            match std::fs::symlink_metadata(root) {
                Ok(m) if m.is_dir() => walk(root, &mut candidates, &mut dir_errors),
                _ if is_manifest_path(root) => {
                    candidates.insert(root.clone());
                }
                _ => {}
            }
        }
        // Read outside the state lock.
        let reads: Vec<(PathBuf, io::Result<String>)> = candidates
            .into_iter()
            .map(|p| {
                let r = std::fs::read(&p)
                    .and_then(|b| String::from_utf8(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)));
                (p, r)
            })
            .collect();

        let mut st = self.state.lock();
        st.dir_errors.retain(|d, _| !roots.iter().any(|r| d.starts_with(r)));
        for (dir, e) in dir_errors {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read manifest directory");
            st.dir_errors.insert(dir.clone(), ManifestError::Read { path: dir, source: Arc::new(e) });
        }
        for (path, read) in reads {
            self.apply_read(&mut st, path, read);
        }
        self.reconcile(&mut st);
        drop(st);
        self.scans.fetch_add(1, Ordering::Release);
    }

    fn apply_read(&self, st: &mut State, path: PathBuf, read: io::Result<String>) {
        match read {
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::IsADirectory => {
                st.files.remove(&path);
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read manifest");
                let entry = st.files.entry(path.clone()).or_insert_with(FileState::empty);
                entry.hash = None;
                entry.errors = vec![ManifestError::Read { path, source: Arc::new(e) }];
            }
            Ok(text) => {
                let hash = hash_text(&text);
                if st.files.get(&path).is_some_and(|f| f.hash == Some(hash)) {
                    return;
                }
                let parsed = parse_file(&path, &text, &self.filter);
                let entry = st.files.entry(path).or_insert_with(FileState::empty);
                entry.hash = Some(hash);
                match parsed {
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
        for (path, file) in &st.files {
            for doc in &file.docs {
                match desired.get(doc.key.as_str()) {
                    None => {
                        desired.insert(&doc.key, (path, doc.line, &doc.value));
                    }
                    Some((first_path, first_line, _)) => duplicates.push(ManifestError::Duplicate {
                        key: doc.key.clone(),
                        path: path.clone(),
                        line: doc.line,
                        first_path: (*first_path).clone(),
                        first_line: *first_line,
                    }),
                }
            }
        }
        // Deletes first, then creations and modifications, each in key order.
        for key in st.current.keys() {
            if !desired.contains_key(key.as_str()) {
                self.store.delete(key);
            }
        }
        let mut next = BTreeMap::new();
        for (key, (path, _, value)) in &desired {
            let current = st.current.get(*key);
            if current.is_some_and(|(_, v)| v == *value) {
                next.insert(key.to_string(), ((*path).clone(), Arc::clone(value)));
            } else if let Err(e) = self.store.apply(Value::clone(value)) {
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
        for d in &duplicates {
            let known = st.duplicates.iter().any(|o| o.to_string() == d.to_string());
            if !known {
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

/// Parses one file into its selected documents, or every error found.
fn parse_file(path: &Path, text: &str, filter: &ManifestFilter) -> Result<Vec<Doc>, Vec<ManifestError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_json = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    let values = if is_json { json_documents(path, text) } else { yaml_documents(path, text) };
    for v in values {
        match v {
            Ok((line, value)) => manifests_of(path, line, value, filter, &mut docs, &mut errors),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(docs) } else { Err(errors) }
}

/// Removes the " at line L column C" libyaml and serde_json add to messages.
fn strip_location(message: String, line: usize, column: usize) -> String {
    message.replacen(&format!(" at line {line} column {column}"), "", 1)
}

/// The documents of a JSON file (one or more concatenated values), each
/// with the line where it starts.
fn json_documents(path: &Path, text: &str) -> Vec<Result<(usize, Value), ManifestError>> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    loop {
        let offset = stream.byte_offset();
        match stream.next() {
            None => break,
            Some(Ok(v)) => {
                let rest = &text[offset..];
                let start = offset + (rest.len() - rest.trim_start().len());
                out.push(Ok((line_at(text, start), v)));
            }
            Some(Err(e)) => {
                let message = strip_location(e.to_string(), e.line(), e.column());
                out.push(Err(ManifestError::Syntax {
                    path: path.to_path_buf(),
                    line: e.line(),
                    column: e.column(),
                    message,
                }));
                break;
            }
        }
    }
    out
}

/// 1-based line of a byte offset.
fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset].iter().filter(|b| **b == b'\n').count() + 1
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

/// The documents of a YAML file, each with the line where it starts.
fn yaml_documents(path: &Path, text: &str) -> Vec<Result<(usize, Value), ManifestError>> {
    let mut out = Vec::new();
    for (first_line, range) in yaml_chunks(text) {
        let chunk = &text[range];
        let Some(line) = first_content_line(chunk, first_line) else { continue };
        let doc_error = |message: String| ManifestError::Document { path: path.to_path_buf(), line, message };
        let mut yaml: serde_yaml::Value = match serde_yaml::from_str(chunk) {
            Ok(v) => v,
            Err(e) => {
                // Parse again with the chunk at its place in the file, so
                // every line in the message is the file's line (only on
                // error: padding every chunk would be quadratic).
                let padded = format!("{}{chunk}", "\n".repeat(first_line));
                let (e, shift) = match serde_yaml::from_str::<serde_yaml::Value>(&padded) {
                    Err(padded_err) => (padded_err, 0),
                    Ok(_) => (e, first_line),
                };
                out.push(Err(match e.location() {
                    Some(loc) => ManifestError::Syntax {
                        path: path.to_path_buf(),
                        line: loc.line() + shift,
                        column: loc.column(),
                        message: strip_location(e.to_string(), loc.line(), loc.column()),
                    },
                    None => doc_error(e.to_string()),
                }));
                continue;
            }
        };
        if let Err(e) = yaml.apply_merge() {
            out.push(Err(doc_error(format!("merge key (<<): {e}"))));
            continue;
        }
        match serde_json::to_value(&yaml) {
            Ok(v) => out.push(Ok((line, v))),
            Err(e) => out.push(Err(doc_error(format!("not representable as JSON: {e}")))),
        }
    }
    out
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
fn manifests_of(
    path: &Path,
    line: usize,
    value: Value,
    filter: &ManifestFilter,
    docs: &mut Vec<Doc>,
    errors: &mut Vec<ManifestError>,
) {
    let doc_error = |message: String| ManifestError::Document { path: path.to_path_buf(), line, message };
    let mut obj = match value {
        Value::Null => return,
        Value::Object(m) => m,
        other => {
            errors.push(doc_error(format!("a manifest must be a mapping, found {}", type_name(&other))));
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
                errors.push(doc_error(format!("items of a {kind} must be a list, found {}", type_name(&other))));
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
                    errors.push(doc_error(format!("items[{i}] must be a mapping, found {}", type_name(&other))));
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
                Ok(key) => select(key, line, Value::Object(item), filter, docs),
                Err(m) => errors.push(doc_error(format!("items[{i}] of the {kind}: {m}"))),
            }
        }
        return;
    }
    match validate(&obj) {
        Ok(key) => select(key, line, Value::Object(obj), filter, docs),
        Err(m) => errors.push(doc_error(m)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> Result<Vec<(String, usize)>, Vec<String>> {
        parse_file(Path::new(name), text, &ManifestFilter::default())
            .map(|docs| docs.into_iter().map(|d| (d.key, d.line)).collect())
            .map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect())
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
        let docs = parse_file(Path::new("l.yaml"), text, &ManifestFilter::default()).unwrap();
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
        let docs = parse_file(Path::new("m.yaml"), text, &ManifestFilter::default()).unwrap();
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
