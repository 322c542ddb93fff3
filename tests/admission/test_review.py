"""The AdmissionReview envelope: allow with a base64 JSONPatch, deny with a one-line status, 403 for
hand-off edits on UPDATE except from fgpu's own service accounts, and a line (never an exception) for a
review that cannot be read."""
from __future__ import annotations

import copy
import importlib
import json
import subprocess
import sys

import pytest
from admission_util import CONFIG, OPERATOR, envelope, patch_of, pod
from fgpu_operator.admission import review

GPU_POD = pod("""
    metadata: {name: p, annotations: {fgpu.io/gpu-fraction: "0.5"}}
    spec: {schedulerName: hami-scheduler, containers: [{name: main}]}
""")
BOUND = pod("""
    metadata:
      name: p
      annotations:
        fgpu.io/request: '{"version":"v1","containers":[{"container":"main","milliGpu":500}]}'
        fgpu.io/assignment: '{"version":"v1","node":"n1","containers":[]}'
    spec: {schedulerName: fgpu-scheduler, nodeName: n1, containers: [{name: main}]}
""")


def test_create_gpu_pod_is_allowed_with_a_patch_and_a_takeover_warning():
    out = review(envelope(GPU_POD), CONFIG)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    r = out["response"]
    assert (r["uid"], r["allowed"], r["patchType"]) == ("7d1c-uid", True, "JSONPatch")
    assert r["warnings"] == ["fgpu: schedulerName hami-scheduler replaced by fgpu-scheduler"]
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "fgpu-scheduler"} in patch_of(out)


def test_create_cpu_pod_is_allowed_untouched():
    r = review(envelope(pod("spec: {containers: [{name: web}]}")), CONFIG)["response"]
    assert r == {"uid": "7d1c-uid", "allowed": True}


def test_validating_mode_gives_the_same_verdict_and_never_a_patch():
    assert review(envelope(GPU_POD), CONFIG, mutating=False)["response"] == {"uid": "7d1c-uid", "allowed": True}
    bad = copy.deepcopy(GPU_POD)
    bad["metadata"]["annotations"]["fgpu.io/gpu-fraction"] = "7.5"
    assert review(envelope(bad), CONFIG, mutating=False)["response"]["status"]["code"] == 400


def _edit(annotations: dict) -> dict:
    new = copy.deepcopy(BOUND)
    new["metadata"]["annotations"] = annotations
    return new


NOTES = BOUND["metadata"]["annotations"]
EDITS = {
    "edit assignment": {**NOTES, "fgpu.io/assignment": '{"version":"v1","node":"n1","containers":[{"x":1}]}'},
    "add allocated": {**NOTES, "fgpu.io/allocated": '["main"]'},
    "drop assignment": {"fgpu.io/request": NOTES["fgpu.io/request"]},
    "edit request": {**NOTES, "fgpu.io/request": NOTES["fgpu.io/request"].replace("500", "900")},
}


@pytest.mark.parametrize("name", list(EDITS))
def test_update_of_handoff_is_forbidden_to_users(name):
    out = review(envelope(_edit(EDITS[name]), "UPDATE", old=BOUND, user="alice"), CONFIG)["response"]
    assert (out["allowed"], out["status"]["code"]) == (False, 403)
    key = next(k for k in ("fgpu.io/assignment", "fgpu.io/allocated", "fgpu.io/request")
               if NOTES.get(k) != EDITS[name].get(k))
    assert out["status"]["message"] == (
        f"metadata.annotations[{key}]: cannot be changed by alice: no pod can change its own GPU request or "
        "allocation (allowed: system:serviceaccount:fgpu-system:fgpu-operator, "
        "system:serviceaccount:fgpu-system:fgpu-device-plugin)")


@pytest.mark.parametrize("user", [OPERATOR, "system:serviceaccount:fgpu-system:fgpu-device-plugin"])
def test_update_of_handoff_is_allowed_to_fgpus_components(user):
    out = review(envelope(_edit(EDITS["add allocated"]), "UPDATE", old=BOUND, user=user), CONFIG)["response"]
    assert out == {"uid": "7d1c-uid", "allowed": True}


def test_update_that_leaves_handoffs_alone_is_allowed():
    new = copy.deepcopy(BOUND)
    new["metadata"]["labels"] = {"tier": "gold"}
    assert review(envelope(new, "UPDATE", old=BOUND), CONFIG)["response"]["allowed"] is True


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_are_allowed(operation):
    assert review(envelope(BOUND, operation), CONFIG)["response"] == {"uid": "7d1c-uid", "allowed": True}


def test_other_kinds_are_allowed_untouched():
    assert review(envelope({"kind": "Binding"}, kind="Binding"), CONFIG)["response"]["allowed"] is True


def test_v1beta1_is_answered_in_kind():
    body = envelope(GPU_POD)
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    assert review(body, CONFIG)["apiVersion"] == "admission.k8s.io/v1beta1"


MALFORMED = {
    "not an object": ("[]", "", "body: [] is not an AdmissionReview"),
    "wrong kind": ('{"apiVersion": "v1", "kind": "Pod"}', "",
                   "apiVersion: 'v1' 'Pod' is not an AdmissionReview (allowed: admission.k8s.io/v1, "
                   "admission.k8s.io/v1beta1)"),
    "no request": ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "",
                   "request: has no uid (allowed: an AdmissionReview request with a uid)"),
    "pod not an object": ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
                          '{"uid": "u9", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": 7}}', "u9",
                          "object: 7 is not a pod object"),
    "old pod missing on update": ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
                                  '{"uid": "u9", "kind": {"kind": "Pod"}, "operation": "UPDATE", "object": {}}}',
                                  "u9", "object: None is not a pod object"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_review_is_denied_with_a_line(name):
    body, uid, message = MALFORMED[name]
    out = review(json.loads(body), CONFIG)
    assert out["response"] == {"uid": uid, "allowed": False, "status": {
        "status": "Failure", "code": 400, "reason": "BadRequest", "message": message}}


def test_a_bug_is_a_500_line_not_an_exception(monkeypatch):
    def broken(*_args, **_kw):
        raise RuntimeError("boom\nsecond line")

    module = importlib.import_module("fgpu_operator.admission.review")  # the package's `review` is the function
    monkeypatch.setattr(module, "classify_pod", broken)
    status = review(envelope(GPU_POD), CONFIG)["response"]["status"]
    assert (status["code"], status["reason"]) == (500, "InternalError")
    assert status["message"] == "fgpu admission failed on this pod (RuntimeError); please report it"


def test_the_core_is_pure():
    """No Kopf, Kubernetes client, gRPC or HTTP: the webhook handlers are the shell, this is the core."""
    code = ("import sys, fgpu_operator.admission; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'kopf', 'kubernetes', 'grpc', 'aiohttp'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
