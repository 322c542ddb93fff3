"""`fgpu inspect` / `kubectl-fgpu inspect` as a user runs them, against the real apiserver: a KWOK node that
publishes a GPU inventory, pods bound to it with hand-off assignments, and a pending pod whose PodScheduled
condition and FailedScheduling event say why."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from inventories import fractional_inventory
from kubernetes import client

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare, dump_assignment

pytestmark = pytest.mark.e2e
GIB = 1 << 30
WHY = "0/2 nodes are available: 1 Insufficient GPU memory, 1 node(s) had untolerated taint {gpu: bad}."


def run_cli(script: str, *args: str) -> subprocess.CompletedProcess:
    """The installed console script (fgpu or kubectl-fgpu) in a fresh process, KUBECONFIG from the fixture."""
    return subprocess.run([str(Path(sys.executable).with_name(script)), "inspect", *args],
                          capture_output=True, text=True, timeout=120)


def bound_pod(node: str, name: str, annotation: str) -> dict:
    return {"metadata": {"name": name, "annotations": {keys.ASSIGNMENT: annotation}},
            "spec": {"nodeName": node, "schedulerName": keys.SCHEDULER_NAME,
                     "containers": [{"name": "main", "image": "busybox"}]}}


def share(node: str, milli: int, mem_gib: int) -> str:
    device = DeviceShare(uuid="GPU-insp-0", milli_gpu=milli, mem_bytes=mem_gib * GIB, sm_pct=milli // 10)
    return dump_assignment(Assignment(node=node, containers=[ContainerAssignment(name="main", devices=[device])]))


@pytest.fixture
def core(k8s):
    with k8s.api() as api:
        yield client.CoreV1Api(api)


def gpu_node(core, make_kwok_node, name: str) -> str:
    """A Ready KWOK node whose device plugin (here: the test) published two H100s, the second one failed."""
    make_kwok_node(name, {"nvidia.com/gpu": 20})
    core.patch_node(name, {"metadata": {"annotations": {keys.INVENTORY: fractional_inventory(name, 2, uuid=lambda i: f"GPU-insp-{i}", unhealthy={1: 79})}}})
    return name


def test_inspect_json_counts_the_bound_pods_on_the_nodes_gpus(core, namespace, kubeconfig_env, make_kwok_node):
    node_name = gpu_node(core, make_kwok_node, "inspect-gpu-1")
    for name, milli, mem in (("train", 500, 40), ("infer", 250, 20)):
        core.create_namespaced_pod(namespace, bound_pod(node_name, name, share(node_name, milli, mem)))
    core.create_namespaced_pod(namespace, bound_pod(node_name, "broken", "{not json"))

    out = run_cli("fgpu", "-o", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    [node] = [n for n in report["nodes"] if n["name"] == node_name]
    gpu0, gpu1 = node["gpus"]
    assert gpu0["allocated"] == {"milliGpu": 750, "memBytes": 60 * GIB, "smPct": 75}
    assert [(s["namespace"], s["pod"]) for s in gpu0["shares"]] == [(namespace, "infer"), (namespace, "train")]
    assert (gpu1["healthy"], gpu1["xid"], gpu1["shares"]) == (False, 79, [])
    assert node["pods"] == [f"{namespace}/infer", f"{namespace}/train"] and node["ready"] is True
    assert {"object": f"pod {namespace}/broken",
            "message": "fgpu.io/assignment: Invalid JSON: key must be a string at line 1 column 2"} \
        in report["problems"]

    table = run_cli("kubectl-fgpu", "node", node_name)  # what `kubectl fgpu inspect node NAME` runs
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[1][:9] == [node_name, "0", "H100", "-", "fractional", "ok", "0.75/1", "60.0/80.0", "75%"]
    assert rows[2][:6] == [node_name, "1", "H100", "-", "fractional", "XID"]
    assert f"pod {namespace}/broken: fgpu.io/assignment: Invalid JSON" in table.stdout


def test_inspect_pod_says_where_a_pod_went_or_why_not(core, namespace, kubeconfig_env, make_kwok_node):
    node_name = gpu_node(core, make_kwok_node, "inspect-gpu-2")
    core.create_namespaced_pod(namespace, bound_pod(node_name, "train", share(node_name, 500, 40)))
    pending = core.create_namespaced_pod(namespace, {
        "metadata": {"name": "big"},
        "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main", "image": "busybox"}]}})
    core.patch_namespaced_pod_status("big", namespace, {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": WHY}]}})
    core.create_namespaced_event(namespace, {
        "metadata": {"name": "big.fgpu"}, "reason": "FailedScheduling", "type": "Warning", "message": WHY,
        "count": 3, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:30Z",
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "big", "uid": pending.metadata.uid},
        "source": {"component": keys.SCHEDULER_NAME}})

    out = run_cli("fgpu", "pod", "big", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"pod {namespace}/big: not scheduled (phase Pending, scheduler fgpu-scheduler)",
        f"why: PodScheduled=False, Unschedulable: {WHY}",
        f"last FailedScheduling event (3x, last seen 2026-01-01T00:00:30Z): {WHY}"]

    placed = run_cli("fgpu", "-o", "json", "pod", "train", "-n", namespace)
    assert placed.returncode == 0, placed.stderr
    report = json.loads(placed.stdout)
    assert (report["state"], report["node"]) == ("scheduled", node_name)
    assert [(d["gpuIndex"], d["uuid"], d["usage"]["milliGpu"]) for d in report["devices"]] == [(0, "GPU-insp-0", 500)]


def test_an_unknown_pod_is_one_line_and_exit_2(namespace, kubeconfig_env):
    out = run_cli("kubectl-fgpu", "pod", "nope", "-n", namespace)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"fgpu inspect: error: pod {namespace}/nope not found\n"
