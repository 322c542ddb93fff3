"""fgpu's own annotations (`fgpu.io/*`): a fraction or a count of GPUs, memory, an SM limit or a MIG
profile for one container (`fgpu.io/container`, default the first), plus the pod's priority, models, node
policy, KubeShare-style groups, SLO, workload class (duty cycle) and SLO-filter switch.

`fgpu.io/gpu-count: N` asks for N devices, each on a different GPU of one node, each with the share that
`gpu-fraction` / `gpu-memory` / `gpu-sm` give (per device, as HAMi's resources are), or N MIG instances of
`mig-profile`; alone it is N whole GPUs. `gpu-fraction: "2"` (a count of whole GPUs) is the same as
`gpu-count: "2"` and must agree with it."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_number, quantity_bytes, show, whole
from fgpu_contracts.request import ModelFilter

from ..config import AdmissionConfig
from ..gpus import mig_profile, model_names
from ..podview import PodView
from .common import MAX_DEVICES, Claims, choice, fraction, group, note

SOURCE = "fgpu"
_SHARE_KEYS = (keys.FGPU_FRACTION, keys.FGPU_COUNT, keys.FGPU_MEMORY, keys.FGPU_SM, keys.FGPU_MIG_PROFILE)
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
    if got := note(view, keys.FGPU_COUNT):
        out.add("count", whole(parse_number(*got), *got, 1, MAX_DEVICES, "a device count"), *got)
    if got := note(view, keys.FGPU_MEMORY):
        out.add("mem_bytes", quantity_bytes(*got), *got)
    if got := note(view, keys.FGPU_SM):
        out.add("sm_pct", whole(parse_number(*got), *got, 1, 100, "an SM percentage"), *got)
    if got := note(view, keys.FGPU_MIG_PROFILE):
        out.add("mig_profile", mig_profile(*got), *got)
    return out


def hints(view: PodView, config: AdmissionConfig) -> Claims:
    out = Claims(SOURCE)
    allow, deny = note(view, keys.FGPU_MODEL), note(view, keys.FGPU_MODEL_EXCLUDE)
    if allow or deny:
        models = ModelFilter(rule="fgpu", allow=model_names(*allow) if allow else (),
                             deny=model_names(*deny) if deny else ())
        out.add("model_filter.fgpu", models, *(allow or deny))
    if got := note(view, keys.FGPU_PRIORITY):
        out.add("priority", choice(*got, ("high", "low")), *got)
    if got := note(view, keys.FGPU_POLICY):
        out.add("node_policy", choice(*got, config.node_policies), *got)
    for key, attr in _GROUPS.items():
        if got := note(view, key):
            out.add(attr, group(*got), *got)
    if got := note(view, keys.FGPU_SLO_SLOWDOWN):
        out.add("slo_slowdown", slowdown(*got), *got)
    if got := note(view, keys.FGPU_DUTY_CYCLE):
        out.add("duty_cycle", duty_cycle(*got), *got)
    if got := note(view, keys.FGPU_SLO_FILTER):
        out.add("slo_filter", choice(*got, ("true", "false")) == "true", *got)
    return out


def duty_cycle(text: str, field: str) -> float:
    """The fraction of time the pod keeps its GPU busy when alone (its workload class for the co-location
    model): 0 < d <= 1."""
    value = parse_number(text, field, allowed=["0 < d <= 1"])
    if not 0 < value <= 1:
        raise InputError(f"{show(text)} is not a duty cycle", field=field, allowed=["0 < d <= 1"])
    return float(value)


def slowdown(text: str, field: str) -> float:
    """A high-priority pod's slowdown bound: more than 1 (1 would forbid any co-runner), at most 100."""
    value = parse_number(text, field, allowed=["1 < s <= 100"])
    if not 1 < value <= 100:
        raise InputError(f"{show(text)} is not a slowdown bound", field=field, allowed=["1 < s <= 100"])
    return float(value)
