#!/usr/bin/env python3
"""Writes a one-layer OCI image archive holding the host's static busybox, so the containerd
integration test needs no registry. Usage: mkimage.py OUT.tar REF [CMD...]"""
import gzip, hashlib, io, json, subprocess, sys, tarfile

out, ref, cmd = sys.argv[1], sys.argv[2], sys.argv[3:] or ["/bin/sh"]
BUSYBOX = "/bin/busybox"


def entry(tar, name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname, info.size = kind, mode, 0, link, len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


def digest(blob):
    return "sha256:" + hashlib.sha256(blob).hexdigest()


raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as layer:
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "root"):
        entry(layer, d, tarfile.DIRTYPE, mode=0o755)
    entry(layer, "bin/busybox", data=open(BUSYBOX, "rb").read(), mode=0o755)
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            entry(layer, "bin/" + applet, tarfile.SYMTYPE, link="busybox")
    entry(layer, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n")
    entry(layer, "etc/group", data=b"root:x:0:\n")
layer_tar = raw.getvalue()
layer_gz = gzip.compress(layer_tar, mtime=0)

config = json.dumps({
    "architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/bin"], "Cmd": cmd, "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
}, sort_keys=True).encode()
manifest = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(layer_gz), "size": len(layer_gz)}],
}, sort_keys=True).encode()
index = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
    }],
}).encode()
with tarfile.open(out, "w") as archive:
    entry(archive, "oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}')
    entry(archive, "index.json", data=index)
    for blob in (config, manifest, layer_gz):
        entry(archive, "blobs/sha256/" + digest(blob)[7:], data=blob)
