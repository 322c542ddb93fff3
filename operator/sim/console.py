"""Where `fgpu simulate` shows progress: stderr, so stdout stays the table or JSON a script reads. Its own
module so both subcommand modules use it without importing each other."""
from __future__ import annotations

import sys


def stderr_console():
    from rich.console import Console  # rich loads only when there is progress to show

    return Console(file=sys.stderr)
