"""Helpers for the admission tests: pods from YAML as the peers' docs write them, a strict RFC 6902 applier
(written apart from fgpu's patch code, so the two cannot share a mistake), and AdmissionReview envelopes."""
from __future__ import annotations

import base64
import copy
import json
import textwrap

import yaml
from fgpu_operator.admission import AdmissionConfig

GIB = 1 << 30
MIB = 1 << 20
#: A cluster whose largest GPU has 80 GiB, so memory-sized shares come out round.
CONFIG = AdmissionConfig(max_gpu_memory_bytes=80 * GIB)
OPERATOR = "system:serviceaccount:fgpu-system:fgpu-operator"


def pod(text: str) -> dict:
    return yaml.safe_load(textwrap.dedent(text))


def _unescape(token: str) -> str:
    assert "~" not in token.replace("~0", "").replace("~1", ""), f"bad escape in {token!r}"
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: object, ops: list[dict]) -> object:
    """Apply add / remove / replace as RFC 6902 says; anything that does not apply cleanly fails the test."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert set(op) <= {"op", "path", "value"}, op
        path = op["path"]
        assert path.startswith("/"), op
        *parents, last = [_unescape(t) for t in path[1:].split("/")]
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        assert isinstance(target, dict), f"{path}: parent is not an object"
        if op["op"] == "add":
            target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            assert last in target, f"replace of missing {path}"
            target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            assert last in target, f"remove of missing {path}"
            del target[last]
        else:
            raise AssertionError(f"unexpected op {op}")
    return doc


def envelope(obj: object, operation: str = "CREATE", old: object = None, user: str = "alice",
             kind: str = "Pod") -> dict:
    request = {"uid": "7d1c-uid", "kind": {"group": "", "version": "v1", "kind": kind},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": operation,
               "userInfo": {"username": user, "groups": ["system:authenticated"]}, "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_of(response: dict) -> list[dict]:
    r = response["response"]
    if "patch" not in r:
        return []
    assert r["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(r["patch"]))
