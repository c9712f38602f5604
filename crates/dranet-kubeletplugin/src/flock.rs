//! Advisory file locks (`flock`) between plugin instances that run side by side during a rolling
//! update. Locks belong to the open file, so the kernel releases them when a process dies, even by
//! SIGKILL: a crashed instance never leaves a lock behind.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Blocks until this process holds the exclusive lock on `path`, creating the file. Call it from a
/// blocking context ([`tokio::task::spawn_blocking`]).
///
/// Lock files may be removed by their holder ([`remove_locked`]); whoever opened the old file
/// before the removal then holds a lock on a file nobody else will see, so after locking we check
/// that the path still names our file and start over if not.
pub(crate) fn lock(path: &Path) -> Result<File> {
    loop {
        let file = open(path)?;
        file.lock().map_err(|e| Error::io("lock", path, e))?;
        let ours = file
            .metadata()
            .map_err(|e| Error::io("inspect lock file", path, e))?;
        match std::fs::metadata(path) {
            Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => return Ok(file),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("inspect lock file", path, e)),
        }
    }
}

fn open(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("open lock file", path, e))
}

/// Takes the exclusive lock on `path` if nobody holds it; `None` if somebody does.
pub(crate) fn try_lock(path: &Path) -> Result<Option<File>> {
    let file = open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
    }
}

/// Removes a lock file while holding its lock (`held`), so that lock files of finished claims do
/// not pile up. See [`lock`] for why waiters cope with that.
pub(crate) fn remove_locked(path: &Path, held: File) {
    let _ = std::fs::remove_file(path);
    drop(held);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn second_holder_waits_and_survives_removal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.lock");
        let first = lock(&path).unwrap();
        assert!(try_lock(&path).unwrap().is_none(), "lock not exclusive");
        let got = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (path, got) = (path.clone(), Arc::clone(&got));
            std::thread::spawn(move || {
                let f = lock(&path).unwrap();
                got.store(true, Ordering::SeqCst);
                f
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!got.load(Ordering::SeqCst), "waiter got a held lock");
        // The holder removes the file on release: the waiter must end up on a live file.
        remove_locked(&path, first);
        let second = waiter.join().unwrap();
        assert!(path.exists());
        assert!(try_lock(&path).unwrap().is_none());
        drop(second);
        assert!(try_lock(&path).unwrap().is_some());
    }
}
