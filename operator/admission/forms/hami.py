"""HAMi: per-device amounts as container resources (`nvidia.com/gpumem` MiB, `gpumem-percentage`,
`gpucores` %, `priority` 0 high / 1 low) beside `nvidia.com/gpu: N` (read by forms.nvidia), and pod
annotations that choose or avoid GPUs by UUID or type and set the scheduling policies.

As in HAMi, 0 means "not asked" for memory and cores, and a container with memory or cores but no
`nvidia.com/gpu` gets one device. Unlike HAMi, a share without `gpumem` gets memory in proportion to its
cores (HAMi's default is the whole memory: ask `gpumem-percentage: 100` for that).
"""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_quantity, show, whole
from fgpu_contracts.request import MILLI, ModelFilter

from ..config import AdmissionConfig
from ..gpus import model_names, smallest_mig_profile
from ..podview import ContainerView, PodView
from .common import Claims, choice, note, tokens

SOURCE = "hami"
_POLICIES = ("binpack", "spread")
_UNSUPPORTED_POLICY = {
    "topology-aware": "fgpu does not score NVLink topology",
    "mutex": "fgpu does not reserve idle GPUs",
    "numa": "fgpu does not bind NUMA nodes",
}
_MODES = {  # nvidia.com/vgpu-mode values fgpu does not run, and what to ask instead
    "mps": "in fgpu, MPS is a node's sharing mode: ask for that node's replica resource (e.g. "
           "nvidia.com/gpu.shared); fractional shares run under fgpu's quotas",
}


def _amount(c: ContainerView, key: str, hi: int) -> tuple[int, str, str] | None:
    text = c.resource(key)
    if text is None:
        return None
    field = c.resource_field(key)
    value = whole(parse_quantity(text, field), text, field, 0, hi)
    return (value, text, field) if value else None


def _mig_mode(view: PodView) -> bool:
    got = note(view, keys.HAMI_VGPU_MODE)
    return bool(got) and got[0].strip().lower() == "mig"


def _mig_containers(view: PodView, config: AdmissionConfig) -> Claims:
    """`vgpu-mode: mig`: each container's `gpumem` picks the smallest MIG profile that holds it, and its
    `nvidia.com/gpu` count is the number of instances (HAMi's dynamic MIG; fgpu's dynamic-MIG GPUs re-lay
    for it, docs/dynamic-mig.md). Shares of compute or of memory have no meaning on a fixed slice."""
    names, out = config.resources, Claims(SOURCE)
    for c in view.containers:
        for key in (names.memory_pct, names.cores):
            if _amount(c, key, 100):
                raise InputError(f"{show(c.resource(key))} has no meaning in vgpu-mode mig: a MIG instance is a "
                                 "fixed slice", field=c.resource_field(key),
                                 allowed=[f"{names.memory} (MiB), which picks the profile"])
        if got := _amount(c, names.memory, 1 << 40):
            out.add("mig_profile", smallest_mig_profile(got[0] << 20, config.mig_models, got[2], got[1]),
                    got[1], got[2], container=c.name)
        elif c.resource(names.gpu) is not None:
            raise InputError("vgpu-mode mig needs the memory per instance, which picks the MIG profile",
                             field=c.resource_field(names.memory), allowed=["MiB, e.g. 8000"])
    return out


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    if _mig_mode(view):
        return _mig_containers(view, config)
    names, out = config.resources, Claims(SOURCE)
    for c in view.containers:
        if got := _amount(c, names.memory, 1 << 40):
            out.add("mem_bytes", got[0] << 20, *got[1:], container=c.name)
        if got := _amount(c, names.memory_pct, 100):
            out.add("mem_pct", got[0], *got[1:], container=c.name)
        if got := _amount(c, names.cores, 100):
            out.add("milli_gpu", got[0] * MILLI // 100, *got[1:], container=c.name)
    return out


def hints(view: PodView, config: AdmissionConfig) -> Claims:
    out = Claims(SOURCE)
    for c in view.containers:
        if (text := c.resource(config.resources.priority)) is not None:
            field = c.resource_field(config.resources.priority)
            level = whole(parse_quantity(text, field), text, field, 0, 1, "a HAMi priority (0 high, 1 low)")
            out.add("priority", ("high", "low")[level], text, field)
    for key, attr in ((keys.HAMI_USE_UUID, "uuids"), (keys.HAMI_NOUSE_UUID, "exclude_uuids")):
        if got := note(view, key):
            out.add(attr, tokens(*got, "GPU UUIDs"), *got)
    if got := note(view, keys.HAMI_USE_TYPE):  # HAMi reads nouse-gputype only when use-gputype is absent
        out.add("model_filter.hami", ModelFilter(rule="hami", allow=model_names(*got)), *got)
    elif got := note(view, keys.HAMI_NOUSE_TYPE):
        out.add("model_filter.hami", ModelFilter(rule="hami", deny=model_names(*got)), *got)
    for key, attr in ((keys.HAMI_NODE_POLICY, "node_policy"), (keys.HAMI_GPU_POLICY, "gpu_policy")):
        if got := note(view, key):
            out.add(attr, _policy(*got), *got)
    if (got := note(view, keys.HAMI_VGPU_MODE)) and got[0].strip().lower() not in ("hami-core", "mig"):
        reason = _MODES.get(got[0].strip().lower(), "fgpu runs HAMi-core-style quotas and MIG only")
        raise InputError(f"{show(got[0])} is not supported: {reason}", field=got[1], allowed=["hami-core", "mig"])
    return out


def _policy(text: str, field: str) -> str:
    word = text.strip().lower()
    if word in _UNSUPPORTED_POLICY:
        raise InputError(f"{show(text)} is not supported: {_UNSUPPORTED_POLICY[word]}", field=field,
                         allowed=_POLICIES)
    return choice(text, field, _POLICIES)
