"""The operator as a real process for e2e tests: KWOK GPU nodes carrying an inventory, pods asking for a share,
`fgpu operator` started (devcluster.fgpu, failing the test with its log) and stopped. Shared by every operator e2e
test and by bench/scheduler.py."""
from __future__ import annotations

import pytest
from inventories import fractional_inventory
from polling import wait_for

from devcluster import fgpu
from devcluster.fgpu import install_crds, stop, wait_webhook_live  # noqa: F401 - the e2e tests' helpers
from devcluster.kubeplane import ComponentError, free_port
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


def operator_with_own_webhook(k8s, core, namespace: str, tmp_path, *extra: str):
    """`fgpu operator` serving its webhook on 127.0.0.1 with the configuration it writes itself (trusting the
    test's admin, as the chart trusts the plugin's account); returns once the apiserver calls it."""
    from kubernetes import client

    proc = start_operator(k8s, tmp_path, "--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1",
                          "--manage-webhook-config", "--trusted-user", "admin", *extra)
    try:
        with k8s.api() as api:
            reg = client.AdmissionregistrationV1Api(api)
            wait_for(lambda: reg.list_mutating_webhook_configuration().items, what="webhook configuration")
        wait_webhook_live(core, namespace)
    except BaseException:
        stop(proc)
        raise
    return proc


def create_admitted(core, namespace: str, pod: dict):
    """Create `pod` through the webhook (retrying while its server is not answering yet; a denial fails)."""
    from kubernetes.client.rest import ApiException

    def create():
        try:
            return core.create_namespaced_pod(namespace, pod)
        except ApiException as e:  # the webhook may answer a moment after its configuration exists
            if e.status == 400 and "fgpu" in (e.body or ""):
                raise
            return None

    return wait_for(create, what=f"pod {pod['metadata']['name']} admitted")
