"""The node config (NodeConfig), its cross-field rules, and what each GPU ends up as: MIG placements, sharing
mode and replicas after `sharing.<mode>.resources[].devices` selections (NVIDIA's device map: what no entry
selects stays whole). NodeConfig lives here, not in schema.py, because its validation and `gpu_devices` are
these rules. Every error is a SimgpuError naming the field."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pydantic

from fgpu_contracts.keys import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource_name
from simgpu.errors import SimgpuError

from .schema import (
    DEFAULT_MIG_RECONFIGURE_S,
    DEFAULT_TOKEN_SECRET_FILE,
    MAX_TIME_DILATION,
    ConfigModel,
    DeviceRef,
    Fractional,
    GpuDevice,
    GpuGroup,
    MigInstance,
    Qos,
    ReplicatedResource,
    ReplicatedSharing,
    Sharing,
    default_pci_bus_id,
    gpu_uuid,
    mig_uuid,
    pci_key,
)

#: GPUs on one node, all groups together (the largest real servers have 16; every GPU is emulated in memory).
MAX_NODE_GPUS = 64


class NodeConfig(ConfigModel):
    """A node's config file: its GPU groups, how they are shared, and the node-wide settings."""

    version: Literal["v1"]
    node_name: str | None = None  # optional; else --node-name / $NODE_NAME / hostname (resolve_node_name)
    gpus: list[GpuGroup] = pydantic.Field(min_length=1)
    mig_strategy: Literal["none", "single", "mixed"] | None = None  # default: mixed if any MIG GPU, else none
    memory_quota: Literal["hard", "oversubscribe"] = "hard"
    time_dilation: float = pydantic.Field(default=1.0, ge=1e-3, le=MAX_TIME_DILATION)
    token_secret_file: str = DEFAULT_TOKEN_SECRET_FILE
    state_dir: str | None = None  # the device plugin's state (allocation journal); see deviceplugin/statedir.py
    sharing: Sharing = Sharing()
    fractional: Fractional = Fractional()
    qos: Qos = Qos()

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        check_groups(self)
        return self

    # -- derived values --
    @property
    def effective_mig_strategy(self) -> str:
        if self.mig_strategy is not None:
            return self.mig_strategy
        return "mixed" if any(g.mig_enabled for g in self.gpus) else "none"

    def sharing_mode(self, group: GpuGroup) -> str:
        if group.sharing is not None:
            return group.sharing
        if self.sharing.time_slicing is not None:
            return "timeSlicing"
        if self.sharing.mps is not None:
            return "mps"
        return "exclusive"

    def replicated(self, mode: str) -> ReplicatedSharing | None:
        return {"timeSlicing": self.sharing.time_slicing, "mps": self.sharing.mps}.get(mode)

    def gpu_devices(self, node_name: str) -> list[GpuDevice]:
        """The node's GPUs with stable UUIDs (uuid5 of node name + index), their MIG instances, and the sharing
        mode and replicas each one ends up with once `sharing.<mode>.resources[].devices` is applied. A device
        UUID that is not on this node is a SimgpuError naming the `devices` field."""
        return resolve_devices(self, node_name)


def _replicas(cfg: NodeConfig, group: GpuGroup, mode: str) -> int:
    """Replicas of a GPU of `group` in `mode` that no devices list decides: the group's own, else those of an
    `nvidia.com/gpu` entry that selects all devices, else 1."""
    if mode not in ("timeSlicing", "mps"):
        return 1
    if group.replicas is not None:
        return group.replicas
    block = cfg.replicated(mode)
    entry = block.entry(GPU_RESOURCE) if block is not None else None
    return entry.replicas if entry is not None and entry.selects_all else 1


# --- MIG ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Placed:
    profile: str
    start: int
    sms: int
    mem_bytes: int


def _expand_layout(spec, layout: list[str] | str, field: str) -> list[str]:
    from simgpu import mig

    if isinstance(layout, list):
        return list(layout)
    if not layout.startswith("all-"):
        raise SimgpuError(f"{layout!r} is neither a list of profiles nor all-<profile>", field=field)
    name = mig.normalize_profile_name(layout[len("all-"):])
    by_name = {p.name: p for p in mig.profiles(spec)}
    if name not in by_name:
        raise SimgpuError(f"no MIG profile {name!r} on {spec.name}", field=field, allowed=sorted(by_name))
    return [name] * by_name[name].max_count


def _mig_placements(group: GpuGroup, field: str) -> list[_Placed]:
    from simgpu import mig
    from simgpu.catalog import get_gpu

    spec = get_gpu(group.model)
    names = _expand_layout(spec, group.mig.layout if group.mig else [], field)
    if not names and group.mig is not None and group.mig.dynamic:
        return []  # instances come on demand
    by_name = {p.name: p for p in mig.profiles(spec)}
    placed = mig.check_layout(spec, names)
    out = []
    for p in placed:
        prof = p.profile if isinstance(p.profile, str) else p.profile.name
        info = by_name[prof]
        out.append(_Placed(prof, int(p.start), info.sms, info.mem_bytes))
    return out


def check_groups(cfg: NodeConfig) -> None:
    """Cross-field rules that pydantic field types cannot express; messages name the field."""
    from simgpu.catalog import get_gpu

    mig_profiles: set[str] = set()
    any_mig, all_mig = False, True
    for gi, group in enumerate(cfg.gpus):
        where = f"gpus[{gi}]"
        mode = cfg.sharing_mode(group)
        spec = get_gpu(group.model)
        if group.replicas is not None and mode not in ("timeSlicing", "mps"):
            raise SimgpuError(f"replicas needs sharing timeSlicing or mps, not {mode}", field=f"{where}.replicas")
        if group.mig_enabled:
            if not spec.mig:
                raise SimgpuError(f"{spec.name} does not support MIG", field=f"{where}.mig")
            if mode in ("mps", "fractional"):
                raise SimgpuError(f"sharing {mode} is not available on MIG-enabled GPUs",
                                  field=f"{where}.sharing", allowed=["exclusive", "timeSlicing"])
            try:
                placed = _mig_placements(group, f"{where}.mig.layout")
            except SimgpuError as err:
                msg = str(err).removeprefix(f"{err.field}: ").split(" (allowed: ")[0]
                raise SimgpuError(msg, field=f"{where}.mig.layout", allowed=err.allowed) from None
            if not placed and not group.mig.dynamic:
                raise SimgpuError("MIG is enabled but the layout is empty", field=f"{where}.mig.layout",
                                  allowed=["a layout", "dynamic: true (the operator creates instances on demand)"])
            if group.mig.dynamic and mode != "exclusive":
                raise SimgpuError(f"sharing {mode} is not available on dynamic-MIG GPUs (a re-laid instance "
                                  "has no replicas to keep)", field=f"{where}.sharing", allowed=["exclusive"])
            mig_profiles.update(p.profile for p in placed)
            any_mig = True
        else:
            all_mig = False
        if group.sharing in ("timeSlicing", "mps") and group.replicas is None:
            block = cfg.replicated(mode)
            if block is None or block.entry(GPU_RESOURCE) is None and not group.mig_enabled:
                raise SimgpuError(
                    f"sharing {mode} needs replicas: set {where}.replicas or sharing.{mode}.resources"
                    f"[{{name: {GPU_RESOURCE}, replicas: N}}]", field=f"{where}.replicas")
    strategy = cfg.effective_mig_strategy
    if any_mig and strategy == "none":
        raise SimgpuError("MIG-enabled GPUs need a MIG strategy", field="migStrategy", allowed=["single", "mixed"])
    if strategy == "single" and any(g.mig_enabled and g.mig.dynamic for g in cfg.gpus):
        raise SimgpuError("dynamic MIG creates instances of any profile: it needs the mixed strategy",
                          field="migStrategy", allowed=["mixed"])
    if strategy == "single" and any_mig and (not all_mig or len(mig_profiles) > 1):
        raise SimgpuError("the single strategy needs every GPU MIG-enabled with one profile "
                          f"(found {sorted(mig_profiles) or 'none'})", field="migStrategy", allowed=["mixed"])
    total = sum(g.count for g in cfg.gpus)
    if total > MAX_NODE_GPUS:
        raise SimgpuError(f"{total} GPUs on one node", field="gpus",
                          allowed=[f"at most {MAX_NODE_GPUS} GPUs in all (the sum of gpus[].count)"])
    _check_resource_names(cfg, mig_profiles)
    devices = resolve_devices(cfg, cfg.node_name or "", check_uuids=cfg.node_name is not None)
    fractional = any(cfg.sharing_mode(g) == "fractional" for g in cfg.gpus)
    if fractional:
        names = cfg.fractional.resources
        if len({names.gpu, names.memory, names.cores}) != 3:
            raise SimgpuError("fractional resource names must differ", field="fractional.resources")
        if _plain_gpu_resource_used(cfg, devices, names.gpu):
            raise SimgpuError(
                f"{names.gpu} is both the fractional slot resource and a whole-GPU/replica resource on this node;"
                " rename one (fractional.resources.gpu or sharing.<mode>.renameByDefault)",
                field="fractional.resources.gpu")


def _check_resource_names(cfg: NodeConfig, mig_profiles: set[str]) -> None:
    """Every sharing.<mode>.resources[].name is a resource this node has (a typo such as nvidia.com/gpuu
    would otherwise share nothing, silently), and no two entries are advertised under one name."""
    mode = _block_mode(cfg)
    block = cfg.replicated(mode) if mode else None
    if block is None:
        return
    known = [GPU_RESOURCE]
    if cfg.effective_mig_strategy == "mixed":
        known += sorted({mig_resource_name(p) for p in mig_profiles})
    advertised: dict[str, int] = {}
    for k, entry in enumerate(block.resources):
        where = f"sharing.{mode}.resources[{k}]"
        if entry.name.startswith(MIG_RESOURCE_PREFIX) and cfg.effective_mig_strategy == "single":
            raise SimgpuError(f"under migStrategy single, MIG devices are advertised as {GPU_RESOURCE}: "
                              f"select them under that name", field=f"{where}.name", allowed=known)
        if entry.name not in known:
            raise SimgpuError(f"{entry.name!r} is not a resource of this node", field=f"{where}.name", allowed=known)
        name = block.advertised_name(entry.name)
        if name in advertised:
            raise SimgpuError(f"{name!r} is also the advertised name of resources[{advertised[name]}]",
                              field=f"{where}.rename", allowed=["a name no other entry advertises"])
        advertised[name] = k


def _plain_gpu_resource_used(cfg: NodeConfig, devices: list[GpuDevice], name: str) -> bool:
    for dev in devices:
        if dev.sharing == "fractional":
            continue
        if dev.mig and cfg.effective_mig_strategy == "mixed":
            continue
        block = cfg.replicated(dev.sharing)
        if (block.advertised_name(GPU_RESOURCE) if block else GPU_RESOURCE) == name:
            return True
    return False


# --- devices lists: which GPUs / MIG devices a sharing.<mode>.resources entry selects --------------------------
TargetKey = tuple[int, int | None]  # (GPU index, position among its MIG devices or None for the whole GPU)


@dataclass(frozen=True)
class _PhysicalGpu:
    """One physical GPU before sharing is decided."""

    index: int
    group_index: int
    group: GpuGroup
    placements: tuple[_Placed, ...]
    position: int  # within its group (which `uuids` / `pciBusIds` entry is its own)

    def uuid(self, node_name: str) -> str:
        """The configured UUID, else the one derived from the node name and index (stable across restarts)."""
        return self.group.uuids[self.position] if self.group.uuids else gpu_uuid(node_name, self.index)

    @property
    def pci_bus_id(self) -> str:
        return self.group.pci_bus_ids[self.position] if self.group.pci_bus_ids else default_pci_bus_id(self.index)


def _layout(cfg: NodeConfig) -> list[_PhysicalGpu]:
    out: list[_PhysicalGpu] = []
    for gi, group in enumerate(cfg.gpus):
        placed = tuple(_mig_placements(group, f"gpus[{gi}].mig.layout")) if group.mig_enabled else ()
        first = len(out)
        out.extend(_PhysicalGpu(first + k, gi, group, placed, k) for k in range(group.count))
    return out


def _check_identities(layout: list[_PhysicalGpu], node_name: str) -> None:
    """A UUID or bus id names one GPU of the node: no two GPUs share one (configured or derived)."""
    for what, field, key in (("UUID", "uuids", lambda g: g.uuid(node_name)),
                             ("PCI bus id", "pciBusIds", lambda g: pci_key(g.pci_bus_id))):
        seen: dict[object, _PhysicalGpu] = {}
        for g in layout:
            other = seen.setdefault(key(g), g)
            if other is not g:
                value = g.uuid(node_name) if field == "uuids" else g.pci_bus_id
                raise SimgpuError(f"GPU {g.index} has the {what} {value!r} of GPU {other.index}",
                                  field=f"gpus[{g.group_index}].{field}",
                                  allowed=[f"a {what} unique on the node"])


def _block_mode(cfg: NodeConfig) -> str | None:
    return "timeSlicing" if cfg.sharing.time_slicing else "mps" if cfg.sharing.mps else None


class _Selector:
    """Resolves one entry's `devices` (a count or a list) to target keys, with one error per mistake."""

    def __init__(self, cfg: NodeConfig, layout: list[_PhysicalGpu], entry: ReplicatedResource, mode: str,
                 field: str, node_name: str, check_uuids: bool) -> None:
        self.layout, self.entry, self.mode, self.field = layout, entry, mode, field
        self.node_name, self.check_uuids = node_name, check_uuids
        mig_names = sorted({mig_resource_name(p.profile) for g in layout for p in g.placements})
        any_mig = bool(mig_names)
        single = cfg.effective_mig_strategy == "single"
        self.profile: str | None = None
        if entry.name == GPU_RESOURCE:
            self.whole = not (single and any_mig)  # under single, nvidia.com/gpu devices are the MIG devices
        elif entry.name.startswith(MIG_RESOURCE_PREFIX) and not single and entry.name in mig_names:
            self.whole = False
            self.profile = next(p.profile for g in layout for p in g.placements
                                if mig_resource_name(p.profile) == entry.name)
        elif entry.name.startswith(MIG_RESOURCE_PREFIX) and single:
            raise self.error(f"under migStrategy single, MIG devices are advertised as {GPU_RESOURCE}: "
                             f"select them under that name")
        else:
            raise self.error(f"{entry.name} has no devices on this node to select from",
                             allowed=[GPU_RESOURCE, *mig_names])

    def error(self, message: str, allowed: list | None = None) -> SimgpuError:
        return SimgpuError(message, field=self.field, allowed=allowed)

    def targets(self) -> list[TargetKey]:
        if self.whole:
            return [(g.index, None) for g in self.layout if not g.placements]
        return [(g.index, j) for g in self.layout for j, p in enumerate(g.placements)
                if self.profile is None or p.profile == self.profile]

    def _describe(self, key: TargetKey) -> str:
        return f"GPU {key[0]}" if key[1] is None else f"MIG device {key[0]}:{key[1]}"

    def _claimable(self, key: TargetKey) -> bool:
        return self.layout[key[0]].group.sharing in (None, self.mode)

    def select(self) -> list[TargetKey]:
        devices = self.entry.devices
        if isinstance(devices, int):
            eligible = [k for k in self.targets() if self._claimable(k)]
            if devices > len(eligible):
                raise self.error(f"asks for the first {devices} {self.entry.name} devices, but this node has "
                                 f"{len(eligible)} that can be {self.mode}",
                                 allowed=list(range(1, len(eligible) + 1)) or None)
            return eligible[:devices]
        seen: dict[TargetKey, str] = {}
        for ref in devices:
            for key in self._resolve_ref(ref):
                if key in seen:
                    raise self.error(f"{self._describe(key)} is listed twice (as {seen[key]} and {ref})")
                seen[key] = str(ref)
                group = self.layout[key[0]]
                if not self._claimable(key):
                    raise self.error(f"{self._describe(key)} is claimed twice: selected here for {self.mode}, but "
                                     f"gpus[{group.group_index}].sharing is {group.group.sharing}")
        return list(seen)

    def _gpu(self, i: int) -> _PhysicalGpu:
        if i >= len(self.layout):
            raise self.error(f"no GPU {i} on this node", allowed=list(range(len(self.layout))))
        return self.layout[i]

    def _resolve_ref(self, ref: DeviceRef) -> list[TargetKey]:
        if isinstance(ref, str) and ref.startswith("GPU-"):
            uuids = [g.uuid(self.node_name) for g in self.layout]
            if not self.check_uuids and ref not in uuids:
                return []  # derived UUIDs need the node name: checked when the plugin/daemon knows it
            if ref not in uuids:
                raise self.error(f"no GPU {ref} on node {self.node_name}", allowed=uuids)
            ref = uuids.index(ref)
        if isinstance(ref, int):
            gpu = self._gpu(ref)
            if self.whole:
                if gpu.placements:
                    names = sorted({mig_resource_name(p.profile) for p in gpu.placements})
                    raise self.error(f"GPU {ref} is MIG-enabled (gpus[{gpu.group_index}].mig): its devices are "
                                     f"{', '.join(names)}, not {self.entry.name}")
                return [(ref, None)]
            if not gpu.placements:
                raise self.error(f"GPU {ref} has MIG disabled, so it has no {self.entry.name} devices")
            keys = [(ref, j) for j, p in enumerate(gpu.placements) if self.profile in (None, p.profile)]
            if not keys:
                raise self.error(f"GPU {ref} has no {self.profile} MIG device",
                                 allowed=[p.profile for p in gpu.placements])
            return keys
        if self.whole:
            raise self.error(f"{ref} is a MIG device, but {self.entry.name} devices here are whole GPUs")
        if ref.startswith("MIG-"):
            if not self.check_uuids:
                return []
            found = [(g.index, j) for g in self.layout for j, p in enumerate(g.placements)
                     if mig_uuid(self.node_name, g.index, p.profile, p.start) == ref]
            if not found:
                raise self.error(f"no MIG device {ref} on node {self.node_name}")
            i, j = found[0]
        else:
            i, j = (int(x) for x in ref.split(":"))
            gpu = self._gpu(i)
            if not gpu.placements:
                raise self.error(f"GPU {i} has MIG disabled, so it has no MIG device {ref}")
            if j >= len(gpu.placements):
                raise self.error(f"GPU {i} has no MIG device {ref}",
                                 allowed=[f"{i}:{k}" for k in range(len(gpu.placements))])
        profile = self.layout[i].placements[j].profile
        if self.profile not in (None, profile):
            raise self.error(f"MIG device {i}:{j} is a {profile}, not a {self.profile}")
        return [(i, j)]


def resolve_devices(cfg: NodeConfig, node_name: str, check_uuids: bool = True) -> list[GpuDevice]:
    """Each GPU's sharing mode and replicas (and each MIG device's), after applying `devices` selections."""
    layout = _layout(cfg)
    _check_identities(layout, node_name)
    mode_b = _block_mode(cfg)
    block = cfg.replicated(mode_b) if mode_b else None
    chosen: set[tuple[str, int, int | None]] = set()  # (entry name, GPU index, MIG position)
    if block is not None:
        for k, entry in enumerate(block.resources):
            if not entry.selects_all:
                field = f"sharing.{mode_b}.resources[{k}].devices"
                for key in _Selector(cfg, layout, entry, mode_b, field, node_name, check_uuids).select():
                    chosen.add((entry.name, *key))

    def selected(entry: ReplicatedResource, key: TargetKey) -> bool:
        return entry.selects_all or (entry.name, *key) in chosen

    single = cfg.effective_mig_strategy == "single"
    gpu_entry = block.entry(GPU_RESOURCE) if block else None
    devices = []
    for g in layout:
        group, explicit = g.group, g.group.sharing
        if g.placements or g.group.mig_enabled:
            mode = explicit or (mode_b if block else "exclusive")
            fallback = _replicas(cfg, group, mode)
            instances = []
            for j, p in enumerate(g.placements):
                entry = block.entry(GPU_RESOURCE if single else mig_resource_name(p.profile)) if (
                    block is not None and mode == mode_b) else None
                if mode != "timeSlicing":
                    replicas = 1
                elif entry is None:
                    replicas = fallback
                else:
                    replicas = entry.replicas if selected(entry, (g.index, j)) else 1
                instances.append(MigInstance(mig_uuid(node_name, g.index, p.profile, p.start), p.profile, p.start,
                                             p.sms, p.mem_bytes, replicas))
            dynamic = group.mig is not None and group.mig.dynamic
            devices.append(GpuDevice(g.index, g.uuid(node_name), group.model, mode, fallback,
                                     tuple(instances), g.pci_bus_id, dynamic,
                                     group.mig.reconfigure_seconds if group.mig else DEFAULT_MIG_RECONFIGURE_S))
            continue
        key = (g.index, None)
        if explicit is not None:
            mode = explicit
        elif block is not None and (selected(gpu_entry, key) if gpu_entry is not None else group.replicas):
            mode = mode_b
        else:
            mode = "exclusive"  # selected by no sharing resource: a whole GPU, as in NVIDIA's plugin
        replicas = 1
        if mode in ("timeSlicing", "mps"):
            if group.replicas is not None:
                replicas = group.replicas
            elif mode == mode_b and gpu_entry is not None and selected(gpu_entry, key):
                replicas = gpu_entry.replicas
            else:
                k = block.resources.index(gpu_entry) if (mode == mode_b and gpu_entry is not None) else None
                where = f"list it in sharing.{mode}.resources[{k}].devices" if k is not None else (
                    f"set sharing.{mode}.resources[{{name: {GPU_RESOURCE}, replicas: N}}]")
                raise SimgpuError(f"GPU {g.index} has sharing {mode} but no replicas: set "
                                  f"gpus[{g.group_index}].replicas or {where}", field=f"gpus[{g.group_index}].replicas")
        devices.append(GpuDevice(g.index, g.uuid(node_name), group.model, mode, replicas, pci_bus_id=g.pci_bus_id))
    return devices

