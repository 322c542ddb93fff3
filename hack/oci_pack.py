#!/usr/bin/env python3
"""Pack one static executable as a single-layer OCI image layout tarball, without Docker or a registry.

    hack/oci_pack.py BINARY OUT.tar --name IMAGE[:TAG] [--name ...] [--arch amd64]

The image's root holds the executable as /<basename> (its entrypoint) and the empty directories a runtime
mounts over. `ctr -n k8s.io images import OUT.tar` then registers it under every --name (the index carries
one `io.containerd.image.name` entry per name, all pointing at the same manifest). Byte-for-byte
reproducible: fixed mtimes and owners, so a rerun changes nothing. Used by hack/node-setup.sh.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

EMPTY_DIRS = ("dev", "etc", "proc", "sys", "tmp", "var", "var/run")


def _add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    info.mode = mode
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _tar(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in entries:
            _add(tar, name, data, mode)
    return buf.getvalue()


def _blob(data: bytes) -> tuple[str, dict]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return digest, {"digest": digest, "size": len(data)}


def _json(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def pack(binary: Path, out: Path, names: list[str], arch: str) -> str:
    """Write the OCI layout tarball; returns the manifest digest."""
    entry = binary.name
    layer = _tar([(d, None, 0o755) for d in EMPTY_DIRS] + [(entry, binary.read_bytes(), 0o755)])
    layer_digest, layer_desc = _blob(layer)
    config = _json({
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": [f"/{entry}"], "Env": ["PATH=/"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},  # uncompressed: the diff ID is the digest
        "history": [{"created_by": "hack/oci_pack.py", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    })
    config_digest, config_desc = _blob(config)
    manifest = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
    })
    manifest_digest, manifest_desc = _blob(manifest)
    platform = {"architecture": arch, "os": "linux"}
    index = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc,
                       "platform": platform,
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": name.rpartition(":")[2]}}
                      for name in names],
    })
    files = [("oci-layout", _json({"imageLayoutVersion": "1.0.0"})), ("index.json", index)]
    files += [(f"blobs/sha256/{d.split(':')[1]}", data)
              for d, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest))]
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(_tar([("blobs", None, 0o755), ("blobs/sha256", None, 0o755)]
                         + [(name, data, 0o644) for name, data in files]))
    tmp.replace(out)
    return manifest_digest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name", action="append", required=True, help="image reference, e.g. fgpu.local/probe:v1")
    p.add_argument("--arch", default="amd64", help="GOARCH of the binary (default amd64)")
    args = p.parse_args(argv)
    if not args.binary.is_file():
        print(f"oci_pack: {args.binary}: no such file", file=sys.stderr)
        return 2
    print(pack(args.binary, args.out, args.name, args.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
