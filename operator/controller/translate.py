"""Kubernetes objects (raw dicts, as the watch delivers them) to the placement core's terms and back: a Node
and its GPU inventory to a `NodeSpec`, a pod and its canonical GPU request to a `Request`, a decision to the
hand-off `Assignment` written on the Binding, and a bound pod's assignment back to what `restore` needs.

Pure and synchronous: the Kopf handlers call it on every event, so it parses only what placement reads.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal

import pydantic

from fgpu_contracts import keys
from fgpu_contracts.assignment import (
    Assignment,
    ContainerAssignment,
    DeviceShare,
    dump_assignment,
    parse_assignment,
)
from fgpu_contracts.errors import InputError
from fgpu_contracts.inventory import node_inventory
from fgpu_contracts.policy import SchedulingPolicySpec
from fgpu_contracts.quantity import parse_quantity
from fgpu_contracts.request import MILLI, GpuRequest, device_shape, load_request
from fgpu_contracts.signature import sign

from ..objects import pod_key
from ..placement.gpus import canonical_model
from ..placement.live import Allocation
from ..placement.model import (
    Constraints,
    GpuInfo,
    MigSlot,
    NodeSpec,
    Request,
    SelectorTerm,
    Taint,
    Toleration,
)
from ..placement.models import ModelFilter

_MIB = 1 << 20


def _quantity(value: object) -> Decimal:
    """A resource amount as the admission webhook reads it; an unreadable one counts as nothing (the API
    server validated it already; this never stops the watch)."""
    try:
        return parse_quantity(value, "resources")
    except InputError:
        return Decimal(0)


def _is_extended(name: str) -> bool:
    """Counted like kube-scheduler's scalar resources: a domain-qualified name outside kubernetes.io."""
    return "/" in name and not name.startswith("kubernetes.io/")


def _extended(resources: dict) -> dict[str, int]:
    return {k: int(_quantity(v)) for k, v in (resources or {}).items() if _is_extended(k)}


# --- nodes -------------------------------------------------------------------------------------------------
def node_spec(node: dict, gpunode_spec: dict | None = None) -> NodeSpec:
    """A Node and its GPU inventory (the `fgpu.io/gpu-inventory` annotation, else its GPUNode's spec) as the
    core sees it. A node whose inventory is missing or malformed has no GPUs: fgpu places nothing there until
    its device plugin publishes one."""
    meta, spec, status = node.get("metadata", {}), node.get("spec") or {}, node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    gpus = inventory_gpus(meta.get("name", ""), meta.get("annotations") or {}, gpunode_spec)
    taints = tuple(Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", "NoSchedule"))
                   for t in spec.get("taints") or ())
    models = {g.model for g in gpus}
    return NodeSpec(
        name=meta.get("name", ""),
        cpu_milli=int(_quantity(alloc.get("cpu", 0)) * 1000),
        memory_mib=int(_quantity(alloc.get("memory", 0)) / _MIB),
        num_gpu=len(gpus),
        model=models.pop() if len(models) == 1 else ("mixed" if models else ""),
        gpus=gpus,
        labels=tuple(sorted((meta.get("labels") or {}).items())),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        extended=tuple(sorted(_extended(alloc).items())),
        max_pods=int(_quantity(alloc.get("pods", 110))) or 110,
    )


def inventory_gpus(node: str, annotations: dict, gpunode_spec: dict | None = None) -> tuple[GpuInfo, ...]:
    try:
        found = node_inventory(node, annotations, gpunode_spec)
    except InputError:
        return ()
    if found is None:
        return ()
    inv = found[0]
    return tuple(
        GpuInfo(g.uuid, canonical_model(g.model), g.mem_bytes // _MIB, g.sms, g.sharing, g.healthy,
                tuple(MigSlot(m.uuid, m.profile, m.mem_bytes // _MIB, m.sms, m.healthy, m.start) for m in g.mig),
                g.mig_dynamic)
        for g in inv.gpus)


# --- pods --------------------------------------------------------------------------------------------------
def pod_resources(pod: dict) -> tuple[int, int, dict[str, int]]:
    """(CPU milli, memory MiB, extended resources) the pod requests, as kube-scheduler sums them:
    containers added up, each init container alone, the larger of the two, plus overhead."""
    spec = pod.get("spec") or {}

    def requests(c: dict) -> dict:
        res = c.get("resources") or {}
        return {**(res.get("limits") or {}), **(res.get("requests") or {})}  # requests default to limits

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        for k, v in requests(c).items():
            total[k] = total.get(k, Decimal(0)) + _quantity(v)
    for c in spec.get("initContainers") or ():
        for k, v in requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), _quantity(v))
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + _quantity(v)
    ext = {k: int(v) for k, v in total.items() if _is_extended(k)}
    return int(total.get("cpu", 0) * 1000), int(math.ceil(total.get("memory", 0) / _MIB)), ext


def gpu_request(pod: dict) -> GpuRequest | None:
    """The canonical request the webhook wrote (`fgpu.io/request`); None if absent or unreadable."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.REQUEST)
    if not raw:
        return None
    try:
        return _parsed_request(raw)
    except (pydantic.ValidationError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def _parsed_request(raw: str) -> GpuRequest:
    """Each pod event re-reads the annotation, and pods of one workload carry the same text: parse it once
    (GpuRequest is frozen; pydantic validation was ~3% of the operator's thread in a 4,000-pod burst)."""
    return load_request(raw)


def guards_slo(request: GpuRequest | None, node_policy: str, cluster_rule: str = "fgpu") -> bool:
    """Whether placing this pod keeps its co-runners' SLOs (the QoS filter): the pod's `fgpu.io/slo-filter`,
    else the cluster's SchedulingPolicy `sloFilter` (`fgpu`: the fgpu policy only; `all`: every policy)."""
    if request is not None and request.slo_filter is not None:
        return request.slo_filter
    return cluster_rule == "all" or node_policy == "fgpu"


def core_request(pod: dict, request: GpuRequest | None, gpu_policy: str = "binpack",
                 default_slo: float | None = None, guard_slo: bool = False) -> Request:
    """The core's view of a pod: its CPU/memory/extended resources, its GPU shape and its constraints
    (`gpu_policy`: the cluster's GPU policy, for a request that names none), and its QoS: a high-priority
    pod's bound (its own, else `default_slo`, the SchedulingPolicy's), its duty cycle, and whether placing
    it keeps co-runners' SLOs (`guard_slo`, from `guards_slo`)."""
    spec = pod.get("spec") or {}
    cpu, mem, ext = pod_resources(pod)
    constraints = Constraints(
        node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
        affinity_terms=_affinity_terms(spec),
        tolerations=tuple(Toleration(t.get("key", "") or "", t.get("operator", "Equal") or "Equal",
                                     t.get("value", "") or "", t.get("effect", "") or "")
                          for t in spec.get("tolerations") or ()),
        extended=tuple(sorted(ext.items())),
        **(_gpu_constraints(request, gpu_policy) if request else {}),
    )
    name = pod_key(pod)
    if request is None:
        return Request(name, cpu, mem, constraints=constraints)
    shape = device_shape(request)  # InputError for two shapes in one pod: said on the pod, never guessed
    high = request.priority == "high"
    return Request(
        name, cpu, mem, num_gpu=sum(c.count for c in request.containers), gpu_milli=shape.milli_gpu,
        gpu_mem_mib=-(-shape.mem_bytes // _MIB) if shape.mem_bytes else 0,
        sm_pct=shape.effective_sm_pct, priority=0 if high else 1,
        gpu_mem_pct=shape.mem_pct or 0, mig_profile=shape.mig_profile or "", constraints=constraints,
        slo=(request.slo_slowdown or default_slo or DEFAULT_SLO_SLOWDOWN) if high else 0.0,
        duty=request.duty_cycle or 0.0, guard_slo=guard_slo)


def _gpu_constraints(request: GpuRequest, default_gpu_policy: str) -> dict:
    return {
        "model_filters": tuple(ModelFilter(f.rule, f.allow, f.deny) for f in request.model_filters),
        "uuids": request.uuids, "exclude_uuids": request.exclude_uuids,
        "affinity_group": request.affinity or "", "anti_affinity_group": request.anti_affinity or "",
        "exclusion_group": request.exclusion or "",
        "gpu_policy": "spread" if (request.gpu_policy or default_gpu_policy) == "spread" else "",
    }


def _affinity_terms(spec: dict) -> tuple[SelectorTerm, ...]:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        exprs = [(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ()))
                 for e in term.get("matchExpressions") or ()]
        exprs += [("metadata.name" if e.get("key") == "metadata.name" else "\0field:" + str(e.get("key")),
                   e.get("operator", ""), tuple(e.get("values") or ())) for e in term.get("matchFields") or ()]
        terms.append(SelectorTerm(tuple(exprs)))
    return tuple(terms)


# --- decisions on the wire ---------------------------------------------------------------------------------
DEFAULT_SLO_SLOWDOWN: float = SchedulingPolicySpec.model_fields["default_slo_slowdown"].default


def assignment_for(allocation: Allocation, request: GpuRequest, gpu_mem_mib: dict[str, int],
                   default_slo: float = DEFAULT_SLO_SLOWDOWN) -> Assignment:
    """The hand-off for the device plugin: per container, its devices with the share it was given.
    `gpu_mem_mib` maps the allocation's GPU UUIDs to their memory (to turn a share into bytes). A
    high-priority pod's containers carry its slowdown bound: its own, else `default_slo` (the
    SchedulingPolicy's `defaultSloSlowdown`)."""
    high = request.priority == "high"
    slo = (request.slo_slowdown or default_slo) if high else None
    devices = iter(allocation.mig or allocation.gpus)
    containers = []
    for c in request.containers:
        shares = []
        for _ in range(c.count):
            uuid = next(devices)
            if c.is_mig:
                shares.append(DeviceShare(uuid=uuid, mig_profile=c.mig_profile))
                continue
            cap = gpu_mem_mib.get(uuid, 0) * _MIB
            mem = c.mem_bytes or (cap * c.mem_pct // 100 if c.mem_pct else cap * c.milli_gpu // MILLI)
            shares.append(DeviceShare(uuid=uuid, milli_gpu=c.milli_gpu, mem_bytes=mem or None,
                                      sm_pct=c.effective_sm_pct))
        containers.append(ContainerAssignment(name=c.container, devices=shares, priority=0 if high else 1,
                                              slo_slowdown=slo))
    return Assignment(node=allocation.node, containers=containers)


def binding_annotations(assignment: Assignment, now: str, uid: str = "", key: bytes | None = None) -> dict[str, str]:
    """The hand-off written on the Binding; signed for pod `uid` when there is a hand-off key."""
    out = {keys.ASSIGNMENT: dump_assignment(assignment), keys.ASSIGNED_AT: now}
    if key is not None:
        out[keys.ASSIGNMENT_SIGNATURE] = sign(key, uid, assignment.node, now, out[keys.ASSIGNMENT])
    return out


@dataclass(frozen=True)
class Bound:
    """What a bound pod holds, read back from its hand-off annotation (for `LiveCluster.restore`)."""

    node: str
    gpus: tuple[str, ...]
    mig: tuple[str, ...]
    assignment: Assignment


def bound_devices(pod: dict) -> Bound | None:
    """The devices a bound pod's assignment names; None when it has no readable assignment."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.ASSIGNMENT)
    if not raw:
        return None
    try:
        a = parse_assignment(raw)
    except InputError:
        return None
    devices = [d for c in a.containers for d in c.devices]
    return Bound(a.node, tuple(d.uuid for d in devices if not d.mig_profile),
                 tuple(d.uuid for d in devices if d.mig_profile), a)
