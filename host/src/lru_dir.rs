//! A directory of cache files kept under a size, least recently used first.
//!
//! Owns the order of eviction (a file's modification time, which [`touch`]
//! refreshes on every use) and the removal of files past the limit. Does
//! not own what the files are, how they are named or verified: the caller
//! says which names are entries ([`evict`]'s `is_entry`) and removes
//! whatever it keeps beside one it is told was evicted. Used by the OCI
//! blob cache and the compile cache.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Marks `path` as just used: the last to be evicted.
pub fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Removes the entries of `dir` used least recently until those left hold
/// at most `max` bytes, never `keep` (the entry just written), and returns
/// the paths removed. Only files whose names `is_entry` accepts count.
/// Failures are logged, never returned: a cache that cannot shrink still
/// serves.
pub fn evict(dir: &Path, max: u64, keep: &Path, is_entry: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let meta = e.metadata().ok()?;
            if !meta.is_file() || !is_entry(e.file_name().to_str()?) {
                return None;
            }
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    let mut removed = Vec::new();
    if total <= max {
        return removed;
    }
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                tracing::info!(path = %path.display(), "evicted from the cache");
                removed.push(path);
            }
            Err(e) => tracing::warn!(path = %path.display(), "cannot evict from the cache: {e}"),
        }
    }
    removed
}
