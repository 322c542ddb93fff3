"""The scheduler's signature on a hand-off (`fgpu.io/assignment-signature`, v1).

The device plugin hands a container whatever `fgpu.io/assignment` its pod carries at Allocate. The webhook and
the operator's guard keep users from editing it, but neither sits on the path between an edit and Allocate.
So the scheduler signs what it gives with a key only it and the device plugins hold, and the plugin hands out
only what verifies: HMAC-SHA256 over (pod uid, node, assigned-at, assignment text). The uid binds it to one
pod (a pod cannot wear another pod's signed assignment), assigned-at to its turn at Allocate (oldest first).
"""
from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import ASSIGNED_AT, ASSIGNMENT, ASSIGNMENT_SIGNATURE

VERSION = "v1"
KEY_MIN_BYTES = 32


def _message(uid: str, node: str, assigned_at: str, assignment: str) -> bytes:
    return json.dumps([ASSIGNMENT_SIGNATURE, VERSION, uid, node, assigned_at, assignment],
                      separators=(",", ":")).encode()


def sign(key: bytes, uid: str, node: str, assigned_at: str, assignment: str) -> str:
    """The annotation's value: `v1:<hex HMAC-SHA256>`."""
    digest = hmac.new(key, _message(uid, node, assigned_at, assignment), hashlib.sha256).hexdigest()
    return f"{VERSION}:{digest}"


def problem(key: bytes, uid: str, node: str, annotations: Mapping[str, str]) -> str | None:
    """Why this pod's hand-off is not the one fgpu's scheduler gave it on `node` (None: it is)."""
    assignment = annotations.get(ASSIGNMENT)
    if assignment is None:
        return f"no {ASSIGNMENT}"
    signature = annotations.get(ASSIGNMENT_SIGNATURE)
    if not signature:
        return f"no {ASSIGNMENT_SIGNATURE} (not written by fgpu's scheduler)"
    expected = sign(key, uid, node, annotations.get(ASSIGNED_AT, ""), assignment)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return (f"{ASSIGNMENT_SIGNATURE} does not match (the hand-off was edited after binding, copied from "
                "another pod, or signed with another key)")
    return None


def load_key(path: str, option: str = "--handoff-key-file") -> bytes:
    """The shared key from a file (surrounding whitespace dropped); a missing, empty or short one is refused."""
    allowed = [f"a readable file holding at least {KEY_MIN_BYTES} random bytes or characters, the same for the "
               "operator and every device plugin (e.g. `head -c 48 /dev/urandom | base64 > FILE`)"]
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}", field=option, allowed=allowed) from None
    if len(key) < KEY_MIN_BYTES:
        what = "is empty" if not key else f"holds {len(key)} bytes"
        raise InputError(f"{path} {what}", field=option, allowed=allowed)
    return key
