"""The cluster's scheduling defaults, as the SchedulingPolicy custom resource (group fgpu.io, v1alpha1,
cluster-scoped; deploy/crds/schedulingpolicy.yaml): what a pod gets when its request does not say. The
operator reads it; a pod's own annotations (HAMi's policy annotations, `fgpu.io/policy`, ...) still win."""
from __future__ import annotations

from typing import Literal

import pydantic

from fgpu_contracts.keys import CRD_API_VERSION, SCHEDULING_POLICY_KIND
from fgpu_contracts.wire import Condition, ObjectMeta, WireModel

NodePolicy = Literal["binpack", "spread", "fgd", "fgpu"]
GpuPolicy = Literal["binpack", "spread"]
SloFilter = Literal["fgpu", "all"]


class SchedulingPolicySpec(WireModel):
    """The fields the operator also takes as flags (`fgpu operator --policy`, `--takeover-schedulers`,
    `--aliyun-memory-unit`) have no default here or in the CRD: left out of the object, they are the flag's
    (the object wins field by field; operator/controller/command.py PRECEDENCE). The operator's own copy of
    its flags fills every field."""

    node_policy: NodePolicy | None = None  # which node a pod goes to (the operator's default: fgpu)
    gpu_policy: GpuPolicy = "binpack"  # which GPU of that node
    #: GPU pods naming these are scheduled by fgpu (the operator's default: keys.TAKEOVER_SCHEDULERS)
    takeover_schedulers: tuple[str, ...] | None = None
    aliyun_memory_unit: Literal["GiB", "MiB"] | None = None  # `aliyun.com/gpu-mem`'s unit (default GiB)
    default_slo_slowdown: float = pydantic.Field(default=1.2, gt=1.0, le=100.0)  # a high-priority pod's bound
    # Pods whose PriorityClass value (spec.priority) is at least this are protected (high priority) unless
    # they say otherwise; None: only `fgpu.io/priority: high` or `fgpu.io/slo-slowdown` protect a pod.
    protected_priority: int | None = None
    # Which node policies keep co-runners' SLOs (the QoS filter): `fgpu` alone, or every policy.
    slo_filter: SloFilter = "fgpu"


class SchedulingPolicyStatus(WireModel):
    observed_generation: int | None = pydantic.Field(default=None, ge=0)
    conditions: tuple[Condition, ...] = ()


class SchedulingPolicy(WireModel):
    api_version: Literal[CRD_API_VERSION] = CRD_API_VERSION
    kind: Literal[SCHEDULING_POLICY_KIND] = SCHEDULING_POLICY_KIND
    metadata: ObjectMeta
    spec: SchedulingPolicySpec = SchedulingPolicySpec()
    status: SchedulingPolicyStatus | None = None
