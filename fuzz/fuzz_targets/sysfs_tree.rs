//! Discovery on a sysfs tree whose attribute files were replaced by what a hostile or broken
//! host can hold: links to /dev/zero and outside the root, FIFOs, huge files, garbage, dangling
//! links, directories. Errors and warnings are fine; panics, hangs and unbounded reads are not.
#![no_main]

use std::path::{Path, PathBuf};

use dranet_core::Discover;
use libfuzzer_sys::fuzz_target;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            files(&p, out);
        } else if t.is_file() {
            out.push(p);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(tmp) = tempfile::tempdir() else { return };
    if dranet_discovery::fixture::azure_nd_gb300_v6(tmp.path()).is_err() {
        return;
    }
    let sys = tmp.path().join("sys");
    let mut all = Vec::new();
    files(&sys.join("devices"), &mut all);
    all.sort();
    if all.is_empty() {
        return;
    }
    for pair in data.chunks(2) {
        let (Some(&which), Some(&what)) = (pair.first(), pair.get(1)) else {
            break;
        };
        let target = &all[usize::from(which) % all.len()];
        let _ = std::fs::remove_file(target);
        let _ = match what % 7 {
            0 => std::os::unix::fs::symlink("/dev/zero", target),
            1 => std::os::unix::fs::symlink("/etc/hostname", target),
            2 => std::fs::write(target, vec![b'7'; 1 << 20]),
            3 => std::fs::write(target, [0xff, 0xfe, 0, b'\n']),
            4 => std::os::unix::fs::symlink("does/not/exist", target),
            5 => std::fs::create_dir(target),
            _ => {
                let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
                    .unwrap_or_default();
                // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
                let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            }
        };
    }
    let d = dranet_discovery::Discovery::new(
        dranet_discovery::Sysfs::new(&sys),
        dranet_discovery::SysfsEnumerator,
        dranet_discovery::NoLinks,
        Default::default(),
    );
    let _ = d.discover();
});
