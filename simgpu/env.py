"""The container environment contract between the device plugin (which writes it at Allocate) and the
workload client / node daemon (which read it). One place for every name, so the two sides cannot drift.

The GPU-facing names follow HAMi-core's conventions (peers.md section (c)); the FGPU_* names are ours.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from simgpu.errors import SimgpuError

# --- HAMi-core / NVIDIA names -------------------------------------------------------------------------
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"  # comma-separated GPU-/MIG- UUIDs
CUDA_DEVICE_MEMORY_LIMIT_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"  # + visible index; value "<MiB>m"
CUDA_DEVICE_SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"  # percent of SMs/time, 1..100
CUDA_TASK_PRIORITY = "CUDA_TASK_PRIORITY"  # 0 high, 1 low (HAMi)
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"  # MPS mode only
CUDA_OVERSUBSCRIBE = "CUDA_OVERSUBSCRIBE"  # "true" when the node's memory-quota mode is oversubscribe
NODE_NAME = "NODE_NAME"  # fake nvidia-smi style tools need it (fake-gpu-operator #108)

# --- fgpu names ------------------------------------------------------------------------------------------
DAEMON_SOCKET = "FGPU_DAEMON_SOCKET"  # path of the node daemon's socket inside the container
CONTEXT_TOKEN = "FGPU_CONTEXT_TOKEN"  # token for visible device 0 (same as FGPU_CONTEXT_TOKEN_0)
CONTEXT_TOKEN_PREFIX = "FGPU_CONTEXT_TOKEN_"  # + visible index: one token per visible device
SHARING_MODE = "FGPU_SHARING_MODE"  # exclusive | timeSlicing | mps | fractional (informational)
SLO_SLOWDOWN = "FGPU_SLO_SLOWDOWN"  # a high-priority container's slowdown bound, > 1 (informational: the token has it)

# Where Allocate mounts the daemon socket's directory inside the container.
CONTAINER_SOCKET_DIR = "/var/run/fgpu"

_MIB = 1024 * 1024
_LIMIT_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)\s*$")
_UNIT = {"": 1, "k": 1024, "m": _MIB, "g": 1024 * _MIB}


def memory_limit_var(index: int) -> str:
    return f"{CUDA_DEVICE_MEMORY_LIMIT_PREFIX}{index}"


def context_token_var(index: int) -> str:
    return f"{CONTEXT_TOKEN_PREFIX}{index}"


def format_memory_limit(nbytes: int) -> str:
    """HAMi-core's format: whole MiB with an "m" suffix (rounded down, at least 1 MiB)."""
    return f"{max(1, nbytes // _MIB)}m"


def parse_memory_limit(text: str, *, field_name: str = CUDA_DEVICE_MEMORY_LIMIT_PREFIX + "<i>") -> int:
    """Bytes from "8192m" / "8g" / "1048576" (no suffix = bytes, as HAMi-core reads it)."""
    match = _LIMIT_RE.match(text or "")
    if not match:
        raise SimgpuError(f"bad memory limit {text!r}", field=field_name, allowed=["<N>", "<N>k", "<N>m", "<N>g"])
    return int(match.group(1)) * _UNIT[match.group(2).lower()]


@dataclass(frozen=True)
class ContainerEnv:
    """What a workload inside a container learns from the env that Allocate wrote."""

    visible_devices: list[str]
    daemon_socket: str | None
    tokens: list[str | None]  # per visible device
    memory_limits: list[int | None] = field(default_factory=list)  # bytes per visible device
    sm_limit_pct: int | None = None
    priority: int | None = None
    slo_slowdown: float | None = None
    mps_thread_pct: int | None = None
    oversubscribe: bool = False
    node_name: str | None = None


def _number_var(env: Mapping[str, str], name: str, kind: type, allowed: str, ok) -> int | float | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise SimgpuError(f"not {'an integer' if kind is int else 'a number'}: {raw!r}", field=name,
                          allowed=[allowed]) from None
    if not ok(value):  # nan compares false: out of range too
        raise SimgpuError(f"{value} out of range", field=name, allowed=[allowed])
    return value


def _int_var(env: Mapping[str, str], name: str, lo: int, hi: int) -> int | None:
    return _number_var(env, name, int, f"{lo}..{hi}", lambda v: lo <= v <= hi)


def read_container_env(env: Mapping[str, str]) -> ContainerEnv:
    """Parse the Allocate env contract (e.g. os.environ); bad values raise SimgpuError naming the variable."""
    raw_devices = env.get(NVIDIA_VISIBLE_DEVICES, "")
    devices = [d.strip() for d in raw_devices.split(",") if d.strip() and d.strip() not in ("none", "void")]
    tokens: list[str | None] = []
    limits: list[int | None] = []
    for i in range(len(devices)):
        token = env.get(context_token_var(i)) or (env.get(CONTEXT_TOKEN) if i == 0 else None)
        tokens.append(token)
        raw = env.get(memory_limit_var(i))
        limits.append(parse_memory_limit(raw, field_name=memory_limit_var(i)) if raw else None)
    return ContainerEnv(
        visible_devices=devices,
        daemon_socket=env.get(DAEMON_SOCKET) or None,
        tokens=tokens,
        memory_limits=limits,
        sm_limit_pct=_int_var(env, CUDA_DEVICE_SM_LIMIT, 1, 100),
        priority=_int_var(env, CUDA_TASK_PRIORITY, 0, 1),
        slo_slowdown=_number_var(env, SLO_SLOWDOWN, float, "1 < s <= 100", lambda v: 1.0 < v <= 100.0),
        mps_thread_pct=_int_var(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1, 100),
        oversubscribe=env.get(CUDA_OVERSUBSCRIBE, "").lower() == "true",
        node_name=env.get(NODE_NAME) or None,
    )
