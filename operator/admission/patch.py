"""The mutation: RFC 6902 JSON-patch ops that turn an admitted pod into what fgpu's scheduler, a real
kubelet and the device plugin expect.

- `spec.schedulerName: fgpu-scheduler`, and the canonical request in `fgpu.io/request` (the scheduler reads
  only that, never a peer's spelling); user-set allocation hand-offs are removed.
- Each GPU container carries the countable device resource the node's device plugin advertises (in its
  limits, and in its requests where it has any: the two must be equal), so the kubelet admits the pod and
  calls Allocate: `nvidia.com/gpu: <count>` for shares and whole GPUs (a fractional node advertises
  `splitCount` slots per GPU under that name, and Allocate matches a container by its device count,
  docs/deviceplugin.md), `nvidia.com/mig-<profile>: <count>` for MIG.
- Per-device amounts are removed from every container: HAMi's `gpumem`, `gpumem-percentage`, `gpucores`,
  `priority` and Aliyun's `gpu-mem`. They are not kept for kube-scheduler-style accounting against the
  `gpumem`/`gpucores` totals a fractional node publishes, because that accounting would be wrong: HAMi's
  amounts are per device while Kubernetes counts a container's resource once (`gpu: 2` + `gpumem: 3000` is
  6000 MiB, counted as 3000); only fractional nodes publish the totals, so the kubelet of any other node
  would refuse the pod; and a kubelet restart resets the totals until the plugin republishes them. fgpu's
  scheduler accounts memory and SMs per GPU from `fgpu.io/request` instead. What is lost: a namespace
  ResourceQuota on `requests.nvidia.com/gpumem` (quotas on `nvidia.com/gpu` still apply).
"""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

from .config import DEFAULT_CONFIG, AdmissionConfig
from .handoff import ALLOCATION_KEYS
from .podview import ContainerView, PodView


def escape(token: str) -> str:
    """One JSON-pointer reference token (RFC 6901): `~` is `~0`, `/` is `~1`, in that order."""
    return token.replace("~", "~0").replace("/", "~1")


def set_op(path: str, value: object, present: bool) -> dict:
    return {"op": "replace" if present else "add", "path": path, "value": value}


def _annotations(pod: dict, request: GpuRequest) -> list[dict]:
    text = dump_request(request)
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return [set_op("/metadata", {"annotations": {keys.REQUEST: text}}, "metadata" in pod)]
    notes = meta.get("annotations")
    if not isinstance(notes, dict):
        return [set_op("/metadata/annotations", {keys.REQUEST: text}, "annotations" in meta)]
    ops = [{"op": "remove", "path": f"/metadata/annotations/{escape(k)}"} for k in ALLOCATION_KEYS if k in notes]
    if notes.get(keys.REQUEST) != text:
        ops.append(set_op(f"/metadata/annotations/{escape(keys.REQUEST)}", text, keys.REQUEST in notes))
    return ops


def _resources(c: ContainerView, asked: ContainerRequest | None, config: AdmissionConfig) -> list[dict]:
    drop = set(config.resources.accounting())
    want: dict[str, str] = {}
    if asked is not None and asked.is_mig:
        want[keys.mig_resource_name(asked.mig_profile)] = str(asked.count)
        drop.add(config.resources.gpu)
    elif asked is not None:
        want[config.resources.gpu] = str(asked.count)
    res = c.raw.get("resources")
    if not isinstance(res, dict):
        return [set_op(f"{c.pointer}/resources", {"limits": want}, "resources" in c.raw)] if want else []
    ops: list[dict] = []
    for section in ("limits", "requests"):  # extended resources' requests default to their limits
        base, current = f"{c.pointer}/resources/{section}", res.get(section)
        if not isinstance(current, dict):
            ops += [set_op(base, dict(want), section in res)] if want and section == "limits" else []
            continue
        ops += [{"op": "remove", "path": f"{base}/{escape(k)}"} for k in current if k in drop and k not in want]
        ops += [set_op(f"{base}/{escape(k)}", v, k in current) for k, v in want.items() if str(current.get(k)) != v]
    return ops


def mutate(pod: dict, request: GpuRequest, config: AdmissionConfig = DEFAULT_CONFIG) -> list[dict]:
    """The JSON patch for an admitted GPU pod (empty when the pod is already what fgpu wants)."""
    view = PodView(pod)
    ops = []
    if view.spec.get("schedulerName") != config.scheduler_name:
        ops.append(set_op("/spec/schedulerName", config.scheduler_name, "schedulerName" in view.spec))
    ops += _annotations(pod, request)
    asked = {c.container: c for c in request.containers}
    for c in view.containers:
        ops += _resources(c, asked.get(c.name), config)
    return ops
