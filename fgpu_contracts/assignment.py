"""The hand-off between fgpu's scheduler and the device plugin (`fgpu.io/assignment`, JSON, v1).

The scheduler (operator) decides node, GPU (or MIG instance) and share per container and writes it on the
pod before binding; the plugin reads it back at Allocate. HAMi's `hami.io/vgpu-devices-to-allocate` is the
pattern (peers.md section 1); ours is JSON and versioned:

    fgpu.io/assignment: {"version": "v1", "node": "node-1", "containers": [
        {"name": "train", "priority": 1,
         "devices": [{"uuid": "GPU-...", "milliGpu": 300, "memBytes": 8589934592, "smPct": 30}]},
        {"name": "serve", "priority": 0, "sloSlowdown": 1.2, "devices": [...]}]}
    fgpu.io/assigned-at: "2026-11-22T15:20:00.123456Z"   (RFC 3339; oldest first wins at Allocate)

A container asking for N devices gets N entries in `devices`, each a different GPU (or MIG instance) with its
own share: HAMi's `nvidia.com/gpu: 2` at 50% each is two devices of `milliGpu: 500`. That has been the v1 shape
from the start, so a single-GPU hand-off written by any earlier fgpu reads the same.

The plugin records containers it has allocated in `fgpu.io/allocated` (JSON list of container names), so a
plugin restart does not hand the same assignment out twice. The keys are in `fgpu_contracts.keys`.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

import pydantic

from fgpu_contracts.keys import ASSIGNMENT
from fgpu_contracts.wire import WireModel, parse_json


class DeviceShare(WireModel):
    """What one container gets of one device."""

    uuid: str = pydantic.Field(min_length=1)  # GPU-... or MIG-... on the assigned node
    milli_gpu: int = pydantic.Field(default=1000, ge=1, le=1000)
    mem_bytes: int | None = pydantic.Field(default=None, ge=1)  # None: the whole device's memory
    sm_pct: int | None = pydantic.Field(default=None, ge=1, le=100)  # None: 100
    mig_profile: str | None = None


class ContainerAssignment(WireModel):
    name: str = pydantic.Field(min_length=1)
    devices: list[DeviceShare] = pydantic.Field(min_length=1)  # in the container's device order (index 0 first)
    priority: Literal[0, 1] = 1
    # A high-priority container's slowdown bound versus running alone (its SLO: `fgpu.io/slo-slowdown`, else
    # the cluster's default). Optional: absent for low priority, and in assignments written before it existed.
    slo_slowdown: float | None = pydantic.Field(default=None, gt=1.0, le=100.0)

    @pydantic.field_validator("devices")
    @classmethod
    def _distinct(cls, value: list[DeviceShare]) -> list[DeviceShare]:
        uuids = [d.uuid for d in value]
        if len(set(uuids)) != len(uuids):
            raise ValueError("a container's devices must be different GPUs or MIG instances")
        return value


class Assignment(WireModel):
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
    """Validate an annotation value; InputError(field=`fgpu.io/assignment`) if it is not one. Cached: the
    plugin's Allocate re-reads the same annotations of every pending pod, and the result is frozen, so sharing
    it is safe."""
    return parse_json(Assignment, text, ASSIGNMENT)
