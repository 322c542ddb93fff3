"""Every spelling says something about a few attributes (a container's compute share, its memory, the pod's
priority, ...): a `Claim`. A pod may use several spellings at once (HAMi resources with fgpu annotations, a
KAI fraction and fgpu's); they must agree, attribute by attribute, or the pod is refused with both spellings
named. What agrees becomes the canonical `GpuRequest`.
"""
from __future__ import annotations

from dataclasses import dataclass

import pydantic

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show
from fgpu_contracts.request import MILLI, ContainerRequest, GpuRequest

from .config import AdmissionConfig
from .gpus import memory_share_milli
from .placeable import check_placeable
from .podview import PodView

#: `source` when spellings mix: the most specific one names the request.
SOURCES = ("fgpu", "kai", "kubeshare", "hami", "aliyun", "nvidia")
_WHAT = {  # attribute -> how a message names it and its unit
    "count": ("device count", "devices"), "milli_gpu": ("compute share", "milli-GPU"),
    "mem_bytes": ("memory per device", "bytes"), "mem_pct": ("memory share", "%"),
    "sm_pct": ("SM limit", "%"), "mig_profile": ("MIG profile", ""),
    **{f"model_filter.{rule}": (f"GPU models ({rule}'s rule)", "") for rule in ("fgpu", "hami", "kubeshare")},
}
_SHARE_ATTRS = ("milli_gpu", "mem_bytes", "mem_pct", "sm_pct")
#: Claims on a GPU-model filter: `model_filter.<rule>`, one per spelling's rule (fgpu, hami, kubeshare).
_MODEL_FILTER = "model_filter."


@dataclass(frozen=True)
class Claim:
    """What one spelling (`field`, as the user wrote `text`) says about one attribute. `container` is None
    for pod-level attributes (priority, models, policies, groups, source)."""

    attr: str
    value: object
    field: str
    text: object
    source: str
    container: str | None = None


def _agreed(claims: list[Claim]) -> dict[tuple[str | None, str], Claim]:
    chosen: dict[tuple[str | None, str], Claim] = {}
    for c in claims:
        first = chosen.setdefault((c.container, c.attr), c)
        if first.value != c.value:
            what, unit = _WHAT.get(c.attr, (c.attr.replace("_", " "), ""))
            where = f" for container {c.container!r}" if c.container else ""
            values = "" if c.attr.startswith(_MODEL_FILTER) else (  # the texts say it: no repr of a filter
                f" ({first.value} vs {c.value}{' ' + unit if unit else ''})")
            raise InputError(f"{show(first.text)} disagrees with {c.field}={show(c.text)} on the {what}{where}"
                             f"{values}; give one of them, or equal values", field=first.field)
    return chosen


def _container(name: str, got: dict[str, Claim], view: PodView, config: AdmissionConfig) -> ContainerRequest:
    value = {attr: c.value for attr, c in got.items()}
    if "mig_profile" in got:
        share = next((got[a] for a in _SHARE_ATTRS if a in got), None)
        if share is not None:
            raise InputError(f"{show(share.text)} cannot be combined with {got['mig_profile'].field}: a MIG "
                             "instance is a fixed slice with no fraction, memory or SM limit of its own",
                             field=share.field, allowed=["a MIG profile alone, or a share without one"])
    if "mem_bytes" in got and "mem_pct" in got:
        raise InputError(f"{show(got['mem_bytes'].text)} cannot be combined with {got['mem_pct'].field}",
                         field=got["mem_bytes"].field, allowed=["memory in bytes or in percent, not both"])
    if "mem_bytes" in got and config.max_gpu_memory_bytes and value["mem_bytes"] > config.max_gpu_memory_bytes:
        raise InputError(f"{show(got['mem_bytes'].text)} is more than the cluster's largest GPU has",
                         field=got["mem_bytes"].field,
                         allowed=[f"at most {config.max_gpu_memory_bytes >> 20} MiB per device"])
    memory = "mem_bytes" in got or "mem_pct" in got
    if "milli_gpu" not in got and "mig_profile" not in got:
        if memory:  # sized by memory: HAMi/gpushare/KAI reserve no compute and throttle nothing
            value["milli_gpu"] = memory_share_milli(value.get("mem_bytes"), value.get("mem_pct"), config)
            value.setdefault("sm_pct", 100)
        elif "sm_pct" in got:
            raise InputError(f"{show(got['sm_pct'].text)} limits a share but does not size one",
                             field=got["sm_pct"].field, allowed=["with a fraction or a memory amount"])
        else:
            value["milli_gpu"] = MILLI
    if view.container(name).privileged and "mig_profile" not in value and (
            value["milli_gpu"] < MILLI or memory and value.get("mem_pct") != 100):
        raise InputError("a privileged container sees every GPU of its node, so it cannot hold a share of one",
                         field=f"{view.container(name).field}.securityContext.privileged",
                         allowed=["false", "or a whole GPU"])
    return ContainerRequest(container=name, **value)


def build(claims: list[Claim], view: PodView, config: AdmissionConfig) -> GpuRequest:
    """The canonical request from claims that agree (one line naming both spellings where two do not)."""
    chosen = _agreed(claims)
    per: dict[str, dict[str, Claim]] = {}
    for (container, attr), c in chosen.items():
        if container is not None:
            per.setdefault(container, {})[attr] = c
    pod = {attr: c.value for (container, attr), c in chosen.items()
           if container is None and not attr.startswith(_MODEL_FILTER)}
    filters = sorted((c.value for (container, attr), c in chosen.items() if attr.startswith(_MODEL_FILTER)),
                     key=lambda f: f.rule)
    if filters:  # one per spelling's rule; all of them must pass
        pod["model_filters"] = tuple(filters)
    used = {c.source for c in claims}
    pod.setdefault("source", next(s for s in SOURCES if s in used))
    _protection(pod, chosen, view, config)
    order = [c.name for c in view.containers]
    try:
        containers = tuple(_container(n, per[n], view, config) for n in sorted(per, key=order.index))
        request = GpuRequest(containers=containers, **pod)
    except pydantic.ValidationError as err:  # a rule the spellings' own checks missed: still one line
        raise InputError(first_error(err), field="fgpu.io/request") from None
    check_placeable(request, chosen)
    return request


def _protection(pod: dict, chosen: dict[tuple[str | None, str], Claim], view: PodView,
                config: AdmissionConfig) -> None:
    """Who is protected (docs/qos.md): a pod that asks for nothing is best-effort; a slowdown bound, or a
    PriorityClass value at or above the cluster's `protectedPriority`, makes a pod that names no priority
    high priority. A bound on a pod that says it is low priority is refused (it would protect nothing)."""
    bound = chosen.get((None, "slo_slowdown"))
    named = chosen.get((None, "priority"))
    if bound is not None and named is not None and named.value != "high":
        raise InputError(f"{show(bound.text)} is a slowdown bound, which protects a high-priority pod only, and "
                         f"{named.field} is {show(named.text)}", field=bound.field,
                         allowed=["no bound on a low-priority pod", "or priority high"])
    if named is not None:
        return
    value = view.spec.get("priority")
    by_class = (config.protected_priority is not None and isinstance(value, int) and not isinstance(value, bool)
                and value >= config.protected_priority)
    if bound is not None or by_class:
        pod["priority"] = "high"


def first_error(err: pydantic.ValidationError) -> str:
    """pydantic's first complaint, on one line: what is wrong, and where."""
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"])
    return f"{e['msg']} at {where}" if where else e["msg"]

