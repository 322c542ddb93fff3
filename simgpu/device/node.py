"""A node's emulated GPUs: whole GPUs and MIG instances (each an isolated EmulatedDevice), health, and
one virtual clock for all of them. Built from the node config (simgpu.nodeconfig); still pure.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from simgpu.counters import DeviceCounters, Totals, combine
from simgpu.device.engine import EmulatedDevice
from simgpu.errors import SimgpuError

# Node-config sharing mode -> engine mode. Fractional (Gaia/KubeShare) is time-slicing with per-client
# memory quotas and compute shares enforced by the engine.
ENGINE_MODE = {"exclusive": "exclusive", "timeSlicing": "timeslice", "mps": "mps", "fractional": "timeslice"}


@dataclass
class EmulatedGpu:
    """One physical GPU: either a single device, or MIG instances that share nothing but the board."""

    uuid: str
    index: int
    spec: Any
    sharing: str  # node-config sharing mode
    devices: list[EmulatedDevice]
    mig: bool = False
    profiles: dict[str, str] = field(default_factory=dict)  # MIG uuid -> profile
    xid: int | None = None
    pci_bus_id: str = ""  # as the node config gives it (dcgm-exporter's `pci_bus_id` label)

    @property
    def healthy(self) -> bool:
        return self.xid is None


def build_gpu(spec: Any, *, uuid: str, index: int = 0, sharing: str = "exclusive", memory_mode: str = "hard",
              mig_instances: Iterable[tuple[str, str]] = (), perf: Any = None, priorities: bool = True,
              pci_bus_id: str = "") -> EmulatedGpu:
    """A GPU, optionally split into MIG instances given as (uuid, profile) pairs; `priorities`: whether its
    devices enforce clients' priorities."""
    if sharing not in ENGINE_MODE:
        raise SimgpuError(f"unknown sharing mode {sharing!r}", field="sharing", allowed=list(ENGINE_MODE))
    mode = ENGINE_MODE[sharing]
    instances = list(mig_instances)
    if not instances:
        device = EmulatedDevice(spec, uuid=uuid, mode=mode, memory_mode=memory_mode, perf=perf,
                                label=f"gpu{index}", priorities=priorities)
        return EmulatedGpu(uuid, index, spec, sharing, [device], pci_bus_id=pci_bus_id)
    from simgpu.mig import instance_spec

    devices = [EmulatedDevice(instance_spec(spec, profile), uuid=mig_uuid, mode=mode, memory_mode=memory_mode,
                              perf=perf, label=f"gpu{index}/{profile}", priorities=priorities)
               for mig_uuid, profile in instances]
    return EmulatedGpu(uuid, index, spec, sharing, devices, mig=True, profiles=dict(instances), pci_bus_id=pci_bus_id)


class EmulatedNode:
    """All GPUs of a node, addressed by GPU or MIG UUID, advanced together in virtual time."""

    def __init__(self, gpus: list[EmulatedGpu], node_name: str = "node"):
        self.node_name = node_name
        self.gpus = gpus
        self.devices: dict[str, EmulatedDevice] = {}
        self.parent: dict[str, EmulatedGpu] = {}
        for gpu in gpus:
            for device in gpu.devices:
                self.devices[device.uuid] = device
                self.parent[device.uuid] = gpu
        self.now = 0.0

    def device(self, uuid: str) -> EmulatedDevice:
        try:
            return self.devices[uuid]
        except KeyError:
            raise SimgpuError(f"no device {uuid!r} on node {self.node_name}", field="device_uuid",
                              allowed=sorted(self.devices)) from None

    def gpu(self, uuid: str) -> EmulatedGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        if uuid in self.parent:
            return self.parent[uuid]
        raise SimgpuError(f"no GPU {uuid!r} on node {self.node_name}", field="gpu",
                          allowed=[g.uuid for g in self.gpus] + [u for g in self.gpus if g.mig for u in g.profiles])

    # --- health ------------------------------------------------------------------------------------
    def health(self) -> list[dict[str, Any]]:
        """Every advertisable device (whole GPUs and MIG instances) with its health, for ListAndWatch."""
        out = []
        for gpu in self.gpus:
            out.append({"uuid": gpu.uuid, "healthy": gpu.healthy and all(d.healthy for d in gpu.devices),
                        "xid": gpu.xid or next((d.xid for d in gpu.devices if d.xid), 0) or 0,
                        "model": gpu.spec.name, "parent": "", "profile": "", "index": gpu.index})
            if gpu.mig:
                for d in gpu.devices:
                    out.append({"uuid": d.uuid, "healthy": d.healthy, "xid": d.xid or 0, "model": gpu.spec.name,
                                "parent": gpu.uuid, "profile": gpu.profiles[d.uuid], "index": gpu.index})
        return out

    def set_fault(self, uuid: str, xid: int) -> list[int]:
        """XID on a GPU (all its MIG instances too) or on one MIG instance; returns killed client ids."""
        if not isinstance(xid, int) or isinstance(xid, bool) or xid <= 0:
            raise SimgpuError(f"bad XID {xid!r}", field="xid", allowed=["a positive integer, e.g. 79"])
        killed: list[int] = []
        if any(g.uuid == uuid for g in self.gpus):
            gpu = self.gpu(uuid)
            gpu.xid = xid
            for d in gpu.devices:
                killed += d.set_fault(xid)
        else:
            killed += self.device(uuid).set_fault(xid)
        return killed

    def clear_fault(self, uuid: str) -> None:
        if any(g.uuid == uuid for g in self.gpus):
            gpu = self.gpu(uuid)
            gpu.xid = None
            for d in gpu.devices:
                d.clear_fault()
        else:
            self.device(uuid).clear_fault()

    # --- clock -------------------------------------------------------------------------------------
    def next_event(self) -> float | None:
        times = [t for d in self.devices.values() if (t := d.next_event()) is not None]
        return min(times) if times else None

    def run_until(self, t: float) -> dict[str, set[int]]:
        """Advance every device to virtual time t; returns drained client ids per device UUID."""
        drained = {}
        for uuid, device in self.devices.items():
            done = device.run_until(t)
            if done:
                drained[uuid] = done
        self.now = max(self.now, t)
        return drained

    # --- counters ----------------------------------------------------------------------------------
    def totals(self) -> dict[str, Totals]:
        return {uuid: d.totals() for uuid, d in self.devices.items()}

    def counters(self, since: dict[str, Totals]) -> tuple[dict[str, DeviceCounters], dict[str, DeviceCounters]]:
        """(per GPU, per MIG instance) counters since an earlier totals() snapshot."""
        per_device = {uuid: d.counters(since[uuid]) if uuid in since else d.counters(d.totals())
                      for uuid, d in self.devices.items()}
        per_gpu, per_mig = {}, {}
        for gpu in self.gpus:
            if gpu.mig:
                parts = [(per_device[d.uuid], d.spec.sms) for d in gpu.devices]
                per_gpu[gpu.uuid] = combine(parts)
                per_mig.update({d.uuid: per_device[d.uuid] for d in gpu.devices})
            else:
                per_gpu[gpu.uuid] = per_device[gpu.devices[0].uuid]
        return per_gpu, per_mig


def build_node(config: Any, node_name: str, perf: Any = None) -> EmulatedNode:
    """The node's GPUs from a simgpu.nodeconfig.NodeConfig (UUIDs as the device plugin derives them)."""
    gpus = []
    for dev in config.gpu_devices(node_name):
        gpus.append(build_gpu(dev.spec, uuid=dev.uuid, index=dev.index, sharing=dev.sharing,
                              memory_mode=config.memory_quota,
                              mig_instances=[(m.uuid, m.profile) for m in dev.mig], perf=perf,
                              priorities=config.qos.priorities, pci_bus_id=dev.pci_bus_id))
    return EmulatedNode(gpus, node_name)
