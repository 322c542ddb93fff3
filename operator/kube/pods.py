"""The scheduler's writes to a pod: the Binding (node + hand-off annotations in one atomic write), the
PodScheduled=False condition for a pod that fits nowhere, and a tampered hand-off written back."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..objects import condition, timestamp
from .outcome import Outcome, Result
from .session import STRATEGIC_MERGE, ApiSession

UID_PRECONDITION = "Precondition failed: UID in precondition"
MERGE_PATCH = "application/merge-patch+json"


async def bind(
    api: ApiSession, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str] | None = None,
) -> Outcome:
    """POST pods/{name}/binding. The apiserver copies the Binding's annotations onto the pod in the same
    update that sets spec.nodeName, so the device plugin never sees a bound pod without its hand-off.

    `uid` is a precondition: a pod deleted and recreated under the same name is reported GONE, not bound.
    OK also when a retried attempt finds the pod already on `node` (the earlier attempt did land);
    CONFLICT when it is bound elsewhere or is being deleted.
    """
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if uid:
        metadata["uid"] = uid
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    out = await api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body=body)
    if out.result is Result.CONFLICT:
        if UID_PRECONDITION in out.message:
            return dataclasses.replace(out, result=Result.GONE)
        if out.attempts > 1 and f'is already assigned to node "{node}"' in out.message:
            return dataclasses.replace(out, result=Result.OK)
    return out


async def set_unschedulable(
    api: ApiSession, namespace: str, name: str, message: str, reason: str = "Unschedulable",
    *, pod: dict[str, Any] | None = None,
) -> Outcome:
    """Set PodScheduled=False with `message` (strategic merge on status.conditions, keyed by type, as
    kube-scheduler does), so `kubectl describe` and autoscalers see why the pod waits.

    With the pod's current dict, a condition that already says the same is not written again (attempts=0)
    and lastTransitionTime is kept while the status stays False.
    """
    current = condition(pod, "PodScheduled")
    if current.get("status") == "False" and current.get("reason") == reason and current.get("message") == message:
        return Outcome(Result.OK, 0, "unchanged", attempts=0)
    since = current.get("lastTransitionTime") if current.get("status") == "False" else None
    wanted = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                 "lastProbeTime": None, "lastTransitionTime": since or timestamp()}
    return await api.request(
        "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        body={"status": {"conditions": [wanted]}}, content_type=STRATEGIC_MERGE,
    )



async def set_annotations(
    api: ApiSession, namespace: str, name: str, uid: str, annotations: dict[str, str | None],
) -> Outcome:
    """Merge-patch a pod's annotations (None removes one). `uid` is a precondition: a pod deleted and recreated
    under the same name is left alone (GONE)."""
    body = {"metadata": {"uid": uid, "annotations": annotations}}
    out = await api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body,
                            content_type=MERGE_PATCH)
    if out.result is Result.CONFLICT and UID_PRECONDITION in out.message:
        return dataclasses.replace(out, result=Result.GONE)
    return out


async def set_nominated_node(api: ApiSession, namespace: str, name: str, node: str) -> Outcome:
    """status.nominatedNodeName: where a preemptor will go once its victims are gone (kube-scheduler's hint
    to users and autoscalers; fgpu's own hold is the assumed allocation)."""
    return await api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                             body={"status": {"nominatedNodeName": node}}, content_type=STRATEGIC_MERGE)


async def mark_preempted(api: ApiSession, namespace: str, name: str, message: str) -> Outcome:
    """The DisruptionTarget condition (reason PreemptionByScheduler) kube-scheduler sets on a victim before
    deleting it, so its controller and `kubectl describe` say why it went."""
    wanted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": message,
              "lastTransitionTime": timestamp()}
    return await api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                             body={"status": {"conditions": [wanted]}}, content_type=STRATEGIC_MERGE)


async def delete_pod(api: ApiSession, namespace: str, name: str, uid: str) -> Outcome:
    """DELETE with the pod's own grace period (graceful), `uid` as a precondition (GONE for a pod deleted and
    recreated under the same name, or already gone)."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    out = await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)
    if out.result is Result.CONFLICT and UID_PRECONDITION in out.message:
        return dataclasses.replace(out, result=Result.GONE)
    return out
