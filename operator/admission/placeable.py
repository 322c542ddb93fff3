"""What the webhook admits, fgpu's scheduler can place on some cluster: a node of catalogued GPUs that the
request allows, enough of them, with no other pod on it. A request that no such node could take would wait
Pending forever with a reason the user cannot act on; it is refused here instead, naming the field.

The checks are the shape's, never the cluster's: a model, UUID or MIG layout no node has today is not
refused (a node may join), but a share of 200 GiB on an 80 GB model, three devices from a list of two GPU
UUIDs, or a MIG profile none of the allowed models has, are impossible on any node. Models the catalog does
not know are not judged.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show
from fgpu_contracts.request import GpuRequest, device_shape
from simgpu import mig
from simgpu.catalog import all_gpus

from ..placement.models import ModelFilter, admits_all

#: (container or None for the pod, attribute) -> the claims.Claim that set it (its `field` and `text` name
#: the user's spelling in a refusal)
Fields = Mapping[tuple[str | None, str], Any]


@cache
def _memory() -> dict[str, int]:
    return {g.name: g.mem_bytes for g in all_gpus()}


@cache
def _mig_models(profile: str) -> frozenset[str]:
    return frozenset(g.name for g in mig.mig_gpus() if any(p.name == profile for p in mig.profiles(g)))


def _filters(request: GpuRequest) -> tuple[ModelFilter, ...]:
    return tuple(ModelFilter(f.rule, f.allow, f.deny) for f in request.model_filters)


def _allowed_models(request: GpuRequest) -> list[str] | None:
    """Catalogued models the request may run on, by each spelling's own rule (placement.models); None when
    an allow-list names a model the catalog does not know (a node with it may join: not judged here)."""
    catalog = list(_memory())
    filters = _filters(request)
    for f in filters:
        if any(not any(ModelFilter(f.rule, (token,)).admits(m) for m in catalog) for token in f.allow):
            return None
    return [m for m in catalog if admits_all(filters, m)]


def _claim(fields: Fields, container: str | None, attr: str) -> tuple[str, str]:
    """(field, value as written) of what set `attr`; the canonical request's key if no claim did."""
    c = fields.get((container, attr))
    return (c.field, show(c.text)) if c is not None else ("fgpu.io/request", attr)


def check_placeable(request: GpuRequest, fields: Fields) -> None:
    """InputError (one line: field, value, what is allowed) for a request no node could ever take."""
    shape = device_shape(request)
    devices = sum(c.count for c in request.containers)
    models = _allowed_models(request)
    if models is not None and not models:
        rule = next((f.rule for f in request.model_filters if f.allow), request.model_filters[0].rule)
        field, text = _claim(fields, None, f"model_filter.{rule}")
        raise InputError(f"{text} leaves no GPU model to run on", field=field,
                         allowed=["an allow-list with a model the deny-list does not name"])
    if request.uuids:
        usable = set(request.uuids) - set(request.exclude_uuids)
        if len(usable) < devices:
            field, text = _claim(fields, None, "uuids")
            raise InputError(f"{text} allows {len(usable)} GPU(s) but the pod asks for {devices} devices, one per "
                             "GPU", field=field, allowed=[f"at least {devices} GPU UUIDs not excluded"])
    if models is None:
        return
    if shape.mig_profile is not None and not _mig_models(shape.mig_profile) & set(models):
        c = next(x for x in request.containers if x.mig_profile)
        field, text = _claim(fields, c.container, "mig_profile")
        raise InputError(f"MIG profile {text} exists on none of the GPU models allowed", field=field,
                         allowed=sorted(_mig_models(shape.mig_profile)) or ["a profile of an allowed model"])
    largest = max(_memory()[m] for m in models)
    if shape.mem_bytes is not None and shape.mem_bytes > largest:
        c = request.containers[0]
        field, text = _claim(fields, c.container, "mem_bytes")
        raise InputError(f"{text} per device is more than any allowed GPU model has", field=field,
                         allowed=[f"at most {largest >> 20} MiB per device"])
