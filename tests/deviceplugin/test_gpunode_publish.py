"""The plugin publishes its inventory as a GPUNode (beside the node annotation): created once, owned by the Node,
then its spec replaced whole on each publish (the operator's status left alone); without the CRD installed it
says so once and carries on; other API errors reach the publish loop, which retries."""
import logging
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from deviceplugin.kube import JSON_PATCH, KubeNode
from deviceplugin.labels import Health, inventory
from deviceplugin.resources import discover
from fgpu_contracts.inventory import GPUNode, gpunode
from fgpu_contracts.keys import CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL
from simgpu.nodeconfig import parse_node_config

CFG = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "count": 2, "sharing": "fractional"}]})
GPUS = CFG.gpu_devices("n1")
WHERE = (CRD_GROUP, CRD_VERSION, GPUNODE_PLURAL)


def inv(health=None):
    return inventory(CFG, "n1", GPUS, discover(CFG, "n1"), health or {})


class _Raw:
    """What a `_preload_content=False` call returns: the plugin must drain it and give the connection back."""

    def __init__(self):
        self.read_called = self.released = False

    def read(self):
        self.read_called = True

    def release_conn(self):
        self.released = True


class FakeCustomObjects:
    """Cluster-scoped custom objects of one kind; `crd=False`: the CRD is not installed (every call 404s)."""

    def __init__(self, crd=True, fail=None):
        self.crd, self.fail = crd, fail
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self.responses: list[_Raw] = []

    def _answer(self, where, name):
        assert where == WHERE
        if self.fail is not None:
            raise ApiException(status=self.fail, reason="Forbidden")
        if not self.crd or name is not None and name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        self.responses.append(_Raw())
        return self.responses[-1]

    def patch_cluster_custom_object(self, group, version, plural, name, body, *, _content_type=None,
                                    _preload_content=True):
        self.calls.append(("patch", name, _content_type))
        raw = self._answer((group, version, plural), name)
        [op] = body
        assert (op["op"], op["path"], _content_type, _preload_content) == ("replace", "/spec", JSON_PATCH, False)
        self.objects[name]["spec"] = op["value"]
        return raw

    def create_cluster_custom_object(self, group, version, plural, body, *, _preload_content=True):
        self.calls.append(("create", body["metadata"]["name"], None))
        assert not _preload_content
        raw = self._answer((group, version, plural), None)
        self.objects[body["metadata"]["name"]] = body
        return raw


def kube_node(custom):
    node = KubeNode(object(), "n1")
    node.core = SimpleNamespace(read_node=lambda name: SimpleNamespace(metadata=SimpleNamespace(uid="uid-n1")))
    node.custom = custom
    return node


def test_first_publish_creates_a_gpunode_owned_by_the_node():
    custom = FakeCustomObjects()
    kube_node(custom).publish_gpunode(inv())
    assert [c[0] for c in custom.calls] == ["patch", "create"]
    body = custom.objects["n1"]
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                                    "uid": "uid-n1"}]
    assert body["spec"] == gpunode(inv()).model_dump(mode="json", by_alias=True)["spec"] and "status" not in body
    assert GPUNode.model_validate(body).spec == gpunode(inv()).spec
    assert all(r.read_called and r.released for r in custom.responses)


def test_later_publishes_replace_the_spec_and_leave_the_status_alone():
    custom = FakeCustomObjects()
    node = kube_node(custom)
    node.publish_gpunode(inv())
    custom.objects["n1"]["status"] = {"allocations": [], "conditions": []}
    sick = inv({GPUS[1].uuid: Health(False, 48)})
    node.publish_gpunode(sick)
    assert custom.calls[-1] == ("patch", "n1", JSON_PATCH)
    assert custom.objects["n1"]["spec"] == gpunode(sick).model_dump(mode="json", by_alias=True)["spec"]
    assert custom.objects["n1"]["spec"]["gpus"][1]["xid"] == 48
    assert custom.objects["n1"]["spec"]["summary"]["healthy"] == 1
    assert custom.objects["n1"]["status"] == {"allocations": [], "conditions": []}


def test_without_the_crd_it_says_so_once_and_goes_on(caplog):
    custom = FakeCustomObjects(crd=False)
    node = kube_node(custom)
    with caplog.at_level(logging.WARNING, logger="fgpu.deviceplugin.kube"):
        for _ in range(3):
            node.publish_gpunode(inv())
    [message] = [r.getMessage() for r in caplog.records]
    assert "no GPUNode CRD" in message and "deploy/crds/gpunode.yaml" in message
    assert custom.objects == {}


def test_other_api_errors_reach_the_caller():
    with pytest.raises(ApiException) as err:
        kube_node(FakeCustomObjects(fail=403)).publish_gpunode(inv())
    assert err.value.status == 403
