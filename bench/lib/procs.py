"""CPU and memory accounting of the processes a run involves (from /proc, so a process's children count with it),
and the machine and interpreter a run was made on, as its run file records them."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from lib.common import REPO

CLK_TCK = os.sysconf("SC_CLK_TCK")


def descendants(pid: int | None) -> list[int]:
    """`pid` and every process under it (the operator runs its API writes in a child process)."""
    out, todo = [], [pid] if pid else []
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError, ValueError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


def proc_memory(pid: int | None) -> tuple[float, float]:
    """(VmHWM, VmRSS) in MB of a process and its children (the sum of their peaks: an upper bound on the
    peak of the whole), or (nan, nan) when the process is gone."""
    if pid is None:
        return float("nan"), float("nan")
    total = [0, 0]
    for p in descendants(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            if p == pid:
                return float("nan"), float("nan")
            continue
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("VmHWM", "VmRSS")}
        total[0] += kb.get("VmHWM", 0)
        total[1] += kb.get("VmRSS", 0)
    return total[0] / 1024, total[1] / 1024


def proc_cpu(pid: int | None, children: bool = False) -> float:
    """User + system CPU seconds of a process so far, with its live children's if asked (0 when it is gone)."""
    total = 0.0
    for p in descendants(pid) if children else [pid]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def settle(pid: int, idle: float = 0.35, step: float = 2.0, limit: float = 300.0) -> float:
    """Wait until the scheduler uses less than `idle` of a core over `step` s (so one run does not inherit the
    previous run's deletions); the seconds that took, up to `limit`."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        before = proc_cpu(pid, children=True)
        time.sleep(step)
        if proc_cpu(pid, children=True) - before < idle * step:
            break
    return max(0.0, time.perf_counter() - start - step)


def machine(operator_python: Path | None) -> dict:
    rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "operator"], capture_output=True,
                           text=True)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in cpuinfo.splitlines()) if v}
    python, build = interpreter(Path(sys.executable))  # the pod creator's, and the operator's unless operator_python
    out = {"cpus": os.cpu_count(), "cpu_model": cpu.get("model name", "?"), "cpu_mhz": cpu.get("cpu MHz", "?"),
           "loadavg": os.getloadavg(), "git": rev.stdout.strip(), "operator_changes": dirty.stdout.split("\n")[:-1],
           "python": python, "python_build": build}
    if operator_python:
        version, build = interpreter(operator_python)
        out.update(operator_python=str(operator_python), operator_python_version=version, operator_python_build=build)
    return out


def interpreter(python: Path) -> tuple[str, str]:
    """An interpreter's version and build (`python_build`), asked of the interpreter itself."""
    probe = ("import platform, sysconfig; print(platform.python_version()); "
             "print(*(sysconfig.get_config_var(v) or '' for v in ('CONFIG_ARGS', 'PY_CFLAGS')), sep='\\n')")
    out = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True).stdout
    version, config, cflags = (out.split("\n") + ["", ""])[:3]
    return version, python_build(config, cflags)


def python_build(config_args: str, cflags: str) -> str:
    """What an interpreter's configure line and C flags asked for: "PGO+LTO, frame pointers" as the operator image's
    CPython (`make python-pgo`), "PGO+LTO" (faster than the image's), or "no PGO/LTO" (pyenv's default; a
    distribution may optimise by other means that these do not show). It sets part of the operator's CPU per pod."""
    have = [name for flag, name in (("--enable-optimizations", "PGO"), ("--with-lto", "LTO")) if flag in config_args]
    pointers = ", frame pointers" if "-fno-omit-frame-pointer" in cflags.split() else ""
    return ("+".join(have) if have else "no PGO/LTO") + pointers
