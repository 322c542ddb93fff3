"""NodePrepareResources' decisions, as pure functions: which of a claim's allocated devices are ours, whether
preparing them would over-commit a device or its GPU, and the container edits (env, mounts) that hand each
request its share: the device plugin's Allocate contract (HAMi's env, fgpu's socket and signed context tokens,
deviceplugin.allocate.container_env), delivered through CDI.

The scheduler's allocation is the input, but the apiserver does not check that two allocators (or an edited
status) never hand out the same silicon twice; so every claim is checked against the claims already prepared
on this node, with the same counters the ResourceSlices publish: a whole GPU, a MIG instance and the shared
device of one GPU never overlap, and the shares of one GPU never sum past its memory or 100% of its SMs.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.allocate import AllocContext, container_env
from deviceplugin.dra.devices import DraDevice, NodeDevices
from fgpu_contracts import dra as names
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import ceil_int, parse_quantity
from simgpu.token import Grant


class PrepareError(InputError):
    """This claim cannot be prepared; the message goes to the kubelet (and the pod's events)."""


@dataclass(frozen=True)
class Allocated:
    """One device of a claim's status.allocation.devices.results that belongs to this driver and node."""

    request: str  # "<request>" or "<request>/<subrequest>"
    device: str
    share_id: str | None = None
    memory: int | None = None  # consumedCapacity (shared devices)
    sm_share: int | None = None

    def to_dict(self) -> dict:
        return {"request": self.request, "device": self.device, "shareID": self.share_id,
                "memory": self.memory, "smShare": self.sm_share}

    @classmethod
    def from_dict(cls, d: Mapping) -> Allocated:
        return cls(d["request"], d["device"], d.get("shareID"), d.get("memory"), d.get("smShare"))


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


def _consumed(result: Mapping, key: str, where: str) -> int | None:
    raw = (result.get("consumedCapacity") or {}).get(key)
    if raw is None:
        return None
    return ceil_int(parse_quantity(raw, f"{where}.consumedCapacity[{key}]"))


def allocated_devices(claim: Mapping, ref: ClaimRef, node: str, devices: NodeDevices) -> list[Allocated]:
    """The claim's devices of our driver in this node's pool; PrepareError when the claim is not the one the
    kubelet names, is not allocated, or names a device this node does not publish."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise PrepareError(f"claim {ref.namespace}/{ref.name} has uid {meta.get('uid')!r}, the kubelet asked for "
                           f"{ref.uid!r}: deleted and created again", field="metadata.uid")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError(f"claim {ref.namespace}/{ref.name} is not allocated", field="status.allocation")
    if not (claim.get("status") or {}).get("reservedFor"):
        raise PrepareError(f"claim {ref.namespace}/{ref.name} is reserved for no pod", field="status.reservedFor")
    out = []
    for i, result in enumerate((allocation.get("devices") or {}).get("results") or []):
        if result.get("driver") != names.DRIVER:
            continue
        where = f"status.allocation.devices.results[{i}]"
        if result.get("pool") != node:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {result.get('device')!r} is in pool "
                               f"{result.get('pool')!r}, this is node {node}", field=f"{where}.pool")
        dev = devices.by_name.get(result.get("device", ""))
        if dev is None:
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: node {node} has no device "
                               f"{result.get('device')!r}", field=f"{where}.device",
                               allowed=[d.name for d in devices.devices][:8] + ["..."])
        memory = _consumed(result, names.CAP_MEMORY, where)
        sm = _consumed(result, names.CAP_SM_SHARE, where)
        if dev.shared and not result.get("shareID"):
            raise PrepareError(f"claim {ref.namespace}/{ref.name}: shared device {dev.name} allocated without a "
                               f"shareID", field=f"{where}.shareID")
        if dev.shared:
            _within_request(claim, result.get("request", ""), dev, memory, sm, f"claim {ref.namespace}/{ref.name}",
                            where)
        out.append(Allocated(result.get("request", ""), dev.name, result.get("shareID"), memory, sm))
    if not out:
        raise PrepareError(f"claim {ref.namespace}/{ref.name} has no device of driver {names.DRIVER}",
                           field="status.allocation.devices.results")
    return out


def _requested(claim: Mapping, request: str) -> Mapping:
    """capacity.requests of the claim's request (or subrequest "<request>/<sub>" of a firstAvailable list)."""
    main, _, sub = request.partition("/")
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if req.get("name") != main:
            continue
        if not sub:
            return ((req.get("exactly") or {}).get("capacity") or {}).get("requests") or {}
        for alt in req.get("firstAvailable") or []:
            if alt.get("name") == sub:
                return (alt.get("capacity") or {}).get("requests") or {}
    return {}


def _within_request(claim: Mapping, request: str, dev: DraDevice, memory: int | None, sm: int | None, who: str,
                    where: str) -> None:
    """A share's consumedCapacity is what its request asks, rounded by the device's request policy (256Mi steps
    of memory, the GPU's memory by default; whole percents of SMs, none by default); more than that is an edited
    or forged status, and the claim gets nothing rather than another claim's memory or SMs."""
    asked = _requested(claim, request)
    if names.CAP_MEMORY in asked:
        raw = ceil_int(parse_quantity(asked[names.CAP_MEMORY], f"spec.devices.requests[{request}].capacity"))
        allowed_mem = max(1, -(-raw // names.MEMORY_STEP)) * names.MEMORY_STEP
    else:
        allowed_mem = dev.mem_bytes - dev.mem_bytes % names.MEMORY_STEP
    allowed_sm = ceil_int(parse_quantity(asked[names.CAP_SM_SHARE], f"spec.devices.requests[{request}].capacity")) \
        if names.CAP_SM_SHARE in asked else 0
    for key, got, allowed in ((names.CAP_MEMORY, memory, allowed_mem), (names.CAP_SM_SHARE, sm, allowed_sm)):
        if got is not None and got > allowed:
            raise PrepareError(f"{who}: consumedCapacity {got} on device {dev.name} is more than its request "
                               f"{request!r} asks ({allowed}): the status was edited after allocation",
                               field=f"{where}.consumedCapacity[{key}]", allowed=[f"at most {allowed}"])
    if memory is None and allowed_mem < dev.mem_bytes - dev.mem_bytes % names.MEMORY_STEP:
        raise PrepareError(f"{who}: device {dev.name} allocated without consumedCapacity for a request of "
                           f"{allowed_mem} bytes", field=f"{where}.consumedCapacity[{names.CAP_MEMORY}]")


def _share_amounts(dev: DraDevice, a: Allocated) -> tuple[int, int]:
    """(memory bytes, SM percent) a share consumes; a share without consumedCapacity takes the whole device
    (what the request policy's defaults would have given), never nothing."""
    memory = dev.mem_bytes if a.memory is None else a.memory
    sm = 0 if a.sm_share is None else a.sm_share
    return memory, sm


def check_commitment(devices: NodeDevices, prepared: Iterable[Allocated], new: list[Allocated]) -> str | None:
    """Why preparing `new` beside `prepared` over-commits silicon, or None. Counters are charged once per
    device in use (a shared device once, however many shares), as kube-scheduler's allocator charges them."""
    in_use: dict[str, str] = {}  # device -> who holds it (for the message)
    share_sum: dict[str, list[int]] = {}
    share_ids: dict[str, set[str | None]] = {}
    for label, group in (("a prepared claim", list(prepared)), ("this claim", new)):
        for a in group:
            dev = devices.by_name[a.device]
            if dev.shared:
                if a.share_id in share_ids.setdefault(dev.name, set()):
                    return f"device {dev.name}: share {a.share_id} is handed out twice"
                share_ids[dev.name].add(a.share_id)
                memory, sm = _share_amounts(dev, a)
                total = share_sum.setdefault(dev.name, [0, 0])
                total[0] += memory
                total[1] += sm
                if total[0] > dev.mem_bytes:
                    return f"device {dev.name}: shares would hold {total[0]} bytes of its {dev.mem_bytes}"
                if total[1] > 100:
                    return f"device {dev.name}: shares would hold {total[1]}% of its SMs"
                in_use.setdefault(dev.name, label)
                continue
            if dev.name in in_use:
                return f"device {dev.name} is already held by {in_use[dev.name]}"
            in_use[dev.name] = label
    used: dict[tuple[str, str], int] = {}
    holders: dict[tuple[str, str], list[str]] = {}  # (counter set, counter) -> devices that took it
    for name, holder in in_use.items():
        dev = devices.by_name[name]
        for counter, amount in dev.consumes.items():
            key = (dev.counter_set, counter)
            used[key] = used.get(key, 0) + amount
            if used[key] > devices.counter_sets[dev.counter_set][counter]:
                others = ", ".join(holders.get(key, [])) or "other devices"
                return (f"device {dev.name} ({holder}) overlaps {others} on GPU {dev.gpu.index} "
                        f"({dev.counter_set}/{counter})")
            holders.setdefault(key, []).append(name)
    return None


@dataclass(frozen=True)
class GpuConfig:
    """The claim's opaque configuration for one request: fgpu's priority and slowdown bound. Without one a
    share is high priority with the node's default bound, as a pod that names no fgpu.io/priority."""

    priority: int = 0  # CUDA_TASK_PRIORITY: 0 high, 1 low
    slo_slowdown: float | None = None


_CONFIG_KEYS = ("apiVersion", "kind", "priority", "sloSlowdown")


def _one_config(params: object, where: str) -> dict:
    if not isinstance(params, Mapping):
        raise PrepareError(f"{params!r} is not an object", field=where, allowed=[names.CONFIG_KIND])
    if params.get("apiVersion") != names.CONFIG_API_VERSION or params.get("kind") != names.CONFIG_KIND:
        raise PrepareError(f"apiVersion {params.get('apiVersion')!r}, kind {params.get('kind')!r}", field=where,
                           allowed=[f"{names.CONFIG_API_VERSION} {names.CONFIG_KIND}"])
    unknown = sorted(set(params) - set(_CONFIG_KEYS))
    if unknown:
        raise PrepareError(f"unknown key {unknown[0]!r}", field=where, allowed=list(_CONFIG_KEYS))
    out = {}
    if "priority" in params:
        if params["priority"] not in ("high", "low"):
            raise PrepareError(f"priority {params['priority']!r}", field=where, allowed=["high", "low"])
        out["priority"] = 0 if params["priority"] == "high" else 1
    if "sloSlowdown" in params:
        slo = params["sloSlowdown"]
        if isinstance(slo, bool) or not isinstance(slo, int | float) or not 1.0 < slo <= 100.0:
            raise PrepareError(f"sloSlowdown {slo!r}", field=where, allowed=["a number in (1, 100]"])
        out["slo_slowdown"] = float(slo)
    return out


def request_configs(claim: Mapping, requests: Iterable[str]) -> dict[str, GpuConfig]:
    """Each request's GpuConfig from status.allocation.devices.config (the class's entries, then the
    claim's, each later one overriding; an entry naming no requests applies to all). Another driver's
    entries are not ours to read; ours must be well formed, or the claim gets nothing."""
    entries = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("config") or []
    ordered = sorted(enumerate(entries), key=lambda e: (e[1].get("source") != "FromClass", e[0]))
    merged: dict[str, dict] = {r: {} for r in requests}
    for i, entry in ordered:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != names.DRIVER:
            continue
        where = f"status.allocation.devices.config[{i}].opaque.parameters"
        values = _one_config(opaque.get("parameters"), where)
        named = entry.get("requests") or list(merged)
        for r in merged:
            if r in named or r.split("/")[0] in named:
                merged[r].update(values)
    return {r: GpuConfig(**v) for r, v in merged.items()}


def _grant(dev: DraDevice, a: Allocated, pod: tuple[str, str], index: int, config: GpuConfig) -> Grant:
    ns, name = pod
    common = {"pod_namespace": ns, "pod_name": name, "vdevice_index": index, "priority": config.priority,
              "slo_slowdown": config.slo_slowdown if config.priority == 0 else None}
    if dev.shared:
        memory, sm = _share_amounts(dev, a)
        return Grant(device_uuid=dev.uuid, mem_limit_bytes=memory, sm_limit_pct=sm or None, **common)
    if dev.emulated:  # a MIG profile on a fractional GPU: a hard share the size of the profile
        return Grant(device_uuid=dev.gpu.uuid, mem_limit_bytes=dev.mem_bytes, sm_limit_pct=dev.sm_pct, **common)
    return Grant(device_uuid=dev.uuid, **common)


def reserved_pod(claim: Mapping) -> tuple[str, str]:
    """(namespace, name) of the pod the grant names: the one pod reserving the claim, else none (a claim
    shared by several pods gets grants that name no pod)."""
    pods = [r for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"]
    if len(pods) == 1:
        return (claim.get("metadata") or {}).get("namespace", ""), pods[0].get("name", "")
    return "", ""


@dataclass(frozen=True)
class RequestEdits:
    """What one request of a claim gets: its devices and the CDI device carrying their container edits."""

    request: str
    devices: list[Allocated]
    envs: dict[str, str]
    mounts: list[tuple[str, str, bool]]


def container_edits(devices: NodeDevices, allocated: list[Allocated], claim: Mapping,
                    ctx: AllocContext) -> list[RequestEdits]:
    """One set of edits per request: its devices are the container's devices 0..n-1, as Allocate numbers a
    container's devices (a container that uses two claims sees two devices numbered 0)."""
    pod = reserved_pod(claim)
    by_request: dict[str, list[Allocated]] = {}
    for a in allocated:
        by_request.setdefault(a.request, []).append(a)
    configs = request_configs(claim, by_request)
    out = []
    for request, group in by_request.items():
        devs = [devices.by_name[a.device] for a in group]
        grants = [_grant(d, a, pod, i, configs[request]) for i, (d, a) in enumerate(zip(devs, group, strict=True))]
        fractional = any(d.shared or d.emulated for d in devs)
        alloc = container_env(grants, ctx, mode="fractional" if fractional else "exclusive", mps_pct=None,
                              with_priority=fractional)
        out.append(RequestEdits(request, group, alloc.envs, alloc.mounts))
    return out
