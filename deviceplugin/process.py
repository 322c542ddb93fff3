"""The life of a node-side process (fgpu-device-plugin, fgpu-dra): build and start it, refuse bad input in
one line with exit code 2, then serve until SIGTERM or SIGINT and stop cleanly."""
from __future__ import annotations

import gc
import signal
import sys
import threading
from collections.abc import Callable
from typing import Protocol

from fgpu_contracts.errors import InputError


class Service(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


def serve_until_signalled(prog: str, build: Callable[[], Service]) -> int:
    try:
        service = build()
        service.start()
    except InputError as err:  # SimgpuError included
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a step that names no option of its own: say what failed, blame no option
        print(f"{prog}: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 2
    # Everything loaded so far (grpc, the Kubernetes client: ~50k objects) lives as long as the process; move
    # it out of the collector's reach, or a full collection (~20 ms here) now and then lands inside a call.
    gc.freeze()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    service.stop()
    return 0
