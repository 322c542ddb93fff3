"""Reading and writing the common fields of raw API objects (dicts, as watches and the API deliver them):
a pod's key, a status condition by type, and Kubernetes timestamps (metav1.Time and MicroTime, always UTC
with a `Z`). Pure: the scheduler, its API writes and `fgpu inspect` share it without pulling in a client."""
from __future__ import annotations

import datetime as dt


def pod_key(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def condition(obj: dict | None, kind: str) -> dict:
    """The status condition of type `kind` (e.g. PodScheduled, Ready), or {} when there is none."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return cond
    return {}


def timestamp(micro: bool = False, at: dt.datetime | None = None) -> str:
    """Now (or `at`) as the apiserver writes it: `2026-01-02T03:04:05Z` or `...05.123456Z` (MicroTime)."""
    at = dt.datetime.now(dt.UTC) if at is None else at.astimezone(dt.UTC)
    return at.replace(tzinfo=None).isoformat(timespec="microseconds" if micro else "seconds") + "Z"  # 2.7x strftime


def parse_time(value: object) -> dt.datetime | None:
    """A Time or MicroTime string as an aware datetime (a zone-less one read as UTC); None for a missing or
    unreadable one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)
