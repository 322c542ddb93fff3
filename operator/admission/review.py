"""The whole AdmissionReview answer for pods, for the mutating and the validating webhook alike.

It never raises: a review it cannot read is denied with a line saying why (400), a bad request with the
request's own one-line error (400), a hand-off annotation someone may not write with 403, and a bug in
fgpu with 500 (the apiserver then applies the webhook's failurePolicy). Only CREATE and UPDATE of pods
matter; anything else is allowed untouched.
"""
from __future__ import annotations

import base64
import json

from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import show

from .config import DEFAULT_CONFIG, AdmissionConfig
from .handoff import HandoffError, check_update
from .parse import classify_pod
from .patch import mutate
from .podview import PodView

_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


def _deny(version: str, uid: str, code: int, reason: str, message: str) -> dict:
    status = {"status": "Failure", "code": code, "reason": reason, "message": " ".join(message.splitlines())}
    return {"apiVersion": version, "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": False, "status": status}}


def _allow(version: str, uid: str, ops: list[dict] | None = None, warnings: list[str] | None = None) -> dict:
    response: dict = {"uid": uid, "allowed": True}
    if ops:
        raw = json.dumps(ops, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
        response |= {"patchType": "JSONPatch", "patch": base64.b64encode(raw).decode()}
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": version, "kind": "AdmissionReview", "response": response}


def _request(review: object) -> tuple[dict, str, str]:
    """(request, uid, apiVersion) of a well-formed review; InputError otherwise."""
    if not isinstance(review, dict):
        raise InputError(f"{show(review)} is not an AdmissionReview", field="body")
    version = review.get("apiVersion")
    if version not in _VERSIONS or review.get("kind") != "AdmissionReview":
        raise InputError(f"{show(version)} {show(review.get('kind'))} is not an AdmissionReview",
                         field="apiVersion", allowed=_VERSIONS)
    request = review.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    if not isinstance(uid, str) or not uid:
        raise InputError("has no uid", field="request", allowed=["an AdmissionReview request with a uid"])
    return request, uid, version


def _decide(request: dict, version: str, uid: str, config: AdmissionConfig, mutating: bool) -> dict:
    kind = request.get("kind")
    if not isinstance(kind, dict) or kind.get("kind") != "Pod":
        return _allow(version, uid)
    operation = request.get("operation")
    if operation == "UPDATE":
        user = request.get("userInfo")
        name = user.get("username") if isinstance(user, dict) else None
        check_update(PodView(request.get("oldObject")), PodView(request.get("object")),
                     name if isinstance(name, str) else "", config)
        return _allow(version, uid)
    if operation != "CREATE":
        return _allow(version, uid)
    pod = request.get("object")
    seen = classify_pod(pod, config)
    if seen.request is None or not mutating:
        return _allow(version, uid)
    warnings = [] if seen.scheduler == config.scheduler_name else [
        f"fgpu: schedulerName {seen.scheduler[:60]} replaced by {config.scheduler_name}"]
    return _allow(version, uid, mutate(pod, seen.request, config), warnings)


def review(admission_review: object, config: AdmissionConfig = DEFAULT_CONFIG, *, mutating: bool = True) -> dict:
    """The AdmissionReview response to `admission_review` (a parsed JSON body). `mutating=False` answers
    as the validating webhook: the same verdict, never a patch."""
    version, uid = _VERSIONS[0], ""
    try:
        request, uid, version = _request(admission_review)
        return _decide(request, version, uid, config, mutating)
    except HandoffError as err:
        return _deny(version, uid, 403, "Forbidden", err.message)
    except InputError as err:
        return _deny(version, uid, 400, "BadRequest", err.message)
    except Exception as err:  # noqa: BLE001 - the webhook answers every review; the bug is named
        return _deny(version, uid, 500, "InternalError",
                     f"fgpu admission failed on this pod ({type(err).__name__}); please report it")
