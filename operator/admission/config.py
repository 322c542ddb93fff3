"""The webhook's settings: one explicit, immutable object (kopf's style), so the handlers and the tests
read the same knobs and nothing is a module-level global."""
from __future__ import annotations

from typing import Literal

import pydantic

from fgpu_contracts import keys

OPERATOR_NAMESPACE = "fgpu-system"


class ResourceNames(pydantic.BaseModel):
    """HAMi's per-container resources. HAMi's chart makes every name configurable, and the fractional
    device plugin advertises the same names (`fractional.resources` in the node config)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    gpu: str = keys.GPU_RESOURCE  # the countable device resource: whole GPUs, or fractional slots
    memory: str = keys.GPU_MEMORY_RESOURCE  # MiB per device
    memory_pct: str = keys.GPU_MEMORY_PCT_RESOURCE
    cores: str = keys.GPU_CORES_RESOURCE
    priority: str = keys.GPU_PRIORITY_RESOURCE

    def accounting(self) -> tuple[str, ...]:
        """Per-device amounts that nodes do not advertise per container; the webhook drops them."""
        return (self.memory, self.memory_pct, self.cores, self.priority, keys.ALIYUN_MEMORY)


class AdmissionConfig(pydantic.BaseModel):
    """What the webhook needs to know about the cluster and who may write the hand-off annotations."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = keys.SCHEDULER_NAME
    #: GPU pods naming one of these schedulers are taken over; GPU pods naming any other are left alone.
    takeover_schedulers: tuple[str, ...] = keys.TAKEOVER_SCHEDULERS
    #: The cluster's largest GPU memory: a larger per-device request is refused, and a share asked by memory
    #: alone is sized against it. None: skip the check, and size against simgpu's largest catalogued GPU.
    max_gpu_memory_bytes: int | None = pydantic.Field(default=None, ge=1)
    #: The cluster's MIG-capable GPU models (catalog names), among which HAMi's `vgpu-mode: mig` memory
    #: request picks its profile. Empty: every MIG model simgpu catalogues.
    mig_models: tuple[str, ...] = ()
    #: gpushare's `--memory-unit`: what one `aliyun.com/gpu-mem` is.
    aliyun_memory_unit: Literal["GiB", "MiB"] = "GiB"
    resources: ResourceNames = ResourceNames()
    #: Values of `fgpu.io/policy` (the placement core's node policies).
    node_policies: tuple[str, ...] = ("binpack", "spread", "fgd", "fgpu")
    #: Pods whose PriorityClass value (`spec.priority`) is at least this are protected (high priority) unless
    #: they name a priority; None: only `fgpu.io/priority: high` or a slowdown bound protect a pod.
    protected_priority: int | None = None
    #: DRA (docs/dra.md "Classic spellings on DRA"): who allocates fgpu-dra's pools, kube-scheduler or
    #: fgpu-scheduler; set, shares and MIG instances become ResourceClaims of fgpu-dra's classes. None: off.
    dra_allocator: Literal["kube-scheduler", "fgpu-scheduler"] | None = None
    #: The memory of every GPU of the cluster when they all have the same (from the scheduler's model): a share
    #: asked as a fraction of a GPU's memory becomes that amount on DRA. None: such a share is refused on DRA.
    dra_gpu_memory_bytes: int | None = pydantic.Field(default=None, ge=1)
    #: Users (`userInfo.username`) that may change hand-off annotations on an existing pod.
    trusted_users: tuple[str, ...] = (
        f"system:serviceaccount:{OPERATOR_NAMESPACE}:fgpu-operator",
        f"system:serviceaccount:{OPERATOR_NAMESPACE}:fgpu-device-plugin",
    )


DEFAULT_CONFIG = AdmissionConfig()
