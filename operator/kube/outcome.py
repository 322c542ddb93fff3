"""What an API write came to, as a value: the hot path branches on it instead of catching exceptions."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Result(enum.StrEnum):
    OK = "ok"  # 2xx
    CONFLICT = "conflict"  # 409: already bound, stale resourceVersion, UID precondition failed
    GONE = "gone"  # 404/410: the object is not there (pod deleted)
    INVALID = "invalid"  # 400/422: the request itself is wrong; retrying cannot help
    DENIED = "denied"  # 401/403: credentials or RBAC
    UNAVAILABLE = "unavailable"  # 429/5xx/timeouts, still failing after the bounded retries
    FAILED = "failed"  # any other status


RETRYABLE = frozenset({429, 500, 502, 503, 504})


def classify(status: int) -> Result:
    """The Result for an HTTP status (0 = no answer at all)."""
    if 200 <= status < 300:
        return Result.OK
    if status == 409:
        return Result.CONFLICT
    if status in (404, 410):
        return Result.GONE
    if status in (400, 422):
        return Result.INVALID
    if status in (401, 403):
        return Result.DENIED
    if status == 0 or status in RETRYABLE:
        return Result.UNAVAILABLE
    return Result.FAILED


@dataclass(frozen=True, slots=True)
class Outcome:
    """One API call's end: the Result, the last HTTP status (0 if none came), the apiserver's message,
    how many attempts it took, and the decoded JSON body."""

    result: Result
    status: int
    message: str = ""
    attempts: int = 1
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.result is Result.OK

    def __str__(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return f"{self.result} ({self.status or 'no answer'}, {self.attempts} attempt(s)){tail}"
