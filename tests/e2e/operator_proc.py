"""The operator as a real process for e2e tests: KWOK GPU nodes carrying an inventory, pods asking for a share,
`fgpu operator` started and stopped. Shared by every operator e2e test and by bench/scheduler.py."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inventories import fractional_inventory

from devcluster.kubeplane import die_with_parent
from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30
FGPU = str(Path(sys.executable).with_name("fgpu"))


def gpu_node(make_kwok_node, k8s, name: str, model: str = "H100-SXM5-80GB", count: int = 2, mem: int = 80 * GIB):
    from kubernetes import client

    make_kwok_node(name, {"nvidia.com/gpu": 10 * count})
    with k8s.api() as api:
        client.CoreV1Api(api).patch_node(name, {"metadata": {"annotations": {keys.INVENTORY: fractional_inventory(
            name, count, model=model, mem_bytes=mem)}}})


def share_pod(name: str, milli: int, mem_gib: int = 0) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli,
                                                  mem_bytes=mem_gib * GIB or None)])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}}}]}}


def start_operator(k8s, tmp_path, *extra: str, leader_elect: bool = False, log_name: str = "operator.log",
                   policy: str = "binpack", ready: str = "fgpu scheduler started"):
    """`fgpu operator` against the test cluster, its output in tmp_path/log_name; returns once the log shows
    `ready` (the model is synced), or fails the test with the log's tail."""
    log = tmp_path / log_name
    env = {**os.environ, "KUBECONFIG": str(k8s.kubeconfig)}
    argv = [FGPU, "operator", "--policy", policy, *([] if leader_elect else ["--no-leader-elect"]), *extra]
    proc = subprocess.Popen(argv, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            preexec_fn=die_with_parent)  # a killed pytest leaves no operator behind
    proc.log_path = log
    deadline = time.monotonic() + 60
    while ready not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"operator did not start:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        time.sleep(0.2)
    return proc


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def install_crds(k8s) -> None:
    """Apply deploy/crds/*.yaml (idempotent) and wait until each kind is served."""
    import yaml
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    from polling import wait_for

    with k8s.api() as api:
        ext = client.ApiextensionsV1Api(api)
        for path in sorted(CRDS.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            try:
                ext.create_custom_resource_definition(crd)
            except ApiException as e:
                if e.status != 409:
                    raise
            group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
            version = crd["spec"]["versions"][0]["name"]
            custom = client.CustomObjectsApi(api)

            def served(custom=custom, group=group, version=version, plural=plural):
                try:
                    custom.list_cluster_custom_object(group, version, plural)
                except ApiException as e:
                    if e.status == 404:
                        return False
                    raise
                return True

            wait_for(served, 30, f"{plural}.{group} to be served")


def wait_webhook_live(core, namespace: str, timeout: float = 60.0) -> None:
    """The apiserver calls a webhook once its own informer has seen the configuration, a moment after the
    configuration exists: until then pods are admitted unmutated. Dry-run a GPU pod until it comes back routed
    to fgpu (dry-run calls webhooks without side effects and creates nothing)."""
    from kubernetes.client.rest import ApiException
    from polling import wait_for

    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "fgpu-webhook-probe", "annotations": {keys.FGPU_FRACTION: "0.1"}},
             "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}

    def routed() -> bool:
        try:
            pod = core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as e:  # the webhook's server may answer a moment after its configuration exists
            if e.status == 400 and "fgpu" in (e.body or ""):
                raise
            return False
        return pod.spec.scheduler_name == keys.SCHEDULER_NAME

    wait_for(routed, timeout, "the apiserver to call fgpu's mutating webhook")
