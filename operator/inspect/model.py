"""The reports `fgpu inspect` prints, as frozen dataclasses: one shape shared by the builder (`view`) and the
renderers (`render`). `-o json` / `-o yaml` are exactly these fields with camelCase keys (documented in
docs/inspect.md, versioned by `version`); pydantic dataclasses so a document reads back into the same objects
(`load_report`), which keeps the documented format honest."""
from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic.alias_generators import to_camel
from pydantic.dataclasses import dataclass

from fgpu_contracts.errors import InputError

_CONFIG = pydantic.ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
VERSION = "v1"
Priority = Literal["high", "low"]


@dataclass(frozen=True, config=_CONFIG)
class Usage:
    """An amount of GPU: compute in milli-GPU, memory in bytes, SMs in percent of one GPU (so a node's
    capacity is 1000 milli-GPU and 100 % per GPU)."""

    milli_gpu: int = 0
    mem_bytes: int = 0
    sm_pct: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.milli_gpu + other.milli_gpu, self.mem_bytes + other.mem_bytes,
                     self.sm_pct + other.sm_pct)


@dataclass(frozen=True, config=_CONFIG)
class Share:
    """One container's share of one device (GPU or MIG instance), unset fields resolved to what they mean
    (no memory limit: the whole device's memory; no SM limit: 100 %)."""

    namespace: str
    pod: str
    container: str
    priority: Priority
    usage: Usage


@dataclass(frozen=True, config=_CONFIG)
class MigView:
    uuid: str
    profile: str
    start: int
    mem_bytes: int
    sms: int
    healthy: bool
    allocated: Usage  # of this instance: 1000 milli-GPU, 100 % = the whole instance
    shares: tuple[Share, ...] = ()


@dataclass(frozen=True, config=_CONFIG)
class MigChangeView:
    """A dynamic-MIG change of one GPU: the desired layout, its phase (Pending, Applying, Done, Failed), when
    it started, the pods held for it, and the node's message."""

    id: str
    phase: str
    layout: tuple[str, ...]  # "<profile>@<start>", in slice order
    started: str
    pods: tuple[str, ...] = ()
    message: str = ""


@dataclass(frozen=True, config=_CONFIG)
class GpuView:
    index: int
    uuid: str
    model: str
    short_name: str
    mem_bytes: int
    sms: int
    sharing: str
    replicas: int
    healthy: bool
    xid: int | None
    allocated: Usage  # shares of the GPU itself, plus its MIG instances' weighted by their SMs
    shares: tuple[Share, ...] = ()
    mig: tuple[MigView, ...] = ()
    mig_dynamic: bool = False  # its idle MIG instances may be re-laid (docs/dynamic-mig.md)
    mig_change: MigChangeView | None = None  # its current (or last) re-layout, from the GPUNode's status


@dataclass(frozen=True, config=_CONFIG)
class NodeView:
    name: str
    ready: bool
    schedulable: bool
    source: Literal["annotation", "gpunode"]  # where the inventory came from
    mig_strategy: str
    capacity: Usage
    allocated: Usage
    pods: tuple[str, ...]  # namespace/name of the pods holding a share here
    gpus: tuple[GpuView, ...]


@dataclass(frozen=True, config=_CONFIG)
class PendingPod:
    namespace: str
    name: str
    reason: str  # of the PodScheduled=False condition ("" when the scheduler has not written one yet)
    message: str


@dataclass(frozen=True, config=_CONFIG)
class Problem:
    """Something that could not be read, on one object; the rest of the report stands."""

    object: str  # "pod ns/name" or "node name"
    message: str


@dataclass(frozen=True, config=_CONFIG)
class Summary:
    nodes: int
    gpus: int
    unhealthy_gpus: int
    pods: int
    pending: int
    capacity: Usage
    allocated: Usage


@dataclass(frozen=True, config=_CONFIG, kw_only=True)
class ClusterReport:
    kind: Literal["ClusterReport"] = "ClusterReport"
    version: Literal["v1"] = VERSION
    summary: Summary
    nodes: tuple[NodeView, ...]
    pending: tuple[PendingPod, ...] = ()
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True, config=_CONFIG)
class PodDevice:
    """A device one container of the pod was given, located on its node's inventory (index, model and MIG
    profile are None when the node no longer lists the UUID)."""

    container: str
    uuid: str
    gpu_index: int | None
    model: str | None
    mig_profile: str | None
    priority: Priority
    usage: Usage


@dataclass(frozen=True, config=_CONFIG)
class SchedulingEvent:
    reason: str
    message: str
    count: int
    last_seen: str | None


PodState = Literal["scheduled", "pending", "bound", "finished"]


@dataclass(frozen=True, config=_CONFIG, kw_only=True)
class PodReport:
    """Where a pod went, or why not. state: scheduled (holds the devices listed), pending (not bound: see
    reason/message/event), bound (on a node without an fgpu assignment), finished (Succeeded/Failed: its
    devices are released)."""

    kind: Literal["PodReport"] = "PodReport"
    version: Literal["v1"] = VERSION
    namespace: str
    name: str
    phase: str
    state: PodState
    node: str | None
    scheduler_name: str
    devices: tuple[PodDevice, ...] = ()
    reason: str = ""  # PodScheduled=False reason
    message: str = ""  # PodScheduled=False message, kube-scheduler's "0/N nodes are available: ..."
    event: SchedulingEvent | None = None  # the latest FailedScheduling event
    request: dict[str, Any] | None = None  # fgpu.io/request: what the webhook understood the pod to ask


@dataclass(frozen=True, config=_CONFIG, kw_only=True)
class CheckReport:
    """`fgpu inspect check`: fgpu's invariants on the cluster (operator/inspect/audit.py says which)."""

    kind: Literal["CheckReport"] = "CheckReport"
    version: Literal["v1"] = VERSION
    ok: bool
    summary: Summary
    violations: tuple[str, ...] = ()
    daemons: tuple[str, ...] = ()  # nodes whose daemon's open contexts were checked too (--daemon-metrics)


Report = ClusterReport | PodReport | CheckReport
_KINDS = {"ClusterReport": ClusterReport, "PodReport": PodReport, "CheckReport": CheckReport}


def report_document(report: Report) -> dict:
    """The report as JSON-ready data with camelCase keys, in field order: what -o json/yaml print."""
    return pydantic.TypeAdapter(type(report)).dump_python(report, mode="json", by_alias=True)


def load_report(document: dict) -> Report:
    """A document printed by -o json/yaml back as the report (InputError if it is not one)."""
    kind = _KINDS.get(document.get("kind")) if isinstance(document, dict) else None
    if kind is None:
        raise InputError("not an fgpu inspect report", field="kind", allowed=_KINDS)
    try:
        return pydantic.TypeAdapter(kind).validate_python(document)
    except pydantic.ValidationError as err:
        e = err.errors()[0]
        raise InputError(f"{e['msg']} at {'.'.join(str(p) for p in e['loc'])}", field=kind.__name__) from None
