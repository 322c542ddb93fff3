"""Build `fgpu inspect`'s reports from Node, Pod, Event and GPUNode objects as the API returns them (raw JSON
dicts). Pure: no client, no clock, so every case is a unit test on plain dicts.

What a node has comes from its `fgpu.io/gpu-inventory` annotation (or, without one, its GPUNode's spec); what
is allocated comes from the `fgpu.io/assignment` of the pods that hold a share: bound, not Succeeded/Failed.
A malformed inventory is an InputError naming the node (the report would be wrong about all its GPUs); a
malformed annotation on a pod is one Problem in the report, and the rest still adds up.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, DeviceShare, parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.inventory import GpuInfo, Inventory, MigChange, MigDevice, node_inventory
from fgpu_contracts.request import GpuRequest, dump_request
from fgpu_contracts.wire import parse_json

from ..objects import condition, parse_time, pod_key
from .model import (
    ClusterReport,
    GpuView,
    MigChangeView,
    MigView,
    NodeView,
    PendingPod,
    PodDevice,
    PodReport,
    Problem,
    SchedulingEvent,
    Share,
    Summary,
    Usage,
)

FINISHED = ("Succeeded", "Failed")


# --- reading raw objects -------------------------------------------------------------------------------------
def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _annotations(obj: dict) -> dict:
    return _meta(obj).get("annotations") or {}


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _bound_to(pod: dict) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def _scheduler(pod: dict) -> str:
    return (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"


def _inventory(node: dict, gpunode: dict | None) -> tuple[Inventory, str] | None:
    """The node's inventory and where it came from; None for a node without GPUs fgpu knows of."""
    return node_inventory(_meta(node).get("name", ""), _annotations(node), (gpunode or {}).get("spec"))


def _assignment(pod: dict) -> Assignment | None:
    raw = _annotations(pod).get(keys.ASSIGNMENT)
    return parse_assignment(raw) if raw else None


def _request(pod: dict) -> GpuRequest | None:
    raw = _annotations(pod).get(keys.REQUEST)
    return parse_json(GpuRequest, raw, keys.REQUEST) if raw else None


# --- devices and shares --------------------------------------------------------------------------------------
@dataclass
class _Device:
    """A GPU or one of its MIG instances, and the shares found on it."""

    gpu: GpuInfo
    mig: MigDevice | None = None
    shares: list[Share] = field(default_factory=list)

    @property
    def mem_bytes(self) -> int:
        return (self.mig or self.gpu).mem_bytes

    def usage(self, share: DeviceShare) -> Usage:
        """What a share takes of this device, unset limits meaning the whole device."""
        return Usage(share.milli_gpu, share.mem_bytes or self.mem_bytes, share.sm_pct or 100)


def _devices(inv: Inventory) -> dict[str, _Device]:
    out: dict[str, _Device] = {}
    for gpu in inv.gpus:
        out[gpu.uuid] = _Device(gpu)
        out.update((m.uuid, _Device(gpu, m)) for m in gpu.mig)
    return out


def _located(assignment: Assignment, devices: dict[str, _Device]) -> Iterator[tuple[str, int, DeviceShare,
                                                                                     _Device | None]]:
    """(container, priority, share, device or None if the node does not list it) for each assigned device."""
    for c in assignment.containers:
        for d in c.devices:
            yield c.name, c.priority, d, devices.get(d.uuid)


def _priority(value: int) -> str:
    return "high" if value == 0 else "low"  # HAMi's convention, which the assignment keeps


def _total(shares: Iterable[Share]) -> Usage:
    return sum((s.usage for s in shares), Usage())


def _on_gpu(usage: Usage, mig: MigDevice, gpu: GpuInfo) -> Usage:
    """A MIG instance's usage as a part of its GPU: compute and SMs weighted by the instance's SMs."""
    weight = mig.sms / gpu.sms
    return Usage(round(usage.milli_gpu * weight), usage.mem_bytes, round(usage.sm_pct * weight))


def _mig_change(doc: dict | None) -> MigChangeView | None:
    """A GPUNode status.migChanges entry as the report shows it (None if absent or not one)."""
    try:
        c = MigChange.model_validate(doc) if doc else None
    except ValueError:
        return None
    if c is None:
        return None
    return MigChangeView(id=c.id, phase=c.phase, started=c.started_time, pods=c.pods, message=c.message,
                         layout=tuple(f"{p.profile}@{p.start}" for p in sorted(c.layout, key=lambda p: p.start)))


def _gpu_view(gpu: GpuInfo, devices: dict[str, _Device], change: dict | None = None) -> GpuView:
    own = tuple(sorted(devices[gpu.uuid].shares, key=_share_order))
    allocated, migs = _total(own), []
    for m in sorted(gpu.mig, key=lambda m: m.start):
        shares = tuple(sorted(devices[m.uuid].shares, key=_share_order))
        migs.append(MigView(uuid=m.uuid, profile=m.profile, start=m.start, mem_bytes=m.mem_bytes, sms=m.sms,
                            healthy=m.healthy, allocated=_total(shares), shares=shares))
        allocated += _on_gpu(migs[-1].allocated, m, gpu)
    return GpuView(index=gpu.index, uuid=gpu.uuid, model=gpu.model, short_name=gpu.short_name,
                   mem_bytes=gpu.mem_bytes, sms=gpu.sms, sharing=gpu.sharing, replicas=gpu.replicas,
                   healthy=gpu.healthy, xid=gpu.xid, allocated=allocated, shares=own, mig=tuple(migs),
                   mig_dynamic=gpu.mig_dynamic, mig_change=_mig_change(change))


def _share_order(share: Share) -> tuple[str, str, str]:
    return share.namespace, share.pod, share.container


def _node_view(node: dict, inv: Inventory, source: str, devices: dict[str, _Device],
               gpunode: dict | None = None) -> NodeView:
    changes = {c.get("gpu"): c for c in ((gpunode or {}).get("status") or {}).get("migChanges") or ()
               if isinstance(c, dict)}
    gpus = tuple(_gpu_view(g, devices, changes.get(g.uuid)) for g in sorted(inv.gpus, key=lambda g: g.index))
    pods = {f"{s.namespace}/{s.pod}" for d in devices.values() for s in d.shares}
    return NodeView(
        name=_meta(node).get("name", ""), ready=condition(node, "Ready").get("status") == "True",
        schedulable=not (node.get("spec") or {}).get("unschedulable"), source=source,
        mig_strategy=inv.mig_strategy, capacity=sum((_capacity(g) for g in inv.gpus), Usage()),
        allocated=sum((g.allocated for g in gpus), Usage()), pods=tuple(sorted(pods)), gpus=gpus)


def _capacity(gpu: GpuInfo) -> Usage:
    return Usage(1000, gpu.mem_bytes, 100)


# --- the cluster -------------------------------------------------------------------------------------------
def _is_fgpu_pending(pod: dict) -> bool:
    """Not bound, not finished, and fgpu's to place (its scheduler name, or a request the webhook wrote)."""
    asks = _scheduler(pod) == keys.SCHEDULER_NAME or keys.REQUEST in _annotations(pod)
    return asks and not _bound_to(pod) and _phase(pod) not in FINISHED


def _why_not(pod: dict) -> tuple[str, str]:
    """(reason, message) of the pod's PodScheduled=False condition: the scheduler's word on why it waits."""
    cond = condition(pod, "PodScheduled")
    return (cond.get("reason", ""), cond.get("message", "")) if cond.get("status") == "False" else ("", "")


def _pending(pod: dict) -> PendingPod:
    reason, message = _why_not(pod)
    return PendingPod(namespace=_meta(pod).get("namespace", ""), name=_meta(pod).get("name", ""), reason=reason,
                      message=message)


def _place_shares(pod: dict, nodes: dict[str, dict[str, _Device]]) -> list[Problem]:
    """Add the shares of a pod that holds GPUs to its node's devices; what cannot be read is a Problem."""
    where = f"pod {pod_key(pod)}"
    node = _bound_to(pod)
    try:
        assignment = _assignment(pod)
    except InputError as e:
        return [Problem(where, str(e))]
    if assignment is None:
        return []
    problems = []
    if assignment.node != node:
        problems.append(Problem(where, f"{keys.ASSIGNMENT} names node {assignment.node}, the pod is bound to "
                                       f"{node}; counted on {node}"))
    if node not in nodes:
        return [*problems, Problem(where, f"bound to node {node}, which publishes no {keys.INVENTORY}")]
    for container, priority, share, device in _located(assignment, nodes[node]):
        if device is None:
            problems.append(Problem(where, f"{keys.ASSIGNMENT} gives container {container} {share.uuid}, "
                                           f"not a device of node {node}"))
            continue
        device.shares.append(Share(namespace=_meta(pod).get("namespace", ""), pod=_meta(pod).get("name", ""),
                                   container=container, priority=_priority(priority),
                                   usage=device.usage(share)))
    return problems


def cluster_report(nodes: Iterable[dict], pods: Iterable[dict], gpunodes: Iterable[dict] = ()) -> ClusterReport:
    """Every node with GPUs, what its pods hold of each GPU and MIG instance, pending fgpu pods, and the
    problems met on the way. Nodes without an inventory (or GPUNode) are not GPU nodes and are left out."""
    by_name = {_meta(g).get("name"): g for g in gpunodes}
    inventories: dict[str, tuple[dict, Inventory, str]] = {}
    for node in nodes:
        name = _meta(node).get("name", "")
        if found := _inventory(node, by_name.get(name)):
            inventories[name] = (node, *found)
    devices = {name: _devices(inv) for name, (_, inv, _) in inventories.items()}
    problems: list[Problem] = []
    pending: list[PendingPod] = []
    for pod in pods:
        if _is_fgpu_pending(pod):
            pending.append(_pending(pod))
        elif _bound_to(pod) and _phase(pod) not in FINISHED:
            problems += _place_shares(pod, devices)
    views = tuple(_node_view(node, inv, source, devices[name], by_name.get(name))
                  for name, (node, inv, source) in sorted(inventories.items()))
    gpus = [g for n in views for g in n.gpus]
    summary = Summary(nodes=len(views), gpus=len(gpus), unhealthy_gpus=sum(not g.healthy for g in gpus),
                      pods=len({p for n in views for p in n.pods}), pending=len(pending),
                      capacity=sum((n.capacity for n in views), Usage()),
                      allocated=sum((n.allocated for n in views), Usage()))
    pending.sort(key=lambda p: (p.namespace, p.name))
    return ClusterReport(summary=summary, nodes=views, pending=tuple(pending), problems=tuple(problems))


# --- one pod -------------------------------------------------------------------------------------------------
def _when(event: dict) -> float:
    """When an event was last seen (core/v1 or events.k8s.io/v1 fields), as a number to compare."""
    for value in (event.get("lastTimestamp"), event.get("eventTime"),
                  (event.get("series") or {}).get("lastObservedTime"), _meta(event).get("creationTimestamp")):
        t = parse_time(value)
        if t is not None:
            return t.timestamp()
    return float("-inf")


def _about(event: dict) -> dict:
    return event.get("involvedObject") or event.get("regarding") or {}


def latest_failed_scheduling(pod: dict, events: Iterable[dict]) -> SchedulingEvent | None:
    """The newest FailedScheduling event about this pod (this incarnation of it, where events carry a UID)."""
    name, uid = _meta(pod).get("name"), _meta(pod).get("uid")
    mine = [e for e in events if e.get("reason") == "FailedScheduling" and _about(e).get("name") == name
            and (not uid or _about(e).get("uid") in (None, uid))]
    if not mine:
        return None
    e = max(mine, key=_when)
    count = e.get("count") or (e.get("series") or {}).get("count") or 1
    last = e.get("lastTimestamp") or e.get("eventTime") or _meta(e).get("creationTimestamp")
    return SchedulingEvent(reason=e["reason"], message=e.get("message") or e.get("note") or "", count=count,
                           last_seen=last)


def _pod_devices(assignment: Assignment, inv: Inventory | None) -> tuple[PodDevice, ...]:
    devices = _devices(inv) if inv else {}
    out = []
    for container, priority, share, device in _located(assignment, devices):
        out.append(PodDevice(
            container=container, uuid=share.uuid, gpu_index=device.gpu.index if device else None,
            model=device.gpu.short_name if device else None,
            mig_profile=device.mig.profile if device and device.mig else share.mig_profile,
            priority=_priority(priority),
            usage=device.usage(share) if device else Usage(share.milli_gpu, share.mem_bytes or 0,
                                                           share.sm_pct or 100)))
    return tuple(out)


def pod_report(pod: dict, node: dict | None = None, events: Iterable[dict] = ()) -> PodReport:
    """Where `pod` went (its node's inventory, when given, locates each device) or why it did not; its
    own malformed annotations are an InputError naming the pod, since they are what was asked about."""
    meta, node_name, phase = _meta(pod), _bound_to(pod), _phase(pod)
    try:
        assignment, request = _assignment(pod), _request(pod)
    except InputError as e:
        raise InputError(str(e), field=f"pod {pod_key(pod)}") from None
    found = _inventory(node, None) if node else None
    if phase in FINISHED:
        state = "finished"
    else:
        state = "pending" if not node_name else "scheduled" if assignment else "bound"
    reason, message = _why_not(pod)
    return PodReport(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), phase=phase, state=state,
        node=node_name or None, scheduler_name=_scheduler(pod),
        devices=_pod_devices(assignment, found[0] if found else None) if assignment and node_name else (),
        reason=reason, message=message,
        event=latest_failed_scheduling(pod, events) if state == "pending" else None,
        request=json.loads(dump_request(request)) if request else None)
