//! The database file's own lock, beside the lock file of its name (`take_ownership`): a hard
//! link, or a mount of the file in another place, is another name with a lock file of its own,
//! and two processes on one database through two names kept two write-ahead logs of it, lost
//! acknowledged batches and corrupted its indexes.
//!
//! An exclusive `flock` on the file, taken before SQLite opens it and held for the store's
//! life. Only on Linux and on a local file system, where `flock` locks are apart from the POSIX
//! locks SQLite takes: NFS turns a `flock` into a POSIX lock of the whole file, SMB enforces it
//! on SQLite's own reads, and the BSDs and macOS let the two kinds meet. Elsewhere the store
//! keeps the lock of its name alone, and says so in a warning.
//!
//! Closing any descriptor of a file drops the POSIX locks this process holds on it, SQLite's
//! too: a file this process already holds under another name is refused from a registry of the
//! files held, without opening it again.

use std::path::Path;

/// Held for the store's life; nothing where the lock is not taken (see the module's comment).
pub struct FileLock {
    #[cfg(target_os = "linux")]
    _held: Option<linux::Held>,
}

/// Takes the database file's own lock at `path`, creating the file empty where it does not
/// exist yet (SQLite takes an empty file for a new database).
#[cfg(target_os = "linux")]
pub fn lock(path: &Path) -> anyhow::Result<FileLock> {
    linux::lock(path).map(|held| FileLock { _held: held })
}

/// No lock of the file's own off Linux: see the module's comment.
#[cfg(not(target_os = "linux"))]
pub fn lock(_path: &Path) -> anyhow::Result<FileLock> {
    Ok(FileLock {})
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashSet;
    use std::fs::{File, OpenOptions, TryLockError};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;
    use std::sync::{Mutex, PoisonError};

    use anyhow::Context;

    /// The refusal for a file held by another process under another name.
    fn in_use(path: &Path) -> anyhow::Error {
        anyhow::anyhow!(
            "the embedded database {} is in use by another mordant process under another name for \
             the same file (a hard link, or the file mounted in another place). The embedded store \
             serves one process only: stop the other process, give this one its own file \
             (database.path), or use PostgreSQL (DATABASE_URL) to run several replicas",
            path.display()
        )
    }

    /// The files this process holds, by device and inode.
    static HELD: Mutex<Option<HashSet<(u64, u64)>>> = Mutex::new(None);

    /// File systems whose `flock` locks are apart from POSIX locks (`statfs`'s `f_type`, from
    /// `linux/magic.h`): ext2–4, XFS, Btrfs, tmpfs, overlayfs, ZFS, F2FS, bcachefs.
    const LOCAL: [u64; 8] = [
        0xEF53,
        0x5846_5342,
        0x9123_683E,
        0x0102_1994,
        0x794C_7630,
        0x2FC1_2FC1,
        0xF2F5_2010,
        0xCA45_1A4E,
    ];

    /// The flock'ed descriptor and its place in [`HELD`], given back on drop.
    pub struct Held {
        _file: File,
        key: (u64, u64),
    }

    impl Drop for Held {
        fn drop(&mut self) {
            let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(held) = held.as_mut() {
                held.remove(&self.key);
            }
        }
    }

    fn held(key: (u64, u64)) -> bool {
        let held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref().is_some_and(|h| h.contains(&key))
    }

    fn refuse_if_held(path: &Path, key: (u64, u64)) -> anyhow::Result<()> {
        anyhow::ensure!(
            !held(key),
            "the embedded database {} is already open in this process under another name for \
             the same file (a hard link)",
            path.display()
        );
        Ok(())
    }

    pub fn lock(path: &Path) -> anyhow::Result<Option<Held>> {
        if let Ok(meta) = std::fs::metadata(path) {
            refuse_if_held(path, (meta.dev(), meta.ino()))?;
        }
        let file = match OpenOptions::new().read(true).open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path),
            opened => opened,
        }
        .with_context(|| format!("cannot open {}", path.display()))?;
        let kind = rustix::fs::fstatfs(&file)
            .map(|s| s.f_type as u64)
            .with_context(|| format!("cannot read the file system of {}", path.display()))?;
        if !LOCAL.contains(&kind) {
            tracing::warn!(
                path = %path.display(),
                file_system = format!("{kind:#x}"),
                "the embedded database is not on a local file system this service knows: only \
                 the lock of its name is taken, and a second process naming the file by a hard \
                 link or another mount would not be refused"
            );
            return Ok(None);
        }
        let meta = file
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?;
        let key = (meta.dev(), meta.ino());
        refuse_if_held(path, key)?;
        match file.try_lock() {
            Ok(()) => {
                HELD.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert_with(HashSet::new)
                    .insert(key);
                Ok(Some(Held { _file: file, key }))
            }
            Err(TryLockError::WouldBlock) => Err(in_use(path)),
            Err(TryLockError::Error(e)) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "the embedded database's own lock could not be taken: only the lock of its \
                     name is"
                );
                Ok(None)
            }
        }
    }
}
