"""Our kubelet protos against upstream's, downloaded through the Go module proxy (needs network; part of CI).

`go mod download -json k8s.io/kubelet@v0.<minor>.<patch>` (the version hack/testbin.sh pins for the control
plane, or $FGPU_KUBELET_VERSION), GOMODCACHE under $FGPU_CACHE (default ~/.cache/fgpu) shared with testbin.
Both protos are compiled with grpc_tools.protoc to descriptor sets and compared by `shape`: package,
messages, fields (name, number, type, label, message type, proto3 optional), nested map entries, services
and methods.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[1]


def kubelet_version() -> str:
    if os.environ.get("FGPU_KUBELET_VERSION"):
        return os.environ["FGPU_KUBELET_VERSION"]
    text = (REPO / "hack" / "testbin.sh").read_text()
    match = re.search(r"^K8S_VERSION=v1\.(\d+\.\d+)", text, re.M)
    assert match, "hack/testbin.sh does not pin K8S_VERSION=v1.X.Y"
    return f"v0.{match.group(1)}"


def download_module(module: str, version: str, workdir: Path) -> Path:
    """The module's directory in the Go module cache (downloaded through the proxy if not there yet)."""
    go = shutil.which("go")
    assert go, f"the Go toolchain is needed to download {module} through the module proxy"
    cache = Path(os.environ.get("FGPU_CACHE", Path.home() / ".cache" / "fgpu"))
    env = dict(os.environ, GOMODCACHE=str(cache / "go" / "pkg" / "mod"), GOFLAGS="-modcacherw", GO111MODULE="on")
    proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"go mod download {module}@{version} failed: {proc.stdout}{proc.stderr}"
    return Path(json.loads(proc.stdout)["Dir"])


def download_kubelet(workdir: Path) -> Path:
    return download_module("k8s.io/kubelet", kubelet_version(), workdir)


def descriptor(include: Path, proto: Path, out: Path) -> descriptor_pb2.FileDescriptorProto:
    well_known = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{include}", f"-I{well_known}", f"--descriptor_set_out={out}",
                      str(proto.relative_to(include))])
    assert rc == 0, f"protoc failed on {proto}"
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return fds.file[-1]


def shape(fd: descriptor_pb2.FileDescriptorProto) -> dict:
    def message(m):
        return {
            "fields": {f.name: (f.number, f.type, f.label, f.type_name, f.proto3_optional) for f in m.field},
            "nested": {n.name: message(n) for n in m.nested_type},
            "map_entry": m.options.map_entry,
        }

    return {
        "package": fd.package,
        "syntax": fd.syntax,
        "messages": {m.name: message(m) for m in fd.message_type},
        "services": {
            s.name: {m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in s.method}
            for s in fd.service
        },
    }


def assert_same_shape(ours: dict, upstream: dict, package: str) -> None:
    assert ours["package"] == upstream["package"] == package
    assert ours["services"] == upstream["services"]
    assert set(ours["messages"]) == set(upstream["messages"])
    for name, body in upstream["messages"].items():
        assert ours["messages"][name] == body, f"message {name} differs from upstream"


def committed_shape(module) -> dict:
    """The shape of a generated *_pb2 module's descriptor (what the committed stubs were built from)."""
    committed = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(committed)
    return shape(committed)
