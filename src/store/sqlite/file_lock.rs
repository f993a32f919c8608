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
//! too. So a descriptor is opened only to be locked, and on every Unix a file this process
//! already holds under another name is refused from a registry of the files it holds (by device
//! and inode), before anything is opened.

use std::path::Path;

/// Held for the store's life: the file's place in the registry and, where it was taken, its
/// `flock` (see the module's comment).
pub struct FileLock {
    #[cfg(unix)]
    _held: unix::Held,
}

/// Takes the database file's own lock at `path`, creating the file empty where it does not
/// exist yet (SQLite takes an empty file for a new database).
#[cfg(unix)]
pub fn lock(path: &Path) -> anyhow::Result<FileLock> {
    unix::lock(path).map(|held| FileLock { _held: held })
}

/// No lock of the file's own, nor a registry, off Unix: see the module's comment.
#[cfg(not(unix))]
pub fn lock(path: &Path) -> anyhow::Result<FileLock> {
    tracing::warn!(
        path = %path.display(),
        "only the lock of the embedded database's name is taken on this system: a second \
         process naming the file by a hard link or another mount would not be refused"
    );
    Ok(FileLock {})
}

#[cfg(unix)]
mod unix {
    use std::collections::HashSet;
    use std::fs::{File, OpenOptions, TryLockError};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::path::Path;
    use std::sync::{Mutex, PoisonError};

    use anyhow::Context;

    /// The files this process holds, by device and inode.
    static HELD: Mutex<Option<HashSet<(u64, u64)>>> = Mutex::new(None);

    /// File systems whose `flock` locks are apart from POSIX locks (`statfs`'s `f_type`, from
    /// `linux/magic.h`): ext2–4, XFS, Btrfs, tmpfs, overlayfs, ZFS, F2FS, bcachefs.
    #[cfg(target_os = "linux")]
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

    /// The file's place in [`HELD`] and its locked descriptor, if one was taken: the
    /// descriptor is closed before the place is given back.
    pub struct Held {
        file: Option<File>,
        key: (u64, u64),
    }

    impl Drop for Held {
        fn drop(&mut self) {
            drop(self.file.take());
            let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(held) = held.as_mut() {
                held.remove(&self.key);
            }
        }
    }

    /// The refusal for a file held by another process under another name.
    fn in_use(path: &Path) -> anyhow::Error {
        anyhow::anyhow!(
            "the embedded database {} is in use by another mordant process under another name \
             for the same file (a hard link, or the file mounted in another place). The \
             embedded store serves one process only: stop the other process, give this one its \
             own file (database.path), or use PostgreSQL (DATABASE_URL) to run several replicas",
            path.display()
        )
    }

    fn key_of(meta: &std::fs::Metadata) -> (u64, u64) {
        (meta.dev(), meta.ino())
    }

    /// The registry held throughout, so that two opens in this process cannot both pass it.
    pub fn lock(path: &Path) -> anyhow::Result<Held> {
        let mut registry = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        let held = registry.get_or_insert_with(HashSet::new);
        let refuse = |key| -> anyhow::Result<()> {
            anyhow::ensure!(
                !held.contains(&key),
                "the embedded database {} is already open in this process under another name \
                 for the same file (a hard link)",
                path.display()
            );
            Ok(())
        };
        match std::fs::metadata(path) {
            Ok(meta) => refuse(key_of(&meta))?,
            // Not there yet: created empty here, before anything else in this process can hold
            // it, so that it has an inode to register and lock.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o644)
                    .open(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        let file = lockable(path)?
            .map(|()| {
                OpenOptions::new()
                    .read(true)
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))
            })
            .transpose()?;
        let meta = match &file {
            Some(file) => file.metadata(),
            None => std::fs::metadata(path),
        }
        .with_context(|| format!("cannot read {}", path.display()))?;
        let key = key_of(&meta);
        refuse(key)?;
        let file = match file.map(|f| (f.try_lock(), f)) {
            Some((Ok(()), file)) => Some(file),
            Some((Err(TryLockError::WouldBlock), _)) => return Err(in_use(path)),
            Some((Err(TryLockError::Error(e)), _)) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "the embedded database's own lock could not be taken: only the lock of its \
                     name is"
                );
                None
            }
            None => None,
        };
        held.insert(key);
        Ok(Held { file, key })
    }

    /// `Some(())` where the file's own lock is taken: Linux, on a file system of [`LOCAL`];
    /// elsewhere a warning says that only its name's is.
    #[cfg(target_os = "linux")]
    fn lockable(path: &Path) -> anyhow::Result<Option<()>> {
        // `f_type` is a `long`: its low 32 bits hold the magic number on every target.
        let kind = u64::from(
            rustix::fs::statfs(path)
                .with_context(|| format!("cannot read the file system of {}", path.display()))?
                .f_type as u32,
        );
        if LOCAL.contains(&kind) {
            return Ok(Some(()));
        }
        tracing::warn!(
            path = %path.display(),
            file_system = format!("{kind:#x}"),
            "the embedded database is not on a local file system this service knows: only the \
             lock of its name is taken, and a second process naming the file by a hard link or \
             another mount would not be refused"
        );
        Ok(None)
    }

    #[cfg(not(target_os = "linux"))]
    fn lockable(path: &Path) -> anyhow::Result<Option<()>> {
        tracing::warn!(
            path = %path.display(),
            "only the lock of the embedded database's name is taken on this system: a second \
             process naming the file by a hard link or another mount would not be refused"
        );
        Ok(None)
    }
}
