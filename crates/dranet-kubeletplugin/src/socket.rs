//! Unix sockets for the kubelet: replacing a stale socket at start, removing ours at shutdown.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

use crate::error::{Error, Result};

/// Removes the socket file when dropped, unless another process has replaced it meanwhile.
#[derive(Debug)]
pub(crate) struct SocketGuard {
    path: PathBuf,
    ident: Option<Ident>,
}

/// Device, inode and change time: inode numbers are reused as soon as a file is removed, so the
/// change time tells our socket apart from a newer one that got the same inode.
type Ident = (u64, u64, i64, i64);

fn ident(path: &Path) -> Option<Ident> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        // Only remove the inode we created: a newer instance may already serve on this path.
        if self.ident.is_some() && ident(&self.path) == self.ident {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds a unix socket at `path`, creating the directory. A socket file nobody answers on is left
/// from a crash and is replaced; one a live process answers on is an error, and so is a path that
/// is not a socket (we never delete someone's regular file).
/// Binds a listening unix socket created with mode 0600 (only the kubelet, as root, connects).
/// The mode is set on the unbound socket, before `bind` creates the file, so there is no moment
/// at which the file exists with the umask's mode, and no process-wide umask change.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    use socket2::{Domain, SockAddr, Socket, Type};
    use std::os::fd::OwnedFd;
    let sock = Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)?;
    // fchmod on the socket's fd sets the mode bind gives the file (masked by the umask, which
    // can only remove bits).
    let as_file = std::fs::File::from(OwnedFd::from(sock));
    as_file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let sock = Socket::from(OwnedFd::from(as_file));
    sock.bind(&SockAddr::unix(path)?)?;
    sock.listen(1024)?;
    sock.set_nonblocking(true)?;
    UnixListener::from_std(std::os::unix::net::UnixListener::from(OwnedFd::from(sock)))
}

pub(crate) fn bind(path: &Path) -> Result<(UnixListener, SocketGuard)> {
    // sockaddr_un holds 108 bytes including the terminating NUL; the OS error for a longer path
    // ("invalid argument") would not say what is wrong.
    if path.as_os_str().len() > 107 {
        return Err(Error::Config(format!(
            "socket path {} is {} bytes, longer than the 107 a unix socket path may have; \
             use a shorter kubelet directory or driver name",
            path.display(),
            path.as_os_str().len()
        )));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create socket directory", dir, e))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(Error::SocketInUse {
                    path: path.to_path_buf(),
                });
            }
            tracing::info!(path = %path.display(), "replacing stale socket");
            std::fs::remove_file(path).map_err(|e| Error::io("remove stale socket", path, e))?;
        }
        Ok(_) => {
            return Err(Error::Config(format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("inspect socket path", path, e)),
    }
    let listener = bind_private(path).map_err(|e| Error::io("bind socket", path, e))?;
    Ok((
        listener,
        SocketGuard {
            path: path.to_path_buf(),
            ident: ident(path),
        },
    ))
}

/// 8-4-4-4-12 hex digits, the form of Kubernetes UIDs: a rolling-update instance's pod UID, which
/// goes into its socket names.
pub(crate) fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Rolling updates: removes the sockets of this driver's instances that died without cleaning up
/// (their pod UID is in the name, so a new instance never binds over them). A socket something
/// still answers on is an instance that runs, and stays.
pub(crate) fn remove_dead_instances(registry_dir: &Path, plugin_dir: &Path, driver: &str) {
    let ours = |dir: &Path, name: &str| -> bool {
        if dir == registry_dir {
            // `<driver>-reg.sock` or `<driver>-<pod uid>-reg.sock`; another driver's name may
            // start with ours, so the middle must be exactly a UID.
            name.strip_prefix(driver)
                .and_then(|r| r.strip_suffix("-reg.sock"))
                .is_some_and(|mid| mid.is_empty() || mid.strip_prefix('-').is_some_and(is_uuid))
        } else {
            // The plugin directory is this driver's alone.
            name == "dra.sock"
                || name
                    .strip_prefix("dra-")
                    .and_then(|r| r.strip_suffix(".sock"))
                    .is_some_and(is_uuid)
        }
    };
    for dir in [registry_dir, plugin_dir] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
            if !is_socket || !ours(dir, name) {
                continue;
            }
            if std::os::unix::net::UnixStream::connect(&path).is_err() {
                tracing::info!(path = %path.display(), "removing the socket of an instance that is gone");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_socket_is_replaced_live_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b.sock");
        // A stale socket: bound, then its listener closed without removing the file.
        drop(
            std::os::unix::net::UnixListener::bind({
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                &path
            })
            .unwrap(),
        );
        assert!(path.exists());
        let (live, guard) = bind(&path).unwrap();
        let err = bind(&path).unwrap_err();
        assert!(matches!(err, Error::SocketInUse { .. }), "{err}");
        drop(live);
        drop(guard);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn dead_instances_sockets_go_live_ones_and_other_drivers_stay() {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("plugins_registry");
        let plug = dir.path().join("plugins/dra.net");
        std::fs::create_dir_all(&reg).unwrap();
        std::fs::create_dir_all(&plug).unwrap();
        let dead_uid = "0a6f3c1e-5a1b-4c2d-8e3f-123456789abc";
        let live_uid = "1b7f4d2f-6b2c-4d3e-9f40-23456789abcd";
        let stale = |p: PathBuf| {
            drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
            p
        };
        let dead = [
            stale(reg.join(format!("dra.net-{dead_uid}-reg.sock"))),
            stale(reg.join("dra.net-reg.sock")),
            stale(plug.join(format!("dra-{dead_uid}.sock"))),
        ];
        let other_driver = stale(reg.join("dra.net-extra-reg.sock"));
        let _live = std::os::unix::net::UnixListener::bind(
            reg.join(format!("dra.net-{live_uid}-reg.sock")),
        )
        .unwrap();
        remove_dead_instances(&reg, &plug, "dra.net");
        for p in &dead {
            assert!(!p.exists(), "{} not removed", p.display());
        }
        assert!(other_driver.exists(), "another driver's socket was removed");
        assert!(reg.join(format!("dra.net-{live_uid}-reg.sock")).exists());
    }

    #[tokio::test]
    async fn too_long_a_path_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d".repeat(120)).join("dra.sock");
        let err = bind(&path).unwrap_err();
        assert!(err.to_string().contains("longer than the 107"), "{err}");
    }

    #[tokio::test]
    async fn regular_file_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sock");
        std::fs::write(&path, "keep me").unwrap();
        let err = bind(&path).unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    }

    #[tokio::test]
    async fn guard_leaves_a_newer_socket_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sock");
        let (l1, g1) = bind(&path).unwrap();
        drop(l1);
        // A second instance took over the path.
        let (_l2, _g2) = bind(&path).unwrap();
        drop(g1);
        assert!(path.exists());
    }
}
