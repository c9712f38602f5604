//! Small JSON records kept in a directory, each written so that a crash leaves either the old or
//! the new file ([`dranet_util::AtomicWrite`]: temporary file created 0600, fsync, rename, fsync
//! of the directory). The attach journal keeps its entries with these, and a driver may keep its
//! own records the same way.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use dranet_util::AtomicWrite;

/// Creates `dir` (and its parents) with mode 0700.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `data` to `dir/name` durably.
pub fn write(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    // The callers name the record in their errors: the OS error is enough here.
    AtomicWrite::new(dir.join(name))
        .write(data)
        .map_err(dranet_util::AtomicWriteError::into_io_error)
}

/// Removes `dir/name`; a missing file is not an error.
pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
    match fs::remove_file(dir.join(name)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    // The removal is done; a failed directory sync only weakens durability.
    let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Reads a record of at most `max` bytes; `None` when there is none. Anything but a regular file
/// is an error (a symlink planted in our directory is never followed).
pub fn read(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(io::Error::other(format!(
            "{} bytes, more than the {max} a record may have",
            meta.len()
        )));
    }
    fs::read(path).map(Some)
}

/// The records (`*.json`, not temporaries) in `dir`, sorted.
pub fn list(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for d in fs::read_dir(dir)? {
        let d = d?;
        let name = d.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with('.') && name.ends_with(".json") {
            out.push(d.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Moves a record that cannot be read aside, where its reader no longer finds it and an operator
/// still can.
pub use dranet_util::quarantine;
