"""A node's emulated GPUs: whole GPUs and MIG instances (each an isolated EmulatedDevice), health, and
one virtual clock for all of them. Built from the node config (simgpu.nodeconfig); still pure.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from simgpu.counters import DeviceCounters, Totals, combine
from simgpu.device.engine import EmulatedDevice
from simgpu.errors import RelayoutRefused, SimgpuError

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
    starts: dict[str, int] = field(default_factory=dict)  # MIG uuid -> first memory slice (dynamic MIG)
    dynamic: bool = False  # its idle MIG instances may be re-laid (`EmulatedNode.relayout`)
    reconfigure_s: float = 0.0  # how long a re-layout takes, in seconds
    memory_mode: str = "hard"  # what a re-laid instance is built with
    perf: Any = None
    priorities: bool = True

    @property
    def healthy(self) -> bool:
        return self.xid is None


def build_gpu(spec: Any, *, uuid: str, index: int = 0, sharing: str = "exclusive", memory_mode: str = "hard",
              mig_instances: Iterable[tuple[str, str]] = (), perf: Any = None, priorities: bool = True,
              pci_bus_id: str = "", mig_mode: bool = False) -> EmulatedGpu:
    """A GPU, optionally split into MIG instances given as (uuid, profile) pairs; `priorities`: whether its
    devices enforce clients' priorities; `mig_mode`: in MIG mode even with no instance (dynamic MIG)."""
    if sharing not in ENGINE_MODE:
        raise SimgpuError(f"unknown sharing mode {sharing!r}", field="sharing", allowed=list(ENGINE_MODE))
    mode = ENGINE_MODE[sharing]
    instances = list(mig_instances)
    if not instances and not mig_mode:
        device = EmulatedDevice(spec, uuid=uuid, mode=mode, memory_mode=memory_mode, perf=perf,
                                label=f"gpu{index}", priorities=priorities)
        return EmulatedGpu(uuid, index, spec, sharing, [device], pci_bus_id=pci_bus_id)
    devices = [mig_device(spec, mig_uuid, profile, index, mode, memory_mode, perf, priorities)
               for mig_uuid, profile in instances]
    return EmulatedGpu(uuid, index, spec, sharing, devices, mig=True, profiles=dict(instances), pci_bus_id=pci_bus_id,
                       memory_mode=memory_mode, perf=perf, priorities=priorities)


def mig_device(spec: Any, uuid: str, profile: str, index: int, mode: str, memory_mode: str, perf: Any,
               priorities: bool) -> EmulatedDevice:
    from simgpu.mig import instance_spec

    return EmulatedDevice(instance_spec(spec, profile), uuid=uuid, mode=mode, memory_mode=memory_mode, perf=perf,
                          label=f"gpu{index}/{profile}", priorities=priorities)


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
                                "parent": gpu.uuid, "profile": gpu.profiles[d.uuid], "index": gpu.index,
                                "start": gpu.starts.get(d.uuid, -1)})
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

    # --- dynamic MIG -------------------------------------------------------------------------------
    def begin_relayout(self, gpu_uuid: str, layout: list[tuple[str, int]]) -> tuple[list[str], list[tuple[str, int]]]:
        """Start re-laying a dynamic-MIG GPU into `layout` ((profile, start) of every instance it will have):
        checked by simgpu's MIG rules, and refused if an instance it drops has a context (a GPU is never
        re-laid under a running workload, as nvidia-smi refuses to destroy a GI in use). The dropped instances
        are destroyed at once (gone from the device list); returns (their UUIDs, the placements to create)."""
        from simgpu import mig

        gpu = self._gpu_only(gpu_uuid)
        if not gpu.dynamic:
            raise SimgpuError(f"GPU {gpu_uuid} is not a dynamic-MIG GPU; its layout is fixed by the node config",
                              field="gpu", allowed=[g.uuid for g in self.gpus if g.dynamic])
        problem = mig.placed_layout_problem(gpu.spec, list(layout))
        if problem:
            raise SimgpuError(f"the layout {_spelled(layout)} is not valid on {gpu.spec.name}: {problem}",
                              field="layout")
        wanted = set(layout)
        drop = [d for d in gpu.devices if (gpu.profiles[d.uuid], gpu.starts.get(d.uuid, -1)) not in wanted]
        busy = [d for d in drop if d.clients]
        if busy:
            said = ", ".join(f"{gpu.profiles[d.uuid]}@{gpu.starts.get(d.uuid)} ({d.uuid}, {len(d.clients)} context(s))"
                             for d in busy)
            raise RelayoutRefused(f"refused: instance(s) {said} in use would be destroyed", field="layout",
                              allowed=["a layout that keeps every instance with a live context"])
        have = {(gpu.profiles[d.uuid], gpu.starts.get(d.uuid, -1)) for d in gpu.devices}
        for d in drop:
            gpu.devices.remove(d)
            gpu.profiles.pop(d.uuid, None)
            gpu.starts.pop(d.uuid, None)
            self.devices.pop(d.uuid, None)
            self.parent.pop(d.uuid, None)
        return [d.uuid for d in drop], [p for p in layout if p not in have]

    def finish_relayout(self, gpu_uuid: str, create: list[tuple[str, int]], uuid_of) -> list[str]:
        """Create the new instances of a re-layout (`uuid_of(gpu index, profile, start)` names them)."""
        gpu = self._gpu_only(gpu_uuid)
        made = []
        for profile, start in create:
            uuid = uuid_of(gpu.index, profile, start)
            d = mig_device(gpu.spec, uuid, profile, gpu.index, ENGINE_MODE[gpu.sharing], gpu.memory_mode, gpu.perf,
                           gpu.priorities)
            d.now = self.now
            gpu.devices.append(d)
            gpu.profiles[uuid], gpu.starts[uuid] = profile, start
            self.devices[uuid], self.parent[uuid] = d, gpu
            made.append(uuid)
        gpu.devices.sort(key=lambda d: gpu.starts.get(d.uuid, -1))
        return made

    def _gpu_only(self, uuid: str) -> EmulatedGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise SimgpuError(f"no GPU {uuid!r} on node {self.node_name}", field="gpu", allowed=[g.uuid for g in self.gpus])

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
        gpu = build_gpu(dev.spec, uuid=dev.uuid, index=dev.index, sharing=dev.sharing,
                        memory_mode=config.memory_quota, mig_instances=[(m.uuid, m.profile) for m in dev.mig],
                        perf=perf, priorities=config.qos.priorities, pci_bus_id=dev.pci_bus_id,
                        mig_mode=dev.mig_mode)
        gpu.starts = {m.uuid: m.start for m in dev.mig}
        gpu.dynamic, gpu.reconfigure_s = dev.mig_dynamic, dev.mig_reconfigure_s
        gpus.append(gpu)
    return EmulatedNode(gpus, node_name)


def _spelled(layout: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{p}@{s}" for p, s in layout) or "(no instance)"
