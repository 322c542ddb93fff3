"""One error type for bad placement/trace input, so shells can print it as one line (CLI: exit code 2)."""
from __future__ import annotations

from collections.abc import Iterable


class PlacementInputError(ValueError):
    """Bad input (trace, node list, policy name, seeds), naming the field and what would have been allowed."""

    def __init__(self, message: str, *, field: str | None = None, allowed: Iterable[object] | None = None):
        self.field = field
        self.allowed = list(allowed) if allowed is not None else None
        text = f"{field}: {message}" if field else message
        if self.allowed is not None:
            text += f" (allowed: {', '.join(str(a) for a in self.allowed)})"
        super().__init__(text)
