"""One error type for bad input, so every shell can turn it into one clear line (CLI: exit code 2)."""
from __future__ import annotations

from collections.abc import Iterable


class SimgpuError(ValueError):
    """Bad input or an impossible request, with the offending field and what would have been allowed."""

    def __init__(self, message: str, *, field: str | None = None, allowed: Iterable[object] | None = None):
        self.field = field
        self.allowed = list(allowed) if allowed is not None else None
        text = message
        if field:
            text = f"{field}: {text}"
        if self.allowed is not None:
            text += f" (allowed: {', '.join(str(a) for a in self.allowed)})"
        super().__init__(text)


class OutOfMemoryError(SimgpuError):
    """An allocation over a hard memory quota (Gaia-style: names quota, used and requested bytes)."""

    def __init__(self, *, quota: int, used: int, requested: int, who: str = "client"):
        self.quota, self.used, self.requested = quota, used, requested
        super().__init__(
            f"out of memory: {who} asked for {requested} bytes with {used} of its {quota}-byte quota in use"
        )
