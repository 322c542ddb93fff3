"""The placement core's error type: fgpu's one InputError under the name its callers already catch, so a shell
prints it as one line (CLI: exit code 2)."""
from __future__ import annotations

from fgpu_contracts.errors import InputError


class PlacementInputError(InputError):
    """Bad input (trace, node list, policy name, seeds), naming the field and what would have been allowed."""
