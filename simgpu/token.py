"""Context tokens: the device plugin grants a container a share of one device at Allocate; the node daemon
verifies the grant when the workload opens a context. HMAC-SHA256 over canonical JSON, base64url, so the
daemon needs no call back to the plugin and a container cannot widen its own quota.

Format: ``<base64url(canonical JSON of the Grant)>.<base64url(HMAC-SHA256(secret, that JSON))>``.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Literal

import pydantic

from simgpu.errors import SimgpuError


class Grant(pydantic.BaseModel, frozen=True, extra="forbid"):
    """What a container may use on one device (a GPU or a MIG instance)."""

    device_uuid: str = pydantic.Field(min_length=1)
    mem_limit_bytes: int | None = pydantic.Field(default=None, ge=1)  # None = the whole device
    sm_limit_pct: int | None = pydantic.Field(default=None, ge=1, le=100)  # None = 100
    priority: Literal[0, 1] = 1  # HAMi's CUDA_TASK_PRIORITY: 0 high, 1 low (default)
    pod_namespace: str = ""
    pod_name: str = ""
    container: str = ""
    # the device's index among the container's visible devices (HAMi's vdevice_index in metrics)
    vdevice_index: int = pydantic.Field(default=0, ge=0)
    # a high-priority pod's slowdown bound (fgpu.io/slo-slowdown, else the cluster's default); None: the
    # node config's qos.sloSlowdown
    slo_slowdown: float | None = pydantic.Field(default=None, gt=1.0, le=100.0)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _canonical(grant: Grant) -> bytes:
    # fields at their default are left out, so a daemon that predates a new optional field still reads
    # every grant that does not use it
    return json.dumps(grant.model_dump(exclude_defaults=True), sort_keys=True, separators=(",", ":")).encode()


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes | bytearray) or len(secret) < 16:
        raise SimgpuError("token secret must be at least 16 bytes", field="tokenSecretFile")


def issue_token(secret: bytes, grant: Grant) -> str:
    _check_secret(secret)
    payload = _canonical(grant)
    mac = hmac.new(bytes(secret), payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def verify_token(secret: bytes, token: str) -> Grant:
    """The grant inside a token we issued; anything else (forged, truncated, garbage) -> SimgpuError."""
    _check_secret(secret)
    if not isinstance(token, str) or token.count(".") != 1:
        raise SimgpuError("malformed token (expected <payload>.<signature>)", field="token")
    payload_text, mac_text = token.split(".")
    try:
        payload, mac = _unb64(payload_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        raise SimgpuError("malformed token (not base64url)", field="token") from None
    expected = hmac.new(bytes(secret), payload, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, mac):
        raise SimgpuError("token signature does not match (forged, or issued with another secret)", field="token")
    try:
        return Grant.model_validate_json(payload)
    except pydantic.ValidationError:
        raise SimgpuError("token payload is not a valid grant", field="token") from None


def load_or_create_secret(path: str | os.PathLike[str]) -> bytes:
    """Read the node's token secret; create a random one (mode 0600) if the file does not exist yet.

    The device plugin and the daemon both call this on the same path; creation is atomic (link of a
    temp file), so whichever starts first writes it and the other reads the same bytes.
    """
    target = Path(path)
    try:
        data = target.read_bytes().strip()
    except FileNotFoundError:
        try:
            data = _create_secret(target)
        except OSError as err:  # e.g. /etc/fgpu not ours to create: name the file, not some other option
            raise SimgpuError(f"cannot create token secret {target}: {err.strerror or err}",
                              field="tokenSecretFile") from None
    except OSError as err:
        raise SimgpuError(f"cannot read token secret {target}: {err.strerror}", field="tokenSecretFile") from None
    _check_secret(data)
    return data


def _create_secret(target: Path) -> bytes:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_hex(32).encode())
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return target.read_bytes().strip()
