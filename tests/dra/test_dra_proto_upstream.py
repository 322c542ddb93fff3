"""Our DRA v1 and plugin-registration v1 protos against upstream's k8s.io/kubelet
pkg/apis/dra/v1/api.proto and pkg/apis/pluginregistration/v1/api.proto (downloaded through the Go module
proxy; tests/protocheck.py says how they are compared)."""
import re
from pathlib import Path

import pytest
from protocheck import REPO, assert_same_shape, committed_shape, descriptor, download_kubelet, shape

API = REPO / "deviceplugin" / "dra" / "api"
PROTOS = [  # ours, upstream's path in k8s.io/kubelet, package
    (API / "dra.proto", Path("pkg/apis/dra/v1/api.proto"), "k8s.io.kubelet.pkg.apis.dra.v1"),
    (API / "pluginregistration.proto", Path("pkg/apis/pluginregistration/v1/api.proto"), "pluginregistration"),
]


@pytest.fixture(scope="module")
def kubelet_dir(tmp_path_factory) -> Path:
    return download_kubelet(tmp_path_factory.mktemp("gomod"))


@pytest.mark.parametrize(("ours", "upstream_rel", "package"), PROTOS, ids=["dra", "pluginregistration"])
def test_descriptor_matches_upstream(kubelet_dir, tmp_path, ours, upstream_rel, package):
    upstream = shape(descriptor(kubelet_dir, kubelet_dir / upstream_rel, tmp_path / "up.pb"))
    assert_same_shape(shape(descriptor(REPO, ours, tmp_path / "ours.pb")), upstream, package)


def test_service_names_the_kubelet_looks_for(kubelet_dir):
    """supported_versions carries "v1.DRAPlugin" and PluginInfo.type "DRAPlugin": upstream's constants."""
    from deviceplugin.dra.plugin import DRA_SERVICE, PLUGIN_TYPE

    dra = (kubelet_dir / "pkg/apis/dra/v1/types.go").read_text()
    reg = (kubelet_dir / "pkg/apis/pluginregistration/v1/constants.go").read_text()
    assert re.search(rf'DRAPluginService\s*=\s*"{re.escape(DRA_SERVICE)}"', dra)
    assert re.search(rf'\bDRAPlugin\s*=\s*"{re.escape(PLUGIN_TYPE)}"', reg)


def test_generated_stubs_match_protos(tmp_path):
    """The committed *_pb2.py were generated from the committed protos (regen.sh not forgotten)."""
    from deviceplugin.dra.api import dra_pb2, pluginregistration_pb2

    for module, (proto, _, _) in zip((dra_pb2, pluginregistration_pb2), PROTOS, strict=True):
        assert committed_shape(module) == shape(descriptor(REPO, proto, tmp_path / f"{proto.stem}.pb"))
    assert set(dra_pb2.DESCRIPTOR.services_by_name) == {"DRAPlugin"}
    assert set(pluginregistration_pb2.DESCRIPTOR.services_by_name) == {"Registration"}
