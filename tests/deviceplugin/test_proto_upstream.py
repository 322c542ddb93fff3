"""Our v1beta1 proto against upstream's, downloaded through the Go module proxy (needs network; part of CI).

`go mod download -json k8s.io/kubelet@v0.<minor>.<patch>` (the version hack/testbin.sh pins for the control
plane, or $FGPU_KUBELET_VERSION), GOMODCACHE under $FGPU_CACHE (default ~/.cache/fgpu) shared with testbin.
Both protos are compiled with grpc_tools.protoc to descriptor sets and compared: package, messages, fields
(name, number, type, label, message type), nested map entries, services and methods.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "deviceplugin" / "api" / "api.proto"
UPSTREAM_REL = Path("pkg/apis/deviceplugin/v1beta1/api.proto")


def _kubelet_version() -> str:
    if os.environ.get("FGPU_KUBELET_VERSION"):
        return os.environ["FGPU_KUBELET_VERSION"]
    text = (REPO / "hack" / "testbin.sh").read_text()
    match = re.search(r"^K8S_VERSION=v1\.(\d+\.\d+)", text, re.M)
    assert match, "hack/testbin.sh does not pin K8S_VERSION=v1.X.Y"
    return f"v0.{match.group(1)}"


def _download_upstream(tmp_path: Path) -> Path:
    go = shutil.which("go")
    assert go, "the Go toolchain is needed to download k8s.io/kubelet through the module proxy"
    cache = Path(os.environ.get("FGPU_CACHE", Path.home() / ".cache" / "fgpu"))
    env = dict(os.environ, GOMODCACHE=str(cache / "go" / "pkg" / "mod"), GOFLAGS="-modcacherw", GO111MODULE="on")
    version = _kubelet_version()
    proc = subprocess.run([go, "mod", "download", "-json", f"k8s.io/kubelet@{version}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"go mod download k8s.io/kubelet@{version} failed: {proc.stdout}{proc.stderr}"
    return Path(json.loads(proc.stdout)["Dir"])


def _descriptor(include: Path, proto: Path, out: Path) -> descriptor_pb2.FileDescriptorProto:
    well_known = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{include}", f"-I{well_known}", f"--descriptor_set_out={out}",
                      str(proto.relative_to(include))])
    assert rc == 0, f"protoc failed on {proto}"
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return fds.file[-1]


def _shape(fd: descriptor_pb2.FileDescriptorProto) -> dict:
    def message(m):
        return {
            "fields": {f.name: (f.number, f.type, f.label, f.type_name) for f in m.field},
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


def test_descriptor_matches_upstream(tmp_path):
    upstream_dir = _download_upstream(tmp_path)
    upstream = _shape(_descriptor(upstream_dir, upstream_dir / UPSTREAM_REL, tmp_path / "up.pb"))
    ours = _shape(_descriptor(REPO, OURS, tmp_path / "ours.pb"))
    assert ours["package"] == upstream["package"] == "v1beta1"
    assert ours["services"] == upstream["services"]
    assert set(ours["messages"]) == set(upstream["messages"])
    for name, shape in upstream["messages"].items():
        assert ours["messages"][name] == shape, f"message {name} differs from upstream"


def test_generated_stubs_match_proto(tmp_path):
    """The committed *_pb2.py were generated from the committed api.proto (regen.sh not forgotten)."""
    from deviceplugin.api import api_pb2

    fresh = _descriptor(REPO, OURS, tmp_path / "ours.pb")
    committed = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(committed)
    assert _shape(committed) == _shape(fresh)
    assert set(api_pb2.DESCRIPTOR.services_by_name) == {"Registration", "DevicePlugin"}
