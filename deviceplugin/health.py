"""Device health for ListAndWatch: from the node daemon's health stream (simgpu.client.DaemonClient
.watch_health(), which yields the full list on every change), or all healthy when there is no daemon."""
from __future__ import annotations

import logging
import os
import threading

from deviceplugin.labels import Health
from deviceplugin.server import HealthBoard

log = logging.getLogger("fgpu.deviceplugin.health")


def _entry(item) -> tuple[str, Health]:
    get = item.get if isinstance(item, dict) else (lambda k, d=None: getattr(item, k, d))
    return str(get("uuid")), Health(bool(get("healthy", True)), get("xid"))


def follow_daemon(socket_path: str, board: HealthBoard, stop: threading.Event, retry_s: float = 1.0) -> None:
    """Feed `board` from the daemon until `stop`; reconnect after errors. Runs in its own thread.

    While the daemon is unreachable the last known health stays (a daemon restart is not a GPU fault)."""
    warned = False
    while not stop.is_set():
        if not os.path.exists(socket_path):
            if not warned:
                log.warning("no node daemon at %s yet: advertising devices as healthy", socket_path)
                warned = True
            stop.wait(retry_s)
            continue
        try:
            from simgpu.client import DaemonClient

            client = DaemonClient(socket_path)
            for items in client.watch_health():
                board.update(dict(_entry(i) for i in items))
                if stop.is_set():
                    break
        except Exception as err:  # daemon restarting, client not installed yet, ...
            if not warned:
                log.warning("health stream from %s unavailable (%s); retrying", socket_path, err)
                warned = True
            stop.wait(retry_s)


def start_health(socket_path: str | None, board: HealthBoard, stop: threading.Event) -> threading.Thread | None:
    if not socket_path:
        return None
    thread = threading.Thread(target=follow_daemon, args=(socket_path, board, stop), name="health", daemon=True)
    thread.start()
    return thread
