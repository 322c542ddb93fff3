"""Realistic Node and Pod dicts (as the API returns them) for `fgpu inspect`'s pure builder: inventories and
assignments are made with the contract models, so they are what the device plugin and scheduler write."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare, dump_assignment
from fgpu_contracts.inventory import GpuInfo, Inventory, MigDevice, dump_inventory

GIB = 1 << 30


def h100(index: int, uuid: str, **kw) -> GpuInfo:
    fields = dict(index=index, uuid=uuid, model="H100-SXM5-80GB", short_name="H100", mem_bytes=80 * GIB, sms=132,
                  sharing="fractional", replicas=10)
    return GpuInfo(**{**fields, **kw})


def a100_mig(index: int, uuid: str) -> GpuInfo:
    """An A100-40GB split 4g.20gb (slices 0-3) + 3g.20gb (slices 4-7), as NVIDIA's mixed strategy shows it."""
    return GpuInfo(index=index, uuid=uuid, model="A100-SXM4-40GB", short_name="A100-40GB", mem_bytes=40 * GIB,
                   sms=108, sharing="exclusive", replicas=1, mig=(
                       MigDevice(uuid="MIG-4g-0", profile="4g.20gb", start=0, mem_bytes=21066814587, sms=56),
                       MigDevice(uuid="MIG-3g-4", profile="3g.20gb", start=4, mem_bytes=21066814587, sms=42)))


def node(name: str, *gpus: GpuInfo, mig_strategy: str = "none", ready: bool = True, annotation: str | None = None,
         unschedulable: bool = False) -> dict:
    inv = Inventory(node=name, mig_strategy=mig_strategy, memory_quota="hard", time_dilation=1.0,
                    resources={"nvidia.com/gpu": 10 * len(gpus)}, node_resources={}, gpus=gpus)
    text = annotation if annotation is not None else dump_inventory(inv)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {keys.INVENTORY: text} if gpus or annotation else {}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def assignment(node_name: str, *containers: tuple[str, int, list[dict]]) -> str:
    """containers: (name, priority, [DeviceShare fields])."""
    return dump_assignment(Assignment(node=node_name, containers=[
        ContainerAssignment(name=n, priority=p, devices=[DeviceShare(**d) for d in devs])
        for n, p, devs in containers]))


def pod(name: str, namespace: str = "default", node_name: str | None = None, assigned: str | None = None,
        phase: str = "Running", conditions: tuple[dict, ...] = (), annotations: dict | None = None,
        uid: str | None = None) -> dict:
    notes = dict(annotations or {})
    if assigned is not None:
        notes[keys.ASSIGNMENT] = assigned
    spec: dict = {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main", "image": "busybox"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "annotations": notes},
            "spec": spec, "status": {"phase": phase, "conditions": list(conditions)}}


def unschedulable(message: str) -> dict:
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def cluster() -> tuple[list[dict], list[dict]]:
    """Two H100s shared fractionally (one has fallen off the bus: XID 79), an A100 in MIG mode, a CPU node;
    pods holding shares, a finished one, a pending one, and one with a malformed assignment."""
    nodes = [
        node("gpu-a", h100(0, "GPU-a0"), h100(1, "GPU-a1", healthy=False, xid=79)),
        node("gpu-m", a100_mig(0, "GPU-m0"), mig_strategy="mixed"),
        {"metadata": {"name": "cpu-1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    ]
    pods = [
        pod("train-a", node_name="gpu-a", assigned=assignment("gpu-a", ("main", 0, [
            {"uuid": "GPU-a0", "milli_gpu": 500, "mem_bytes": 40 * GIB, "sm_pct": 50}]))),
        pod("infer-b", "ml", node_name="gpu-a", assigned=assignment("gpu-a", ("main", 1, [
            {"uuid": "GPU-a0", "milli_gpu": 250, "mem_bytes": 20 * GIB, "sm_pct": 25}]))),
        pod("done", node_name="gpu-a", phase="Succeeded", assigned=assignment("gpu-a", ("main", 1, [
            {"uuid": "GPU-a0", "milli_gpu": 250}]))),
        pod("mig-job", "ml", node_name="gpu-m", assigned=assignment("gpu-m", ("main", 1, [
            {"uuid": "MIG-3g-4", "mig_profile": "3g.20gb"}]))),
        pod("web", node_name="cpu-1"),  # bound, no GPU assignment: holds nothing
        pod("big", phase="Pending", conditions=(unschedulable("0/3 nodes are available: 1 node(s) didn't have GPUs, "
                                             "2 Insufficient GPU memory."),)),
        pod("broken", node_name="gpu-a", assigned="{not json"),
    ]
    return nodes, pods
