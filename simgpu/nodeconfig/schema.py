"""The node configuration's parts: NVIDIA's sharing block, fgpu's additions, and the resolved device view.

Pure pydantic models that need no other rule; the whole NodeConfig, whose rules span these parts, lives in
`resolve.py` with those rules (so neither module imports the other back), loading in `load.py`.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

import pydantic
from pydantic.alias_generators import to_camel

from fgpu_contracts.keys import GPU_CORES_RESOURCE, GPU_MEMORY_RESOURCE, GPU_RESOURCE
from fgpu_contracts.policy import SchedulingPolicySpec
from simgpu.errors import SimgpuError

SharingMode = Literal["exclusive", "timeSlicing", "mps", "fractional"]
SHARING_MODES: tuple[str, ...] = ("exclusive", "timeSlicing", "mps", "fractional")
DEFAULT_TOKEN_SECRET_FILE = "/etc/fgpu/token-secret"
# Namespace for uuid5-derived device UUIDs: fixed forever, so a node's UUIDs never change across restarts.
_UUID_NAMESPACE = uuid.UUID("6d1f3c1e-7c0a-5b8e-9a55-0f6d2b8f4a11")


class ConfigModel(pydantic.BaseModel):
    """Frozen, unknown fields are errors, camelCase in YAML (NVIDIA's spelling). Strict: `count: true` is not
    1 and `timeDilation: "2"` is not 2; no nan or inf where a number is asked for."""

    model_config = pydantic.ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, strict=True,
        allow_inf_nan=False,
    )


#: Replicas per device (timeSlicing / mps): each replica is one device the plugin lists to the kubelet in
#: every ListAndWatch answer and keeps in memory, so 10^8 of them would take gigabytes and never start.
#: NVIDIA's plugin sets no bound; 1000 is HAMi's deviceSplitCount bound here too (fractional.splitCount).
MAX_REPLICAS = 1000
REPLICAS_WHY = "each replica is a device the plugin lists to the kubelet"
#: timeDilation: wall time per emulated second. 10^4 makes a 1 ms kernel take 10 s of wall time.
MAX_TIME_DILATION = 1e4
#: An extended resource name as Kubernetes accepts it: <domain>/<name> (a DNS subdomain and a qualified name).
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
RESOURCE_NAME_ALLOWED = "<domain>/<name>, e.g. example.com/gpu.shared"


def _replicas_in_range(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= MAX_REPLICAS:
        raise SimgpuError(f"{value} replicas", allowed=[f"1..{MAX_REPLICAS} ({REPLICAS_WHY})"])
    return value


def _resource_name(value: str | None) -> str | None:
    if value is not None and not _RESOURCE_NAME.fullmatch(value):
        raise SimgpuError(f"{value!r} is not an extended resource name", allowed=[RESOURCE_NAME_ALLOWED])
    return value


# --- NVIDIA's sharing schema ------------------------------------------------------------------------------
DeviceRef = int | str  # a GPU index, "<gpu>:<mig>" (a MIG device by position), "GPU-<uuid>" or "MIG-<uuid>"
DEVICES_ALLOWED = ["all", "a count N >= 1 (the first N devices)",
                   "a list of GPU indices, '<gpu>:<mig>' MIG indices, GPU-<uuid> or MIG-<uuid>"]
_MIG_INDEX = re.compile(r"(\d+):(\d+)")


def _device_ref(item: object, k: int) -> DeviceRef:
    """One list entry of `devices`, in canonical form (NVIDIA's ReplicaDeviceRef forms; fgpu checks them)."""
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise ValueError(f"item {k}: {item!r} is not a GPU index, MIG index or UUID")
    if isinstance(item, int) or item.isdecimal():
        if int(item) < 0:
            raise ValueError(f"item {k}: a GPU index is >= 0, not {item}")
        return int(item)
    if m := _MIG_INDEX.fullmatch(item):
        return f"{int(m[1])}:{int(m[2])}"
    prefix = item[:4].upper()
    if prefix in ("GPU-", "MIG-"):
        try:
            return f"{prefix}{uuid.UUID(item[4:])}"
        except ValueError:
            pass
    raise ValueError(f"item {k}: {item!r} is not a GPU index, '<gpu>:<mig>' MIG index, GPU-<uuid> or MIG-<uuid>")


def _devices(value: object) -> str | int | tuple[DeviceRef, ...]:
    if value == "all":
        return "all"
    if isinstance(value, bool) or not isinstance(value, int | list | tuple):
        raise SimgpuError(f"{value!r} is not a device selection", allowed=DEVICES_ALLOWED)
    if isinstance(value, int):
        if value < 1:
            raise SimgpuError(f"a device count is >= 1, not {value}", allowed=DEVICES_ALLOWED)
        return value
    if not value:
        raise SimgpuError("an empty list selects no device; leave the resource out instead",
                          allowed=DEVICES_ALLOWED)
    refs = tuple(_device_ref(item, k) for k, item in enumerate(value))
    dupes = sorted({str(r) for r in refs if refs.count(r) > 1})
    if dupes:
        raise ValueError(f"listed twice: {', '.join(dupes)}")
    return refs


class ReplicatedResource(ConfigModel):
    """One entry of NVIDIA's `sharing.<mode>.resources`: advertise `replicas` devices per device of `name`.
    `devices` selects which ones (NVIDIA's schema: all, a count, or a list); devices of `name` left out stay
    whole, under `name` (NVIDIA's rule, internal/rm/device_map.go)."""

    name: str = pydantic.Field(min_length=1)  # which names this node has is checked in resolve.check_groups
    rename: str | None = None
    replicas: int
    devices: Literal["all"] | int | tuple[DeviceRef, ...] = "all"

    @pydantic.field_validator("devices", mode="before")
    @classmethod
    def _parse_devices(cls, value: object) -> object:
        return _devices(value)

    _replicas = pydantic.field_validator("replicas")(_replicas_in_range)
    _rename = pydantic.field_validator("rename")(_resource_name)

    @property
    def selects_all(self) -> bool:
        return self.devices == "all"


class ReplicatedSharing(ConfigModel):
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


class Sharing(ConfigModel):
    time_slicing: ReplicatedSharing | None = None
    mps: ReplicatedSharing | None = None

    @pydantic.model_validator(mode="after")
    def _one_mode(self) -> Sharing:
        if self.time_slicing is not None and self.mps is not None:
            raise ValueError("timeSlicing and mps are mutually exclusive at node level (as in NVIDIA's plugin);"
                             " set `sharing` per GPU group instead")
        return self


# --- fgpu additions ---------------------------------------------------------------------------------------
class FractionalResources(ConfigModel):
    """Resource names of fgpu's fractional mode; defaults are HAMi's (peers.md section (c))."""

    gpu: str = GPU_RESOURCE  # device-plugin resource: vGPU slots, `splitCount` per physical GPU
    memory: str = GPU_MEMORY_RESOURCE  # node-level extended resource, MiB
    cores: str = GPU_CORES_RESOURCE  # node-level extended resource, percent per GPU (100 each)

    _names = pydantic.field_validator("gpu", "memory", "cores")(_resource_name)


class Fractional(ConfigModel):
    resources: FractionalResources = FractionalResources()
    split_count: int = pydantic.Field(default=10, ge=1, le=1000)  # HAMi's deviceSplitCount


# A high-priority pod's slowdown bound when its grant names none: the cluster's default (SchedulingPolicy).
DEFAULT_SLO_SLOWDOWN: float = SchedulingPolicySpec.model_fields["default_slo_slowdown"].default


class Qos(ConfigModel):
    """The node daemon's quality of service: whether it enforces priorities (a low-priority context runs only
    while no high-priority one has work, as AntMan and HAMi's CUDA_TASK_PRIORITY do), and the slowdown
    bound of high-priority pods whose grant carries none (pods not placed by fgpu's scheduler)."""

    priorities: bool = True
    slo_slowdown: float = pydantic.Field(default=DEFAULT_SLO_SLOWDOWN, gt=1.0, le=100.0)


#: Seconds one dynamic-MIG change of a GPU takes (destroying its idle GIs/CIs and creating the new ones), as
#: the node daemon emulates it. No GPU spec data gives a figure: an assumption (docs/dynamic-mig.md).
DEFAULT_MIG_RECONFIGURE_S = 2.0


class MigConfig(ConfigModel):
    mode: Literal["enabled", "disabled"] = "enabled"
    # Profiles to create, e.g. ["3g.40gb", "4g.40gb"], or "all-<profile>" (as mig-parted's all-1g.10gb).
    layout: list[str] | str = []
    #: The operator may re-lay the GPU's idle instances on demand (docs/dynamic-mig.md); `layout` is then the
    #: starting one (may be empty). False: the layout is fixed.
    dynamic: bool = False
    reconfigure_seconds: float = pydantic.Field(default=DEFAULT_MIG_RECONFIGURE_S, gt=0.0, le=600.0)  # floats: pydantic versions render int bounds differently

    @pydantic.model_validator(mode="after")
    def _no_layout_when_disabled(self) -> MigConfig:
        if self.mode == "disabled" and self.layout:
            raise SimgpuError("a layout with MIG disabled would be ignored: the GPU stays whole",
                              field="layout", allowed=["mode: enabled", "no layout"])
        if self.mode == "disabled" and self.dynamic:
            raise SimgpuError("dynamic MIG needs MIG enabled", field="dynamic", allowed=["mode: enabled"])
        return self


#: A GPU's UUID as NVML and `nvidia-smi -L` print it; a PCI bus id as lspci (`0000:3b:00.0`) or NVML
#: (`00000000:3B:00.0`) print it: domain, bus, device (0-1f), function (0-7).
_GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PCI_BUS_ID = re.compile(r"([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):([0-9a-fA-F]{2}):([01][0-9a-fA-F])\.([0-7])")
UUID_ALLOWED = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lowercase hex (as nvidia-smi -L prints it)"
PCI_ALLOWED = "domain:bus:device.function, e.g. 0000:3b:00.0 or 00000000:3B:00.0"


def pci_key(bus_id: str) -> tuple[int, int, int, int]:
    """A bus id as numbers, so `0000:3b:00.0` and `00000000:3B:00.0` are one device."""
    m = _PCI_BUS_ID.fullmatch(bus_id)
    return (int(m[1], 16), int(m[2], 16), int(m[3], 16), int(m[4]))


class GpuGroup(ConfigModel):
    model: str
    count: int = pydantic.Field(default=1, ge=1, le=64)
    sharing: SharingMode | None = None  # default: the node-level NVIDIA sharing block's mode, else exclusive
    replicas: int | None = None  # overrides sharing.<mode>.resources replicas
    mig: MigConfig | None = None
    #: The group's GPUs' identities, one per GPU in order, as a real node's (to mirror its inventory and
    #: test UUID-pinned pods); default: UUIDs derived from the node name and index, bus ids from the index.
    uuids: list[str] | None = None
    pci_bus_ids: list[str] | None = None

    _replicas = pydantic.field_validator("replicas")(_replicas_in_range)

    @pydantic.field_validator("uuids", "pci_bus_ids")
    @classmethod
    def _identity_form(cls, value: list[str] | None, info: pydantic.ValidationInfo) -> list[str] | None:
        pattern, what, allowed = ((_GPU_UUID, "GPU UUID", UUID_ALLOWED) if info.field_name == "uuids"
                                  else (_PCI_BUS_ID, "PCI bus id", PCI_ALLOWED))
        bad = next((v for v in value or () if not pattern.fullmatch(v)), None)
        if bad is not None:
            raise SimgpuError(f"{bad!r} is not a {what}", allowed=[allowed])
        return value

    @pydantic.model_validator(mode="after")
    def _one_identity_per_gpu(self) -> GpuGroup:
        for name, given in (("uuids", self.uuids), ("pciBusIds", self.pci_bus_ids)):
            if given is not None and len(given) != self.count:
                raise SimgpuError(f"{len(given)} {name} for {self.count} GPUs", field=name,
                                  allowed=[f"exactly count ({self.count}) entries, one per GPU in order"])
        return self

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
    replicas: int = 1  # > 1: time-sliced, per sharing.timeSlicing.resources (or the GPU group's replicas)


@dataclass(frozen=True)
class GpuDevice:
    index: int  # node-wide, in config order
    uuid: str  # the group's `uuids` entry, else "GPU-<uuid5>"
    model: str  # canonical catalog name
    sharing: str  # one of SHARING_MODES
    replicas: int  # 1 unless timeSlicing / mps
    mig: tuple[MigInstance, ...] = ()
    pci_bus_id: str = ""  # the group's `pciBusIds` entry, else `default_pci_bus_id(index)`
    mig_dynamic: bool = False  # MIG mode whose idle instances may be re-laid (mig.dynamic); `mig` may be empty
    mig_reconfigure_s: float = DEFAULT_MIG_RECONFIGURE_S

    @property
    def mig_mode(self) -> bool:
        return bool(self.mig) or self.mig_dynamic

    @property
    def spec(self):  # -> simgpu.catalog.GPUSpec
        from simgpu.catalog import get_gpu

        return get_gpu(self.model)


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{index}')}"


def default_pci_bus_id(index: int) -> str:
    """An emulated GPU's bus id when the config gives none: bus index + 1 (NVML's 8-digit domain form)."""
    return f"00000000:{index + 1:02X}:00.0"


def mig_uuid(node_name: str, gpu_index: int, profile: str, start: int) -> str:
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{gpu_index}/mig/{profile}@{start}')}"
