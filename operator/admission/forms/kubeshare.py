"""KubeShare 2.0 labels (`sharedgpu/gpu_request`, `gpu_limit`, `gpu_mem` bytes, `gpu_model`, `priority`;
1.0's annotation spelling of the same keys too) for the pod's target container, and its scheduling groups.

KubeShare's rules hold: a request above 1 is a whole number equal to the limit, and request <= limit. Both
are required: KubeShare's opportunistic pods (no request, priority 0) reserve nothing, and fgpu reserves
every share it places. The limit above the request becomes the share's SM limit (Gemini's burst ceiling).
"""
from __future__ import annotations

import math

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_number, show, whole
from fgpu_contracts.request import MILLI, ModelFilter

from ..config import AdmissionConfig
from ..gpus import model_names
from ..podview import PodView, label_field
from .common import Claims, group

SOURCE = "kubeshare"
_ALLOWED = ["0 < request <= limit <= 1", "or request = limit, a whole number of GPUs"]
_GROUPS = {keys.KUBESHARE_AFFINITY: "affinity", keys.KUBESHARE_ANTI_AFFINITY: "anti_affinity",
           keys.KUBESHARE_EXCLUSION: "exclusion"}


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    request, limit, mem = (view.meta(k) for k in (keys.KUBESHARE_REQUEST, keys.KUBESHARE_LIMIT,
                                                  keys.KUBESHARE_MEMORY))
    if not (request or limit or mem):
        return Claims(SOURCE)
    for got, key in ((request, keys.KUBESHARE_REQUEST), (limit, keys.KUBESHARE_LIMIT)):
        if got is None:
            raise InputError("is missing: KubeShare asks for a GPU with both gpu_request and gpu_limit",
                             field=label_field(key), allowed=_ALLOWED)
    req, lim = parse_number(*request, allowed=_ALLOWED), parse_number(*limit, allowed=_ALLOWED)
    if req == 0 and lim == 0:
        if mem and parse_number(*mem) != 0:  # KubeShare would drop the memory; a pod asking none gets none
            raise InputError(f"{show(mem[0])} bytes of GPU memory, but {request[1]}={show(request[0])} and "
                             f"{limit[1]}={show(limit[0])} ask for no GPU", field=mem[1],
                             allowed=["a request and limit above 0", "or no gpu_mem"])
        return Claims(SOURCE)  # KubeShare: a regular pod
    if req == 0:
        raise InputError(f"{show(request[0])} guarantees no share: KubeShare's opportunistic pods are not supported",
                         field=request[1], allowed=_ALLOWED)
    if req > lim or lim > 1 and req != lim:
        raise InputError(f"{show(request[0])} does not fit {limit[1]}={show(limit[0])}", field=request[1],
                         allowed=_ALLOWED)
    out = Claims(SOURCE, view.target().name)
    if req > 1:
        out.add("count", whole(req, *request, 2, 64, "a whole number of GPUs"), *request)
        out.add("milli_gpu", MILLI, *request)
    else:
        out.add("milli_gpu", math.ceil(req * MILLI), *request)
        if lim > req:
            out.add("sm_pct", math.ceil(lim * 100), *limit)
    if mem and (nbytes := whole(parse_number(*mem), *mem, 0, 1 << 60, "a number of bytes")):
        out.add("mem_bytes", nbytes, *mem)
    return out


def hints(view: PodView, config: AdmissionConfig) -> Claims:
    out = Claims(SOURCE)
    if got := view.meta(keys.KUBESHARE_MODEL):  # one model, compared for equality (KubeShare's rule)
        names = model_names(*got)
        if len(names) > 1:
            raise InputError(f"{show(got[0])} names {len(names)} models; KubeShare's gpu_model names one",
                             field=got[1], allowed=["one GPU model name, e.g. NVIDIA-A100-SXM4-80GB"])
        out.add("model_filter.kubeshare", ModelFilter(rule="kubeshare", allow=names), *got)
    if got := view.meta(keys.KUBESHARE_PRIORITY):
        level = -1 if got[0].strip() == "-1" else whole(parse_number(*got), *got, 0, 100, "a KubeShare priority")
        out.add("priority", "high" if level > 0 else "low", *got)  # 0 (and -1): opportunistic
    for key, attr in _GROUPS.items():
        if got := view.meta(key):
            out.add(attr, group(*got), *got)
    return out
