"""The scheduler's API writes in a second process, so binding runs beside deciding instead of after it.

kube-scheduler binds in goroutines apart from its scheduling cycle; one Python thread cannot. Measured on the
2-CPU bench (1,000 KWOK nodes, QPS 500/1000): the operator spent less CPU per pod than kube-scheduler
(5.8 ms against 6.5 ms) yet got 51% of a core against kube-scheduler's 70%, because the CPU is shared out
among runnable threads and it had one. Building requests, TLS and reading answers were ~15% of that
thread. Here they run in a child process that holds the real `ApiSession`s (QPS, burst, in-flight cap and
retries unchanged); the operator's side, `RemoteSession`, sends each call down a pipe and awaits its
`Outcome`, so callers cannot tell the two apart.

Failure has the meaning of a network failure: calls in flight when the child dies end UNAVAILABLE (the
scheduler forgets the reservation and retries; a Binding that did land comes back through the pod watch),
and a new child is started. The child exits when its pipe closes, so it never outlives the operator.
Wire format: 4-byte big-endian length, then a pickle; the pipe joins two processes of one program.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import struct
import sys
from dataclasses import asdict
from typing import Any

from .outcome import Outcome, Result
from .session import ApiSession, Limits

log = logging.getLogger("fgpu.operator.writer")

_LEN = struct.Struct(">I")
RESTART_DELAY_S = 0.5


class _Frames:
    """Length-prefixed pickles out of a byte stream, and into a transport, several per write."""

    def __init__(self, write: Any):
        self._write, self._out, self._flush_scheduled = write, [], False

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        self._out += (_LEN.pack(len(data)), data)
        if not self._flush_scheduled:  # one write for everything queued in this turn of the loop
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out:
            self._write(b"".join(out))

    @staticmethod
    async def read(reader: asyncio.StreamReader) -> Any:
        """The next message; raises IncompleteReadError at the end of the stream."""
        (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
        return pickle.loads(await reader.readexactly(n))


class WriterProcess:
    """The child process and the pending calls: `session(name)` gives a RemoteSession for one of the
    sessions the child was started with (`{name: Limits}`)."""

    def __init__(self, kubeconfig: str | None, sessions: dict[str, Limits]):
        self.kubeconfig, self.sessions = kubeconfig, dict(sessions)
        self._proc: asyncio.subprocess.Process | None = None
        self._frames: _Frames | None = None
        self._pending: dict[int, asyncio.Future[Outcome]] = {}
        self._ids = itertools.count()
        self._reader: asyncio.Task | None = None
        self._closing = False
        self._ready = asyncio.Event()
        self.restarts = 0

    def session(self, name: str) -> RemoteSession:
        if name not in self.sessions:
            raise KeyError(f"no session {name!r} in the writer process (has: {sorted(self.sessions)})")
        return RemoteSession(self, name)

    async def start(self) -> None:
        spec = {"kubeconfig": self.kubeconfig, "sessions": {k: asdict(v) for k, v in self.sessions.items()}}
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "FGPU_WRITER_SPEC": repr(spec)})
        self._frames = _Frames(self._proc.stdin.write)
        self._reader = asyncio.create_task(self._read_answers(self._proc), name="fgpu-writer-answers")
        self._ready.set()

    async def call(self, name: str, method: str, path: str, kwargs: dict[str, Any]) -> Outcome:
        await self._ready.wait()
        rid = next(self._ids)
        future = self._pending[rid] = asyncio.get_running_loop().create_future()
        try:
            self._frames.send((rid, name, method, path, kwargs))
            return await future
        finally:
            self._pending.pop(rid, None)

    async def _read_answers(self, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                rid, result, status, message, attempts, body = await _Frames.read(proc.stdout)
                future = self._pending.get(rid)
                if future is not None and not future.done():
                    future.set_result(Outcome(Result(result), status, message, attempts, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        self._ready.clear()
        code = await proc.wait()
        lost = Outcome(Result.UNAVAILABLE, 0, f"the API writer process exited ({code})")
        for future in list(self._pending.values()):
            if not future.done():
                future.set_result(lost)
        if not self._closing:
            log.warning("API writer process exited (%s) with %d call(s) in flight; starting another",
                        code, len(self._pending))
            self.restarts += 1
            await asyncio.sleep(RESTART_DELAY_S)
            if not self._closing:
                await self.start()

    async def close(self) -> None:
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, ConnectionError, OSError):
            proc.stdin.close()  # the child finishes nothing more and exits
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


class RemoteSession:
    """`ApiSession.request` across the pipe: the same arguments, the same Outcome."""

    def __init__(self, writer: WriterProcess, name: str):
        self._writer, self._name = writer, name

    async def request(self, method: str, path: str, **kwargs: Any) -> Outcome:
        return await self._writer.call(self._name, method, path, kwargs)


async def _serve(spec: dict[str, Any]) -> None:
    """The child: answer calls until the pipe from the operator closes."""
    from .config import load

    creds = load(spec["kubeconfig"])
    sessions = {name: ApiSession(creds, Limits(**limits)) for name, limits in spec["sessions"].items()}
    for api in sessions.values():
        api.open()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    frames = _Frames(transport.write)
    tasks: set[asyncio.Task] = set()

    async def answer(rid: int, name: str, method: str, path: str, kwargs: dict[str, Any]) -> None:
        out = await sessions[name].request(method, path, **kwargs)
        frames.send((rid, out.result.value, out.status, out.message, out.attempts, out.body))

    try:
        while True:
            task = asyncio.create_task(answer(*await _Frames.read(reader)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except asyncio.IncompleteReadError:
        pass  # the operator closed the pipe (or died): calls still in flight are abandoned
    finally:
        for task in tasks:
            task.cancel()
        for api in sessions.values():
            await api.close()


def main() -> None:
    import ast

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s fgpu-writer: %(message)s")
    spec = ast.literal_eval(os.environ["FGPU_WRITER_SPEC"])
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency; this keeps the child usable without it
        runner = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve(spec))


if __name__ == "__main__":
    main()
