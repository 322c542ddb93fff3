"""fgpu's own annotations (`fgpu.io/*`): a fraction or a count of GPUs, memory, an SM limit or a MIG
profile for one container (`fgpu.io/container`, default the first), plus the pod's priority, models, node
policy, KubeShare-style groups and SLO."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_number, quantity_bytes, show, whole

from ..config import AdmissionConfig
from ..gpus import mig_profile, resolve_models
from ..podview import PodView
from .common import Claims, choice, fraction, group, note

SOURCE = "fgpu"
_SHARE_KEYS = (keys.FGPU_FRACTION, keys.FGPU_MEMORY, keys.FGPU_SM, keys.FGPU_MIG_PROFILE)
_GROUPS = {keys.FGPU_AFFINITY: "affinity", keys.FGPU_ANTI_AFFINITY: "anti_affinity",
           keys.FGPU_EXCLUSION: "exclusion"}


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    if not any(k in view.annotations for k in _SHARE_KEYS):
        return Claims(SOURCE)
    out = Claims(SOURCE, view.target().name)
    if got := note(view, keys.FGPU_FRACTION):
        count, milli = fraction(*got, counts=True)
        out.add("milli_gpu", milli, *got)
        if count is not None:
            out.add("count", count, *got)
    if got := note(view, keys.FGPU_MEMORY):
        out.add("mem_bytes", quantity_bytes(*got), *got)
    if got := note(view, keys.FGPU_SM):
        out.add("sm_pct", whole(parse_number(*got), *got, 1, 100, "an SM percentage"), *got)
    if got := note(view, keys.FGPU_MIG_PROFILE):
        out.add("mig_profile", mig_profile(*got), *got)
    return out


def hints(view: PodView, config: AdmissionConfig) -> Claims:
    out = Claims(SOURCE)
    if got := note(view, keys.FGPU_MODEL):
        out.add("models", resolve_models(*got), *got)
    if got := note(view, keys.FGPU_PRIORITY):
        out.add("priority", choice(*got, ("high", "low")), *got)
    if got := note(view, keys.FGPU_POLICY):
        out.add("node_policy", choice(*got, config.node_policies), *got)
    for key, attr in _GROUPS.items():
        if got := note(view, key):
            out.add(attr, group(*got), *got)
    if got := note(view, keys.FGPU_SLO_SLOWDOWN):
        out.add("slo_slowdown", slowdown(*got), *got)
    return out


def slowdown(text: str, field: str) -> float:
    """A high-priority pod's slowdown bound: more than 1 (1 would forbid any co-runner), at most 100."""
    value = parse_number(text, field, allowed=["1 < s <= 100"])
    if not 1 < value <= 100:
        raise InputError(f"{show(text)} is not a slowdown bound", field=field, allowed=["1 < s <= 100"])
    return float(value)
