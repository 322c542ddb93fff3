"""The gRPC shell: translates NodeDaemon messages to NodeRuntime calls and errors to Error messages.
A bad request never crashes the daemon or touches another context; it gets an Error reply."""
from __future__ import annotations

import logging
from typing import Any

import grpc

from simgpu.daemon import simgpu_daemon_pb2 as pb
from simgpu.daemon import simgpu_daemon_pb2_grpc as pb_grpc
from simgpu.daemon.runtime import Context, NodeRuntime
from simgpu.device import CLIENT_FAULT_XID, ContextLostError
from simgpu.errors import OutOfMemoryError, RelayoutRefused, SimgpuError
from simgpu.perf import parse_op

log = logging.getLogger("simgpu.daemon")
_OP_CACHE_LIMIT = 4096


def device_list(devices: list[dict[str, Any]]) -> pb.DeviceList:
    return pb.DeviceList(devices=[pb.Device(uuid=d["uuid"], healthy=d["healthy"], xid=int(d["xid"] or 0),
                                            model=d["model"], parent=d["parent"], profile=d["profile"],
                                            index=d["index"], start=max(0, d.get("start", 0)))
                                  for d in devices])


def error_reply(err: BaseException) -> pb.Error:
    if isinstance(err, OutOfMemoryError):
        return pb.Error(code="OUT_OF_MEMORY", message=str(err), field="bytes", quota=err.quota, used=err.used,
                        requested=err.requested)
    if isinstance(err, ContextLostError):
        return pb.Error(code="CONTEXT_LOST", message=err.reason, field="context")
    if isinstance(err, SimgpuError):
        code = {"token": "UNAUTHENTICATED", "gpu": "UNAVAILABLE"}.get(err.field or "", "INVALID_ARGUMENT")
        return pb.Error(code=code, message=str(err), field=err.field or "",
                        allowed=[str(a) for a in err.allowed or []])
    log.exception("unexpected error", exc_info=err)
    return pb.Error(code="INTERNAL", message=f"internal error: {type(err).__name__}: {err}")


class NodeDaemonService(pb_grpc.NodeDaemonServicer):
    def __init__(self, runtime: NodeRuntime):
        self.runtime = runtime
        self._ops: dict[tuple, Any] = {}

    # --- device plugin side ------------------------------------------------------------------------
    async def Devices(self, request, context):
        return device_list(self.runtime.devices())

    async def WatchHealth(self, request, context):
        async for devices in self.runtime.watch():
            yield device_list(devices)

    async def SetFault(self, request, context):
        try:
            return device_list(self.runtime.set_fault(request.uuid, request.xid))
        except SimgpuError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def ClearFault(self, request, context):
        try:
            return device_list(self.runtime.clear_fault(request.uuid))
        except SimgpuError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def Reconfigure(self, request, context):
        layout = [(p.profile, p.start) for p in request.layout]
        try:
            return device_list(await self.runtime.reconfigure(request.gpu_uuid, layout, request.change_id))
        except SimgpuError as err:
            refused = isinstance(err, RelayoutRefused)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION if refused else grpc.StatusCode.INVALID_ARGUMENT,
                                str(err))

    # --- workload side -----------------------------------------------------------------------------
    async def Session(self, request_iterator, context):
        ctx: Context | None = None
        try:
            async for req in request_iterator:
                reply = pb.SessionReply(id=req.id)
                try:
                    ctx = await self._handle(req, ctx, reply)
                except Exception as err:  # every failure becomes an Error reply, the stream lives on
                    reply.ClearField("body")
                    reply.error.CopyFrom(error_reply(err))
                yield reply
        finally:
            if ctx is not None and ctx.cid in self.runtime.contexts:
                self.runtime.close(ctx)

    def _op(self, msg: pb.Op) -> Any:
        inputs = msg.inputs if msg.HasField("inputs") else None  # absent: a sender without the field, 1 input
        key = (msg.kind, msg.m, msg.n, msg.k, msg.dtype, msg.bytes, msg.flops, inputs)
        op = self._ops.get(key)
        if op is None:
            if inputs is not None and msg.kind in ("gemm", "copy"):
                raise SimgpuError(f"got {inputs} on a {msg.kind!r} op", field="inputs",
                                  allowed=["only on elementwise ops"])
            if msg.kind == "gemm":
                d = {"op": "gemm", "m": msg.m, "n": msg.n, "k": msg.k, "dtype": msg.dtype or "bf16"}
            elif msg.kind == "elementwise":
                d = {"op": "elementwise", "bytes": msg.bytes, "flops": msg.flops}
                if inputs is not None:
                    d["inputs"] = inputs
            else:
                d = {"op": msg.kind, "bytes": msg.bytes}
            op = parse_op(d)
            if len(self._ops) > _OP_CACHE_LIMIT:
                self._ops.clear()
            self._ops[key] = op
        return op

    async def _handle(self, req: pb.SessionRequest, ctx: Context | None, reply: pb.SessionReply) -> Context | None:
        rt = self.runtime
        kind = req.WhichOneof("body")
        if kind == "open":
            if ctx is not None:
                raise SimgpuError("this stream already has a context", field="open")
            ctx = rt.open(req.open.token)
            device, client = ctx.device, ctx.device.clients[ctx.cid]
            spec = client.spec
            reply.opened.CopyFrom(pb.Opened(
                context=ctx.cid, device_uuid=device.uuid, model=device.spec.name, mem_total=device.memory.total,
                mem_limit=device.memory.usage(ctx.cid).quota, sms=device.spec.sms,
                visible_sms=device.perf.visible_sms(spec.mps_pct), sharing=device.mode,
                time_dilation=rt.dilation, priority=spec.priority, compute_share=spec.compute_share or 0.0,
                dtypes=device.spec.supported_dtypes()))
            return ctx
        if ctx is None:
            raise SimgpuError("open a context first (the first request must be `open` with a token)", field="open")
        if kind == "launch":
            accepted = 0
            try:
                accepted = await rt.launch(ctx, [self._op(op) for op in req.launch.ops])
            finally:
                reply.launched.accepted = accepted
        elif kind == "malloc":
            alloc = rt.malloc(ctx, req.malloc.bytes)
            reply.allocated.CopyFrom(pb.Allocated(handle=alloc.handle, device_bytes=alloc.device_bytes,
                                                  host_bytes=alloc.host_bytes))
        elif kind == "free":
            reply.freed.bytes = rt.free(ctx, req.free.handle).nbytes
        elif kind == "synchronize":
            await rt.synchronize(ctx)
            client = ctx.device.clients[ctx.cid]
            reply.synchronized.CopyFrom(pb.Synchronized(completed=client.totals.kernels_done,
                                                        virtual_time=ctx.device.now))
        elif kind == "usage":
            u = rt.usage(ctx)
            reply.usage.CopyFrom(pb.UsageReply(**u))
        elif kind == "fault":
            killed = rt.inject_fault(ctx, req.fault.xid or CLIENT_FAULT_XID)
            reply.faulted.killed.extend(killed)
        else:
            raise SimgpuError(f"unknown request {kind!r}", field="body")
        return ctx
