"""Pid files for processes that outlive the command that started them (`make demo`, `make cluster-up`): each
records the pid and the process's start time, so a later `down` stops that process and never a later one that
reuses its pid. Each process runs in a session of its own and is stopped by its process group."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def remember(state: Path, name: str, pid: int) -> None:
    pids = state / "pids"
    pids.mkdir(parents=True, exist_ok=True)
    seq = len(list(pids.glob("*.pid")))
    (pids / f"{seq:02d}-{name}.pid").write_text(f"{pid} {_start_time(pid)}\n")


def ours(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process is still the one we started."""
    try:
        pid, started = pidfile.read_text().split()
    except (OSError, ValueError):
        return None
    return int(pid) if _start_time(int(pid)) == started else None


def name_of(pidfile: Path) -> str:
    return pidfile.stem.split("-", 1)[1]


def files(state: Path) -> list[Path]:
    return sorted((state / "pids").glob("*.pid")) if (state / "pids").is_dir() else []


def alive(state: Path, name: str) -> bool:
    return any(name_of(p) == name and ours(p) is not None for p in files(state))


def still_alive(state: Path) -> list[str]:
    return [f"{p.stem} (pid {ours(p)})" for p in files(state) if ours(p) is not None]


def stop_all(pidfiles: list[Path], grace: float = 15) -> None:
    """SIGTERM each one's process group at once, wait for them together, SIGKILL what is left."""
    for pidfile in pidfiles:
        pid = ours(pidfile)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        left = [p for p in pidfiles if ours(p) is not None]
        if not left:
            return
        for pidfile in left:
            with contextlib.suppress(ChildProcessError, ProcessLookupError, TypeError):
                os.waitpid(ours(pidfile), os.WNOHANG)  # our own child (Ctrl-C during `up`): reap it
        time.sleep(0.05)
    for pidfile in pidfiles:
        pid = ours(pidfile)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def forget(state: Path) -> None:
    shutil.rmtree(state / "pids", ignore_errors=True)
