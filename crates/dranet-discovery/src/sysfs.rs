//! One reader for every sysfs file, rooted anywhere.
//!
//! All paths are relative to the root (`/sys` on a host, `/host/sys` in a container that mounts
//! the host's, or a fixture tree), so the same parsing runs everywhere. Symlinks are resolved
//! lexically against the root — sysfs links are relative, so this never escapes to the real
//! `/sys` when reading a fixture.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// One filesystem access the reader made, for replaying the raw cost of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A file read.
    Read(PathBuf),
    /// A symlink read (and, when resolving, the target's existence checked).
    ReadLink(PathBuf),
    /// A directory listed.
    List(PathBuf),
}

impl Access {
    /// Performs the same access with no parsing at all; returns bytes seen, so the optimiser
    /// cannot drop it.
    pub fn replay(&self) -> usize {
        match self {
            Access::Read(p) => std::fs::read(p).map(|v| v.len()).unwrap_or(0),
            Access::ReadLink(p) => std::fs::read_link(p)
                .map(|t| t.as_os_str().len())
                .unwrap_or(0),
            Access::List(p) => std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0),
        }
    }
}

/// A sysfs tree rooted at a directory.
#[derive(Debug)]
pub struct Sysfs {
    root: PathBuf,
    // Every path read, when recording (benches measure the raw cost of the same reads).
    record: Option<Mutex<Vec<Access>>>,
}

impl Sysfs {
    /// A reader rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            record: None,
        }
    }

    /// A reader that also records every file it reads (see [`Sysfs::recorded`]).
    pub fn recording(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            record: Some(Mutex::new(Vec::new())),
        }
    }

    /// The accesses made so far, when recording.
    pub fn recorded(&self) -> Vec<Access> {
        self.record
            .as_ref()
            .map(|r| r.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of `rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn note(&self, a: impl FnOnce() -> Access) {
        if let Some(r) = &self.record
            && let Ok(mut v) = r.lock()
        {
            v.push(a());
        }
    }

    /// Reads a file and trims trailing whitespace.
    pub fn read(&self, rel: &str) -> io::Result<String> {
        let p = self.path(rel);
        self.note(|| Access::Read(p.clone()));
        let mut s = read_attribute(&p)?;
        let len = s.trim_end().len();
        s.truncate(len);
        Ok(s)
    }

    /// Reads a file that may be absent: `Ok(None)` when it does not exist.
    pub fn read_opt(&self, rel: &str) -> io::Result<Option<String>> {
        match self.read(rel) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The file name a symlink points to (`driver` → `mlx5_core`); `Ok(None)` when absent.
    pub fn link_name(&self, rel: &str) -> io::Result<Option<String>> {
        let p = self.path(rel);
        self.note(|| Access::ReadLink(p.clone()));
        match std::fs::read_link(&p) {
            Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Resolves the symlink `rel` to a path relative to the root, lexically, and checks that the
    /// target exists (a dangling link is an error naming it).
    pub fn resolve(&self, rel: &str) -> io::Result<String> {
        let p = self.path(rel);
        self.note(|| Access::ReadLink(p.clone()));
        let target = std::fs::read_link(&p)?;
        let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
        let joined = if target.is_absolute() {
            // A host sysfs mounted elsewhere with absolute links: keep what is below /sys.
            let t = target
                .strip_prefix(&self.root)
                .or_else(|_| target.strip_prefix("/sys"))
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("link target {} is outside sysfs", target.display()),
                    )
                })?;
            t.to_path_buf()
        } else {
            parent.join(&target)
        };
        let mut out: Vec<&std::ffi::OsStr> = Vec::new();
        for c in joined.components() {
            match c {
                Component::Normal(n) => out.push(n),
                // The guard pops: a `..` with nothing left to pop would leave the root.
                Component::ParentDir if out.pop().is_none() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("link {} escapes the sysfs root", p.display()),
                    ));
                }
                _ => {}
            }
        }
        let resolved: PathBuf = out.iter().collect();
        if !self.root.join(&resolved).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("dangling link to {}", target.display()),
            ));
        }
        Ok(resolved.to_string_lossy().into_owned())
    }

    /// Names in a directory, sorted; `Ok(empty)` when the directory does not exist.
    pub fn list(&self, rel: &str) -> io::Result<Vec<String>> {
        let p = self.path(rel);
        self.note(|| Access::List(p.clone()));
        let rd = match std::fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .map(|n: OsString| n.to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// Largest attribute read. Kernel sysfs attributes are at most one page; fixtures and copies of
/// sysfs get some slack, and anything larger is not an attribute.
pub const MAX_ATTRIBUTE_BYTES: u64 = 64 * 1024;

/// Reads one attribute file as sysfs has them: a regular file, not a symlink (sysfs attributes
/// never are, so a link is something planted), opened without blocking (a FIFO would otherwise
/// hang discovery), and no larger than [`MAX_ATTRIBUTE_BYTES`] (a link to `/dev/zero` would
/// otherwise grow without bound).
fn read_attribute(p: &Path) -> io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", p.display()),
        )
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refuse("a symlink where sysfs has an attribute file; not followed".into())
            } else {
                e
            }
        })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let mut buf = Vec::new();
    f.take(MAX_ATTRIBUTE_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_ATTRIBUTE_BYTES {
        return Err(refuse(format!(
            "larger than {MAX_ATTRIBUTE_BYTES} bytes, not a sysfs attribute"
        )));
    }
    String::from_utf8(buf).map_err(|_| refuse("not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_links_fifos_and_huge_files_are_refused_not_followed_or_hung_on() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("devices/x");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        std::os::unix::fs::symlink("/dev/zero", dev.join("zero")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dev.join("outside")).unwrap();
        std::fs::write(dev.join("huge"), vec![b'a'; 100_000]).unwrap();
        let fifo = dev.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        let sys = Sysfs::new(d.path());
        assert_eq!(sys.read("devices/x/numa_node").unwrap(), "1");
        for (f, needle) in [
            ("zero", "symlink"),
            ("outside", "symlink"),
            ("huge", "larger than 65536"),
        ] {
            let e = sys.read(&format!("devices/x/{f}")).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(f), "{f}: {e}");
        }
        if matches!(made, Ok(s) if s.success()) {
            let e = sys.read("devices/x/fifo").unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        // Directories on the way may be links, as sysfs's are.
        std::os::unix::fs::symlink("devices/x", d.path().join("link")).unwrap();
        assert_eq!(sys.read("link/numa_node").unwrap(), "1");
    }

    #[test]
    fn resolves_relative_links_lexically_and_reports_dangling_ones() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("devices/pci0000:00/0000:00:01.0")).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            root.join("bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/gone",
            root.join("bus/pci/devices/0000:00:02.0"),
        )
        .unwrap();
        std::os::unix::fs::symlink("../../../../../../etc", root.join("bus/pci/devices/escape"))
            .unwrap();
        let s = Sysfs::recording(root);
        assert_eq!(
            s.resolve("bus/pci/devices/0000:00:01.0").unwrap(),
            "devices/pci0000:00/0000:00:01.0"
        );
        let e = s.resolve("bus/pci/devices/0000:00:02.0").unwrap_err();
        assert!(e.to_string().contains("dangling"), "{e}");
        assert!(s.resolve("bus/pci/devices/escape").is_err());
        assert_eq!(s.read_opt("nope").unwrap(), None);
        assert_eq!(s.list("bus/pci/devices").unwrap().len(), 3);
        assert_eq!(s.recorded().len(), 5);
        assert!(matches!(s.recorded()[4], Access::List(_)));
    }
}
