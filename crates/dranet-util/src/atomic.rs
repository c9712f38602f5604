//! Replacing a file so that a crash leaves either the old or the new content, never a mix.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The temporary file [`AtomicWrite`] uses by default for `path`: `.<name>.tmp` beside it. The
/// leading dot keeps it out of readers that take `*.json` or `*.yaml` only.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Replaces a file durably: the data goes to a temporary file in the same directory, which is
/// fsynced and renamed over the file, and then the directory is fsynced, so the rename itself
/// survives a power cut. A crash at any point leaves the old file (or none) or the new one.
///
/// A failed write may leave the temporary file behind (the file itself is untouched); the
/// caller, which knows its naming, removes leftovers when it starts or cleans up.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("state.json");
/// dranet_util::AtomicWrite::new(&path).write(b"{}")?;
/// assert_eq!(std::fs::read(&path)?, b"{}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AtomicWrite {
    path: PathBuf,
    temp: PathBuf,
    mode: u32,
    exact_mode: bool,
}

/// The error of `step` on `path`, for `map_err`.
fn at(step: AtomicWriteStep, path: &Path) -> impl FnOnce(io::Error) -> AtomicWriteError + '_ {
    move |e| AtomicWriteError::new(step, path, e)
}

impl AtomicWrite {
    /// A write that replaces `path`, through [`temp_path`]`(path)`, creating the temporary file
    /// with mode 0600 (less the umask).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            temp: temp_path(&path),
            path,
            mode: 0o600,
            exact_mode: false,
        }
    }

    /// Uses `temp` as the temporary file. It must be in the directory of the file: a rename is
    /// only atomic within one file system, and only that directory is fsynced.
    #[must_use]
    pub fn temp(mut self, temp: impl Into<PathBuf>) -> Self {
        self.temp = temp.into();
        self
    }

    /// The mode a new temporary file is created with, less the umask (default 0600). A temporary
    /// file left by an earlier crash keeps the mode it has; see [`AtomicWrite::exact_mode`].
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self.exact_mode = false;
        self
    }

    /// Gives the temporary file (and so the file) exactly `mode`, whatever the umask and
    /// whatever mode a leftover temporary file had.
    #[must_use]
    pub fn exact_mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self.exact_mode = true;
        self
    }

    /// The file this write replaces.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `data` and replaces the file with it.
    pub fn write(&self, data: &[u8]) -> Result<(), AtomicWriteError> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(self.mode)
            .open(&self.temp)
            .map_err(at(AtomicWriteStep::CreateTemp, &self.temp))?;
        if self.exact_mode {
            f.set_permissions(fs::Permissions::from_mode(self.mode))
                .map_err(at(AtomicWriteStep::SetMode, &self.temp))?;
        }
        f.write_all(data)
            .map_err(at(AtomicWriteStep::Write, &self.temp))?;
        f.sync_all()
            .map_err(at(AtomicWriteStep::SyncFile, &self.temp))?;
        drop(f);
        fs::rename(&self.temp, &self.path).map_err(at(AtomicWriteStep::Rename, &self.path))?;
        // A bare file name lives in the current directory.
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)
            .map_err(at(AtomicWriteStep::OpenDir, dir))?
            .sync_all()
            .map_err(at(AtomicWriteStep::SyncDir, dir))
    }
}

/// The step of an [`AtomicWrite`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicWriteStep {
    /// Creating or opening the temporary file.
    CreateTemp,
    /// Setting the temporary file's mode ([`AtomicWrite::exact_mode`]).
    SetMode,
    /// Writing the data to the temporary file.
    Write,
    /// Fsyncing the temporary file.
    SyncFile,
    /// Renaming the temporary file over the file.
    Rename,
    /// Opening the directory to fsync it.
    OpenDir,
    /// Fsyncing the directory.
    SyncDir,
}

impl AtomicWriteStep {
    fn describe(self) -> &'static str {
        match self {
            AtomicWriteStep::CreateTemp => "create temporary file",
            AtomicWriteStep::SetMode => "set the mode of",
            AtomicWriteStep::Write => "write",
            AtomicWriteStep::SyncFile => "fsync",
            AtomicWriteStep::Rename => "rename to",
            AtomicWriteStep::OpenDir => "open directory",
            AtomicWriteStep::SyncDir => "fsync directory",
        }
    }
}

/// An [`AtomicWrite`] that failed: the step, the path it acted on (the temporary file, the file
/// for [`AtomicWriteStep::Rename`], the directory for the directory steps) and the OS error.
#[derive(Debug)]
pub struct AtomicWriteError {
    step: AtomicWriteStep,
    path: PathBuf,
    source: io::Error,
}

impl AtomicWriteError {
    /// The error of `step` on `path`.
    pub fn new(step: AtomicWriteStep, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self {
            step,
            path: path.into(),
            source,
        }
    }

    /// The step that failed.
    pub fn step(&self) -> AtomicWriteStep {
        self.step
    }

    /// The path the step acted on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Step, path and OS error, for callers that describe the failure in their own words.
    pub fn into_parts(self) -> (AtomicWriteStep, PathBuf, io::Error) {
        (self.step, self.path, self.source)
    }

    /// The OS error alone, for callers that name the file themselves.
    pub fn into_io_error(self) -> io::Error {
        self.source
    }
}

impl std::fmt::Display for AtomicWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.step.describe(),
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for AtomicWriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Moves an unreadable file aside as `<file>.corrupt-<seconds>.<nanoseconds>` (nanoseconds: two
/// in one second keep both), where its reader no longer finds it and an operator still can.
/// Where it went.
pub fn quarantine(path: &Path) -> io::Result<PathBuf> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let moved_to = PathBuf::from(format!(
        "{}.corrupt-{}.{:09}",
        path.display(),
        now.as_secs(),
        now.subsec_nanos()
    ));
    fs::rename(path, &moved_to)?;
    Ok(moved_to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        AtomicWrite::new(&path).write(b"old").unwrap();
        AtomicWrite::new(&path).write(b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(temp_path(&path), dir.path().join(".a.json.tmp"));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(mode_of(&path) & !0o600, 0, "created 0600 less the umask");
    }

    #[test]
    fn exact_mode_wins_over_a_leftover_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let temp = dir.path().join("checkpoint.tmp");
        fs::write(&temp, b"torn").unwrap();
        fs::set_permissions(&temp, fs::Permissions::from_mode(0o644)).unwrap();
        AtomicWrite::new(&path)
            .temp(&temp)
            .exact_mode(0o600)
            .write(b"x")
            .unwrap();
        assert_eq!(mode_of(&path), 0o600);
        assert!(!temp.exists());
    }

    #[test]
    fn a_failed_step_is_named_with_its_path_and_the_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        fs::write(&path, b"old").unwrap();
        // A directory where the temporary file should go.
        fs::create_dir(temp_path(&path)).unwrap();
        let e = AtomicWrite::new(&path).write(b"new").unwrap_err();
        assert_eq!(e.step(), AtomicWriteStep::CreateTemp);
        assert_eq!(e.path(), temp_path(&path));
        assert!(
            e.to_string().starts_with(&format!(
                "create temporary file {}: ",
                temp_path(&path).display()
            )),
            "{e}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"old");
        // The rename target is a non-empty directory: the rename step fails, naming the file.
        let target = dir.path().join("d");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("x"), b"").unwrap();
        let e = AtomicWrite::new(&target).write(b"new").unwrap_err();
        assert_eq!((e.step(), e.path()), (AtomicWriteStep::Rename, &*target));
    }
}
