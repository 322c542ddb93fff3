"""The classic spellings onto DRA (docs/dra.md "Classic spellings on DRA"): with `AdmissionConfig.dra_allocator`
set (the chart's `dra.enabled`), an admitted share (HAMi's gpumem/gpucores, fgpu's, KAI's and Aliyun's forms)
or MIG instance becomes a ResourceClaimTemplate of fgpu-dra's classes with the same capacity, referenced from
`spec.resourceClaims` and the container's `resources.claims`; the old resources leave the container. Whole GPUs
(`nvidia.com/gpu: N`) keep their count: KEP-5004's extended-resource class serves them.

What the claim cannot say is refused, one line each: a claim of fgpu-dra's is one request of one GPU with an
absolute memory amount and one SM share that is also its compute share, and neither kube-scheduler nor
fgpu-scheduler evaluates a selector on it. Pure: the template is returned, the webhook's shell creates it.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from fgpu_contracts import dra as names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import MILLI, ContainerRequest, GpuRequest, dump_request

from .config import AdmissionConfig
from .patch import escape, mutate, set_op
from .podview import PodView

#: The pod's claim (spec.resourceClaims[].name, the container's resources.claims[].name) and its one request.
POD_CLAIM = "fgpu-gpu"
REQUEST = "gpu"
#: Templates the webhook writes carry this label; their names are `fgpu-<kind>-<digest of the spec>`, so pods that
#: ask alike share one template per namespace and writing it again is a no-op.
MANAGED_BY = ("app.kubernetes.io/managed-by", "fgpu-webhook")
#: Pod-level attributes only fgpu-scheduler honours: kube-scheduler's DRA plugin would drop them silently.
_FGPU_ONLY = {"model_filters": "a GPU-model filter", "uuids": "a GPU UUID list", "exclude_uuids": "a GPU UUID list",
              "node_policy": "a node policy", "gpu_policy": "a GPU policy", "affinity": "an affinity group",
              "anti_affinity": "an anti-affinity group", "exclusion": "an exclusion group",
              "duty_cycle": "a duty cycle", "slo_filter": "an SLO filter"}


@dataclass(frozen=True)
class ClaimRewrite:
    ops: list[dict]  # the pod's JSON patch
    template: dict  # the ResourceClaimTemplate the pod names (namespace: the pod's)


def _refuse(what: str, why: str, allowed: str) -> InputError:
    return InputError(f"{what}: {why} (DRA is on: dra.enabled)", field="fgpu.io/request", allowed=[allowed])


def _memory(c: ContainerRequest, config: AdmissionConfig) -> int | None:
    """The share's memory in bytes (None: the whole GPU's, the request policy's default)."""
    if c.mem_bytes is not None:
        return c.mem_bytes
    pct = c.mem_pct if c.mem_pct is not None else (None if c.milli_gpu == MILLI else -(-c.milli_gpu * 100 // MILLI))
    if pct is None or pct == 100:
        return None
    if config.dra_gpu_memory_bytes is None:
        raise _refuse(f"{pct}% of a GPU's memory", "a claim's memory is an amount, and this cluster's GPUs do not "
                      "all have the same memory", "the memory as an amount (fgpu.io/gpu-memory, nvidia.com/gpumem)")
    return config.dra_gpu_memory_bytes * pct // 100


def _sm_share(c: ContainerRequest) -> int | None:
    """The claim's smShare: both the compute share it reserves and its SM limit. None for a share sized by memory
    alone (HAMi's gpumem without gpucores, gpushare, KAI's gpu-memory: the webhook's compute estimate with no
    throttle), which on DRA reserves no compute and is not throttled, as the driver grants it."""
    if c.sm_pct == 100 and c.milli_gpu < MILLI and (c.mem_bytes is not None or c.mem_pct is not None):
        return None
    compute = -(-c.milli_gpu * 100 // MILLI)
    if c.sm_pct is not None and c.sm_pct != compute:
        raise _refuse(f"a compute share of {c.milli_gpu} milli-GPU with an SM limit of {c.sm_pct}%",
                      "a claim's smShare is both", "one number: the SM limit alone, or the fraction alone")
    return compute


def _device_request(c: ContainerRequest, config: AdmissionConfig) -> tuple[str, dict]:
    """(template kind, the claim's exactly request) for one container's GPUs."""
    if c.is_mig:
        return "mig", {"deviceClassName": names.mig_class(c.mig_profile), "count": c.count}
    if c.count != 1:
        raise _refuse(f"{c.count} GPUs each shared", "a claim's share is of one GPU",
                      "one shared GPU, or whole GPUs (nvidia.com/gpu: N)")
    caps: dict[str, str] = {}
    mem = _memory(c, config)
    if mem is not None:
        caps[names.CAP_MEMORY] = f"{math.ceil(mem / names.MEMORY_STEP) * names.MEMORY_STEP >> 20}Mi"
    sm = _sm_share(c)
    if sm is not None:
        caps[names.CAP_SM_SHARE] = str(sm)
    exactly: dict = {"deviceClassName": names.CLASS_SHARE}
    if caps:
        exactly["capacity"] = {"requests": caps}
    return "share", exactly


def _template(namespace: str, kind: str, exactly: dict, request: GpuRequest) -> dict:
    params = {"apiVersion": names.CONFIG_API_VERSION, "kind": names.CONFIG_KIND, "priority": request.priority}
    if request.slo_slowdown is not None:
        params["sloSlowdown"] = request.slo_slowdown
    spec = {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}],
                        "config": [{"requests": [REQUEST], "opaque": {"driver": names.DRIVER, "parameters": params}}]}}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"fgpu-{kind}-{digest}", "namespace": namespace, "labels": dict([MANAGED_BY])},
            "spec": {"spec": spec}}


def is_whole(request: GpuRequest) -> bool:
    """Whole GPUs only: a count, which KEP-5004's extended-resource mapping serves with no claim of ours."""
    return all(not c.is_mig and not c.is_share for c in request.containers)


def _check_pod(view: PodView, request: GpuRequest, config: AdmissionConfig) -> ContainerRequest:
    if len(request.containers) != 1:
        raise _refuse(f"{len(request.containers)} containers with GPUs", "a pod gets one GPU claim",
                      "one GPU container per pod")
    if config.dra_allocator == names.ALLOCATOR_KUBE:
        for attr, what in _FGPU_ONLY.items():
            if getattr(request, attr) not in (None, ()):
                raise _refuse(what, "kube-scheduler's DRA plugin allocates these pools and would ignore it",
                              "the pod's nodeSelector, or dra.allocator: fgpu-scheduler")
    others = [c for c in view.spec.get("resourceClaims") or () if not (isinstance(c, dict) and c.get("name") == POD_CLAIM)]
    if config.dra_allocator == names.ALLOCATOR_FGPU and others:
        raise _refuse("spec.resourceClaims beside a GPU share", "fgpu-scheduler allocates one claim per pod",
                      "the GPU as the pod's only claim")
    return request.containers[0]


def scheduler_for(config: AdmissionConfig) -> str:
    """Who places a pod whose GPUs are claims: the allocator of the DRA pools."""
    return config.scheduler_name if config.dra_allocator == names.ALLOCATOR_FGPU else keys.DEFAULT_SCHEDULER


def rewrite(pod: dict, request: GpuRequest, namespace: str, config: AdmissionConfig) -> ClaimRewrite:
    """The claim for an admitted share or MIG request, and the pod's patch onto it. InputError for what a claim
    of fgpu-dra's cannot say."""
    view = PodView(pod)
    asked = _check_pod(view, request, config)
    kind, exactly = _device_request(asked, config)
    template = _template(namespace, kind, exactly, request)
    ops: list[dict] = []
    scheduler = scheduler_for(config)
    if view.spec.get("schedulerName") != scheduler:
        ops.append(set_op("/spec/schedulerName", scheduler, "schedulerName" in view.spec))
    ops += _annotations(pod, request, config)
    claims = view.spec.get("resourceClaims")
    entry = {"name": POD_CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}
    mine = next((i for i, c in enumerate(claims or ()) if isinstance(c, dict) and c.get("name") == POD_CLAIM), None)
    if mine is not None:  # admitted before (a pod copied from an admitted one): the same claim, no second one
        if claims[mine] != entry:
            ops.append(set_op(f"/spec/resourceClaims/{mine}", entry, True))
        return ClaimRewrite(ops, template)
    ops.append({"op": "add", "path": "/spec/resourceClaims/-", "value": entry} if isinstance(claims, list)
               else set_op("/spec/resourceClaims", [entry], "resourceClaims" in view.spec))
    ops += _container_ops(view.container(asked.container), config)
    return ClaimRewrite(ops, template)


def _annotations(pod: dict, request: GpuRequest, config: AdmissionConfig) -> list[dict]:
    """fgpu-scheduler reads the pod-level attributes (policy, groups, filters) from `fgpu.io/request` beside the
    claim; kube-scheduler's pods carry none."""
    if config.dra_allocator != names.ALLOCATOR_FGPU:
        return []
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations")
    text = dump_request(request)
    if not isinstance(notes, dict):
        return [set_op("/metadata/annotations", {keys.REQUEST: text}, "annotations" in meta)]
    return [] if notes.get(keys.REQUEST) == text else [
        set_op(f"/metadata/annotations/{escape(keys.REQUEST)}", text, keys.REQUEST in notes)]


def _container_ops(c, config: AdmissionConfig) -> list[dict]:
    """The GPU resources leave the container (the claim carries them); the container names the claim."""
    drop = {config.resources.gpu, *config.resources.accounting()}
    res = c.raw.get("resources")
    ops: list[dict] = []
    if isinstance(res, dict):
        for section in ("limits", "requests"):
            current = res.get(section)
            if isinstance(current, dict):
                ops += [{"op": "remove", "path": f"{c.pointer}/resources/{section}/{escape(k)}"} for k in current
                        if k in drop or k.startswith(keys.MIG_RESOURCE_PREFIX)]
        claims = res.get("claims")
        ops.append({"op": "add", "path": f"{c.pointer}/resources/claims/-", "value": {"name": POD_CLAIM}}
                   if isinstance(claims, list) else set_op(f"{c.pointer}/resources/claims", [{"name": POD_CLAIM}],
                                                         "claims" in res))
    else:
        ops.append(set_op(f"{c.pointer}/resources", {"claims": [{"name": POD_CLAIM}]}, "resources" in c.raw))
    return ops


def admit(pod: dict, request: GpuRequest, namespace: str, config: AdmissionConfig) -> tuple[list[dict], dict | None]:
    """The patch for an admitted GPU pod, and the ResourceClaimTemplate it names (None: no claim of ours). DRA
    off: the device-plugin patch (`patch.mutate`). On: shares and MIG become a claim; whole GPUs keep their
    `nvidia.com/gpu: N` for KEP-5004 (kube-scheduler's pods: left to it; fgpu-scheduler's: it makes the claim)."""
    if config.dra_allocator is None:
        return mutate(pod, request, config), None
    if not is_whole(request):
        done = rewrite(pod, request, namespace, config)
        return done.ops, done.template
    if config.dra_allocator == names.ALLOCATOR_FGPU:
        return mutate(pod, request, config), None
    _check_pod(PodView(pod), request.model_copy(update={"containers": request.containers[:1]}), config)
    spec = PodView(pod).spec
    return ([] if spec.get("schedulerName") == keys.DEFAULT_SCHEDULER else
            [set_op("/spec/schedulerName", keys.DEFAULT_SCHEDULER, "schedulerName" in spec)]), None
