"""Device plugin against a real kube-apiserver: fractional Allocate reads the scheduler's hand-off annotation
from a pending pod bound to the node, records the allocation on the pod, and the plugin publishes GFD-style
labels, the GPU inventory and fractional mode's node-level resources on the Node.

The plugin runs as its own process (`fgpu-device-plugin --kubeconfig ...`); the kubelet is the stub from
devcluster/stub_kubelet.py (there is no kubelet in CI; docs/testing.md)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import grpc
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "deviceplugin"))

from plugin_proc import running_plugin  # noqa: E402

from devcluster.stub_kubelet import StubKubelet  # noqa: E402
from deviceplugin.api import api_pb2  # noqa: E402
from fgpu_contracts.assignment import (  # noqa: E402
    Assignment,
    ContainerAssignment,
    DeviceShare,
    dump_assignment,
)
from fgpu_contracts.keys import ALLOCATED, ASSIGNED_AT, ASSIGNMENT  # noqa: E402
from simgpu.token import verify_token  # noqa: E402

pytestmark = pytest.mark.e2e

NODE = "dp-e2e-node"
SECRET = b"e2e-secret-0123456789abcdef-xyzw"
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 2, sharing: fractional}]\nfractional: {splitCount: 4}\n"


def _wait(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def node_and_plugin(k8s):
    with running_plugin(k8s, NODE, CONFIG, SECRET) as (core, kubelet, cfg):
        yield core, kubelet, cfg


def _pod(namespace: str, name: str, gpu: str, mem: int, sm: int) -> dict:
    assignment = Assignment(node=NODE, containers=[ContainerAssignment(
        name="main", priority=0, devices=[DeviceShare(uuid=gpu, milliGpu=sm * 10, memBytes=mem, smPct=sm)])])
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            ASSIGNMENT: dump_assignment(assignment), ASSIGNED_AT: "2026-01-01T00:00:00Z"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox",
                                                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def _allocate(kubelet: StubKubelet, device_id: str):
    stub = kubelet.plugin("nvidia.com/gpu")
    return stub.Allocate(api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=[device_id])]), timeout=10).container_responses[0]


def test_fractional_allocate_from_pod_annotation(node_and_plugin, namespace):
    core, kubelet, cfg = node_and_plugin
    gpu = cfg.gpu_devices(NODE)[1].uuid
    core.create_namespaced_pod(namespace, _pod(namespace, "infer", gpu, 6 << 30, 30))
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=20)

    env = dict(_allocate(kubelet, slots[0].ID).envs)
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["CUDA_TASK_PRIORITY"] == "0"
    assert env["NODE_NAME"] == NODE
    grant = verify_token(SECRET, env["FGPU_CONTEXT_TOKEN"])
    assert (grant.pod_namespace, grant.pod_name, grant.container) == (namespace, "infer", "main")

    recorded = _wait(lambda: core.read_namespaced_pod("infer", namespace).metadata.annotations.get(ALLOCATED))
    assert json.loads(recorded) == ["main"]

    # the one assignment is used up: the next Allocate finds none and says so
    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet, slots[1].ID)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "fgpu.io/assignment" in err.value.details()


def test_labels_inventory_and_node_resources_published(node_and_plugin):
    core, _kubelet, cfg = node_and_plugin

    def published():
        node = core.read_node(NODE)
        labels = node.metadata.labels or {}
        ok = labels.get("fgpu.io/emulated") == "true" and "fgpu.io/gpu-inventory" in (node.metadata.annotations or {})
        return node if ok and "nvidia.com/gpumem" in (node.status.capacity or {}) else None

    node = _wait(published, timeout=20)
    assert node is not None, "labels / inventory / capacity not published"
    labels = node.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"  # GFD's value: NVML's name
    assert labels["nvidia.com/gpu.count"] == "2"
    inv = json.loads(node.metadata.annotations["fgpu.io/gpu-inventory"])
    assert [g["uuid"] for g in inv["gpus"]] == [g.uuid for g in cfg.gpu_devices(NODE)]
    assert all(g["healthy"] for g in inv["gpus"])
    spec = cfg.gpu_devices(NODE)[0].spec
    assert node.status.capacity["nvidia.com/gpumem"] == str(2 * (spec.mem_bytes >> 20))
    assert node.status.capacity["nvidia.com/gpucores"] == "200"
    assert inv["nodeResources"] == {"nvidia.com/gpumem": 2 * (spec.mem_bytes >> 20), "nvidia.com/gpucores": 200}


def test_two_containers_of_one_pod_both_recorded(node_and_plugin, namespace):
    core, kubelet, cfg = node_and_plugin
    gpu = cfg.gpu_devices(NODE)[0].uuid
    assignment = Assignment(node=NODE, containers=[
        ContainerAssignment(name=n, devices=[DeviceShare(uuid=gpu, memBytes=1 << 30, smPct=10)]) for n in ("a", "b")])
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "two", "annotations": {ASSIGNMENT: dump_assignment(assignment),
                                                    ASSIGNED_AT: "2026-01-01T00:00:00Z"}},
        "spec": {"nodeName": NODE, "containers": [{"name": n, "image": "busybox"} for n in ("a", "b")]}})
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=20)
    # back to back: the second Allocate comes before the watch has seen the first one's record
    first = dict(_allocate(kubelet, slots[0].ID).envs)
    second = dict(_allocate(kubelet, slots[1].ID).envs)
    assert verify_token(SECRET, first["FGPU_CONTEXT_TOKEN"]).container == "a"
    assert verify_token(SECRET, second["FGPU_CONTEXT_TOKEN"]).container == "b"
    recorded = _wait(lambda: json.loads(core.read_namespaced_pod("two", namespace).metadata.annotations.get(
        ALLOCATED, "[]")) == ["a", "b"])
    assert recorded, core.read_namespaced_pod("two", namespace).metadata.annotations


def test_allocate_follows_the_order_pods_reach_the_node_and_skips_a_terminating_one(node_and_plugin, namespace):
    """The kubelet admits pods in the order they reach its node; the plugin must match that order, not the
    assignment's time (binds run concurrently and land out of decision order), and never a pod being deleted."""
    core, kubelet, cfg = node_and_plugin
    gpu = cfg.gpu_devices(NODE)[0].uuid
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=20)
    first = _pod(namespace, "reached-first", gpu, 2 << 30, 20)
    first["metadata"]["annotations"][ASSIGNED_AT] = "2026-01-01T00:00:05Z"  # decided later, bound earlier
    core.create_namespaced_pod(namespace, first)
    core.create_namespaced_pod(namespace, _pod(namespace, "reached-second", gpu, 3 << 30, 30))
    doomed = _pod(namespace, "deleted-before-admission", gpu, 4 << 30, 40)
    core.create_namespaced_pod(namespace, doomed)
    core.delete_namespaced_pod("deleted-before-admission", namespace, grace_period_seconds=30)
    core.create_namespaced_pod(namespace, _pod(namespace, "reached-last", gpu, 5 << 30, 50))
    time.sleep(1.0)  # as on a node, where the kubelet too learns of the deletion from its watch before acting

    got = [verify_token(SECRET, dict(_allocate(kubelet, slots[i].ID).envs)["FGPU_CONTEXT_TOKEN"]).pod_name
           for i in range(3)]
    assert got == ["reached-first", "reached-second", "reached-last"]
