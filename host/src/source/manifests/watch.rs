//! Watching the directory: `notify` events coalesced into rescans, the
//! changed files re-read on blocking threads, and each rescan's results
//! applied to the store together (see the module documentation of
//! `manifests` for the guarantees).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use notify::EventKind;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::parse::parse_file;
use super::{
    BATCH_WAIT, DEBOUNCE, Doc, EXTENSIONS, FileState, MAX_DEBOUNCE, MAX_ERRORS_PER_FILE, ManifestError,
    OWN_THREAD_BYTES, Shared, State, qualified_key_of,
};

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
pub(super) async fn watch_loop(
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

pub(super) fn is_manifest_path(path: &Path) -> bool {
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
pub(super) struct FileRead {
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
    pub(super) fn rescan(&self, roots: Vec<PathBuf>) {
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
    pub(super) fn begin_read(&self, path: &Path) -> u64 {
        let number = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        self.latest_read.lock().insert(path.to_path_buf(), number);
        number
    }

    fn is_latest_read(&self, path: &Path, number: u64) -> bool {
        self.latest_read.lock().get(path) == Some(&number)
    }

    /// Reads and parses one file (blocking). Gives up at the next document
    /// once a newer read of the file has started or `stop` is cancelled.
    pub(super) fn read_file(&self, path: PathBuf, number: u64, stop: Option<&CancellationToken>) -> FileRead {
        #[cfg(test)]
        super::tests::gate::before_read(&path);
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
    pub(super) fn apply(&self, roots: &[PathBuf], dir_errors: Vec<(PathBuf, io::Error)>, reads: Vec<FileRead>) {
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
