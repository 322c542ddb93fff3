"""Our v1beta1 device-plugin proto against upstream's k8s.io/kubelet pkg/apis/deviceplugin/v1beta1/api.proto
(downloaded through the Go module proxy; tests/protocheck.py says how they are compared)."""
from pathlib import Path

from protocheck import REPO, assert_same_shape, committed_shape, descriptor, download_kubelet, shape

OURS = REPO / "deviceplugin" / "api" / "api.proto"
UPSTREAM_REL = Path("pkg/apis/deviceplugin/v1beta1/api.proto")


def test_descriptor_matches_upstream(tmp_path):
    upstream_dir = download_kubelet(tmp_path)
    upstream = shape(descriptor(upstream_dir, upstream_dir / UPSTREAM_REL, tmp_path / "up.pb"))
    assert_same_shape(shape(descriptor(REPO, OURS, tmp_path / "ours.pb")), upstream, "v1beta1")


def test_generated_stubs_match_proto(tmp_path):
    """The committed *_pb2.py were generated from the committed api.proto (regen.sh not forgotten)."""
    from deviceplugin.api import api_pb2

    assert committed_shape(api_pb2) == shape(descriptor(REPO, OURS, tmp_path / "ours.pb"))
    assert set(api_pb2.DESCRIPTOR.services_by_name) == {"Registration", "DevicePlugin"}
