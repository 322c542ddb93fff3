"""The workload side of the node daemon: a small "driver" SDK.

    client = DaemonClient("/var/run/fgpu/daemon.sock")
    ctx = client.open_context(token)           # the token the device plugin put in FGPU_CONTEXT_TOKEN
    buf = ctx.malloc(8 << 30)                  # quota-checked: OutOfMemoryError past the quota
    ctx.launch(GemmOp(4096, 4096, 4096))       # asynchronous, like cudaLaunchKernel
    ctx.synchronize()                          # waits for the kernels; raises errors of earlier launches
    ctx.free(buf); ctx.close()

Each context is one bidirectional gRPC stream; closing it (or the process dying) frees everything the
context held. Launches are buffered and sent in batches, and their replies are read lazily, so a
Python client can issue thousands of kernels per second. For the device plugin: devices(),
watch_health(), set_fault(), clear_fault().
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from simgpu.daemon import simgpu_daemon_pb2 as pb
from simgpu.daemon import simgpu_daemon_pb2_grpc as pb_grpc
from simgpu.device import ContextLostError
from simgpu.errors import OutOfMemoryError, SimgpuError
from simgpu.perf import CopyOp, ElementwiseOp, GemmOp, parse_op

LAUNCH_BATCH = 256  # ops per Launch message
MAX_IN_FLIGHT = 8  # unanswered requests before the client waits for replies (back-pressure)
_OP_MESSAGES: dict = {}  # op -> its pb.Op, so a loop does not rebuild the same message every launch


class DaemonError(SimgpuError):
    """An error reply from the daemon (code: INVALID_ARGUMENT, UNAUTHENTICATED, UNAVAILABLE, ...)."""

    def __init__(self, code: str, message: str, field: str | None = None, allowed: list[str] | None = None):
        self.code, self.field, self.allowed = code, field or None, allowed or None
        self.message = message  # already formatted by the daemon: not re-prefixed with the field
        ValueError.__init__(self, message)


class RemoteOutOfMemoryError(OutOfMemoryError):
    def __init__(self, message: str, quota: int, used: int, requested: int):
        self.quota, self.used, self.requested = quota, used, requested
        self.code, self.field, self.allowed, self.message = "OUT_OF_MEMORY", "bytes", None, message
        ValueError.__init__(self, message)


class RemoteContextLostError(ContextLostError):
    code = "CONTEXT_LOST"


def _raise(error: pb.Error) -> None:
    if error.code == "OUT_OF_MEMORY":
        raise RemoteOutOfMemoryError(error.message, error.quota, error.used, error.requested)
    if error.code == "CONTEXT_LOST":
        raise RemoteContextLostError(error.message)
    raise DaemonError(error.code, error.message, error.field, list(error.allowed))


def op_message(op: Any) -> pb.Op:
    """An op (GemmOp/CopyOp/ElementwiseOp or the dict form simgpu.perf.parse_op takes) as a message;
    a pb.Op passes through unchecked (the daemon validates it)."""
    if isinstance(op, pb.Op):
        return op
    if isinstance(op, dict):
        op = parse_op(op)
    msg = _OP_MESSAGES.get(op) if isinstance(op, GemmOp | CopyOp | ElementwiseOp) else None
    if msg is not None:
        return msg  # messages are only ever copied into a Launch, never mutated
    if isinstance(op, GemmOp):
        msg = pb.Op(kind="gemm", m=op.m, n=op.n, k=op.k, dtype=op.dtype)
    elif isinstance(op, CopyOp):
        msg = pb.Op(kind="copy", bytes=op.bytes)
    elif isinstance(op, ElementwiseOp):
        # always sent; a daemon older than the field ignores it and runs the op as 1 input
        msg = pb.Op(kind="elementwise", bytes=op.bytes, flops=op.flops, inputs=op.inputs)
    if msg is not None:
        if len(_OP_MESSAGES) > 4096:
            _OP_MESSAGES.clear()
        _OP_MESSAGES[op] = msg
        return msg
    raise SimgpuError(f"not an op: {op!r}", field="op", allowed=["GemmOp", "CopyOp", "ElementwiseOp", "dict"])


def _unreachable(socket_path: str, err: grpc.RpcError) -> SimgpuError:
    detail = err.details() if hasattr(err, "details") else str(err)
    return SimgpuError(f"node daemon at {socket_path} failed: {detail}", field="socket")


def device_dicts(msg: pb.DeviceList) -> list[dict[str, Any]]:
    return [{"uuid": d.uuid, "healthy": d.healthy, "xid": d.xid, "model": d.model, "parent": d.parent,
             "profile": d.profile, "index": d.index, **({"start": d.start} if d.parent else {})}
            for d in msg.devices]


class Context:
    """One CUDA-like context on a device, over one Session stream."""

    def __init__(self, stub: pb_grpc.NodeDaemonStub, socket_path: str, token: str, timeout: float | None = None):
        self._socket = socket_path
        self._requests: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._pending: list[int] = []  # ids sent whose replies were not read yet (launches)
        self._batch: list[pb.Op] = []
        self._deferred: BaseException | None = None  # first error of an asynchronous launch
        self._lock = threading.Lock()
        self._closed = False
        self._replies = stub.Session(iter(self._requests.get, None), timeout=timeout)
        try:
            opened = self._call(pb.SessionRequest(open=pb.Open(token=token)))
        except BaseException:
            self.close()  # end the stream: a refused open must not leave a session behind
            raise
        self.info = opened.opened
        self.id = self.info.context

    # --- plumbing ----------------------------------------------------------------------------------
    def _send(self, req: pb.SessionRequest) -> int:
        req.id = next(self._ids)
        self._requests.put(req)
        return req.id

    def _next_reply(self) -> pb.SessionReply:
        try:
            return next(self._replies)
        except StopIteration:
            raise SimgpuError(f"node daemon at {self._socket} closed the session", field="socket") from None
        except grpc.RpcError as err:
            raise _unreachable(self._socket, err) from None

    def _drain_until(self, rid: int | None) -> pb.SessionReply | None:
        """Read replies in order up to `rid` (None: all pending), remembering failed launches."""
        while self._pending:
            reply = self._next_reply()
            expected = self._pending.pop(0)
            assert reply.id == expected, f"reply {reply.id} out of order (expected {expected})"
            if reply.id == rid:
                return reply
            if reply.HasField("error") and self._deferred is None:
                self._deferred = self._exception(reply.error)
        return None

    @staticmethod
    def _exception(error: pb.Error) -> BaseException:
        try:
            _raise(error)
        except SimgpuError as err:
            return err
        raise AssertionError("unreachable")

    def _call(self, req: pb.SessionRequest) -> pb.SessionReply:
        with self._lock:
            if self._closed:
                raise SimgpuError("context is closed", field="context")
            self._flush()
            rid = self._send(req)
            self._pending.append(rid)
            reply = self._drain_until(rid)
            if reply.HasField("error"):
                _raise(reply.error)
            return reply

    def _flush(self) -> None:
        if self._batch:
            rid = self._send(pb.SessionRequest(launch=pb.Launch(ops=self._batch)))
            self._pending.append(rid)
            self._batch = []
        while len(self._pending) > MAX_IN_FLIGHT:
            reply = self._next_reply()
            self._pending.pop(0)
            if reply.HasField("error") and self._deferred is None:
                self._deferred = self._exception(reply.error)

    # --- the driver API ----------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        """Allocate device memory; returns a handle. OutOfMemoryError past the quota (hard mode)."""
        return self._call(pb.SessionRequest(malloc=pb.Malloc(bytes=int(nbytes)))).allocated.handle

    def free(self, handle: int) -> int:
        return self._call(pb.SessionRequest(free=pb.Free(handle=int(handle)))).freed.bytes

    def launch(self, op: Any) -> None:
        """Queue a kernel (asynchronous). Its errors surface at the next synchronize (or other call)."""
        msg = op_message(op)
        with self._lock:
            if self._closed:
                raise SimgpuError("context is closed", field="context")
            self._batch.append(msg)
            if len(self._batch) >= LAUNCH_BATCH:
                self._flush()

    def synchronize(self) -> pb.Synchronized:
        """Wait for every launched kernel; raises the first error of an earlier asynchronous launch."""
        reply = self._call(pb.SessionRequest(synchronize=pb.Synchronize()))
        if self._deferred is not None:
            err, self._deferred = self._deferred, None
            raise err
        return reply.synchronized

    def usage(self) -> dict[str, Any]:
        u = self._call(pb.SessionRequest(usage=pb.Usage())).usage
        return {f.name: getattr(u, f.name) for f in u.DESCRIPTOR.fields}

    def inject_fault(self, xid: int = 31) -> list[int]:
        """Simulate a fatal fault (e.g. an illegal address) in this context; under MPS it kills co-runners."""
        return list(self._call(pb.SessionRequest(fault=pb.InjectFault(xid=xid))).faulted.killed)

    def close(self) -> None:
        """End the session: the daemon frees everything this context held."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._requests.put(None)
        try:
            for _ in self._replies:
                pass
        except grpc.RpcError:
            pass

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DaemonClient:
    """A connection to the node daemon's unix socket."""

    def __init__(self, socket_path: str, timeout: float = 30.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = pb_grpc.NodeDaemonStub(self._channel)
        self._last: Context | None = None
        self._contexts: list[Context] = []

    def _unary(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise DaemonError("INVALID_ARGUMENT", err.details()) from None
            raise _unreachable(self.socket_path, err) from None

    # --- workloads ---------------------------------------------------------------------------------
    def open_context(self, token: str) -> Context:
        if not os.path.exists(self.socket_path):
            raise SimgpuError(f"no node daemon socket at {self.socket_path}", field="socket")
        self._last = Context(self._stub, self.socket_path, token)
        self._contexts.append(self._last)
        return self._last

    def _ctx(self) -> Context:
        if self._last is None:
            raise SimgpuError("open a context first", field="context")
        return self._last

    # Contract convenience: the calls below act on the most recently opened context.
    def malloc(self, nbytes: int) -> int:
        return self._ctx().malloc(nbytes)

    def free(self, handle: int) -> int:
        return self._ctx().free(handle)

    def launch(self, op: Any) -> None:
        self._ctx().launch(op)

    def synchronize(self) -> pb.Synchronized:
        return self._ctx().synchronize()

    def usage(self) -> dict[str, Any]:
        return self._ctx().usage()

    # --- device plugin -----------------------------------------------------------------------------
    def devices(self) -> list[dict[str, Any]]:
        return device_dicts(self._unary(self._stub.Devices, pb.DevicesRequest()))

    def watch_health(self) -> Iterator[list[dict[str, Any]]]:
        """Yields the full device list now and after every health change (for ListAndWatch).
        Cancel by closing the client (or call .cancel() on the iterator's underlying call)."""
        stream = self._stub.WatchHealth(pb.DevicesRequest())
        try:
            for msg in stream:
                yield device_dicts(msg)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                raise _unreachable(self.socket_path, err) from None
        finally:
            stream.cancel()

    def set_fault(self, uuid: str, xid: int) -> list[dict[str, Any]]:
        return device_dicts(self._unary(self._stub.SetFault, pb.FaultRequest(uuid=uuid, xid=xid)))

    def clear_fault(self, uuid: str) -> list[dict[str, Any]]:
        return device_dicts(self._unary(self._stub.ClearFault, pb.FaultRequest(uuid=uuid)))

    def reconfigure(self, gpu_uuid: str, layout: list[tuple[str, int]], change_id: str = "",
                    timeout: float | None = None) -> list[dict[str, Any]]:
        """Re-lay a dynamic-MIG GPU (returns the device list once done). A refusal (an instance in use, a
        change in progress, an invalid layout) is a DaemonError with the daemon's message."""
        request = pb.ReconfigureRequest(gpu_uuid=gpu_uuid, change_id=change_id,
                                        layout=[pb.MigPlacement(profile=p, start=s) for p, s in layout])
        try:
            return device_dicts(self._stub.Reconfigure(request, timeout=timeout or self.timeout + 600))
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                raise DaemonError(err.code().name, err.details()) from None
            raise _unreachable(self.socket_path, err) from None

    def close(self) -> None:
        """Close every context opened through this client (freeing their memory), then the channel."""
        for ctx in self._contexts:
            ctx.close()
        self._contexts.clear()
        self._channel.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
