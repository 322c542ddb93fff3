"""The operator as a real process for e2e tests: KWOK GPU nodes carrying an inventory, pods asking for a share,
`fgpu operator` started (devcluster.fgpu, failing the test with its log) and stopped. Shared by every operator e2e
test and by bench/scheduler.py."""
from __future__ import annotations

import pytest
from inventories import fractional_inventory

from devcluster import fgpu
from devcluster.fgpu import install_crds, stop, wait_webhook_live  # noqa: F401 - the e2e tests' helpers
from devcluster.kubeplane import ComponentError
from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30
FGPU = fgpu.FGPU


def gpu_node(make_kwok_node, k8s, name: str, model: str = "H100-SXM5-80GB", count: int = 2, mem: int = 80 * GIB):
    from kubernetes import client

    make_kwok_node(name, {"nvidia.com/gpu": 10 * count})
    with k8s.api() as api:
        client.CoreV1Api(api).patch_node(name, {"metadata": {"annotations": {keys.INVENTORY: fractional_inventory(
            name, count, model=model, mem_bytes=mem)}}})


def share_pod(name: str, milli: int, mem_gib: int = 0, exclude_uuids: tuple[str, ...] = (),
              priority: str = "low") -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli,
                                                  mem_bytes=mem_gib * GIB or None)], exclude_uuids=exclude_uuids,
                     priority=priority)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}}}]}}


def start_operator(k8s, tmp_path, *extra: str, leader_elect: bool = False, log_name: str = "operator.log",
                   policy: str = "binpack", ready: str = "fgpu scheduler started", program: str = fgpu.FGPU):
    """`fgpu operator` against the test cluster, its output in tmp_path/log_name; returns once the log shows
    `ready` (the model is synced), or fails the test with the log's tail."""
    try:
        return fgpu.start_operator(k8s.kubeconfig, tmp_path / log_name, *extra, leader_elect=leader_elect,
                                   policy=policy, ready=ready, program=program)
    except ComponentError as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)
