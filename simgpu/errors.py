"""simgpu's error type: fgpu's one InputError under the name simgpu's callers already catch."""
from __future__ import annotations

from fgpu_contracts.errors import InputError


class SimgpuError(InputError):
    """Bad input or an impossible request in simgpu (and the device plugin), with the offending field and what
    would have been allowed; an InputError, so every fgpu shell reports it the same way."""


class OutOfMemoryError(SimgpuError):
    """An allocation over a hard memory quota (Gaia-style: names quota, used and requested bytes)."""

    def __init__(self, *, quota: int, used: int, requested: int, who: str = "client"):
        self.quota, self.used, self.requested = quota, used, requested
        super().__init__(
            f"out of memory: {who} asked for {requested} bytes with {used} of its {quota}-byte quota in use"
        )


class RelayoutRefused(SimgpuError):
    """A dynamic-MIG change the GPU cannot take now: an instance it would destroy has a live context, or
    another change of the GPU is in progress (a valid request at the wrong time, not bad input)."""
