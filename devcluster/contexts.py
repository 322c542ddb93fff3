"""Workloads holding live contexts on a node daemon, for the fault engine (tests/e2e/faults.py): each opens a
context with the token its pod's Allocate issued (the env the stub kubelet recorded), holds some memory and
keeps launching small kernels, as a container would. When the daemon goes away the next call fails with an
error naming the daemon (never a hang); the workload records it and reopens a context with the same token,
re-allocating what it held, as a well-behaved CUDA program retries. `audit_quota()` then checks the quota is
whole and not doubled: what is held is counted once, the rest is still there, and not a byte more.

Each workload is its own process, as a container's is (`WorkloadProc` starts one; it reports on stdout, one JSON
line per event, and audits on SIGUSR1): gRPC streams open in the test process would make every fork it does to
start a component race gRPC's fork handlers.

    python -m devcluster.contexts --name NAME --record FILE --hold BYTES
"""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path

from devcluster import fgpu
from simgpu import env
from simgpu.errors import OutOfMemoryError, SimgpuError
from simgpu.perf import GemmOp

BEAT_S = 0.2
OP = GemmOp(256, 256, 256)


class Workload:
    def __init__(self, name: str, envs: dict[str, str], hold_bytes: int, emit=lambda event, **kw: None):
        self.name, self.hold, self.emit = name, hold_bytes, emit
        self.audit_asked = threading.Event()
        self.token, self.socket = envs[env.CONTEXT_TOKEN], envs[env.DAEMON_SOCKET]
        self.quota = int(env.parse_memory_limit(envs[env.memory_limit_var(0)]))
        self.opens = 0
        self.opened_at = 0.0  # time.monotonic() of the latest open
        self.errors: list[tuple[float, Exception]] = []  # (when, what a call failed with)
        self._client = self._ctx = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"workload-{name}", daemon=True)

    def start(self, timeout: float = 30.0) -> None:
        self._reopen(time.monotonic() + timeout)
        self._thread.start()

    def _open(self) -> None:
        from simgpu.client import DaemonClient

        client = DaemonClient(self.socket, timeout=10.0)
        try:
            ctx = client.open_context(self.token)
            ctx.malloc(self.hold)
        except BaseException:
            client.close()
            raise
        self._client, self._ctx = client, ctx
        self.opens += 1
        self.opened_at = time.monotonic()
        self.emit("opened", opens=self.opens)

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._ctx = None

    def _reopen(self, deadline: float) -> None:
        while True:
            try:
                with self._lock:
                    self._drop()
                    self._open()
                return
            except SimgpuError:
                if time.monotonic() > deadline or self._stop.is_set():
                    raise
                time.sleep(0.1)

    def _loop(self) -> None:
        while not self._stop.wait(BEAT_S):
            if self.audit_asked.is_set():
                self.audit_asked.clear()
                try:
                    self.emit("audit", violations=self.audit_quota())
                except Exception as err:  # the daemon went away mid-audit: say so, the beat reconnects
                    self.emit("audit", violations=[f"workload {self.name}: audit failed: {err!r}"])
            try:
                with self._lock:
                    self._ctx.launch(OP)
                    self._ctx.synchronize()
            except Exception as err:  # the daemon went away: say so, then reconnect with the same token
                self.errors.append((time.monotonic(), err))
                self.emit("error", error=repr(err), clear=isinstance(err, SimgpuError) and "daemon" in str(err))
                try:
                    self._reopen(time.monotonic() + 120)
                except SimgpuError:
                    return

    def audit_quota(self) -> list[str]:
        """What the daemon counts against this context's quota now: exactly what it holds, the quota its grant
        says, and room for the rest (a lost quota) but not a byte more (a doubled one)."""
        where = f"workload {self.name}"
        with self._lock:
            usage = self._ctx.usage()
            out = []
            if usage["quota_bytes"] != self.quota:
                out.append(f"{where}: quota {usage['quota_bytes']} bytes, its grant says {self.quota}")
            if usage["device_bytes"] != self.hold:
                out.append(f"{where}: {usage['device_bytes']} bytes counted, it holds {self.hold}")
            room = self.quota - usage["device_bytes"]
            try:
                self._ctx.free(self._ctx.malloc(room))
            except OutOfMemoryError as err:
                out.append(f"{where}: the {room} bytes left of its quota refused: {err}")
            try:
                self._ctx.free(self._ctx.malloc(room + 1))
                out.append(f"{where}: allocated {room + 1} bytes with {room} left of its quota")
            except OutOfMemoryError:
                pass
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            self._drop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devcluster.contexts", description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--record", required=True, type=Path, help="the stub kubelet's record of the pod's Allocate")
    p.add_argument("--hold", required=True, type=int, help="bytes to hold")
    args = p.parse_args(argv)

    def emit(event: str, **fields) -> None:
        print(json.dumps({"t": time.time(), "event": event, **fields}), flush=True)

    work = Workload(args.name, json.loads(args.record.read_text())["env"], args.hold, emit)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGUSR1, lambda *_: work.audit_asked.set())
    work.start(timeout=120)
    done.wait()
    work.stop()
    return 0


class WorkloadProc:
    """A workload process (see the module's doc), read back from its event lines. Times are time.monotonic()."""

    def __init__(self, name: str, record: Path, hold_bytes: int, log: Path):
        self.name, self.log = name, log
        self.proc = fgpu.spawn([sys.executable, "-m", "devcluster.contexts", "--name", name, "--record", str(record),
                                "--hold", str(hold_bytes)], log)

    def events(self, kind: str) -> list[dict]:
        offset = time.time() - time.monotonic()
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == kind:
                        out.append({**event, "t": event["t"] - offset})
        return out

    @property
    def opened_at(self) -> float:
        return max((e["t"] for e in self.events("opened")), default=0.0)

    @property
    def errors(self) -> list[tuple[float, str, bool]]:
        return [(e["t"], e["error"], e["clear"]) for e in self.events("error")]

    def wait_open(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.events("opened"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"workload {self.name} opened no context:\n{fgpu.log_tail(self.proc)}")
            time.sleep(0.1)

    def audit_quota(self, timeout: float = 30.0) -> list[str]:
        seen = len(self.events("audit"))
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while len(audits := self.events("audit")) <= seen:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return [f"workload {self.name}: no quota audit in {timeout:.0f} s:\n{fgpu.log_tail(self.proc, 500)}"]
            time.sleep(0.1)
        return audits[-1]["violations"]

    def stop(self) -> None:
        fgpu.stop(self.proc)


if __name__ == "__main__":
    raise SystemExit(main())
