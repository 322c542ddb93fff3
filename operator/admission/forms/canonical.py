"""`fgpu.io/request` as a spelling of its own: the canonical request, as the webhook writes it.

A pod carries it when the webhook sees the pod a second time (reinvocation, or a manifest copied from an
admitted pod, whose peer resources the first pass already rewrote). Reading it back makes admission
idempotent. A user who writes it by hand gains nothing over fgpu's annotations: it is checked like any
other spelling, and it must agree with the others. (The allocation hand-offs are another matter: see
handoff.py.)
"""
from __future__ import annotations

import pydantic

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show
from fgpu_contracts.request import GpuRequest, load_request

from ..claims import first_error
from ..config import AdmissionConfig
from ..gpus import mig_profile, model_names
from ..podview import PodView
from .common import Claims, choice, group, note, tokens

_CONTAINER_ATTRS = ("count", "milli_gpu", "mem_bytes", "mem_pct", "sm_pct")
_GROUPS = ("affinity", "anti_affinity", "exclusion")


def _load(view: PodView) -> tuple[GpuRequest | None, str, Claims]:
    """(the request, its field, an empty Claims of its source); no request: (None, "", empty Claims)."""
    got = note(view, keys.REQUEST)
    if got is None:
        return None, "", Claims("fgpu")
    try:
        req = load_request(got[0])
    except pydantic.ValidationError as err:
        raise InputError(f"is not a valid fgpu request: {first_error(err)}", field=got[1],
                         allowed=["what fgpu's webhook writes, or no fgpu.io/request"]) from None
    return req, got[1], Claims(req.source)


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    req, field, out = _load(view)
    if req is None:
        return out
    for c in req.containers:
        if view.container(c.container) is None:
            raise InputError(f"names container {show(c.container)}, which the pod does not have", field=field,
                             allowed=[x.name for x in view.containers])
        for attr in ("count",) if c.is_mig else _CONTAINER_ATTRS:  # a MIG request's share fields are unused
            if (value := getattr(c, attr)) is not None:
                out.add(attr, value, str(value), field, container=c.container)
        if c.is_mig:
            out.add("mig_profile", mig_profile(c.mig_profile, field), c.mig_profile, field, container=c.container)
    return out


def hints(view: PodView, config: AdmissionConfig) -> Claims:
    req, field, out = _load(view)
    if req is None:
        return out
    out.add("source", req.source, req.source, field)
    out.add("priority", req.priority, req.priority, field)
    for f in req.model_filters:
        checked = f.model_copy(update={k: model_names(",".join(v), field) for k in ("allow", "deny")
                                       if (v := getattr(f, k))})
        out.add(f"model_filter.{f.rule}", checked, ",".join(f.allow + f.deny), field)
    for attr in ("uuids", "exclude_uuids"):
        if ids := getattr(req, attr):
            out.add(attr, tokens(",".join(ids), field, "GPU UUIDs"), ",".join(ids), field)
    if req.node_policy is not None:
        out.add("node_policy", choice(req.node_policy, field, config.node_policies), req.node_policy, field)
    if req.gpu_policy is not None:
        out.add("gpu_policy", choice(req.gpu_policy, field, ("binpack", "spread")), req.gpu_policy, field)
    for attr in _GROUPS:
        if (name := getattr(req, attr)) is not None:
            out.add(attr, group(name, field), name, field)
    for attr in ("slo_slowdown", "duty_cycle", "slo_filter"):
        if (value := getattr(req, attr)) is not None:
            out.add(attr, value, str(value), field)
    return out
