//! The SHA-256 of a file the boot service serves, computed once per version of the file: it
//! is kept with the file's identity (device, inode, size, modification time) and computed
//! again only when that changes (the file replaced or rewritten). `metal-agent`'s digest
//! goes into every deploy plan and join script; hashing its megabytes on each of them cost a
//! fleet's deploys CPU for nothing.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i128,
}

impl Version {
    fn of(metadata: &std::fs::Metadata) -> Version {
        Version {
            device: metadata.dev(),
            inode: metadata.ino(),
            size: metadata.size(),
            modified_ns: i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec()),
        }
    }
}

/// Digests of files, by path.
#[derive(Debug, Default)]
pub struct FileDigests {
    known: Mutex<HashMap<PathBuf, (Version, String)>>,
    computed: AtomicU64,
}

impl FileDigests {
    /// The SHA-256 (hex) of the file at `path` as it is now.
    pub async fn sha256(&self, path: &Path) -> std::io::Result<String> {
        let version = Version::of(&tokio::fs::metadata(path).await?);
        let locked = || self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((known, digest)) = locked().get(path)
            && *known == version
        {
            return Ok(digest.clone());
        }
        let bytes = tokio::fs::read(path).await?;
        // What was read is the version hashed: a file replaced meanwhile is read again next time.
        let digest = hex::encode(Sha256::digest(&bytes));
        self.computed.fetch_add(1, Ordering::Relaxed);
        let read = tokio::fs::metadata(path).await.map(|m| Version::of(&m));
        if read.as_ref().is_ok_and(|now| *now == version) {
            locked().insert(path.to_owned(), (version, digest.clone()));
        }
        Ok(digest)
    }

    /// How many digests were computed (not answered from what was kept).
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_digest_is_computed_once_per_version_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metal-agent");
        std::fs::write(&path, b"agent v1").unwrap();
        let digests = FileDigests::default();
        let first = digests.sha256(&path).await.unwrap();
        assert_eq!(first, hex::encode(Sha256::digest(b"agent v1")));
        assert_eq!(digests.sha256(&path).await.unwrap(), first);
        assert_eq!(digests.computed(), 1, "the second answer was the kept one");

        // Replaced (a new inode), as an operator's `install` or `mv` does.
        let new = dir.path().join("metal-agent.new");
        std::fs::write(&new, b"agent v2").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert_eq!(digests.sha256(&path).await.unwrap(), hex::encode(Sha256::digest(b"agent v2")));
        assert_eq!(digests.computed(), 2);
        // Rewritten in place with another size.
        std::fs::write(&path, b"agent v3, longer").unwrap();
        assert_eq!(digests.sha256(&path).await.unwrap(), hex::encode(Sha256::digest(b"agent v3, longer")));
        assert_eq!(digests.computed(), 3);
        std::fs::remove_file(&path).unwrap();
        assert!(digests.sha256(&path).await.is_err(), "a file that is gone has no digest");
    }
}
