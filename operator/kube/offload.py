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
Pod Events go further: the child runs the `EventRecorder` itself (aggregation, rate, backlog), so a Scheduled
Event costs the deciding thread one small one-way message, not a task, a body and an answer to wait for.
Wire format: 4-byte big-endian length, then a pickle; the pipe joins two processes of one program. The operator
sends `(rid, op, args)`, rid None when no answer is wanted; the child answers `(rid, Outcome)`, or sends
`(None, "dropped")` when its recorder's backlog drops an Event.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from .events import EventRecorder
from .outcome import Outcome, Result
from .session import ApiSession, Limits

log = logging.getLogger("fgpu.operator.writer")

_LEN = struct.Struct(">I")
#: The child's command: the official client hidden before anything imports Kopf (see `lean`).
_CHILD_MAIN = ("from fgpu_operator.lean import hide_official_client; hide_official_client(); "
               "from fgpu_operator.kube.offload import main; main()")
RESTART_DELAY_S = 0.5


class _Frames:
    """Length-prefixed pickles: `send` queues one and writes everything queued in this turn of the loop at once;
    `feed` takes bytes as they come and gives back the messages they complete."""

    def __init__(self, write: Any):
        self._write, self._out, self._flush_scheduled = write, [], False
        self._in = bytearray()

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        self._out += (_LEN.pack(len(data)), data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out:
            self._write(b"".join(out))

    def feed(self, data: bytes) -> list[Any]:
        buf = self._in
        buf += data
        messages, at = [], 0
        while len(buf) - at >= _LEN.size:
            (n,) = _LEN.unpack_from(buf, at)
            if len(buf) - at - _LEN.size < n:
                break
            messages.append(pickle.loads(buf[at + _LEN.size: at + _LEN.size + n]))
            at += _LEN.size + n
        del buf[:at]
        return messages


class _Child(asyncio.SubprocessProtocol):
    """The operator's end of one child: answers resolve their calls as the bytes arrive, with no task per
    answer; the child's exit fails whatever was still in flight."""

    def __init__(self, owner: WriterProcess):
        self.owner, self.frames, self.exited = owner, None, asyncio.get_running_loop().create_future()
        self._gone: set[str] = set()  # "process" and "stdout": answers still in the pipe are read first

    def connection_made(self, transport: asyncio.SubprocessTransport) -> None:
        self.frames = _Frames(transport.get_pipe_transport(0).write)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        pending = self.owner._pending
        for rid, outcome in self.frames.feed(data):
            if rid is None:  # the child's recorder dropped an Event
                self.owner._dropped_event()
                continue
            future = pending.get(rid)
            if future is not None and not future.done():
                future.set_result(outcome)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._ended("stdout")

    def process_exited(self) -> None:
        self._ended("process")

    def _ended(self, what: str) -> None:
        self._gone.add(what)
        if len(self._gone) == 2 and not self.exited.done():
            self.exited.set_result(None)


class WriterProcess:
    """The child process and the pending calls: `session(name)` gives a RemoteSession for one of the
    sessions the child was started with (`{name: Limits}`); with `events` (the EventRecorder's keyword
    arguments plus `session`, the name of the one it writes with), `recorder()` gives the child's recorder."""

    def __init__(self, kubeconfig: str | None, sessions: dict[str, Limits], events: dict[str, Any] | None = None):
        self.kubeconfig, self.sessions, self.events = kubeconfig, dict(sessions), events
        if events is not None and events.get("session") not in self.sessions:
            raise KeyError(f"events: no session {events.get('session')!r} (has: {sorted(self.sessions)})")
        self._recorder: RemoteRecorder | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._child: _Child | None = None
        self._pending: dict[int, asyncio.Future[Outcome]] = {}
        self._ids = itertools.count()
        self._watch: asyncio.Task | None = None
        self._closing = False
        self._ready = asyncio.Event()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._transport.get_pid() if self._transport is not None else None

    def session(self, name: str) -> RemoteSession:
        if name not in self.sessions:
            raise KeyError(f"no session {name!r} in the writer process (has: {sorted(self.sessions)})")
        return RemoteSession(self, name)

    def recorder(self, on_drop: Callable[[], None] | None = None) -> RemoteRecorder:
        if self.events is None:
            raise KeyError("the writer process was started without an event recorder")
        self._recorder = RemoteRecorder(self, on_drop)
        return self._recorder

    async def start(self) -> None:
        spec = {"kubeconfig": self.kubeconfig, "sessions": {k: asdict(v) for k, v in self.sessions.items()},
                "events": self.events}
        loop = asyncio.get_running_loop()
        self._transport, self._child = await loop.subprocess_exec(
            lambda: _Child(self), sys.executable, "-c", _CHILD_MAIN, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=None, env={**os.environ, "FGPU_WRITER_SPEC": repr(spec)})
        self._watch = asyncio.create_task(self._on_exit(self._transport, self._child), name="fgpu-writer-exit")
        self._ready.set()

    async def call(self, op: str, *args: Any) -> Outcome:
        await self._ready.wait()
        rid = next(self._ids)
        future = self._pending[rid] = asyncio.get_running_loop().create_future()
        try:
            self._child.frames.send((rid, op, args))
            return await future
        finally:
            self._pending.pop(rid, None)

    def tell(self, op: str, *args: Any) -> bool:
        """Send without an answer; False while no child is running (it is being replaced)."""
        if not self._ready.is_set():
            return False
        self._child.frames.send((None, op, args))
        return True

    def _dropped_event(self) -> None:
        if self._recorder is not None:
            self._recorder.dropped_one()

    async def _on_exit(self, transport: asyncio.SubprocessTransport, child: _Child) -> None:
        await child.exited
        self._ready.clear()
        code = transport.get_returncode()
        transport.close()
        lost = Outcome(Result.UNAVAILABLE, 0, f"the API writer process exited ({code})")
        in_flight = [f for f in self._pending.values() if not f.done()]
        for future in in_flight:
            future.set_result(lost)
        if not self._closing:
            log.warning("API writer process exited (%s) with %d call(s) in flight; starting another",
                        code, len(in_flight))
            self.restarts += 1
            await asyncio.sleep(RESTART_DELAY_S)
            if not self._closing:
                await self.start()

    async def close(self) -> None:
        self._closing = True
        transport, child = self._transport, self._child
        if transport is None:
            return
        with contextlib.suppress(ConnectionError, OSError, AttributeError):
            transport.get_pipe_transport(0).close()  # the child finishes nothing more and exits
        try:
            await asyncio.wait_for(asyncio.shield(child.exited), 5.0)
        except TimeoutError:
            transport.kill()
        if self._watch is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch


class RemoteSession:
    """`ApiSession.request` across the pipe: the same arguments, the same Outcome."""

    def __init__(self, writer: WriterProcess, name: str):
        self._writer, self._name = writer, name

    async def request(self, method: str, path: str, **kwargs: Any) -> Outcome:
        return await self._writer.call("request", self._name, method, path, kwargs)


class RemoteRecorder:
    """`EventRecorder`'s post/forget/aclose, run by the child's recorder. `post` is one-way; an Event the child
    drops (its backlog full, or no child running while it is replaced) is counted here as the recorder would."""

    def __init__(self, writer: WriterProcess, on_drop: Callable[[], None] | None = None):
        self._writer, self.on_drop = writer, on_drop
        self.dropped = 0

    def post(self, namespace: str, pod: str, uid: str, reason: str, message: str, type: str = "Warning") -> bool:
        if self._writer.tell("post", namespace, pod, uid, reason, message, type):
            return True
        self.dropped_one()
        return False

    def forget(self, uid: str) -> None:
        self._writer.tell("forget", uid)  # a replaced child starts with no series to forget

    async def aclose(self) -> None:
        """Write every pending count (the child's `flush`)."""
        await self._writer.call("flush")

    def dropped_one(self) -> None:
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop()


async def _serve(spec: dict[str, Any]) -> None:
    """The child: answer calls until the pipe from the operator closes."""
    from .config import load

    creds = load(spec["kubeconfig"])
    sessions = {name: ApiSession(creds, Limits(**limits)) for name, limits in spec["sessions"].items()}
    for api in sessions.values():
        api.open()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    frames = _Frames(transport.write)
    recorder = None
    if spec.get("events") is not None:
        options = dict(spec["events"])
        recorder = EventRecorder(sessions[options.pop("session")], **options,
                                 on_drop=lambda: frames.send((None, "dropped")))
    tasks: set[asyncio.Task] = set()
    closed = loop.create_future()

    async def answer(rid: int, op: str, args: tuple) -> None:
        if op == "flush":
            await recorder.flush()
            frames.send((rid, Outcome(Result.OK, 0, "flushed")))
        else:  # "request"
            name, method, path, kwargs = args
            frames.send((rid, await sessions[name].request(method, path, **kwargs)))

    class Calls(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            for rid, op, args in frames.feed(data):
                if op == "post":
                    recorder.post(*args)
                elif op == "forget":
                    recorder.forget(*args)
                else:
                    task = loop.create_task(answer(rid, op, args))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

        def connection_lost(self, exc: Exception | None) -> None:
            if not closed.done():
                closed.set_result(None)

    await loop.connect_read_pipe(Calls, sys.stdin)
    try:
        await closed  # the operator closed the pipe (or died): calls still in flight are abandoned
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

