"""The canonical GPU request: whatever spelling a pod used (fgpu, HAMi, KubeShare, KAI, Aliyun, NVIDIA MIG or
whole GPUs), the webhook and the scheduler parse it into this one shape, and only this shape reaches the
placement core. A pod's request is written back on the pod by the webhook (`fgpu.io/request`, JSON, v1) so the
scheduler never re-parses a peer's spelling and the user can see what fgpu understood.
"""
from __future__ import annotations

from typing import Literal

import pydantic
from pydantic.alias_generators import to_camel

from fgpu_contracts.errors import InputError

MILLI = 1000  # a whole GPU in milli-GPU
Priority = Literal["high", "low"]
Source = Literal["fgpu", "hami", "kubeshare", "kai", "aliyun", "nvidia"]
#: How a model filter's names match a GPU: each spelling keeps its own project's rule (docs/requests.md).
ModelRule = Literal["fgpu", "hami", "kubeshare"]


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                                       populate_by_name=True)


class ContainerRequest(_Model):
    """What one container asks for. Exactly one of three kinds:

    - a share of GPUs: `count` devices, each giving `milli_gpu` (1..1000) of compute time, `mem_bytes` (or
      `mem_pct` of the device) of memory and `sm_pct` of its SMs; `milli_gpu == 1000` is a whole GPU. Every
      device of a container gets the same share, each on a different GPU of the node (HAMi's
      `nvidia.com/gpu: 2` + `gpumem-percentage: 50`, KAI's `gpu-fraction-num-devices`, fgpu's
      `fgpu.io/gpu-count`);
    - a MIG instance: `mig_profile` set, `count` instances of it (milli/memory/SM fields unused).

    A share asked by memory alone (HAMi `gpumem`, Aliyun `gpu-mem`, KAI `gpu-memory`) carries the webhook's
    estimate of its compute share in `milli_gpu` (its memory's share of the cluster's largest GPU) and
    `sm_pct` 100: such a share reserves memory and is not throttled, as in HAMi and gpushare."""

    container: str = pydantic.Field(min_length=1)
    count: int = pydantic.Field(default=1, ge=1, le=64)
    milli_gpu: int = pydantic.Field(default=MILLI, ge=1, le=MILLI)
    mem_bytes: int | None = pydantic.Field(default=None, ge=1)  # per device; None: see mem_pct / the share
    mem_pct: int | None = pydantic.Field(default=None, ge=1, le=100)  # per device, of its memory
    sm_pct: int | None = pydantic.Field(default=None, ge=1, le=100)  # None: the compute share
    mig_profile: str | None = None

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> ContainerRequest:
        if self.mem_bytes is not None and self.mem_pct is not None:
            raise ValueError("give memory in bytes or in percent, not both")
        return self

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None

    @property
    def is_share(self) -> bool:
        """Part of one GPU that other pods may share."""
        return not self.is_mig and (self.milli_gpu < MILLI or self.mem_bytes is not None
                                    or self.mem_pct is not None and self.mem_pct < 100)

    @property
    def effective_sm_pct(self) -> int:
        return self.sm_pct if self.sm_pct is not None else max(1, -(-self.milli_gpu * 100 // MILLI))


class ModelFilter(_Model):
    """A GPU-model constraint as one spelling wrote it: names allowed (empty: any) and names excluded, kept
    as the user wrote them (so a Pending reason names them), matched by `rule`'s project's rule."""

    rule: ModelRule
    allow: tuple[pydantic.constr(min_length=1, max_length=64), ...] = ()
    deny: tuple[pydantic.constr(min_length=1, max_length=64), ...] = ()

    @pydantic.model_validator(mode="after")
    def _names_something(self) -> ModelFilter:
        if not self.allow and not self.deny:
            raise ValueError("a model filter names at least one model")
        return self


class GpuRequest(_Model):
    """A pod's GPU request, with the constraints and hints every spelling can carry."""

    version: Literal["v1"] = "v1"
    source: Source = "fgpu"
    containers: tuple[ContainerRequest, ...] = pydantic.Field(min_length=1)
    # "high": protected, its slowdown bounded (`slo_slowdown`, else the cluster's default); "low": best-effort,
    # no bound. A pod that asks for nothing is best-effort (docs/qos.md).
    priority: Priority = "low"
    model_filters: tuple[ModelFilter, ...] = ()  # all must pass; at most one per rule
    uuids: tuple[str, ...] = ()  # allowed GPU UUIDs; empty: any
    exclude_uuids: tuple[str, ...] = ()
    node_policy: str | None = None  # binpack | spread | fgd | fgpu (None: the cluster's default)
    gpu_policy: str | None = None  # binpack | spread (None: the cluster's default)
    affinity: str | None = None  # KubeShare group: pods of one affinity group share GPUs
    anti_affinity: str | None = None  # pods of one group never share a GPU
    exclusion: str | None = None  # a GPU holds pods of one exclusion group only
    slo_slowdown: float | None = pydantic.Field(default=None, gt=1.0, le=100.0)
    # The pod's workload class for the co-location model: the fraction of time it keeps its GPU busy when
    # alone (`fgpu.io/duty-cycle`; None: its compute share, the most its cap lets it use).
    duty_cycle: float | None = pydantic.Field(default=None, gt=0.0, le=1.0)
    # Whether placement keeps co-runners' SLOs for this pod (`fgpu.io/slo-filter`; None: the cluster's rule).
    slo_filter: bool | None = None

    @pydantic.model_validator(mode="after")
    def _bound_needs_priority(self) -> GpuRequest:
        if self.slo_slowdown is not None and self.priority != "high":
            raise ValueError("a slowdown bound protects a high-priority pod; this one is low priority")
        return self

    @pydantic.model_validator(mode="before")
    @classmethod
    def _legacy_models(cls, data: object) -> object:
        """Requests written before model filters listed catalog names under `models` / `excludeModels`: fgpu's
        rule matches a catalog name to exactly that model, so they read as an fgpu filter."""
        if not isinstance(data, dict) or not ({"models", "excludeModels", "exclude_models"} & data.keys()):
            return data
        data = dict(data)
        allow, deny = data.pop("models", ()), data.pop("excludeModels", data.pop("exclude_models", ()))
        if allow or deny:
            data["modelFilters"] = [*data.get("modelFilters", ()), {"rule": "fgpu", "allow": allow, "deny": deny}]
        return data

    @pydantic.field_validator("model_filters")
    @classmethod
    def _one_per_rule(cls, value: tuple[ModelFilter, ...]) -> tuple[ModelFilter, ...]:
        rules = [f.rule for f in value]
        if len(set(rules)) != len(rules):
            raise ValueError("one model filter per rule")
        return value

    @pydantic.field_validator("containers")
    @classmethod
    def _unique(cls, value: tuple[ContainerRequest, ...]) -> tuple[ContainerRequest, ...]:
        names = [c.container for c in value]
        if len(set(names)) != len(names):
            raise ValueError("container names must be unique")
        return value


def device_shape(request: GpuRequest) -> ContainerRequest:
    """What each device of the pod gets (the first container's share, `count` 1): fgpu places one shape per
    pod, on as many distinct GPUs (or MIG instances) as its containers ask in all. InputError naming the
    containers when two ask for different shapes: the webhook refuses such a pod, the scheduler never
    guesses."""
    first = request.containers[0]
    shape = first.model_copy(update={"container": "*", "count": 1})
    for c in request.containers[1:]:
        if c.model_copy(update={"container": "*", "count": 1}) != shape:
            raise InputError(f"containers {first.container} and {c.container} ask for different GPU shares "
                             f"({_shown(first)} vs {_shown(c)})", field="spec.containers",
                             allowed=["one share (fraction, memory, SM limit or MIG profile) for every GPU "
                                      "container of a pod"])
    return shape


def _shown(c: ContainerRequest) -> str:
    if c.mig_profile:
        return f"MIG {c.mig_profile}"
    parts = [f"{c.milli_gpu} milli-GPU"]
    if c.mem_bytes is not None:
        parts.append(f"{-(-c.mem_bytes >> 20)} MiB")
    if c.mem_pct is not None:
        parts.append(f"{c.mem_pct}% memory")
    if c.sm_pct is not None:
        parts.append(f"{c.sm_pct}% SMs")
    return ", ".join(parts)


def dump_request(request: GpuRequest) -> str:
    return request.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=False)


def load_request(text: str) -> GpuRequest:
    """Parse `fgpu.io/request` (raises pydantic.ValidationError; callers turn it into an InputError)."""
    return GpuRequest.model_validate_json(text)
