"""The hand-off between fgpu's scheduler and the device plugin (pure, pydantic).

The scheduler (operator) decides node, GPU (or MIG instance) and share per container and writes it on the
pod before binding; the plugin reads it back at Allocate. HAMi's `hami.io/vgpu-devices-to-allocate` is the
pattern (peers.md section 1); ours is JSON and versioned:

    fgpu.io/assignment: {"version": "v1", "node": "node-1", "containers": [
        {"name": "train", "priority": 1,
         "devices": [{"uuid": "GPU-...", "milliGpu": 300, "memBytes": 8589934592, "smPct": 30}]}]}
    fgpu.io/assigned-at: "2026-11-22T15:20:00.123456Z"   (RFC 3339; oldest first wins at Allocate)

The plugin records containers it has allocated in `fgpu.io/allocated` (JSON list of container names), so a
plugin restart does not hand the same assignment out twice. Kubelet's Allocate request names device IDs but
not the pod; as HAMi does, the plugin takes the oldest pending pod on its node whose next unallocated
container asks for as many devices as the request has.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import pydantic
from pydantic.alias_generators import to_camel

from simgpu.errors import SimgpuError

ASSIGNMENT = "fgpu.io/assignment"
ASSIGNED_AT = "fgpu.io/assigned-at"
ALLOCATED = "fgpu.io/allocated"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                                       populate_by_name=True)


class DeviceShare(_Model):
    uuid: str = pydantic.Field(min_length=1)  # GPU-... or MIG-... on the assigned node
    milli_gpu: int = pydantic.Field(default=1000, ge=1, le=1000)
    mem_bytes: int | None = pydantic.Field(default=None, ge=1)  # None: the whole device's memory
    sm_pct: int | None = pydantic.Field(default=None, ge=1, le=100)  # None: 100
    mig_profile: str | None = None


class ContainerAssignment(_Model):
    name: str = pydantic.Field(min_length=1)
    devices: list[DeviceShare] = pydantic.Field(min_length=1)
    priority: Literal[0, 1] = 1


class Assignment(_Model):
    version: Literal["v1"] = "v1"
    node: str = pydantic.Field(min_length=1)
    containers: list[ContainerAssignment] = pydantic.Field(min_length=1)

    @pydantic.field_validator("containers")
    @classmethod
    def _unique(cls, value: list[ContainerAssignment]) -> list[ContainerAssignment]:
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError("container names must be unique")
        return value


def dump_assignment(assignment: Assignment) -> str:
    return assignment.model_dump_json(by_alias=True, exclude_none=True)


@lru_cache(maxsize=4096)
def parse_assignment(text: str) -> Assignment:
    """Validate an annotation value (cached: Allocate re-reads the same annotations of every pending pod;
    the result is frozen, so sharing it is safe)."""
    try:
        return Assignment.model_validate_json(text)
    except pydantic.ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(p) for p in e["loc"])
        raise SimgpuError(f"{e['msg']}" + (f" at {loc}" if loc else ""), field=ASSIGNMENT) from None


@dataclass(frozen=True)
class PodView:
    """The few pod fields the plugin needs (the Kubernetes shell builds these from the API)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    annotations: dict[str, str] = field(default_factory=dict)
    created: str = ""  # RFC 3339; tie-breaker after assigned-at

    def allocated_containers(self) -> frozenset[str]:
        return _allocated(self.annotations.get(ALLOCATED, ""))


@lru_cache(maxsize=4096)
def _allocated(raw: str) -> frozenset[str]:
    if not raw:
        return frozenset()
    try:
        value = json.loads(raw)
    except ValueError:
        return frozenset()
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


@dataclass(frozen=True)
class Match:
    pod: PodView
    container: ContainerAssignment
    assignment: Assignment


def find_assignment(pods: Iterable[PodView], node: str, device_count: int,
                    taken: set[tuple[str, str]] = frozenset()) -> Match | None:
    """The container an Allocate of `device_count` devices is for: the oldest assigned pending pod on `node`
    whose first not-yet-allocated container has `device_count` devices. `taken` holds (pod uid, container)
    pairs this plugin allocated but may not have recorded on the pod yet. Unparseable annotations are
    skipped (the pod then never matches; the operator's validation is the place to reject them)."""
    best_key: tuple[str, str, str, str] | None = None
    best: Match | None = None
    for pod in pods:  # one pass, no sort: Allocate runs this on every call with ~100 pods
        if pod.node_name != node or pod.phase != "Pending" or ASSIGNMENT not in pod.annotations:
            continue
        try:
            assignment = parse_assignment(pod.annotations[ASSIGNMENT])
        except SimgpuError:
            continue
        if assignment.node != node:
            continue
        key = (pod.annotations.get(ASSIGNED_AT, ""), pod.created, pod.namespace, pod.name)
        if best_key is not None and key >= best_key:
            continue
        done = pod.allocated_containers()
        first = next((c for c in assignment.containers
                      if c.name not in done and (pod.uid, c.name) not in taken), None)
        if first is not None and len(first.devices) == device_count:
            best_key, best = key, Match(pod, first, assignment)
    return best
