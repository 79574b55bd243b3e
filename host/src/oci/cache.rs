//! The content-addressed blob cache on disk: `<dir>/blobs/sha256/<hex>`,
//! one file per manifest or layer, named by the sha256 of its bytes.
//!
//! Writes go to a temporary file in the same directory, are synced, then
//! renamed into place, so a reader never sees half a blob (and two pulls of
//! the same digest at once both succeed). Every read re-hashes the bytes: a
//! file that no longer matches its name is removed and reported as a miss,
//! so the next pull fetches it again instead of loading corrupt bytes.
//!
//! Beside each blob, `<dir>/sources/sha256/<hex>` lists who fetched it: one
//! hash per line of the repository and the credentials that did
//! ([`OciPuller`](super::OciPuller) computes them; no secret is written).
//! A blob is served from the cache only to a pull with one of those
//! sources, so a tenant cannot run another tenant's private component by
//! naming its digest (Kubernetes' `imagePullPolicy: IfNotPresent` problem).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::OciError;

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The hex part of a `sha256:<64 hex>` digest, or `None` for anything else
/// (another algorithm, a malformed digest): only those are file names.
pub fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(hex)
}

/// A blob directory (see the module docs).
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
    sources: PathBuf,
    /// Past this many bytes of blobs, the least recently used go.
    max_bytes: u64,
}

impl BlobCache {
    /// The cache under `root` (`<root>/blobs/sha256`); created on first write.
    pub fn new(root: &Path) -> Self {
        BlobCache {
            dir: root.join("blobs").join("sha256"),
            sources: root.join("sources").join("sha256"),
            max_bytes: u64::MAX,
        }
    }

    /// Keeps at most `max_bytes` of blobs: after each write, the blobs
    /// read or written least recently are removed (with their sources)
    /// until the rest fit. A removed blob is only fetched again.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Whether `source` fetched `digest` before (see the module docs).
    pub async fn fetched_by(&self, digest: &str, source: &str) -> bool {
        let Some(hex) = sha256_hex(digest) else { return false };
        let path = self.sources.join(hex);
        let source = source.to_owned();
        tokio::task::spawn_blocking(move || {
            std::fs::read_to_string(path).is_ok_and(|lines| lines.lines().any(|l| l == source))
        })
        .await
        .unwrap_or(false)
    }

    /// Records that `source` fetched `digest`. Two pulls recording at once
    /// may keep only one line: the other source then fetches again.
    pub async fn record_source(&self, digest: &str, source: &str) -> Result<(), OciError> {
        let Some(hex) = sha256_hex(digest) else { return Ok(()) };
        let (dir, path) = (self.sources.clone(), self.sources.join(hex));
        let source = source.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut lines = std::fs::read_to_string(&path).unwrap_or_default();
            if lines.lines().any(|l| l == source) {
                return Ok(());
            }
            lines.push_str(&source);
            lines.push('\n');
            write_atomically(&dir, &path, lines.as_bytes())
        })
        .await
        .expect("cache write panicked")
    }

    /// Where the blob of `digest` lives, if `digest` is a sha256 digest.
    pub fn path(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|hex| self.dir.join(hex))
    }

    /// The bytes of `digest` if cached and intact. A file whose bytes do
    /// not hash to its name, or larger than `max_bytes`, is removed and
    /// reported as a miss.
    pub async fn get(&self, digest: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, OciError> {
        let Some(path) = self.path(digest) else {
            return Ok(None);
        };
        let digest = digest.to_owned();
        tokio::task::spawn_blocking(move || read_verified(&path, &digest, max_bytes))
            .await
            .expect("cache read panicked")
    }

    /// Stores `bytes` as the blob of `digest` (which the caller verified).
    pub async fn put(&self, digest: &str, bytes: &[u8]) -> Result<(), OciError> {
        let Some(path) = self.path(digest) else {
            return Ok(());
        };
        let (dir, sources, max) = (self.dir.clone(), self.sources.clone(), self.max_bytes);
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || {
            write_atomically(&dir, &path, &bytes)?;
            evict(&dir, &sources, &path, max);
            Ok(())
        })
        .await
        .expect("cache write panicked")
    }
}

fn read_verified(path: &Path, digest: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, OciError> {
    let cache_error = |source| OciError::Cache { path: path.to_owned(), source };
    let len = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cache_error(e)),
    };
    let bytes = if len <= max_bytes {
        match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cache_error(e)),
        }
    } else {
        None
    };
    if let Some(bytes) = bytes {
        let found = sha256_digest(&bytes);
        if found == digest {
            crate::lru_dir::touch(path);
            return Ok(Some(bytes));
        }
        tracing::warn!(
            path = %path.display(),
            expected = digest,
            found,
            "cached blob does not match its digest; removing it"
        );
    } else {
        tracing::warn!(path = %path.display(), len, max_bytes, "cached blob over the size limit; removing it");
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(cache_error(e)),
    }
}

/// Removes the blobs used least recently until those left hold at most
/// `max` bytes, never `keep` (the blob just written), with their sources.
fn evict(dir: &Path, sources: &Path, keep: &Path, max: u64) {
    let is_blob = |name: &str| sha256_hex(&format!("sha256:{name}")).is_some();
    for path in crate::lru_dir::evict(dir, max, keep, is_blob) {
        if let Some(name) = path.file_name() {
            let _ = std::fs::remove_file(sources.join(name));
        }
    }
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    let cache_error = |source| OciError::Cache { path: path.to_owned(), source };
    std::fs::create_dir_all(dir).map_err(cache_error)?;
    let mut temp = tempfile::Builder::new().prefix(".partial-").tempfile_in(dir).map_err(cache_error)?;
    temp.write_all(bytes).map_err(cache_error)?;
    temp.as_file().sync_all().map_err(cache_error)?;
    temp.persist(path).map_err(|e| cache_error(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant pulling new digests again and again cannot fill the disk:
    /// past the limit the blob used least recently goes, with its sources.
    #[tokio::test]
    async fn the_least_recently_used_blobs_go_past_the_limit() {
        let root = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(root.path()).with_max_bytes(3000);
        let blob = |c: u8| vec![c; 1000];
        let digest = |c: u8| sha256_digest(&blob(c));
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for (i, c) in [b'a', b'b', b'c'].into_iter().enumerate() {
            cache.put(&digest(c), &blob(c)).await.unwrap();
            cache.record_source(&digest(c), "someone").await.unwrap();
            let file = std::fs::File::options().append(true).open(cache.path(&digest(c)).unwrap()).unwrap();
            file.set_modified(t0 + std::time::Duration::from_secs(i as u64)).unwrap();
        }
        // Reading `a` makes it the most recently used.
        assert!(cache.get(&digest(b'a'), 1000).await.unwrap().is_some());
        cache.put(&digest(b'd'), &blob(b'd')).await.unwrap();
        let kept = |c: u8| cache.path(&digest(c)).unwrap().exists();
        assert_eq!([kept(b'a'), kept(b'b'), kept(b'c'), kept(b'd')], [true, false, true, true]);
        assert!(!cache.fetched_by(&digest(b'b'), "someone").await, "its sources went with it");
        assert!(cache.fetched_by(&digest(b'c'), "someone").await);
    }

    #[tokio::test]
    async fn round_trip_and_corruption_is_a_miss() {
        let root = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(root.path());
        let digest = sha256_digest(b"hello");
        assert_eq!(cache.get(&digest, 100).await.unwrap(), None);
        cache.put(&digest, b"hello").await.unwrap();
        assert_eq!(cache.get(&digest, 100).await.unwrap().as_deref(), Some(&b"hello"[..]));
        // Over the limit: removed, a miss.
        assert_eq!(cache.get(&digest, 4).await.unwrap(), None);
        assert!(!cache.path(&digest).unwrap().exists());
        // Corrupt: removed, a miss.
        cache.put(&digest, b"hello").await.unwrap();
        std::fs::write(cache.path(&digest).unwrap(), b"jello").unwrap();
        assert_eq!(cache.get(&digest, 100).await.unwrap(), None);
        assert!(!cache.path(&digest).unwrap().exists());
        // No temporary files left behind.
        let names: Vec<_> =
            std::fs::read_dir(root.path().join("blobs/sha256")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.is_empty(), "{names:?}");
    }

    #[test]
    fn only_sha256_digests_are_file_names() {
        assert!(sha256_hex(&sha256_digest(b"x")).is_some());
        assert!(sha256_hex("sha512:abcd").is_none());
        assert!(sha256_hex("sha256:../../etc/passwd").is_none());
        assert!(sha256_hex(&sha256_digest(b"x").to_uppercase()).is_none());
    }
}
