"""What must outlive the driver: the claims it prepared (a checkpoint file) and their CDI specs.

The checkpoint is the driver's memory across restarts: a claim prepared before a crash is answered the same
way again (same CDI ids, same tokens), counted when the next claim is checked for over-commitment, and its CDI
spec is rewritten if it went missing. Both files are written atomically (temp file, fsync, rename), so a
crash leaves the old version or the new one, never half of either.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from dataclasses import dataclass

from deviceplugin.dra.prepare import Allocated, ClaimRef
from fgpu_contracts.dra import CDI_KIND
from simgpu.errors import SimgpuError

CHECKPOINT_NAME = "fgpu-dra-checkpoint.json"
CHECKPOINT_VERSION = 1
CDI_VERSION = "0.6.0"  # env and mounts are all we edit: every CDI-aware runtime reads 0.6.0
DEFAULT_CDI_DIR = "/var/run/cdi"


def _atomic_write(path: str, text: str, mode: int = 0o644) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class PreparedClaim:
    ref: ClaimRef
    devices: list[Allocated]
    cdi_ids: dict[str, str]  # request -> fully qualified CDI device id

    def to_dict(self) -> dict:
        return {"namespace": self.ref.namespace, "name": self.ref.name, "uid": self.ref.uid,
                "devices": [d.to_dict() for d in self.devices], "cdiIDs": self.cdi_ids}

    @classmethod
    def from_dict(cls, d: dict) -> PreparedClaim:
        return cls(ClaimRef(d["namespace"], d["name"], d["uid"]), [Allocated.from_dict(x) for x in d["devices"]],
                   dict(d["cdiIDs"]))


class Checkpoint:
    """The prepared claims by UID, mirrored to `path` on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = {}
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            raise SimgpuError(f"{path}: unreadable checkpoint ({err}); move it away only if no claim is "
                              "prepared on this node", field="--state-dir") from None
        if doc.get("version") != CHECKPOINT_VERSION:
            raise SimgpuError(f"{path}: checkpoint version {doc.get('version')!r}, this driver reads "
                              f"{CHECKPOINT_VERSION}", field="--state-dir", allowed=[CHECKPOINT_VERSION])
        self.claims = {uid: PreparedClaim.from_dict(c) for uid, c in doc.get("claims", {}).items()}

    def save(self) -> None:
        doc = {"version": CHECKPOINT_VERSION, "claims": {u: c.to_dict() for u, c in sorted(self.claims.items())}}
        _atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True) + "\n", 0o600)

    def unknown_devices(self, known: set[str]) -> str | None:
        """Why this checkpoint does not fit the node's devices (the config changed under prepared claims), or
        None. Counting such a claim against the new devices could hand its silicon out twice."""
        for c in self.claims.values():
            for a in c.devices:
                if a.device not in known:
                    return (f"claim {c.ref.namespace}/{c.ref.name} ({c.ref.uid}) is prepared on device {a.device}, "
                            f"which this node config no longer has; restore the old config until its pods are gone")
        return None

    def allocated(self, excluding: str = "") -> list[Allocated]:
        return [a for uid, c in self.claims.items() if uid != excluding for a in c.devices]


_CDI_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:-]")


def cdi_device_name(claim_uid: str, request: str) -> str:
    """A CDI device name ([A-Za-z0-9_.:-]) for one request of one claim; a subrequest's '/' becomes '_'."""
    return _CDI_NAME_BAD.sub("_", f"{claim_uid}-{request}")


def cdi_spec_path(cdi_dir: str, claim_uid: str) -> str:
    vendor, cls = CDI_KIND.split("/")
    return os.path.join(cdi_dir, f"{vendor}-{cls}_{claim_uid}.json")


def cdi_spec(claim_uid: str, edits) -> dict:
    """The claim's CDI spec: one device per request, carrying its env and mounts."""
    devices = []
    for e in edits:
        container = {"env": [f"{k}={v}" for k, v in sorted(e.envs.items())]}
        if e.mounts:
            container["mounts"] = [{"hostPath": host, "containerPath": path,
                                    "options": ["rbind", "ro" if ro else "rw"]} for path, host, ro in e.mounts]
        devices.append({"name": cdi_device_name(claim_uid, e.request), "containerEdits": container})
    return {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices}


def write_cdi_spec(cdi_dir: str, claim_uid: str, spec: dict) -> None:
    os.makedirs(cdi_dir, exist_ok=True)
    _atomic_write(cdi_spec_path(cdi_dir, claim_uid), json.dumps(spec, indent=1) + "\n")


def remove_cdi_spec(cdi_dir: str, claim_uid: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(cdi_spec_path(cdi_dir, claim_uid))
