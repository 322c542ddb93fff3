"""The node configuration: one versioned YAML file that says which emulated GPUs a node has and how they are
shared. Read by the device plugin (what to advertise) and the node daemon (what to emulate).

In the spirit of NVIDIA's k8s-device-plugin config (peers.md section 5): `version: v1`, and NVIDIA's
`sharing.timeSlicing|mps.{renameByDefault, failRequestsGreaterThanOne, resources[{name, replicas}]}` block
is accepted as is. fgpu adds per-GPU sharing modes, MIG layouts, fractional sharing, memory-quota mode and
time dilation. See docs/deviceplugin.md for the reference and deploy/examples/node-config/ for examples.

Pure: no Kubernetes, no gRPC. Every error is a SimgpuError naming the field (e.g. ``gpus[0].model``).
"""
from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pydantic
import yaml
from pydantic.alias_generators import to_camel

from simgpu.errors import SimgpuError

SharingMode = Literal["exclusive", "timeSlicing", "mps", "fractional"]
SHARING_MODES: tuple[str, ...] = ("exclusive", "timeSlicing", "mps", "fractional")
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DEFAULT_TOKEN_SECRET_FILE = "/etc/fgpu/token-secret"
# Namespace for uuid5-derived device UUIDs: fixed forever, so a node's UUIDs never change across restarts.
_UUID_NAMESPACE = uuid.UUID("6d1f3c1e-7c0a-5b8e-9a55-0f6d2b8f4a11")


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


# --- NVIDIA's sharing schema ------------------------------------------------------------------------------
class ReplicatedResource(_Model):
    """One entry of NVIDIA's `sharing.<mode>.resources`: advertise `replicas` devices per device of `name`."""

    name: str = pydantic.Field(min_length=1)
    rename: str | None = None
    replicas: int = pydantic.Field(ge=1)
    devices: Literal["all"] = "all"  # NVIDIA also allows index/UUID lists; fgpu sets sharing per GPU instead


class ReplicatedSharing(_Model):
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: list[ReplicatedResource] = pydantic.Field(min_length=1)

    @pydantic.field_validator("resources")
    @classmethod
    def _unique_names(cls, value: list[ReplicatedResource]) -> list[ReplicatedResource]:
        names = [r.name for r in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"resource listed twice: {', '.join(dupes)}")
        return value

    def entry(self, resource: str) -> ReplicatedResource | None:
        return next((r for r in self.resources if r.name == resource), None)

    def advertised_name(self, resource: str) -> str:
        """NVIDIA's rule: an explicit rename wins, else `<name>.shared` under renameByDefault."""
        entry = self.entry(resource)
        if entry is not None and entry.rename:
            return entry.rename
        return f"{resource}.shared" if self.rename_by_default else resource


class Sharing(_Model):
    time_slicing: ReplicatedSharing | None = None
    mps: ReplicatedSharing | None = None

    @pydantic.model_validator(mode="after")
    def _one_mode(self) -> Sharing:
        if self.time_slicing is not None and self.mps is not None:
            raise ValueError("timeSlicing and mps are mutually exclusive at node level (as in NVIDIA's plugin);"
                             " set `sharing` per GPU group instead")
        return self


# --- fgpu additions ---------------------------------------------------------------------------------------
class FractionalResources(_Model):
    """Resource names of fgpu's fractional mode; defaults are HAMi's (peers.md section (c))."""

    gpu: str = GPU_RESOURCE  # device-plugin resource: vGPU slots, `splitCount` per physical GPU
    memory: str = "nvidia.com/gpumem"  # node-level extended resource, MiB
    cores: str = "nvidia.com/gpucores"  # node-level extended resource, percent per GPU (100 each)


class Fractional(_Model):
    resources: FractionalResources = FractionalResources()
    split_count: int = pydantic.Field(default=10, ge=1, le=1000)  # HAMi's deviceSplitCount


class MigConfig(_Model):
    mode: Literal["enabled", "disabled"] = "enabled"
    # Profiles to create, e.g. ["3g.40gb", "4g.40gb"], or "all-<profile>" (as mig-parted's all-1g.10gb).
    layout: list[str] | str = []


class GpuGroup(_Model):
    model: str
    count: int = pydantic.Field(default=1, ge=1, le=64)
    sharing: SharingMode | None = None  # default: the node-level NVIDIA sharing block's mode, else exclusive
    replicas: int | None = pydantic.Field(default=None, ge=1)  # overrides sharing.<mode>.resources replicas
    mig: MigConfig | None = None

    @pydantic.field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from simgpu.catalog import get_gpu

        return get_gpu(value).name  # SimgpuError is a ValueError: pydantic reports it at gpus[i].model

    @property
    def mig_enabled(self) -> bool:
        return self.mig is not None and self.mig.mode == "enabled"


# --- the resolved view: concrete devices with UUIDs ---------------------------------------------------------
@dataclass(frozen=True)
class MigInstance:
    uuid: str
    profile: str  # "1g.10gb"
    start: int  # first memory slice of its placement
    sms: int
    mem_bytes: int


@dataclass(frozen=True)
class GpuDevice:
    index: int  # node-wide, in config order
    uuid: str  # "GPU-<uuid5>"
    model: str  # canonical catalog name
    sharing: str  # one of SHARING_MODES
    replicas: int  # 1 unless timeSlicing / mps
    mig: tuple[MigInstance, ...] = ()

    @property
    def spec(self):  # -> simgpu.catalog.GPUSpec
        from simgpu.catalog import get_gpu

        return get_gpu(self.model)


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{index}')}"


def mig_uuid(node_name: str, gpu_index: int, profile: str, start: int) -> str:
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{gpu_index}/mig/{profile}@{start}')}"


class NodeConfig(_Model):
    version: Literal["v1"]
    node_name: str | None = None  # optional; else --node-name / $NODE_NAME / hostname (resolve_node_name)
    gpus: list[GpuGroup] = pydantic.Field(min_length=1)
    mig_strategy: Literal["none", "single", "mixed"] | None = None  # default: mixed if any MIG GPU, else none
    memory_quota: Literal["hard", "oversubscribe"] = "hard"
    time_dilation: float = pydantic.Field(default=1.0, ge=1e-3)
    token_secret_file: str = DEFAULT_TOKEN_SECRET_FILE
    state_dir: str | None = None  # the device plugin's state (allocation journal); see deviceplugin/statedir.py
    sharing: Sharing = Sharing()
    fractional: Fractional = Fractional()

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        _check_groups(self)
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
        """The node's GPUs with stable UUIDs (uuid5 of node name + index) and their MIG instances."""
        devices: list[GpuDevice] = []
        for gi, group in enumerate(self.gpus):
            mode = self.sharing_mode(group)
            for _ in range(group.count):
                index = len(devices)
                instances: tuple[MigInstance, ...] = ()
                if group.mig_enabled:
                    instances = tuple(
                        MigInstance(mig_uuid(node_name, index, p.profile, p.start), p.profile, p.start, p.sms,
                                    p.mem_bytes)
                        for p in _mig_placements(group, f"gpus[{gi}].mig.layout")
                    )
                devices.append(GpuDevice(index, gpu_uuid(node_name, index), group.model, mode,
                                         _replicas(self, group, mode), instances))
        return devices


def _replicas(cfg: NodeConfig, group: GpuGroup, mode: str) -> int:
    if mode not in ("timeSlicing", "mps"):
        return 1
    if group.replicas is not None:
        return group.replicas
    block = cfg.replicated(mode)
    entry = block.entry(GPU_RESOURCE) if block is not None else None
    return entry.replicas if entry is not None else 1


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
    by_name = {p.name: p for p in mig.profiles(spec)}
    placed = mig.check_layout(spec, names)
    out = []
    for p in placed:
        prof = p.profile if isinstance(p.profile, str) else p.profile.name
        info = by_name[prof]
        out.append(_Placed(prof, int(p.start), info.sms, info.mem_bytes))
    return out


def _check_groups(cfg: NodeConfig) -> None:
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
            if not placed:
                raise SimgpuError("MIG is enabled but the layout is empty", field=f"{where}.mig.layout")
            mig_profiles.update(p.profile for p in placed)
            any_mig = True
        else:
            all_mig = False
        if mode in ("timeSlicing", "mps") and group.replicas is None:
            block = cfg.replicated(mode)
            if block is None or block.entry(GPU_RESOURCE) is None and not group.mig_enabled:
                raise SimgpuError(
                    f"sharing {mode} needs replicas: set {where}.replicas or sharing.{mode}.resources"
                    f"[{{name: {GPU_RESOURCE}, replicas: N}}]", field=f"{where}.replicas")
    strategy = cfg.effective_mig_strategy
    if any_mig and strategy == "none":
        raise SimgpuError("MIG-enabled GPUs need a MIG strategy", field="migStrategy", allowed=["single", "mixed"])
    if strategy == "single" and any_mig and (not all_mig or len(mig_profiles) > 1):
        raise SimgpuError("the single strategy needs every GPU MIG-enabled with one profile "
                          f"(found {sorted(mig_profiles) or 'none'})", field="migStrategy", allowed=["mixed"])
    fractional = any(cfg.sharing_mode(g) == "fractional" for g in cfg.gpus)
    if fractional:
        names = cfg.fractional.resources
        if len({names.gpu, names.memory, names.cores}) != 3:
            raise SimgpuError("fractional resource names must differ", field="fractional.resources")
        others = any(cfg.sharing_mode(g) != "fractional" for g in cfg.gpus)
        if others and _plain_gpu_resource_used(cfg, names.gpu):
            raise SimgpuError(
                f"{names.gpu} is both the fractional slot resource and a whole-GPU/replica resource on this node;"
                " rename one (fractional.resources.gpu or sharing.<mode>.renameByDefault)",
                field="fractional.resources.gpu")


def _plain_gpu_resource_used(cfg: NodeConfig, name: str) -> bool:
    for group in cfg.gpus:
        mode = cfg.sharing_mode(group)
        if mode == "fractional":
            continue
        if group.mig_enabled and cfg.effective_mig_strategy == "mixed":
            continue
        block = cfg.replicated(mode)
        if (block.advertised_name(GPU_RESOURCE) if block else GPU_RESOURCE) == name:
            return True
    return False


# --- loading ------------------------------------------------------------------------------------------------
def _loc(parts: tuple) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(config)"


def _first_error(err: pydantic.ValidationError) -> SimgpuError:
    e = err.errors()[0]
    loc = _loc(tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))))
    cause = e.get("ctx", {}).get("error")
    if isinstance(cause, SimgpuError):
        if loc == "(config)":  # raised by a cross-field check, which names its own field
            return cause
        msg = str(cause)
        prefix = f"{cause.field}: " if cause.field else ""
        msg = msg.removeprefix(prefix).split(" (allowed: ")[0]
        return SimgpuError(msg, field=loc, allowed=cause.allowed)
    msg = e["msg"].removeprefix("Value error, ")
    allowed = None
    if e["type"] in ("literal_error", "enum") and "expected" in e.get("ctx", {}):
        allowed = [a.strip().strip("'") for a in str(e["ctx"]["expected"]).replace(" or ", ",").split(",")]
        msg = f"{e.get('input')!r} is not allowed"
    elif e["type"] == "extra_forbidden":
        msg = "unknown field"
    return SimgpuError(msg, field=loc, allowed=allowed)


def parse_node_config(doc: object) -> NodeConfig:
    """Validate an already-parsed YAML document."""
    if not isinstance(doc, dict):
        raise SimgpuError("the node config must be a YAML mapping", field="(config)")
    if "version" not in doc:
        raise SimgpuError("missing", field="version", allowed=["v1"])
    try:
        return NodeConfig.model_validate(doc)
    except pydantic.ValidationError as err:
        raise _first_error(err) from None


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SimgpuError(f"cannot read {path}: {err.strerror}", field="--config") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SimgpuError(f"{path} is not valid YAML: {err}", field="--config") from None
    return parse_node_config(doc)


def resolve_node_name(cfg: NodeConfig, explicit: str | None = None) -> str:
    """The node name used for UUIDs: --node-name, else the config's nodeName, else $NODE_NAME, else hostname.
    The device plugin and the daemon must agree, so both call this."""
    return explicit or cfg.node_name or os.environ.get("NODE_NAME") or socket.gethostname()

