"""A node's ResourceSlices (resource.k8s.io/v1) from its devices and their health (pure).

One pool per node, named after it. The API's limits (k8s.io/api resource/v1 types.go, v0.37.2) shape the
split: counter sets live in slices of their own (at most 8 per slice), and a slice whose devices consume
counters or carry taints holds at most 64 devices. Every slice of the pool carries the same generation and
the pool's slice count, so a consumer never mixes slices of two publications.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

from deviceplugin.dra.devices import DraDevice, NodeDevices
from deviceplugin.labels import Health
from fgpu_contracts import dra as names

MAX_COUNTER_SETS_PER_SLICE = 8  # ResourceSliceMaxCounterSets
MAX_DEVICES_PER_SLICE = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures (our devices consume counters)
MAX_COUNTERS_PER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
MAX_ATTRS_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice


def _quantity(n: int) -> str:
    """A canonical quantity: binary suffix when exact (80Gi, 256Mi), else the plain number."""
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _attributes(dev: DraDevice, pool: str) -> dict[str, dict]:
    spec = dev.gpu.spec
    attrs = {
        names.ATTR_KIND: {"string": dev.kind},
        names.ATTR_MODEL: {"string": spec.short_name},
        names.ATTR_PRODUCT: {"string": spec.name[:64]},
        names.ATTR_UUID: {"string": dev.uuid},
        names.ATTR_ARCH: {"string": spec.arch},
        names.ATTR_SM_COUNT: {"int": dev.sms},
        names.ATTR_MEMORY: {"int": dev.mem_bytes},
        names.ATTR_MIG_CAPABLE: {"bool": bool(spec.mig) and dev.kind == names.KIND_GPU},
        names.ATTR_INDEX: {"int": dev.gpu.index},
        names.ATTR_POOL: {"string": pool},
    }
    if dev.kind == names.KIND_MIG:
        attrs[names.ATTR_MIG_PROFILE] = {"string": dev.profile}
        attrs[names.ATTR_MIG_START] = {"int": dev.start}
        attrs[names.ATTR_PARENT_UUID] = {"string": dev.gpu.uuid}
    return attrs


def _share_policy(value: int, step: int, minimum: int, default: int) -> dict:
    return {"default": _quantity(default), "validRange": {"min": _quantity(minimum), "max": _quantity(value),
                                                          "step": _quantity(step)}}


def _capacity(dev: DraDevice) -> dict[str, dict]:
    if not dev.shared:
        return {names.CAP_MEMORY: {"value": _quantity(dev.mem_bytes)},
                names.CAP_SM_SHARE: {"value": str(dev.sm_pct)}}
    mem = dev.mem_bytes - dev.mem_bytes % names.MEMORY_STEP  # max and default must be multiples of the step
    return {
        # a share that names no memory takes the GPU's (HAMi's gpumem default of 100%)
        names.CAP_MEMORY: {"value": _quantity(dev.mem_bytes),
                           "requestPolicy": _share_policy(mem, names.MEMORY_STEP, names.MEMORY_STEP, mem)},
        # a share that names no SM share reserves none and is not throttled (HAMi's gpucores unset)
        names.CAP_SM_SHARE: {"value": "100", "requestPolicy": _share_policy(100, 1, 0, 0)},
    }


def _taints(dev: DraDevice, health: Mapping[str, Health], allocator: str) -> list[dict]:
    """An unhealthy GPU (or MIG instance) keeps new claims off all devices over it; NoSchedule, not NoExecute:
    the daemon already failed the contexts on it, and the pods' own restart policy decides what happens.
    A pool that fgpu-scheduler allocates keeps kube-scheduler off every device (`names.TAINT_ALLOCATOR`)."""
    out = []
    if allocator == names.ALLOCATOR_FGPU:
        out.append({"key": names.TAINT_ALLOCATOR, "value": names.ALLOCATOR_FGPU, "effect": "NoSchedule"})
    for uuid in dict.fromkeys((dev.gpu.uuid, dev.uuid)):
        h = health.get(uuid)
        if h is not None and not h.healthy:
            out.append({"key": names.TAINT_UNHEALTHY, "value": f"xid-{h.xid}" if h.xid else "unhealthy",
                        "effect": "NoSchedule"})
            break
    return out


def device_object(dev: DraDevice, pool: str, health: Mapping[str, Health],
                  allocator: str = names.ALLOCATOR_KUBE) -> dict:
    obj = {
        "name": dev.name,
        "attributes": _attributes(dev, pool),
        "capacity": _capacity(dev),
        "consumesCounters": [{"counterSet": dev.counter_set,
                              "counters": {k: {"value": str(v)} for k, v in dev.consumes.items()}}],
    }
    if dev.shared:
        obj["allowMultipleAllocations"] = True
    taints = _taints(dev, health, allocator)
    if taints:
        obj["taints"] = taints
    assert len(obj["attributes"]) + len(obj["capacity"]) <= MAX_ATTRS_AND_CAPACITIES
    return obj


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def slice_name(node: str, what: str, k: int) -> str:
    """`<node>-gpu.fgpu.io-<counters|devices>-<k>`; a node name too long for that (object names stop at 253)
    is cut and followed by a digest of the whole, so two long names never meet."""
    suffix = f"-{names.DRIVER}-{what}-{k}"
    if len(node) + len(suffix) > 253:
        node = f"{node[:200].rstrip('.-')}-{hashlib.sha256(node.encode()).hexdigest()[:16]}"
    return node + suffix


def resource_slices(node: str, devices: NodeDevices, health: Mapping[str, Health], pool: str,
                    generation: int = 1, allocator: str = names.ALLOCATOR_KUBE) -> list[dict]:
    """Every ResourceSlice of the node's pool: counter-set slices first, then device slices. `allocator`:
    which scheduler allocates this pool (fgpu-scheduler's pools carry `names.TAINT_ALLOCATOR`)."""
    counter_sets = [{"name": name, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
                    for name, counters in devices.counter_sets.items()]
    assert all(len(c["counters"]) <= MAX_COUNTERS_PER_SET for c in counter_sets)
    device_objs = [device_object(d, pool, health, allocator) for d in devices.devices]
    specs = [("counters", {"sharedCounters": chunk}) for chunk in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)]
    specs += [("devices", {"devices": chunk}) for chunk in _chunks(device_objs, MAX_DEVICES_PER_SLICE)]
    out, seen = [], {"counters": 0, "devices": 0}
    for what, body in specs:
        out.append({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, what, seen[what]),
                         "labels": {"app.kubernetes.io/managed-by": "fgpu-dra"}},
            "spec": {"driver": names.DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": len(specs)},
                     **body},
        })
        seen[what] += 1
    return out
