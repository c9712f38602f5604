#!/usr/bin/env python3
"""Builds the dranet image offline as an OCI archive, with no base image and no registry.

The image holds the binary at /usr/bin/dranet and the shared libraries it links against (read
from `ldd`), nothing else: the same as deploy/image/Dockerfile's. Import it with
`ctr -n k8s.io images import ARCHIVE` (containerd) and refer to it by NAME with
imagePullPolicy: Never.

    deploy/image/oci-archive.py target/release/dranet dranet.tar --name localhost/dranet:0.1.0
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile


def libraries(binary):
    """Absolute paths of the libraries `binary` loads (and the dynamic loader)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"oci-archive: ldd {binary}: {out.stderr.strip() or out.stdout.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts:
            path = parts[parts.index("=>") + 1]
            if path.startswith("/"):
                libs.append(path)
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def add_file(tar, src, dest, mode):
    info = tarfile.TarInfo(dest.lstrip("/"))
    info.size = os.path.getsize(src)
    info.mode = mode
    info.mtime = 0
    with open(src, "rb") as f:
        tar.addfile(info, f)


def add_dirs(tar, path, seen):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in seen:
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = 0
            tar.addfile(info)


def blob(out, data, media_type):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    info.mtime = 0
    out.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("binary", help="the dranet binary (a release build)")
    p.add_argument("output", help="the OCI archive to write (.tar)")
    p.add_argument("--name", default="localhost/dranet:latest", help="image name and tag")
    p.add_argument("--strip", action="store_true", help="strip the binary's symbols first")
    p.add_argument("--pci-ids", help="a pci.ids file to include at /usr/share/misc/pci.ids")
    a = p.parse_args()
    if not os.path.isfile(a.binary):
        sys.exit(f"oci-archive: {a.binary}: no such file")
    if ":" not in a.name.rsplit("/", 1)[-1]:
        sys.exit(f"oci-archive: --name {a.name}: give a tag, e.g. {a.name}:0.1.0")

    with tempfile.TemporaryDirectory() as tmp:
        binary = a.binary
        if a.strip:
            binary = os.path.join(tmp, "dranet")
            shutil.copy(a.binary, binary)
            subprocess.run(["strip", binary], check=True)
        layer_buf = io.BytesIO()
        with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
            seen = set()
            files = [(binary, "/usr/bin/dranet", 0o755)]
            files += [(lib, lib, 0o755) for lib in libraries(a.binary)]
            if a.pci_ids:
                files.append((a.pci_ids, "/usr/share/misc/pci.ids", 0o644))
            for src, dest, mode in files:
                add_dirs(layer, dest, seen)
                add_file(layer, src, dest, mode)
            # A writable /tmp is not needed: the daemon writes only to its mounted state dir.
        layer_bytes = layer_buf.getvalue()
        diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": ["/usr/bin/dranet"],
                "Cmd": ["run"],
                "Env": ["PATH=/usr/bin"],
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
        with tarfile.open(a.output, mode="w") as out:
            layer_desc = blob(out, layer_bytes, "application/vnd.oci.image.layer.v1.tar")
            config_desc = blob(
                out, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"
            )
            manifest = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc,
                "layers": [layer_desc],
            }
            manifest_desc = blob(
                out, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
            )
            manifest_desc["annotations"] = {
                "io.containerd.image.name": a.name,
                "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[1],
            }
            manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
            index = {"schemaVersion": 2, "manifests": [manifest_desc]}
            for name, data in [
                ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                ("index.json", json.dumps(index).encode()),
            ]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                out.addfile(info, io.BytesIO(data))
    print(f"{a.output}: {a.name}, {len(layer_bytes) // 1024} KiB layer")


if __name__ == "__main__":
    main()
