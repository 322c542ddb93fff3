"""The DRA devices of one node, from the node config alone (pure): what each GPU can be handed out as, and
which of the GPU's counters each form consumes, so no two forms are ever allocated over the same silicon.

Every GPU has one counter set (`gpu-<index>`): one counter per memory slice (MIG's unit of placement; a GPU
without MIG has one), its compute slices, and the media-extensions engine when a "+me" profile exists. The
forms of one GPU:

- `gpu-<i>`: the whole GPU; consumes every counter.
- `gpu-<i>-shared` (fractional GPUs): one device with allowMultipleAllocations whose memory and SM share
  claims consume; it too consumes every counter, once, while any share is allocated (kube-scheduler's
  allocator charges a shared device's counters on its first allocation only), so no whole-GPU or MIG claim
  lands on a GPU that holds shares, and the shares never exceed the GPU.
- `gpu-<i>-mig-<profile>-<start>`: one MIG placement, consuming the memory slices [start, start+size), its
  compute slices and (for "+me") the media engine. On a GPU the node config partitions (mig.layout) these are
  exactly its configured instances (and the GPU offers no other form); on a MIG-capable fractional GPU every
  placement simgpu.mig allows is offered, and the counters keep any allocated set non-overlapping, within the
  compute slices and with at most one "+me": the rules of simgpu.mig.find_placements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from fgpu_contracts.dra import (
    COUNTER_COMPUTE,
    COUNTER_MEDIA,
    COUNTER_MEMORY_SLICE,
    KIND_GPU,
    KIND_MIG,
    KIND_SHARE,
)
from simgpu import mig
from simgpu.nodeconfig import GpuDevice, NodeConfig, mig_uuid


@dataclass(frozen=True)
class DraDevice:
    """One device of a ResourceSlice and what preparing it hands out."""

    name: str  # a DNS label, unique on the node
    kind: str  # fgpu_contracts.dra.KINDS
    gpu: GpuDevice
    counter_set: str
    consumes: dict[str, int]  # counter -> amount taken from counter_set
    mem_bytes: int
    sms: int
    uuid: str  # what the container sees (the GPU, or the MIG instance)
    profile: str | None = None  # MIG
    start: int | None = None  # MIG: first memory slice
    # MIG on a fractional GPU: no instance exists in the daemon; the container gets a hard share of the GPU
    # sized like the profile (memory and SMs enforced by the daemon; bandwidth and L2 are not partitioned)
    emulated: bool = False

    @property
    def shared(self) -> bool:
        return self.kind == KIND_SHARE

    @property
    def sm_pct(self) -> int:
        """The device's SMs as a percentage of its GPU's (100 for whole and shared devices)."""
        return max(1, min(100, math.ceil(100 * self.sms / self.gpu.spec.sms)))


@dataclass(frozen=True)
class NodeDevices:
    """Every counter set and device of a node, in a stable order (GPU index, then whole, shared, MIG)."""

    counter_sets: dict[str, dict[str, int]]
    devices: tuple[DraDevice, ...]
    by_name: dict[str, DraDevice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name.update({d.name: d for d in self.devices})


def counter_set_name(gpu: GpuDevice) -> str:
    return f"gpu-{gpu.index}"


def _mig_table(gpu: GpuDevice) -> tuple[int, int, list[mig.MigProfile]] | None:
    if not gpu.spec.mig or gpu.spec.name not in {g.name for g in mig.mig_gpus()}:
        return None
    compute, memory = mig.slices(gpu.spec)
    return compute, memory, mig.profiles(gpu.spec)


def gpu_counters(gpu: GpuDevice) -> dict[str, int]:
    table = _mig_table(gpu)
    if table is None:
        return {COUNTER_MEMORY_SLICE.format(0): 1, COUNTER_COMPUTE: 1}
    compute, memory, profiles = table
    counters = {COUNTER_MEMORY_SLICE.format(k): 1 for k in range(memory)}
    counters[COUNTER_COMPUTE] = compute
    if any(p.media_extensions for p in profiles):
        counters[COUNTER_MEDIA] = 1
    return counters


def _mig_consumption(profile: mig.MigProfile, start: int) -> dict[str, int]:
    out = {COUNTER_MEMORY_SLICE.format(k): 1 for k in range(start, start + profile.memory_slices)}
    out[COUNTER_COMPUTE] = profile.compute_slices
    if profile.media_extensions:
        out[COUNTER_MEDIA] = 1
    return out


def _profile_label(profile: str) -> str:
    return profile.replace(".", "-").replace("+", "-")  # "1g.10gb+me" -> "1g-10gb-me": a DNS label


def gpu_devices(node: str, gpu: GpuDevice) -> list[DraDevice]:
    cset = counter_set_name(gpu)
    everything = gpu_counters(gpu)
    spec = gpu.spec
    table = _mig_table(gpu)
    by_profile = {p.name: p for p in table[2]} if table else {}

    def mig_device(profile: mig.MigProfile, start: int, uuid: str, emulated: bool) -> DraDevice:
        return DraDevice(f"gpu-{gpu.index}-mig-{_profile_label(profile.name)}-{start}", KIND_MIG, gpu, cset,
                         _mig_consumption(profile, start), profile.mem_bytes, profile.sms, uuid,
                         profile.name, start, emulated)

    if gpu.mig:  # partitioned by the node config: its instances are all there is
        return [mig_device(by_profile[inst.profile], inst.start, inst.uuid, False) for inst in gpu.mig]
    out = [DraDevice(f"gpu-{gpu.index}", KIND_GPU, gpu, cset, dict(everything), spec.mem_bytes, spec.sms,
                     gpu.uuid)]
    if gpu.sharing != "fractional":
        return out
    out.append(DraDevice(f"gpu-{gpu.index}-shared", KIND_SHARE, gpu, cset, dict(everything), spec.mem_bytes,
                         spec.sms, gpu.uuid))
    for profile in by_profile.values():
        for start in profile.starts:
            out.append(mig_device(profile, start, mig_uuid(node, gpu.index, profile.name, start), True))
    return out


def node_devices(cfg: NodeConfig, node: str) -> NodeDevices:
    gpus = cfg.gpu_devices(node)
    return NodeDevices(
        counter_sets={counter_set_name(g): gpu_counters(g) for g in gpus},
        devices=tuple(d for g in gpus for d in gpu_devices(node, g)),
    )
