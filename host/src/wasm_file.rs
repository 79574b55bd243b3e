//! Reading a plugin component from a path that an untrusted caller chose.
//!
//! This module owns the rules for a `wasm` path given over the admin API
//! ([`crate::admin_api`]); the TOML config's paths are trusted and read by
//! the plugin runtime. [`WasmDirs::read`] reads a component only when
//!
//! - some directories are configured at all (none: path loads are refused
//!   and only uploads work);
//! - the path is absolute and, canonicalized (symlinks and `..` resolved),
//!   lies inside one of those directories (also canonicalized);
//! - it is a regular file: checked before opening, so a FIFO or a device is
//!   never opened, and again on the opened descriptor (`fstat`), so a file
//!   swapped in between is never read; the open itself is non-blocking and
//!   does not follow a symlink (Unix);
//! - it is at most the size cap, enforced while reading too (a file growing
//!   under the reader is cut off, not read to exhaustion).
//!
//! A path that does not exist, lies outside the directories, or is not a
//! regular file gets one and the same error, [`WasmFileError::Refused`], so
//! the answer does not reveal what exists on the host. The read is
//! blocking: the admin API runs it off the async runtime, bounded in time
//! and in how many run at once.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a component was not read from a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmFileError {
    #[error(
        "loading a component from a path on the host is disabled (no wasm directories are configured); upload the component instead"
    )]
    Disabled,
    #[error(
        "{path:?} cannot be loaded: it does not exist, or it is not a regular file inside the directories the host loads components from"
    )]
    Refused { path: PathBuf },
    #[error("{path:?} is larger than the limit of {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("cannot read {path:?}: {message}")]
    Read { path: PathBuf, message: String },
}

/// The directories components may be read from, and the size cap.
#[derive(Debug, Clone)]
pub struct WasmDirs {
    dirs: Vec<PathBuf>,
    max_bytes: u64,
}

impl WasmDirs {
    /// Components may be read from files inside `dirs` (and their
    /// subdirectories), of at most `max_bytes`. No directories: none may.
    pub fn new(dirs: impl IntoIterator<Item = PathBuf>, max_bytes: u64) -> Self {
        WasmDirs { dirs: dirs.into_iter().collect(), max_bytes }
    }

    /// The directories, as configured.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Reads the component at `path`; returns its canonical path and bytes.
    pub fn read(&self, path: &Path) -> Result<(PathBuf, Vec<u8>), WasmFileError> {
        if self.dirs.is_empty() {
            return Err(WasmFileError::Disabled);
        }
        let refused = || WasmFileError::Refused { path: path.to_path_buf() };
        if !path.is_absolute() {
            return Err(refused());
        }
        let canonical = path.canonicalize().map_err(|_| refused())?;
        // Directories are resolved on each read: one created or re-pointed
        // after start-up counts as it is now.
        let inside = self.dirs.iter().filter_map(|d| d.canonicalize().ok()).any(|d| canonical.starts_with(d));
        if !inside {
            return Err(refused());
        }
        // Never open anything but a regular file: opening a FIFO blocks
        // until a writer comes, and opening a device can have effects.
        if !std::fs::symlink_metadata(&canonical).is_ok_and(|m| m.is_file()) {
            return Err(refused());
        }
        let file = open_no_follow_no_block(&canonical).map_err(|_| refused())?;
        let meta = file.metadata().map_err(|_| refused())?;
        if !meta.is_file() {
            return Err(refused());
        }
        let too_large = || WasmFileError::TooLarge { path: canonical.clone(), max: self.max_bytes };
        if meta.len() > self.max_bytes {
            return Err(too_large());
        }
        match read_capped(file, self.max_bytes) {
            Ok(Some(bytes)) => Ok((canonical, bytes)),
            Ok(None) => Err(too_large()),
            Err(e) => Err(WasmFileError::Read { path: canonical.clone(), message: e.to_string() }),
        }
    }
}

/// Reads `r` to its end, or returns `None` as soon as it yields more than
/// `max` bytes (reading at most `max + 1`).
pub fn read_capped(r: impl Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    r.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

#[cfg(unix)]
fn open_no_follow_no_block(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY).open(path)
}

#[cfg(not(unix))]
fn open_no_follow_no_block(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(p: &Path) -> Result<(PathBuf, Vec<u8>), WasmFileError> {
        Err(WasmFileError::Refused { path: p.to_path_buf() })
    }

    #[test]
    fn reads_regular_files_inside_the_directories_only() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(allowed.path().join("sub")).unwrap();
        let inside = allowed.path().join("sub").join("p.wasm");
        std::fs::write(&inside, b"bytes").unwrap();
        let outside = other.path().join("q.wasm");
        std::fs::write(&outside, b"secret").unwrap();
        let dirs = WasmDirs::new([allowed.path().to_path_buf()], 16);

        let (canonical, bytes) = dirs.read(&inside).unwrap();
        assert_eq!((canonical, bytes), (inside.canonicalize().unwrap(), b"bytes".to_vec()));
        // Outside, missing, escaping with `..`, relative, a directory: one answer.
        assert_eq!(dirs.read(&outside), refused(&outside));
        let missing = allowed.path().join("nope.wasm");
        assert_eq!(dirs.read(&missing), refused(&missing));
        let dotdot = allowed.path().join("..").join(other.path().file_name().unwrap()).join("q.wasm");
        assert_eq!(dirs.read(&dotdot), refused(&dotdot));
        assert_eq!(dirs.read(Path::new("p.wasm")), refused(Path::new("p.wasm")));
        let sub = allowed.path().join("sub");
        assert_eq!(dirs.read(&sub), refused(&sub));
        assert_eq!(
            dirs.read(&outside).unwrap_err().to_string().replace(&format!("{outside:?}"), "P"),
            dirs.read(&missing).unwrap_err().to_string().replace(&format!("{missing:?}"), "P"),
        );

        // No directories: every path is refused, whatever it names.
        assert_eq!(WasmDirs::new([], 16).read(&inside), Err(WasmFileError::Disabled));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_fifos_devices_and_large_files_are_refused() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let outside = other.path().join("q.wasm");
        std::fs::write(&outside, b"secret").unwrap();
        let link = allowed.path().join("link.wasm");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let fifo = allowed.path().join("fifo.wasm");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let big = allowed.path().join("big.wasm");
        std::fs::write(&big, vec![0u8; 17]).unwrap();
        let dirs = WasmDirs::new([allowed.path().to_path_buf(), PathBuf::from("/dev")], 16);

        assert_eq!(dirs.read(&link), refused(&link));
        let started = std::time::Instant::now();
        assert_eq!(dirs.read(&fifo), refused(&fifo));
        assert_eq!(dirs.read(Path::new("/dev/zero")), refused(Path::new("/dev/zero")));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(dirs.read(&big), Err(WasmFileError::TooLarge { path: big.canonicalize().unwrap(), max: 16 }));
    }

    #[test]
    fn read_capped_stops_after_the_cap() {
        assert_eq!(read_capped(&b"abc"[..], 3).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read_capped(&b"abcd"[..], 3).unwrap(), None);
        // An endless reader is cut off after max + 1 bytes.
        assert_eq!(read_capped(std::io::repeat(0), 1 << 20).unwrap(), None);
    }
}
