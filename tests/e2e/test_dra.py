"""fgpu-dra's objects against a real 1.37 control plane (no kubelet: the kubelet plugin is driven in process).

- The apiserver's own validation accepts our DeviceClasses and the ResourceSlices of several node configs
  (counter sets in their own slices, partitionable MIG devices, consumable capacity, taints); publishing the
  same again writes nothing, a health change publishes a new pool generation with the taint.
- kube-scheduler's DRA plugin, unchanged, allocates claims on a KWOK node from those slices: two claims for
  "8Gi and 30%" share one GPU's shared device (consumedCapacity and shareIDs filled), a MIG claim takes a
  placement on the other GPU, and a claim that fits nowhere (a whole GPU, another 50% share) stays Pending
  with kube-scheduler's own reason: the counters keep whole, shared and MIG devices apart.
- `fgpu-dra`, run as a process for the KWOK node, published those slices; its kubelet plugin, driven by a stub
  kubelet, prepares the claims kube-scheduler allocated (reading them from the apiserver), and after a
  restart answers them the same way.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dra_support import SECRET, StubKubelet
from fgpu_operator.inspect.claims import claim_violations
from plugin_proc import stop_process
from polling import wait_for

from deviceplugin.dra.classes import device_classes
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.kube import GROUP, VERSION, SlicePublisher
from deviceplugin.dra.slices import resource_slices
from deviceplugin.dra.state import cdi_spec_path
from deviceplugin.labels import Health
from fgpu_contracts import dra as names
from simgpu import env
from simgpu.nodeconfig import parse_node_config
from simgpu.token import verify_token

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
CONFIGS = {
    "mixed": """
version: v1
migStrategy: mixed
gpus:
  - {model: A100-80GB, count: 2, sharing: fractional}
  - {model: T4}
  - {model: H100, mig: {layout: [4g.40gb, 3g.40gb]}}
fractional: {resources: {gpu: fgpu.io/vgpu}}
""",
    "big": """
version: v1
gpus:
  - {model: H100, count: 10, sharing: fractional}
fractional: {resources: {gpu: fgpu.io/vgpu}}
""",
    "two": """
version: v1
gpus:
  - {model: A100-80GB, count: 2, sharing: fractional}
""",
}


def _objects(api):
    from kubernetes import client

    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def classes(k8s):
    with k8s.api() as api:
        objs = _objects(api)
        for cls in device_classes():
            objs.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", cls)
    yield
    with k8s.api() as api:
        objs = _objects(api)
        for cls in device_classes():
            objs.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", cls["metadata"]["name"])


def _publish(api, node: str, config: str, health=None) -> tuple[SlicePublisher, int]:
    devices = node_devices(parse_node_config(yaml.safe_load(config)), node)
    publisher = SlicePublisher(api, node)
    generation = publisher.publish(lambda g: resource_slices(node, devices, health or {}, "default", g))
    return publisher, generation


def test_apiserver_accepts_our_classes_and_slices(k8s, classes):
    with k8s.api() as api:
        for key, config in CONFIGS.items():
            node = f"dra-validate-{key}"
            publisher, first = _publish(api, node, config)
            try:
                stored = publisher.existing()
                devices = node_devices(parse_node_config(yaml.safe_load(config)), node)
                assert sum(len(s["spec"].get("devices", [])) for s in stored.values()) == len(devices.devices)
                assert _publish(api, node, config)[1] == first  # nothing changed: nothing written
                sick = {devices.devices[0].gpu.uuid: Health(False, 79)}
                second = _publish(api, node, config, sick)[1]
                assert second == first + 1
                assert _publish(api, node, config, sick)[1] == second  # the stamped taint is no change
                stored = publisher.existing()
                assert {s["spec"]["pool"]["generation"] for s in stored.values()} == {second}
                tainted = [d for s in stored.values() for d in s["spec"].get("devices", []) if d.get("taints")]
                assert tainted and tainted[0]["taints"][0]["key"] == names.TAINT_UNHEALTHY
            finally:
                publisher.withdraw()
            assert publisher.existing() == {}


def test_apiserver_accepts_the_example_claims(k8s, classes):
    """deploy/dra's ResourceClaimTemplates (the capacity requests' keys, the CEL selector) pass validation."""
    with k8s.api() as api:
        objs = _objects(api)
        templates = [d for f in ("claim-share.yaml", "claim-forms.yaml")
                     for d in yaml.safe_load_all((REPO / "deploy" / "dra" / f).read_text())
                     if d["kind"] == "ResourceClaimTemplate"]
        assert len(templates) == 5
        for template in templates:
            objs.create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaimtemplates", template,
                                                 dry_run="All")


def _claim(name: str, cls: str, capacity: dict | None = None) -> dict:
    exactly = {"deviceClassName": cls, **({"capacity": {"requests": capacity}} if capacity else {})}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _pod(name: str, claim: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"operator": "Exists"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]}}


SHARE_8G_30 = {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}


@contextlib.contextmanager
def running_driver(k8s, node: str, config: str, workdir: Path) -> Iterator[Path]:
    """`fgpu-dra` as a real process for `node`, its sockets, state and CDI specs under `workdir`; yields the
    registration socket; stops it (SIGTERM) and prints its log's tail."""
    (workdir / "secret").write_bytes(SECRET)
    cfg = workdir / "node.yaml"
    cfg.write_text(config + f"tokenSecretFile: {workdir}/secret\n")
    log_path = workdir / "driver.log"
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deviceplugin.dra.cli", "--config", str(cfg), "--node-name", node,
             "--kubeconfig", str(k8s.kubeconfig), "--state-dir", str(workdir / "state"),
             "--cdi-dir", str(workdir / "cdi"), "--registry-dir", str(workdir / "reg"),
             "--plugins-dir", str(workdir / "plugins"), "--daemon-socket", "/run/fgpu/daemon.sock"],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield workdir / "reg" / f"{names.DRIVER}-reg.sock"
    finally:
        stop_process(proc)
        print(log_path.read_text()[-3000:])


def _registered(socket: Path) -> StubKubelet | None:
    if not socket.exists():
        return None
    kubelet = StubKubelet(str(socket))
    try:
        kubelet.register()
    except Exception:
        kubelet.close()
        return None
    return kubelet


def test_kube_scheduler_allocates_from_our_slices_and_the_driver_prepares(
        k8s, classes, kube_scheduler, make_kwok_node, namespace):
    from kubernetes import client

    node = "dra-kwok-0"
    make_kwok_node(node, {})
    workdir = Path(tempfile.mkdtemp(prefix="drae", dir="/tmp"))  # short: unix socket paths
    with k8s.api() as api, running_driver(k8s, node, CONFIGS["two"], workdir) as socket:
        objs, core = _objects(api), client.CoreV1Api(api)
        publisher = SlicePublisher(api, node)
        try:
            wait_for(lambda: len(publisher.existing()) == 2, 60, "fgpu-dra's two ResourceSlices published")
            wanted = [("c1", names.CLASS_SHARE, SHARE_8G_30), ("c2", names.CLASS_SHARE, SHARE_8G_30),
                      ("mig", names.mig_class("3g.40gb"), None),
                      ("c3", names.CLASS_SHARE, {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "50"}),
                      ("whole", names.CLASS_GPU, None)]
            for claim, cls, capacity in wanted:  # one at a time: each sees the ones before it allocated
                objs.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                     _claim(claim, cls, capacity))
                core.create_namespaced_pod(namespace, _pod(f"p-{claim}", claim, node))
                if claim in ("c1", "c2", "mig"):
                    wait_for(lambda c=claim: core.read_namespaced_pod(f"p-{c}", namespace).spec.node_name,
                             60, f"pod p-{claim} bound")

            def pending_reason(pod: str):
                conds = core.read_namespaced_pod(pod, namespace).status.conditions or []
                return next((c.message for c in conds if c.type == "PodScheduled" and c.status == "False"
                             and c.reason == "Unschedulable"), None)

            reasons = {c: wait_for(lambda c=c: pending_reason(f"p-{c}"), 60, f"pod p-{c} Unschedulable")
                       for c in ("c3", "whole")}  # 40% left on gpu-0's shares; gpu-1 holds a MIG instance
            got = {c: objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", c)
                   for c, _, _ in wanted}
            results = {c: (got[c].get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
                       for c in got}
            assert [r["device"] for r in results["c1"]] == ["gpu-0-shared"]
            assert [r["device"] for r in results["c2"]] == ["gpu-0-shared"]
            for c in ("c1", "c2"):
                assert results[c][0]["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
            assert results["c1"][0]["shareID"] != results["c2"][0]["shareID"]
            # first fit: gpu-0's MIG placements are blocked by its shares, so the first free one is on gpu-1
            assert [r["device"] for r in results["mig"]] == ["gpu-1-mig-3g-40gb-0"]
            listed = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
            assert claim_violations(list(publisher.existing().values()), listed) == []  # fgpu inspect check's
            for c, message in reasons.items():  # kube-scheduler's own words
                assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims."), message
                assert not results[c]

            # the kubelet plugin prepares what kube-scheduler allocated, reading the claims from the API
            kubelet = wait_for(lambda: _registered(socket), 30, "fgpu-dra's registration socket answering")
            refs = [(namespace, c, got[c]["metadata"]["uid"]) for c in ("c1", "c2", "mig")]
            try:
                out = kubelet.prepare(*refs).claims
            finally:
                kubelet.close()
            assert all(out[uid].error == "" for _, _, uid in refs), {u: out[u].error for _, _, u in refs}
            with open(cdi_spec_path(str(workdir / "cdi"), refs[0][2])) as fh:
                edits = yaml.safe_load(fh)["devices"][0]["containerEdits"]["env"]
            grant = verify_token(SECRET, dict(e.split("=", 1) for e in edits)[env.CONTEXT_TOKEN])
            assert (grant.mem_limit_bytes, grant.sm_limit_pct, grant.pod_name) == (8 * GIB, 30, "p-c1")
        finally:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    # a restarted driver answers the prepared claims the same way (its checkpoint), and withdraws nothing
    with running_driver(k8s, node, CONFIGS["two"], workdir) as socket:
        kubelet = wait_for(lambda: _registered(socket), 30, "fgpu-dra answering again")
        try:
            again = kubelet.prepare(*refs).claims
        finally:
            kubelet.close()
        assert {u: list(again[u].devices) for _, _, u in refs} == {u: list(out[u].devices) for _, _, u in refs}
    with k8s.api() as api:
        SlicePublisher(api, node).withdraw()
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_classic_nvidia_gpu_pod_gets_whole_gpus_through_dra(
        k8s, classes, kube_scheduler, make_kwok_node, namespace):
    """KEP-5004 with deploy/dra/extended-resource.yaml: `nvidia.com/gpu: 1` on a node with no device plugin is
    a claim kube-scheduler writes and allocates from fgpu-dra's slices; fgpu-dra prepares it."""
    from kubernetes import client

    node = "dra-kwok-ext"
    make_kwok_node(node, {})
    [extended] = [d for d in yaml.safe_load_all((REPO / "deploy" / "dra" / "extended-resource.yaml").read_text()) if d]
    workdir = Path(tempfile.mkdtemp(prefix="drax", dir="/tmp"))
    with k8s.api() as api, running_driver(k8s, node, CONFIGS["two"], workdir) as socket:
        objs, core = _objects(api), client.CoreV1Api(api)
        objs.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", extended)
        try:
            wait_for(lambda: len(SlicePublisher(api, node).existing()) == 2, 60, "fgpu-dra's slices published")

            def classic(name: str, gpus: int) -> dict:
                return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                 "tolerations": [{"operator": "Exists"}],
                                 "containers": [{"name": "main", "image": "busybox",
                                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}

            core.create_namespaced_pod(namespace, classic("one", 1))
            wait_for(lambda: core.read_namespaced_pod("one", namespace).spec.node_name, 60, "pod one bound")
            status = json.loads(core.read_namespaced_pod("one", namespace, _preload_content=False).data)["status"]
            claim_name = status["extendedResourceClaimStatus"]["resourceClaimName"]
            claim = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", claim_name)
            assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
            core.create_namespaced_pod(namespace, classic("two", 2))  # only gpu-1 is left

            def pending(pod: str):
                conds = core.read_namespaced_pod(pod, namespace).status.conditions or []
                return next((c.message for c in conds if c.type == "PodScheduled" and c.status == "False"), None)

            assert "0/1 nodes are available" in wait_for(lambda: pending("two"), 60, "pod two Unschedulable")
            kubelet = wait_for(lambda: _registered(socket), 30, "fgpu-dra's registration socket answering")
            try:
                out = kubelet.prepare((namespace, claim_name, claim["metadata"]["uid"])).claims
            finally:
                kubelet.close()
            assert out[claim["metadata"]["uid"]].error == ""
            with open(cdi_spec_path(str(workdir / "cdi"), claim["metadata"]["uid"])) as fh:
                envs = dict(e.split("=", 1) for e in yaml.safe_load(fh)["devices"][0]["containerEdits"]["env"])
            gpu0 = node_devices(parse_node_config(yaml.safe_load(CONFIGS["two"])), node).by_name["gpu-0"]
            assert envs[env.NVIDIA_VISIBLE_DEVICES] == gpu0.uuid and env.memory_limit_var(0) not in envs
        finally:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            objs.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", extended["metadata"]["name"])
            SlicePublisher(api, node).withdraw()
    shutil.rmtree(workdir, ignore_errors=True)
