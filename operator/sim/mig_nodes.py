"""MIG nodes and MIG pods in `fgpu simulate`'s CSV files, and the mapping of a trace's GPU shares to profiles.

Nodes file, two optional columns: `mig` (empty or `none`: whole/fractional GPUs; `static`: every GPU of the
node cut into `mig_layout`, fixed; `dynamic`: in MIG mode, idle instances re-laid on demand by the operator's
planner, starting from `mig_layout` or from no instance) and `mig_layout` (profiles joined by `+`, `N*` for
repeats: `3g.40gb+2g.20gb+2*1g.10gb`). Each layout is checked with simgpu's MIG rules and placed as the
driver would (`simgpu.mig.check_layout`).

Pods file, optional columns: `mig_profile` (the pod asks for `num_gpu` instances of it; `gpu_milli` is
then the share it would have asked for without MIG, 0 if none), `priority` (its PriorityClass value) and
`preemption_policy` (`PreemptLowerPriority`, the default, or `Never`).

`--as-mig` turns a trace's shares into MIG requests by one rule, stated in docs/mig_modes.md: the smallest
profile (fewest compute slices, then memory slices) of the cluster's MIG GPU model that holds the share in
both compute and memory (its compute slices / the GPU's, and its memory slices / the GPU's, each >= the
share); a pod of whole GPUs asks for as many full-GPU instances (7g).
"""
from __future__ import annotations

import re

from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import MILLI, GpuInfo, MigSlot, Request

from simgpu import mig
from simgpu.errors import SimgpuError

MIG_MODES = ("", "none", "static", "dynamic")
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
_MIB = 1 << 20


def parse_layout(text: str, model: str, where: str) -> list[mig.Placement]:
    """`3g.40gb+2*1g.10gb` -> simgpu's placements on an empty GPU of `model`, or one error line."""
    names: list[str] = []
    for part in (p.strip() for p in text.split("+")):
        m = re.fullmatch(r"(?:(\d+)\s*\*\s*)?(\S+)", part)
        if not m or (m.group(1) is not None and not 1 <= int(m.group(1)) <= 8):
            raise PlacementInputError(f"{where}: cannot read layout part {part[:30]!r}", field="mig_layout",
                                      allowed=["profiles joined by +, N* for repeats, e.g. 3g.40gb+2*1g.10gb"])
        names += [m.group(2)] * int(m.group(1) or 1)
    try:
        return mig.check_layout(model, names)
    except SimgpuError as err:  # its message already names its field and what is allowed
        raise PlacementInputError(f"{where}: {err.message}", field="mig_layout") from None


def mig_gpus(node: str, count: int, model: str, mode: str, layout: str, where: str) -> tuple[GpuInfo, ...]:
    """The GPUs of one MIG node (`mode` static or dynamic), each with the layout's instances."""
    try:
        mig.profiles(model)
    except SimgpuError:
        capable = ", ".join(g.short_name for g in mig.mig_gpus())
        raise PlacementInputError(f"{where}: {model} does not support MIG", field="mig",
                                  allowed=[capable]) from None
    if mode == "static" and not layout:
        raise PlacementInputError(f"{where}: mig static needs a mig_layout", field="mig_layout",
                                  allowed=["profiles joined by +, e.g. 3g.40gb+2g.20gb+2*1g.10gb"])
    placements = parse_layout(layout, model, where) if layout else []
    gpus = []
    for i in range(count):
        uuid = f"{node}/{i}"
        slots = []
        for p in placements:
            prof = mig.get_profile(model, p.profile)
            slots.append(MigSlot(f"{uuid}/mig-{p.profile}@{p.start}", p.profile, prof.mem_bytes // _MIB, prof.sms,
                                 True, p.start))
        gpus.append(GpuInfo(uuid, model, sharing="mig", mig=tuple(slots), mig_dynamic=mode == "dynamic"))
    return tuple(gpus)


def profile_for_share(model: str, gpu_milli: int) -> mig.MigProfile:
    """The smallest profile of `model` that holds a share of `gpu_milli`/1000 in compute and in memory."""
    compute, memory = mig.slices(model)
    fitting = [p for p in mig.profiles(model) if not p.media_extensions
               and p.compute_slices * MILLI >= gpu_milli * compute and p.memory_slices * MILLI >= gpu_milli * memory]
    return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices))


def as_mig(request: Request, model: str) -> Request:
    """A trace pod's request as a MIG request on `model` (CPU-only pods unchanged): a share of each of its
    GPUs becomes one instance per GPU of the smallest profile holding the share."""
    if not request.wants_gpu:
        return request
    if request.is_share:
        return Request(request.name, request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_milli,
                       qos=request.qos, priority=request.priority,
                       mig_profile=profile_for_share(model, request.gpu_milli).name)
    full = max(mig.profiles(model), key=lambda p: (p.compute_slices, p.memory_slices))
    return Request(request.name, request.cpu_milli, request.memory_mib, request.num_gpu, request.gpu_milli,
                   qos=request.qos, priority=request.priority, mig_profile=full.name)


def check_pod_profile(profile: str, where: str) -> str:
    """A pods file's mig_profile, normalised (`MIG 3g.40gb` -> `3g.40gb`), or one error line."""
    name = mig.normalize_profile_name(profile)
    known = sorted({p.name for g in mig.mig_gpus() for p in mig.profiles(g)})
    if name not in known:
        raise PlacementInputError(f"{where}: unknown MIG profile {profile[:30]!r}", field="--pods", allowed=known)
    return name


def _profile_milli(model: str, profile: str) -> int:
    """A MIG instance's share of its GPU in milli-GPU: its compute slices over the GPU's."""
    return MILLI * mig.get_profile(model, profile).compute_slices // mig.slices(model)[0]


def _any_model_milli(profile: str) -> int:
    for g in mig.mig_gpus():
        if any(p.name == profile for p in mig.profiles(g)):
            return _profile_milli(g.name, profile)
    return 0


def asked_milli(request: Request) -> int:
    """The GPU a pod asks for, in milli-GPU: its share times its count; for a MIG pod the share it would have
    asked for without MIG (`gpu_milli`), else its profile's compute share. The same for a pod whichever way
    the cluster serves it, so offered load (and `--load`'s arrival compression) does not depend on the mode."""
    if request.wants_gpu:
        return request.total_gpu_milli
    if request.is_mig:
        return request.num_gpu * (request.gpu_milli or _any_model_milli(request.mig_profile))
    return 0


def held_milli(cluster, placement) -> int:
    """The GPU a placement holds, in milli-GPU: its shares, or its MIG instances' compute slices."""
    if not placement.mig:
        return placement.request.total_gpu_milli
    total = 0
    for uuid in placement.mig:
        node, profile, _ = cluster.mig_slots[uuid]
        total += _profile_milli(cluster.nodes[node].gpus[cluster.mig_gpu[uuid]].model, profile)
    return total
