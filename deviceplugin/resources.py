"""Resource naming and device discovery: which extended resources this node advertises and which device IDs
each one lists, derived from the node config alone (pure; NVIDIA's plugin splits the same way).

Device IDs: a whole GPU is its UUID, a MIG device its MIG UUID; a time-slicing/MPS replica or a fractional
slot is `<uuid>::<k>` (NVIDIA's "annotated ID" form), so the GPU behind any ID is known without a lookup.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from fgpu_contracts.keys import GPU_RESOURCE, mig_resource_name
from simgpu.nodeconfig import GpuDevice, NodeConfig

REPLICA_SEP = "::"


@dataclass(frozen=True)
class Slot:
    """One device ID in one resource's ListAndWatch."""

    id: str
    gpu_uuid: str  # the physical GPU
    device_uuid: str  # what the container sees: the GPU or a MIG instance
    mode: str  # exclusive | timeSlicing | mps | fractional
    replicas: int  # how many slots share device_uuid (1 for whole GPUs and MIG devices)
    mem_bytes: int  # of device_uuid
    sms: int  # of device_uuid
    mig_profile: str | None = None


@dataclass(frozen=True)
class Resource:
    name: str
    slots: tuple[Slot, ...]
    fail_requests_greater_than_one: bool = False
    fractional: bool = False

    @property
    def socket_name(self) -> str:
        """Socket file for this resource's server inside the device-plugin directory."""
        return "fgpu-" + self.name.replace("/", "_") + ".sock"

    def slot(self, device_id: str) -> Slot | None:
        return self._index().get(device_id)

    def _index(self) -> dict[str, Slot]:
        cached = self.__dict__.get("_by_id")
        if cached is None:
            cached = {s.id: s for s in self.slots}
            object.__setattr__(self, "_by_id", cached)
        return cached


def replica_id(uuid: str, k: int) -> str:
    return f"{uuid}{REPLICA_SEP}{k}"


def discover(cfg: NodeConfig, node_name: str, gpus: list[GpuDevice] | None = None) -> list[Resource]:
    """Every resource this node advertises, in a stable order, with its device IDs (`gpus`: the node's GPUs
    as they are now, when a dynamic-MIG GPU was re-laid; default: as configured)."""
    pools: OrderedDict[str, list[Slot]] = OrderedDict()
    strict: set[str] = set()
    fractional: set[str] = set()
    for gpu in cfg.gpu_devices(node_name) if gpus is None else gpus:
        for name, slots, fail_gt_one in gpu_slots(cfg, gpu):
            pools.setdefault(name, []).extend(slots)
            if fail_gt_one:
                strict.add(name)
            if gpu.sharing == "fractional":
                fractional.add(name)
    return [Resource(name, tuple(slots), name in strict, name in fractional) for name, slots in pools.items()]


def gpu_slots(cfg: NodeConfig, gpu: GpuDevice):
    """(resource name, slots, failRequestsGreaterThanOne) for one physical GPU."""
    spec = gpu.spec
    if gpu.sharing == "fractional":
        n = cfg.fractional.split_count
        yield cfg.fractional.resources.gpu, [
            Slot(replica_id(gpu.uuid, k), gpu.uuid, gpu.uuid, "fractional", n, spec.mem_bytes, spec.sms)
            for k in range(n)
        ], False
        return
    block = cfg.replicated(gpu.sharing)
    if gpu.mig_mode:  # a dynamic-MIG GPU with no instance yet advertises nothing (not a whole GPU)
        for inst in gpu.mig:
            base = GPU_RESOURCE if cfg.effective_mig_strategy == "single" else mig_resource_name(inst.profile)
            replicas = inst.replicas  # decided by the node config (sharing.timeSlicing.resources[].devices)
            name = block.advertised_name(base) if (block is not None and replicas > 1) else base
            ids = [inst.uuid] if replicas == 1 else [replica_id(inst.uuid, k) for k in range(replicas)]
            mode = "timeSlicing" if replicas > 1 else "exclusive"
            yield name, [
                Slot(i, gpu.uuid, inst.uuid, mode, replicas, inst.mem_bytes, inst.sms, inst.profile) for i in ids
            ], bool(block and replicas > 1 and block.fail_requests_greater_than_one)
        return
    if gpu.sharing in ("timeSlicing", "mps"):
        name = block.advertised_name(GPU_RESOURCE) if block is not None else GPU_RESOURCE
        yield name, [
            Slot(replica_id(gpu.uuid, k), gpu.uuid, gpu.uuid, gpu.sharing, gpu.replicas, spec.mem_bytes, spec.sms)
            for k in range(gpu.replicas)
        ], bool(block and block.fail_requests_greater_than_one)
        return
    yield GPU_RESOURCE, [Slot(gpu.uuid, gpu.uuid, gpu.uuid, "exclusive", 1, spec.mem_bytes, spec.sms)], False


def node_level_resources(cfg: NodeConfig, node_name: str) -> dict[str, int]:
    """Fractional mode's accounting-only extended resources (memory MiB, cores %), published on the node's
    status rather than through a device plugin: one device per MiB would overflow ListAndWatch."""
    gpus = [g for g in cfg.gpu_devices(node_name) if g.sharing == "fractional"]
    if not gpus:
        return {}
    names = cfg.fractional.resources
    return {
        names.memory: sum(g.spec.mem_bytes // (1 << 20) for g in gpus),
        names.cores: 100 * len(gpus),
    }


def node_devices(cfg: NodeConfig, node_name: str, gpus: list[GpuDevice] | None = None) -> dict[str, Slot]:
    """Every GPU and MIG UUID on the node, described as a whole-device slot (memory, SMs): what a fractional
    assignment may name."""
    out: dict[str, Slot] = {}
    for gpu in cfg.gpu_devices(node_name) if gpus is None else gpus:
        spec = gpu.spec
        out[gpu.uuid] = Slot(gpu.uuid, gpu.uuid, gpu.uuid, gpu.sharing, 1, spec.mem_bytes, spec.sms)
        for inst in gpu.mig:
            out[inst.uuid] = Slot(inst.uuid, gpu.uuid, inst.uuid, "exclusive", 1, inst.mem_bytes, inst.sms,
                                  inst.profile)
    return out
