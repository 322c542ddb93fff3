"""One error type for bad input, so every shell turns it into one line: a CLI exits 2 with it, the webhook
denies with it, a gRPC service answers INVALID_ARGUMENT with it."""
from __future__ import annotations

from collections.abc import Iterable


class InputError(ValueError):
    """Bad input or an impossible request: names the field, and what would have been allowed.

    The message is always a single line (`field: message (allowed: a, b)`), safe to show a user as is."""

    def __init__(self, message: str, *, field: str | None = None, allowed: Iterable[object] | None = None):
        self.field = field
        self.allowed = list(allowed) if allowed is not None else None
        text = " ".join(str(message).splitlines())  # one line, whatever the caller passed
        if field:
            text = f"{field}: {text}"
        if self.allowed is not None:
            text += f" (allowed: {', '.join(str(a) for a in self.allowed)})"
        self.message = text
        super().__init__(text)
