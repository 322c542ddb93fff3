"""A node's GPUs as its device plugin publishes them, for the scheduler: the `fgpu.io/gpu-inventory` node
annotation (JSON, v1) and the GPUNode custom resource whose spec is the same inventory (plus a summary for
`kubectl get`).

The annotation needs no CRD installed and travels with the Node object the scheduler already watches; the
GPUNode (group fgpu.io, v1alpha1, cluster-scoped, named after its node; deploy/crds/gpunode.yaml) adds a
status the operator owns: what it allocated on each GPU, and conditions. The plugin writes both for one
release, then only the GPUNode. Inventory v1 on the wire:

    {"version": "v1", "node": str, "migStrategy": str, "memoryQuota": str, "timeDilation": float,
     "resources": {name: device count}, "nodeResources": {fractional memory/cores resource: amount},
     "gpus": [{"index", "uuid", "model", "shortName", "memBytes", "sms", "sharing", "replicas",
               "healthy", "xid", "pciBusId", "mig": [{"uuid", "profile", "start", "memBytes", "sms", "healthy"}],
               "migDynamic": bool, "migChange": {"id", "phase", "message"} | null}]}

Dynamic MIG (docs/dynamic-mig.md) is a hand-shake on the GPUNode: the operator writes the desired layout of a
`migDynamic` GPU in status.migChanges (one change id per GPU at a time), the node applies it and reports
how far it got in that GPU's spec `migChange` (Applying, then Done with the new `mig` list, or Failed).
"""
from __future__ import annotations

import json
from typing import Literal

import pydantic

from fgpu_contracts.assignment import DeviceShare
from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import CRD_API_VERSION, GPUNODE_KIND, INVENTORY
from fgpu_contracts.wire import Condition, ObjectMeta, WireModel, parse_json, without_derived

SharingMode = Literal["exclusive", "timeSlicing", "mps", "fractional"]
#: How far the node got with a MIG change: Applying (instances being destroyed and created, unavailable),
#: Done (spec.gpus[].mig is the new layout), Failed (refused or broke; `mig` says what the GPU has).
NodeMigPhase = Literal["Applying", "Done", "Failed"]
#: A change as the operator tracks it: Pending (written, the node has not taken it up yet), then the node's.
MigChangePhase = Literal["Pending", "Applying", "Done", "Failed"]


class MigDevice(WireModel):
    """One MIG instance of a GPU, where its memory slices start, and whether it (and its GPU) is healthy."""

    uuid: str = pydantic.Field(min_length=1)
    profile: str = pydantic.Field(min_length=1)  # "3g.40gb"
    start: int = pydantic.Field(ge=0)
    mem_bytes: int = pydantic.Field(ge=1)
    sms: int = pydantic.Field(ge=1)
    healthy: bool = True


class MigChangeReport(WireModel):
    """The node's answer to the GPU's MIG change `id` (GPUNode status.migChanges)."""

    id: str = pydantic.Field(min_length=1)
    phase: NodeMigPhase
    message: str = ""


class GpuInfo(WireModel):
    """One physical GPU: identity, size, how it is shared, health (the last XID error that made it unhealthy)."""

    index: int = pydantic.Field(ge=0)
    uuid: str = pydantic.Field(min_length=1)
    model: str = pydantic.Field(min_length=1)  # catalog name, "H100-SXM5-80GB"
    short_name: str = pydantic.Field(min_length=1)  # "H100"
    mem_bytes: int = pydantic.Field(ge=1)
    sms: int = pydantic.Field(ge=1)
    sharing: SharingMode
    replicas: int = pydantic.Field(ge=1)  # time-slicing/MPS replicas, or fractional slots
    healthy: bool = True
    xid: int | None = None
    mig: tuple[MigDevice, ...] = ()
    pci_bus_id: str | None = None  # "00000000:3B:00.0" (NVML's form) or "0000:3b:00.0"; None from older plugins
    mig_dynamic: bool = False  # node config `mig: {dynamic: true}`: the operator may re-lay its idle instances
    mig_change: MigChangeReport | None = None  # the node's report on the last MIG change it was asked for

    @pydantic.model_serializer(mode="wrap")
    def _static_mig_unsaid(self, handler):
        """A GPU without dynamic MIG is written without those fields: its document is the one plugins wrote
        before they existed (byte for byte, so an unchanged inventory is still a no-op patch)."""
        data = handler(self)
        if not self.mig_dynamic and self.mig_change is None:
            for key in ("migDynamic", "migChange", "mig_dynamic", "mig_change"):
                data.pop(key, None)
        return data


class Inventory(WireModel):
    version: Literal["v1"] = "v1"
    node: str = pydantic.Field(min_length=1)
    mig_strategy: Literal["none", "single", "mixed"]
    memory_quota: Literal["hard", "oversubscribe"]
    time_dilation: float = pydantic.Field(gt=0)
    resources: dict[str, int]  # device-plugin resource -> devices advertised
    node_resources: dict[str, int]  # fractional mode's node-level resources (memory MiB, cores %)
    gpus: tuple[GpuInfo, ...]


def dump_inventory(inv: Inventory) -> str:
    """The annotation value: compact, keys sorted, so an unchanged inventory is byte-identical (no-op patch).
    A GPU without dynamic MIG leaves its `migDynamic`/`migChange` out (GpuInfo's serializer)."""
    return json.dumps(inv.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True)


def parse_inventory(text: str | bytes) -> Inventory:
    """Validate an annotation value; InputError(field=`fgpu.io/gpu-inventory`) if it is not one."""
    return parse_json(Inventory, text, INVENTORY)


# --- the GPUNode custom resource ----------------------------------------------------------------------------
class GpuAllocation(DeviceShare):
    """What the scheduler gave one container of one pod on one device of this node (the device share of the
    pod's assignment, with the pod it belongs to)."""

    namespace: str = pydantic.Field(min_length=1)
    pod: str = pydantic.Field(min_length=1)
    pod_uid: str = pydantic.Field(min_length=1)
    container: str = pydantic.Field(min_length=1)


class GpuSummary(WireModel):
    """What `kubectl get gpunodes` shows of the inventory (printer columns show one value, not a list)."""

    gpus: int
    healthy: int
    models: str  # distinct short names, in index order: "A100-40GB,L4"


class GPUNodeSpec(Inventory):
    """Written by the device plugin: the node's inventory, plus its summary (derived, recomputed on read)."""

    @pydantic.model_validator(mode="before")
    @classmethod
    def _summary_is_derived(cls, data: object) -> object:
        return without_derived(data, "summary")

    @pydantic.computed_field
    @property
    def summary(self) -> GpuSummary:
        return GpuSummary(gpus=len(self.gpus), healthy=sum(g.healthy for g in self.gpus),
                          models=",".join(dict.fromkeys(g.short_name for g in self.gpus)))


class MigPlacement(WireModel):
    """One instance of a desired layout: its profile and first memory slice."""

    profile: str = pydantic.Field(min_length=1)
    start: int = pydantic.Field(ge=0)


class MigChange(WireModel):
    """A desired MIG layout of one GPU, written by the operator's leader: the whole new layout (instances
    kept and created; any other is destroyed, and only idle ones ever are), a change id the node echoes in
    its report, the phase, when it started, and the pods (namespace/name, uid) held for its new instances."""

    gpu: str = pydantic.Field(min_length=1)  # the GPU's UUID
    id: str = pydantic.Field(min_length=1)
    layout: tuple[MigPlacement, ...]
    phase: MigChangePhase
    started_time: str = pydantic.Field(min_length=1)  # RFC 3339
    pods: tuple[str, ...] = ()  # "namespace/name" held for the new instances
    pod_uids: tuple[str, ...] = ()
    targets: tuple[MigPlacement, ...] = ()  # the new instances those pods take, in pod order
    message: str = ""


class GPUNodeStatus(WireModel):
    """Written by the operator (the status subresource): allocations on this node's GPUs, conditions, and the
    MIG changes in progress (and the last one of each GPU)."""

    allocations: tuple[GpuAllocation, ...] = ()
    conditions: tuple[Condition, ...] = ()
    mig_changes: tuple[MigChange, ...] = ()

    @pydantic.model_validator(mode="before")
    @classmethod
    def _count_is_derived(cls, data: object) -> object:
        return without_derived(data, "allocatedPods")

    @pydantic.computed_field(alias="allocatedPods")
    @property
    def allocated_pods(self) -> int:
        """Pods holding a share of a GPU here (for `kubectl get`)."""
        return len({(a.namespace, a.pod) for a in self.allocations})


class GPUNode(WireModel):
    """One per node, named after it: the spec is the node's inventory (written by the device plugin)."""

    api_version: Literal[CRD_API_VERSION] = CRD_API_VERSION
    kind: Literal[GPUNODE_KIND] = GPUNODE_KIND
    metadata: ObjectMeta
    spec: GPUNodeSpec
    status: GPUNodeStatus | None = None

    @pydantic.model_validator(mode="after")
    def _named_after_node(self) -> GPUNode:
        if self.metadata.name != self.spec.node:
            raise ValueError(f"a GPUNode is named after its node: {self.metadata.name!r} != {self.spec.node!r}")
        return self


def gpunode(inv: Inventory) -> GPUNode:
    """The GPUNode a device plugin publishes for its node's inventory (no status: that is the operator's)."""
    return GPUNode(metadata=ObjectMeta(name=inv.node), spec=GPUNodeSpec(**dict(inv)))


InventorySource = Literal["annotation", "gpunode"]


def node_inventory(node_name: str, annotations: dict,
                   gpunode_spec: dict | None) -> tuple[Inventory, InventorySource] | None:
    """A node's inventory, the one rule every reader uses: the node's annotation while plugins still write it,
    else its GPUNode's spec; None for a node that publishes neither. A malformed one is an InputError naming
    where it came from (the node, or its GPUNode)."""
    raw = annotations.get(INVENTORY)
    try:
        if raw:
            return parse_inventory(raw), "annotation"
        if gpunode_spec:
            return parse_json(GPUNodeSpec, json.dumps(gpunode_spec), "spec"), "gpunode"
    except InputError as e:
        source = f"node {node_name}" if raw else f"{GPUNODE_KIND} {node_name}"
        raise InputError(str(e), field=source) from None
    return None
