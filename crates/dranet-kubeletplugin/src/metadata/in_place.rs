//! Writing a metadata file on the inode it already has (see the module docs: a container's bind
//! mount pins that inode, so a rename would hide the write from it).

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Files are read by the containers' users, written by the plugin only.
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

/// Opens `path` for reading and writing, creating it (and its directories) if missing; an
/// existing file keeps its inode and contents.
fn open(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)?;
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)?;
    // The mode given at creation is cut by the umask.
    f.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(f)
}

/// Makes `path` an empty file, the bind mount's source before anything is known. `keep`: an
/// existing file keeps what it holds (a restart must not empty the file of a running pod).
pub(crate) fn placeholder(path: &Path, keep: bool) -> io::Result<()> {
    let f = open(path)?;
    if !keep {
        f.set_len(0)?;
    }
    Ok(())
}

/// Replaces the contents of `path` with `bytes` on the same inode, durably: written from the
/// start, cut to their length, synced. Not atomic: a crash in the middle can leave a torn
/// file, which the next write replaces (its generation then starts again at 1).
pub(crate) fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = open(path)?;
    write_file(&mut f, bytes)
}

fn write_file(f: &mut File, bytes: &[u8]) -> io::Result<()> {
    f.seek(SeekFrom::Start(0))?;
    f.write_all(bytes)?;
    let len = u64::try_from(bytes.len()).map_err(io::Error::other)?;
    f.set_len(len)?;
    f.sync_all()
}

/// The generation of the file at `path` (its first object's: every object of a write carries the
/// same): 0 when it is missing, empty (a placeholder) or not metadata (torn by a crash).
pub(crate) fn generation(path: &Path) -> io::Result<i64> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    }
    if bytes.is_empty() {
        return Ok(0);
    }
    let first = serde_json::Deserializer::from_slice(&bytes)
        .into_iter::<serde_json::Value>()
        .next();
    let generation = match first {
        Some(Ok(object)) => object
            .pointer("/metadata/generation")
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| "no metadata.generation".to_string()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("no JSON object".to_string()),
    };
    match generation {
        Ok(g) => Ok(g.max(0)),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "a device metadata file is not readable; its next write counts generations from 1 again");
            Ok(0)
        }
    }
}
