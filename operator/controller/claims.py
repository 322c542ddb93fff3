"""DRA claims of fgpu-scheduler's pods onto the placement core and back (pure, raw JSON; docs/dra.md).

- `dra_pool`: a node's fgpu-dra ResourceSlices as the GPUs the core places on, and the device names the
  allocation writes (whole GPU `gpu-<i>`, shared `gpu-<i>-shared`, MIG `gpu-<i>-mig-...`). Only a pool that
  fgpu-scheduler allocates (every device tainted `gpu.fgpu.io/allocator=fgpu-scheduler`) is placed on.
- `claim_plan`: a pending pod's claims as the canonical `GpuRequest` — the device class says the shape
  (whole GPUs, a share with memory + SM share, a MIG profile), the capacity requests say the share — so every
  policy of the core (binpack, spread, fgd, fgpu) places DRA claims exactly as it places annotated pods.
- `claim_status`: the core's decision as `status.allocation` + `status.reservedFor`, as kube-scheduler's
  PreBind writes it (shareID and consumedCapacity for a shared device, a nodeSelector for the node).
- `allocated_devices`: a claim's allocation read back (restart, another replica), so the model never hands
  out the same device twice.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from fgpu_contracts import dra as names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_quantity
from fgpu_contracts.request import MILLI, ContainerRequest, GpuRequest

from ..placement.gpus import canonical_model
from ..placement.live import Allocation
from ..placement.model import Constraints, GpuInfo, MigSlot, NodeSpec, Request, SelectorTerm

_MIB = 1 << 20
#: The label a node placed from an fgpu-owned DRA pool carries in the core's view only (never on the Node: a
#: NUL byte is no valid label key): pods with claims go only there, so a claim never lands on a device-plugin node.
DRA_LABEL = ("\0dra", "true")
#: A claim of one of these classes is fgpu-dra's, so fgpu-scheduler allocates it.
WHOLE_CLASSES = (names.CLASS_GPU, names.CLASS_EXTENDED)


class ClaimsNotReady(Exception):
    """A claim the pod names is not created yet (the controller-manager makes it from the template)."""


class Unsupported(InputError):
    """A claim fgpu-scheduler cannot allocate as asked: said on the pod, never guessed."""


# --- pools ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DraGpu:
    index: int
    info: GpuInfo
    whole: str = ""  # device names: the whole GPU, its shared device, MIG uuid -> device
    shared: str = ""
    mig: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DraPool:
    node: str
    pool: str
    owned: bool  # every device carries fgpu-scheduler's allocator taint
    gpus: tuple[DraGpu, ...] = ()
    devices: Mapping[str, str] = field(default_factory=dict)  # device name -> the uuid it hands out

    def gpu(self, uuid: str) -> DraGpu | None:
        return next((g for g in self.gpus if g.info.uuid == uuid), None)


def _attr(dev: Mapping, name: str):
    value = (dev.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), None) if value else None


def _tainted(dev: Mapping, key: str, value: str | None = None) -> bool:
    return any(t.get("key") == key and (value is None or t.get("value") == value) for t in dev.get("taints") or ())


def dra_pool(node: str, slices: Iterable[Mapping]) -> DraPool | None:
    """The node's pool of fgpu-dra devices (its newest generation); None when it publishes none."""
    mine = [s for s in slices if (s.get("spec") or {}).get("driver") == names.DRIVER
            and (s.get("spec") or {}).get("nodeName") == node]
    if not mine:
        return None
    top = max(int(((s["spec"].get("pool") or {}).get("generation")) or 0) for s in mine)
    devices = [d for s in mine if int(((s["spec"].get("pool") or {}).get("generation")) or 0) == top
               for d in s["spec"].get("devices") or ()]
    pool = (mine[0]["spec"].get("pool") or {}).get("name", node)
    by_index: dict[int, dict] = {}
    instances: dict[int, list[dict]] = {}
    for d in devices:
        index, kind = int(_attr(d, names.ATTR_INDEX) or 0), str(_attr(d, names.ATTR_KIND))
        by_index.setdefault(index, {})
        if kind == names.KIND_MIG:
            instances.setdefault(index, []).append(d)
        else:
            by_index[index][kind] = d
        instances.setdefault(index, [])
    gpus = []
    for index, kinds in sorted(by_index.items()):
        migs = instances[index]
        top_dev = kinds.get(names.KIND_GPU) or kinds.get(names.KIND_SHARE)
        partitioned = top_dev is None  # the node config partitions it: its MIG instances only
        ref = top_dev or migs[0]
        uuid = str(_attr(ref, names.ATTR_UUID) if top_dev else _attr(ref, names.ATTR_PARENT_UUID))
        healthy = not _tainted(ref, names.TAINT_UNHEALTHY)
        slots = tuple(MigSlot(str(_attr(m, names.ATTR_UUID)), str(_attr(m, names.ATTR_MIG_PROFILE)),
                              int(_attr(m, names.ATTR_MEMORY) or 0) // _MIB, int(_attr(m, names.ATTR_SM_COUNT) or 0),
                              not _tainted(m, names.TAINT_UNHEALTHY)) for m in migs) if partitioned else ()
        model = canonical_model(str(_attr(ref, names.ATTR_MODEL)))
        mem = 0 if partitioned else int(_attr(ref, names.ATTR_MEMORY) or 0) // _MIB
        sms = 0 if partitioned else int(_attr(ref, names.ATTR_SM_COUNT) or 0)
        sharing = "fractional" if names.KIND_SHARE in kinds else "exclusive"
        info = GpuInfo(uuid, model, mem, sms, sharing, healthy, slots)
        gpus.append(DraGpu(index, info, kinds[names.KIND_GPU]["name"] if names.KIND_GPU in kinds else "",
                           kinds[names.KIND_SHARE]["name"] if names.KIND_SHARE in kinds else "",
                           tuple((s.uuid, m["name"]) for s, m in zip(slots, migs, strict=True))
                           if partitioned else ()))
    owned = bool(devices) and all(_tainted(d, names.TAINT_ALLOCATOR, names.ALLOCATOR_FGPU) for d in devices)
    by_name = {d["name"]: str(_attr(d, names.ATTR_UUID)) for d in devices}
    return DraPool(node, pool, owned, tuple(gpus), by_name)


# --- a pod's claims -> the canonical request ----------------------------------------------------------------
@dataclass(frozen=True)
class ClaimPlan:
    """What one pod's GPU claim asks, in the core's terms, and where its allocation goes."""

    namespace: str
    claim: str  # the ResourceClaim's name
    request: str  # the claim's request name (results[].request)
    kind: str  # names.KIND_GPU | KIND_SHARE | KIND_MIG
    gpu_request: GpuRequest
    mem_bytes: int = 0  # a share's consumedCapacity (0: the GPU's whole memory, the request policy's default)
    sm_pct: int = 0
    claim_obj: Mapping = field(default_factory=dict, compare=False)
    #: KEP-5004: the claim to create first (`extended_claim`), and the pod's extendedResourceClaimStatus after
    create: Mapping | None = field(default=None, compare=False)
    container: str = ""


#: The pod claim name `claim_names` gives a KEP-5004 claim (not in spec.resourceClaims: no DNS label is empty)
EXTENDED = ""


def claim_names(pod: Mapping, owned: Mapping[tuple[str, str], str] | None = None,
                extended: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """(pod claim name, ResourceClaim name) for each of the pod's claims; None: not created yet. `owned` maps
    (pod uid, pod claim name) to the claim the controller-manager made (`owned_claim`): found as soon as the claim
    is seen, one write before the pod's status names it. A KEP-5004 claim (named in the pod's status, or in
    `extended` by pod uid) comes last, as pod claim `EXTENDED`."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    made = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()}
    uid = (pod.get("metadata") or {}).get("uid", "")
    out = [(c.get("name", ""), c.get("resourceClaimName") or made.get(c.get("name"))
            or (owned or {}).get((uid, c.get("name", "")))) for c in spec.get("resourceClaims") or ()]
    special = ((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
               or (extended or {}).get(uid))
    return [*out, (EXTENDED, special)] if special else out


def owned_claim(claim: Mapping) -> tuple[str, str] | None:
    """(pod uid, pod claim name) of a claim the controller-manager made from a pod's template: the pod is its
    controlling owner and the annotation names the pod's claim, as the controller-manager itself finds it."""
    meta = claim.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(names.POD_CLAIM_NAME)
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod" and o.get("controller")), None)
    return (owner.get("uid", ""), name) if name and owner else None


def _is_ours(cls: str) -> bool:
    return cls in (*WHOLE_CLASSES, names.CLASS_SHARE, names.CLASS_MIG) or names.mig_class_profile(cls) is not None


def _amount(value: object, where: str) -> Decimal:
    return parse_quantity(value, where)


def claim_plan(pod: Mapping, claims: Mapping[tuple[str, str], Mapping],
               owned: Mapping[tuple[str, str], str] | None = None, extended: Mapping[str, str] | None = None
               ) -> ClaimPlan:
    """The pod's one GPU claim as a canonical request. Raises ClaimsNotReady while a claim is not created (or
    not seen yet), Unsupported for what fgpu-scheduler does not allocate."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "")
    found = []
    for pod_name, claim_name in claim_names(pod, owned, extended):
        if claim_name is None:
            raise ClaimsNotReady(f"waiting for the ResourceClaim of spec.resourceClaims[{pod_name}] to be created")
        claim = claims.get((ns, claim_name))
        if claim is None:
            raise ClaimsNotReady(f"waiting for ResourceClaim {ns}/{claim_name}")
        found.append((pod_name, claim_name, claim))
    where = "spec.resourceClaims"
    if len(found) != 1:
        raise Unsupported(f"{len(found)} claims; fgpu-scheduler allocates one GPU claim per pod (ask for all "
                          "GPUs in one request)", field=where)
    pod_name, claim_name, claim = found[0]
    where = f"ResourceClaim {ns}/{claim_name} spec.devices"
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests = devices.get("requests") or ()
    if len(requests) != 1:
        raise Unsupported(f"{len(requests)} requests; fgpu-scheduler allocates a claim of one request",
                          field=f"{where}.requests")
    if devices.get("constraints"):
        raise Unsupported("constraints are not evaluated by fgpu-scheduler", field=f"{where}.constraints")
    req = requests[0]
    where = f"{where}.requests[{req.get('name', '')}]"
    exactly = req.get("exactly")
    if not exactly:
        raise Unsupported("fgpu-scheduler allocates 'exactly' requests, not firstAvailable", field=where)
    cls = exactly.get("deviceClassName", "")
    if not _is_ours(cls):
        raise Unsupported(f"device class {cls!r}: fgpu-scheduler allocates {names.DRIVER}'s classes only "
                          "(leave schedulerName unset for other drivers)", field=f"{where}.exactly.deviceClassName")
    for key in ("selectors", "adminAccess"):
        if exactly.get(key):
            raise Unsupported(f"{key} is not evaluated by fgpu-scheduler (use the pod's nodeSelector or fgpu.io "
                              "annotations)", field=f"{where}.exactly.{key}")
    if exactly.get("allocationMode", "ExactCount") != "ExactCount":
        raise Unsupported(f"allocationMode {exactly['allocationMode']!r}; allowed: ExactCount",
                          field=f"{where}.exactly.allocationMode")
    count = int(exactly.get("count") or 1)
    containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or ()
                  if any(r.get("name") == pod_name for r in (c.get("resources") or {}).get("claims") or ())]
    if pod_name == EXTENDED:
        containers = [m.get("containerName", "") for m in ((pod.get("status") or {}).get(
            "extendedResourceClaimStatus") or {}).get("requestMappings") or ()] or [
            c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or ()
            if keys.GPU_RESOURCE in {**((c.get("resources") or {}).get("limits") or {}),
                                     **((c.get("resources") or {}).get("requests") or {})}]
    container = (containers or [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or ()] or ["main"])[0]
    caps = (exactly.get("capacity") or {}).get("requests") or {}
    unknown = sorted(set(caps) - {names.CAP_MEMORY, names.CAP_SM_SHARE})
    if unknown:
        raise Unsupported(f"capacity {unknown[0]!r}; allowed: {names.CAP_MEMORY}, {names.CAP_SM_SHARE}",
                          field=f"{where}.exactly.capacity.requests")
    plan = dict(namespace=ns, claim=claim_name, request=req.get("name", ""), claim_obj=claim,
                container=container if pod_name == EXTENDED else "")
    if cls in WHOLE_CLASSES:
        return ClaimPlan(kind=names.KIND_GPU, gpu_request=_request(ContainerRequest(container=container, count=count)),
                         **plan)
    if cls != names.CLASS_SHARE:
        profile = names.mig_class_profile(cls)
        if profile is None:
            raise Unsupported(f"device class {cls!r} names no MIG profile; use mig-<profile>.fgpu.io",
                              field=f"{where}.exactly.deviceClassName")
        return ClaimPlan(kind=names.KIND_MIG, gpu_request=_request(
            ContainerRequest(container=container, count=count, mig_profile=profile)), **plan)
    if count != 1:
        raise Unsupported(f"count {count} of a share; a share is of one GPU", field=f"{where}.exactly.count")
    mem = 0
    if names.CAP_MEMORY in caps:
        asked = _amount(caps[names.CAP_MEMORY], f"{where}.exactly.capacity.requests[{names.CAP_MEMORY}]")
        mem = max(math.ceil(asked / names.MEMORY_STEP), 1) * names.MEMORY_STEP  # the request policy's rounding
    sm = 0
    if names.CAP_SM_SHARE in caps:
        pct = _amount(caps[names.CAP_SM_SHARE], f"{where}.exactly.capacity.requests[{names.CAP_SM_SHARE}]")
        sm = math.ceil(pct)
        if not 0 <= sm <= 100:
            raise InputError(f"{caps[names.CAP_SM_SHARE]!r}; allowed: 0 to 100 (percent of the SMs)",
                             field=f"{where}.exactly.capacity.requests[{names.CAP_SM_SHARE}]")
    # no SM share: reserves (almost) no compute and is not throttled, as the driver grants it; no memory: all of it
    share = ContainerRequest(container=container, milli_gpu=max(1, sm * MILLI // 100), sm_pct=sm or None,
                             **({"mem_bytes": mem} if mem else {"mem_pct": 100}))
    return ClaimPlan(kind=names.KIND_SHARE, gpu_request=_request(share), mem_bytes=mem, sm_pct=sm, **plan)


def _request(container: ContainerRequest) -> GpuRequest:
    return GpuRequest(containers=(container,))


# --- the decision -> status -----------------------------------------------------------------------------------
def claim_status(plan: ClaimPlan, allocation: Allocation, pool: DraPool, pod: Mapping,
                 new_share_id: Callable[[], str]) -> dict:
    """status.allocation and status.reservedFor for the core's `allocation` of `plan` in `pool`."""
    results = []
    for uuid in allocation.mig or allocation.gpus:
        result = {"request": plan.request, "driver": names.DRIVER, "pool": pool.pool}
        if plan.kind == names.KIND_MIG:
            gpu = next(g for g in pool.gpus if any(u == uuid for u, _ in g.mig))
            result["device"] = dict(gpu.mig)[uuid]
        else:
            gpu = pool.gpu(uuid)
            assert gpu is not None, f"{uuid} is not in pool {pool.pool}"
            if plan.kind == names.KIND_GPU:
                result["device"] = gpu.whole
            else:
                mem = plan.mem_bytes or gpu.info.mem_mib * _MIB // names.MEMORY_STEP * names.MEMORY_STEP
                result.update(device=gpu.shared, shareID=new_share_id(),
                              consumedCapacity={names.CAP_MEMORY: _quantity(mem),
                                                names.CAP_SM_SHARE: str(plan.sm_pct)})
        results.append(result)
    meta = pod.get("metadata") or {}
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [allocation.node]}]}]}
    return {"allocation": {"devices": {"results": results}, "nodeSelector": selector},
            "reservedFor": [{"resource": "pods", "name": meta.get("name", ""), "uid": meta.get("uid", "")}]}


def _quantity(n: int) -> str:
    return f"{n // (1 << 30)}Gi" if n % (1 << 30) == 0 else f"{n // _MIB}Mi"


# --- an allocation read back ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Held:
    node: str
    gpus: tuple[str, ...] = ()
    mig: tuple[str, ...] = ()


def allocated_devices(claim: Mapping, pools: Mapping[str, DraPool]) -> Held | None:
    """The node and devices an allocated claim holds in fgpu-owned pools; None when unallocated or elsewhere."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = [r for r in (allocation.get("devices") or {}).get("results") or () if r.get("driver") == names.DRIVER]
    by_pool = {p.pool: p for p in pools.values()}
    gpus, mig, node = [], [], ""
    for r in results:
        pool = by_pool.get(r.get("pool", ""))
        if pool is None or not pool.owned or r.get("device") not in pool.devices:
            continue
        node = pool.node
        uuid = pool.devices[r["device"]]
        (mig if any(uuid == u for g in pool.gpus for u, _ in g.mig) else gpus).append(uuid)
    return Held(node, tuple(gpus), tuple(mig)) if node else None


# --- the core's view ------------------------------------------------------------------------------------------
def with_pool(spec: NodeSpec, pool: DraPool | None, extended: Iterable[str] = ()) -> NodeSpec:
    """A node without a device plugin's inventory takes its GPUs from the fgpu-owned DRA pool it publishes.
    `extended`: resource names a DeviceClass of fgpu-dra's maps (KEP-5004): the node counts them as one per GPU,
    so NodeResourcesFit lets a `nvidia.com/gpu: N` pod through, as kube-scheduler's does on a node whose
    allocatable lacks a DRA-backed resource; the GPU filters decide whether N GPUs are free."""
    if pool is None or not pool.owned or spec.gpus:
        return spec
    gpus = tuple(g.info for g in pool.gpus)
    models = {g.model for g in gpus}
    have = dict(spec.extended)
    counted = tuple(sorted({**{name: len(gpus) for name in extended}, **have}.items()))
    return dataclasses.replace(spec, gpus=gpus, num_gpu=len(gpus),
                               model=models.pop() if len(models) == 1 else ("mixed" if models else ""),
                               labels=tuple(sorted((*spec.labels, DRA_LABEL))), extended=counted)


def kept_apart(request: Request, claimed: bool, either: bool = False) -> Request:
    """A pod with claims goes only to fgpu-owned DRA nodes; a GPU pod without claims never does (nothing there
    would hand it its annotated share), unless `either`: whole GPUs that KEP-5004's class serves there too."""
    c = request.constraints or Constraints()
    if either and not claimed:
        return request
    if claimed:
        c = dataclasses.replace(c, node_selector=tuple(sorted((*c.node_selector, DRA_LABEL))))
    elif request.num_gpu:
        off = (DRA_LABEL[0], "DoesNotExist", ())
        terms = tuple(SelectorTerm((*t.expressions, off)) for t in c.affinity_terms) or (SelectorTerm((off,)),)
        c = dataclasses.replace(c, affinity_terms=terms)
    else:
        return request
    return dataclasses.replace(request, constraints=c)


# --- KEP-5004: `nvidia.com/gpu: N` of fgpu-scheduler's pods on fgpu-owned DRA nodes ---------------------------
def extended_request(pod: Mapping, resource: str) -> tuple[str, str, int] | None:
    """(container, request name, count) when exactly one container asks for `resource` (kube-scheduler's request
    name: "container-<i>-request-<j>", i the container's index in initContainers + containers, j the resource's
    in its sorted requests); None otherwise (no such container, or several: fgpu allocates one request)."""
    spec = pod.get("spec") or {}
    found = []
    for i, c in enumerate([*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]):
        res = c.get("resources") or {}
        requests = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # limits default the requests
        if resource in requests:
            count = int(parse_quantity(requests[resource], f"{c.get('name', '')}.resources[{resource}]"))
            found.append((c.get("name", ""), f"container-{i}-request-{sorted(requests).index(resource)}", count))
    return found[0] if len(found) == 1 and found[0][2] >= 1 else None


def extended_claim(pod: Mapping, request: str, device_class: str, count: int) -> dict:
    """The claim kube-scheduler's PreBind creates for a pod's extended resource (KEP-5004): owned by the pod, named
    after it, annotated as such, one ExactCount request per container and resource; created with the
    delete-protection finalizer already on (kube-scheduler adds it in a second write)."""
    meta = pod.get("metadata") or {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": f"{meta.get('name', '')}-extended-resources-",
                         "namespace": meta.get("namespace", ""),
                         "annotations": {names.EXTENDED_RESOURCE_CLAIM: "true"},
                         "finalizers": [names.DELETE_PROTECTION],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""),
                                              "uid": meta.get("uid", ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}}


def extended_status(container: str, resource: str, request: str, claim_name: str) -> dict:
    """The pod's status.extendedResourceClaimStatus naming the claim: the kubelet hands its devices to the
    container that asked for the resource."""
    return {"requestMappings": [{"containerName": container, "resourceName": resource, "requestName": request}],
            "resourceClaimName": claim_name}


def extended_owner(claim: Mapping) -> str | None:
    """The uid of the pod a KEP-5004 claim was made for (by fgpu or kube-scheduler); None for any other claim."""
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(names.EXTENDED_RESOURCE_CLAIM) != "true":
        return None
    return next((o.get("uid") for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"
                 and o.get("controller")), None)
