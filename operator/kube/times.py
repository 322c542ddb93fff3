"""Kubernetes timestamps: metav1.Time (seconds) and metav1.MicroTime, always UTC with a `Z`."""
from __future__ import annotations

import datetime as dt


def timestamp(micro: bool = False, at: dt.datetime | None = None) -> str:
    """Now (or `at`) as the apiserver writes it: `2026-01-02T03:04:05Z` or `...05.123456Z` (MicroTime)."""
    at = (at or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse(value: str | None) -> dt.datetime | None:
    """A Time or MicroTime string as an aware datetime; None for a missing or unreadable one."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
