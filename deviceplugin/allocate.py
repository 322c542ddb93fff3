"""Allocate's answer, as a pure function: device IDs (and, for fractional slots, the scheduler's assignment)
in; the container's env, mounts and context tokens out. The env contract is HAMi-core's plus fgpu's socket
and token variables; every name comes from simgpu.env so the workload side reads exactly what is written.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from deviceplugin.handoff import Match
from deviceplugin.resources import Resource, Slot
from fgpu_contracts.keys import ASSIGNMENT
from simgpu import env
from simgpu.errors import SimgpuError
from simgpu.token import Grant, issue_token


class AllocateError(SimgpuError):
    """Allocate cannot be honoured; the gRPC shell returns the message to the kubelet. `transient`: the same call
    may succeed later (the API unreachable), answered UNAVAILABLE rather than FAILED_PRECONDITION."""

    def __init__(self, message: str, *, field: str | None = None, allowed: Iterable[object] | None = None,
                 transient: bool = False):
        super().__init__(message, field=field, allowed=allowed)
        self.transient = transient


@dataclass(frozen=True)
class AllocContext:
    node_name: str
    secret: bytes
    daemon_socket: str | None = None  # host path; its directory is mounted at env.CONTAINER_SOCKET_DIR
    memory_quota: str = "hard"  # hard | oversubscribe
    handoff_key: bytes | None = None  # verifies the scheduler's signature on assignments (None: unverified)


@dataclass(frozen=True)
class ContainerAllocation:
    envs: dict[str, str]
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # (container path, host path, read-only)
    grants: list[Grant] = field(default_factory=list)


def _slots(resource: Resource, device_ids: list[str]) -> list[Slot]:
    if not device_ids:
        raise AllocateError(f"empty device list for {resource.name}", field="devices_ids")
    slots = []
    for device_id in device_ids:
        slot = resource.slot(device_id)
        if slot is None:
            raise AllocateError(f"unknown device ID {device_id!r} for {resource.name}", field="devices_ids")
        slots.append(slot)
    if len(set(device_ids)) != len(device_ids):
        raise AllocateError(f"device IDs repeated in one request for {resource.name}", field="devices_ids")
    return slots


def allocate_slots(resource: Resource, device_ids: list[str], ctx: AllocContext) -> ContainerAllocation:
    """Whole GPUs, MIG devices and time-slicing / MPS replicas: the device IDs say everything."""
    if resource.fractional:
        raise AllocateError(f"{resource.name} is fractional: Allocate needs the scheduler's assignment")
    slots = _slots(resource, device_ids)
    if resource.fail_requests_greater_than_one and len(slots) > 1:
        raise AllocateError(
            f"request for '{resource.name}: {len(slots)}' too large: maximum request size for shared resources"
            " is 1 (failRequestsGreaterThanOne)", field="devices_ids")
    by_device: dict[str, list[Slot]] = {}
    for slot in slots:
        by_device.setdefault(slot.device_uuid, []).append(slot)
    grants = []
    mps_pct = None
    for device_uuid, group in by_device.items():
        first = group[0]
        if first.mode == "mps":
            share = len(group) / first.replicas
            pct = max(1, min(100, int(100 * share)))
            mps_pct = mps_pct or pct
            grants.append(Grant(device_uuid=device_uuid, mem_limit_bytes=int(first.mem_bytes * share),
                                sm_limit_pct=pct))
        else:  # exclusive, MIG (the instance is the limit), time-slicing (no isolation, as NVIDIA's)
            grants.append(Grant(device_uuid=device_uuid))
    return container_env(grants, ctx, mode=slots[0].mode, mps_pct=mps_pct, with_priority=False)


def allocate_assignment(resource: Resource, device_ids: list[str], match: Match | None, ctx: AllocContext,
                        devices: dict[str, Slot]) -> ContainerAllocation:
    """Fractional slots: the GPU, memory and SM share come from the pod's fgpu.io/assignment.

    `devices` maps every GPU / MIG UUID on this node to a slot describing it (memory, SMs)."""
    _slots(resource, device_ids)
    if match is None:
        raise AllocateError(
            f"no pending pod on node {ctx.node_name} has an fgpu.io/assignment for a container asking for "
            f"{len(device_ids)} {resource.name}: was the pod scheduled by fgpu's scheduler?",
            field=ASSIGNMENT)
    pod, container = match.pod, match.container
    if match.refused:
        raise AllocateError(f"pod {pod.namespace}/{pod.name} container {container.name}: not handed out: "
                            f"{match.refused}", field=ASSIGNMENT)
    grants = []
    for i, share in enumerate(container.devices):
        device = devices.get(share.uuid)
        where = f"{pod.namespace}/{pod.name} container {container.name} device {i}"
        if device is None:
            raise AllocateError(f"{where}: {share.uuid} is not a device of node {ctx.node_name}",
                                field=ASSIGNMENT)
        if share.mem_bytes is not None and share.mem_bytes > device.mem_bytes and ctx.memory_quota == "hard":
            raise AllocateError(f"{where}: {share.mem_bytes} bytes assigned but {share.uuid} has "
                                f"{device.mem_bytes}", field=ASSIGNMENT)
        grants.append(Grant(device_uuid=share.uuid, mem_limit_bytes=share.mem_bytes, sm_limit_pct=share.sm_pct,
                            priority=container.priority, pod_namespace=pod.namespace, pod_name=pod.name,
                            container=container.name, vdevice_index=i, slo_slowdown=container.slo_slowdown))
    return container_env(grants, ctx, mode="fractional", mps_pct=None, with_priority=True)


def container_env(grants: list[Grant], ctx: AllocContext, *, mode: str, mps_pct: int | None,
                  with_priority: bool) -> ContainerAllocation:
    """A container's env, mounts and tokens for its grants (device i is the container's device i): the one
    spelling of the contract, for the device plugin's Allocate and the DRA driver's CDI specs alike."""
    envs = {
        env.NVIDIA_VISIBLE_DEVICES: ",".join(g.device_uuid for g in grants),
        env.NODE_NAME: ctx.node_name,
        env.SHARING_MODE: mode,
    }
    for i, grant in enumerate(grants):
        if grant.mem_limit_bytes is not None:
            envs[env.memory_limit_var(i)] = env.format_memory_limit(grant.mem_limit_bytes)
        token = issue_token(ctx.secret, grant)
        envs[env.context_token_var(i)] = token
        if i == 0:
            envs[env.CONTEXT_TOKEN] = token
    sm = next((g.sm_limit_pct for g in grants if g.sm_limit_pct is not None), None)
    if sm is not None:
        envs[env.CUDA_DEVICE_SM_LIMIT] = str(sm)
    if with_priority:
        envs[env.CUDA_TASK_PRIORITY] = str(grants[0].priority)
        if grants[0].slo_slowdown is not None:
            envs[env.SLO_SLOWDOWN] = f"{grants[0].slo_slowdown:g}"
    if mps_pct is not None:
        envs[env.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE] = str(mps_pct)
    if ctx.memory_quota == "oversubscribe":
        envs[env.CUDA_OVERSUBSCRIBE] = "true"
    mounts = []
    if ctx.daemon_socket:
        envs[env.DAEMON_SOCKET] = f"{env.CONTAINER_SOCKET_DIR}/{os.path.basename(ctx.daemon_socket)}"
        mounts.append((env.CONTAINER_SOCKET_DIR, os.path.dirname(os.path.abspath(ctx.daemon_socket)), False))
    return ContainerAllocation(envs, mounts, grants)


def preferred_allocation(resource: Resource, available: list[str], must_include: list[str], size: int) -> list[str]:
    """Pack onto the fewest GPUs: keep must-include IDs; then repeatedly take the GPU that already holds
    chosen IDs, else the fullest GPU that can still satisfy the rest (best fit), else the one with the most
    free IDs. So a 2-replica request lands on one GPU and partly used GPUs fill up first."""
    available_set = set(available)
    chosen = [d for d in dict.fromkeys(must_include) if d in available_set][:max(size, 0)]
    free: dict[str, list[str]] = {}
    for device_id in available:
        if device_id not in chosen:
            slot = resource.slot(device_id)
            free.setdefault(slot.gpu_uuid if slot else device_id, []).append(device_id)
    held = {(resource.slot(d).gpu_uuid if resource.slot(d) else d) for d in chosen}
    while len(chosen) < size and free:
        need = size - len(chosen)
        same = [g for g in free if g in held]
        fits = [g for g in free if len(free[g]) >= need]
        if same:
            gpu = min(same, key=lambda g: (-len(free[g]), g))
        elif fits:
            gpu = min(fits, key=lambda g: (len(free[g]), g))
        else:
            gpu = min(free, key=lambda g: (-len(free[g]), g))
        take = sorted(free.pop(gpu))[:need]
        chosen.extend(take)
        held.add(gpu)
    return chosen
