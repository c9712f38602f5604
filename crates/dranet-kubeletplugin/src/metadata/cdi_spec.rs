//! The CDI spec of a claim's request: one device that bind-mounts the request's file.

use std::path::PathBuf;

use dranet_util::temp_path;

use super::layout::MetadataLayout;
use crate::cdi::{CDI_VERSION, CdiDevice, CdiSpec, ContainerEdits, Mount, write_atomically};
use crate::error::{Error, Result};

/// The spec of request `request` of claim `namespace/name` (UID `uid`; `pod_claim_name` when
/// generated from a template, see [`MetadataLayout::container_path`]).
pub(crate) fn spec(
    layout: &MetadataLayout,
    namespace: &str,
    name: &str,
    pod_claim_name: Option<&str>,
    uid: &str,
    request: &str,
) -> CdiSpec {
    let mount = Mount {
        host_path: layout
            .file(namespace, name, request)
            .to_string_lossy()
            .into_owned(),
        container_path: layout.container_path(name, pod_claim_name, request),
        options: vec!["ro".into(), "bind".into()],
    };
    CdiSpec {
        cdi_version: CDI_VERSION.into(),
        kind: layout.cdi_kind(),
        devices: vec![CdiDevice::new(
            layout.cdi_device_name(uid, request),
            ContainerEdits::default().mount(mount),
        )],
    }
}

/// Writes the spec of a claim's request (atomically: a runtime never reads half a spec).
pub(crate) fn write(
    layout: &MetadataLayout,
    namespace: &str,
    name: &str,
    pod_claim_name: Option<&str>,
    uid: &str,
    request: &str,
) -> Result<()> {
    let spec = spec(layout, namespace, name, pod_claim_name, uid, request);
    let bytes = serde_json::to_vec_pretty(&spec).map_err(|e| {
        Error::Config(format!(
            "device metadata CDI spec of claim {namespace}/{name}: {e}"
        ))
    })?;
    write_atomically(layout.cdi_dir(), &layout.spec_path(uid, request), &bytes)
}

/// The spec files of this layout in the CDI directory, with the claim UID each is for.
pub(crate) fn list(layout: &MetadataLayout) -> Result<Vec<(PathBuf, String)>> {
    let dir = layout.cdi_dir();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read CDI directory", dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| Error::io("read CDI directory", dir, e))?;
        let file_name = e.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        // An interrupted write leaves `.<name>.tmp` (see dranet_util::temp_path).
        let spec_name = file_name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .unwrap_or(file_name);
        if let Some((uid, _)) = layout.parse_spec_name(spec_name) {
            out.push((e.path(), uid));
        }
    }
    Ok(out)
}

/// Removes every spec of claim `uid`, and what an interrupted write of one left.
pub(crate) fn remove_claim(layout: &MetadataLayout, uid: &str) -> Result<()> {
    for (path, of) in list(layout)? {
        if of == uid {
            remove(&path)?;
        }
    }
    Ok(())
}

/// Removes one spec file and its temporary file; a missing one is fine.
pub(crate) fn remove(path: &std::path::Path) -> Result<()> {
    for p in [temp_path(path), path.to_path_buf()] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove device metadata CDI spec", &p, e)),
        }
    }
    Ok(())
}
