"""The daemon's logic, free of gRPC: contexts opened with device-plugin tokens, kernels run in real time
scaled by the dilation factor, waiters for synchronize, health watchers.

Everything runs on one asyncio loop, so the emulated node needs no locks. Virtual time is
(loop time - start) / time_dilation: with timeDilation 10 a 1 ms kernel takes 10 ms of wall time, with
0.01 it takes 10 us. A single timer is armed at the next event (kernel completion, slice end); every
request first brings the node up to "now", then changes it, then re-arms the timer.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from simgpu.device import ClientSpec, ContextLostError, EmulatedDevice, EmulatedNode
from simgpu.device.engine import DAEMON_SHUTDOWN
from simgpu.errors import RelayoutRefused, SimgpuError
from simgpu.nodeconfig.schema import mig_uuid
from simgpu.token import Grant, verify_token

log = logging.getLogger("simgpu.daemon")

MIN_SLEEP_S = 0.0002  # when a launch queue is full, poll no faster than this (wall time)
LAUNCH_CHUNK = 64  # a launch yields the loop after this many kernels, so one big batch cannot hold it


@dataclass
class Context:
    cid: int
    device: EmulatedDevice
    grant: Grant
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> ClientSpec:
        return self.device.clients[self.cid].spec


def client_spec(grant: Grant, device: EmulatedDevice) -> ClientSpec:
    """The device plugin's grant as the engine's client spec. The SM limit is an MPS active-thread
    percentage on MPS devices, and a hard compute share (HAMi-core's CUDA_DEVICE_SM_LIMIT) elsewhere. Every
    context opened with one pod's grant draws on that grant's one memory quota (a second context, or another
    pod holding the token, gets no more); a grant naming no pod (a whole GPU or replica) is per context."""
    pct = grant.sm_limit_pct if grant.sm_limit_pct is not None and grant.sm_limit_pct < 100 else None
    name = "/".join(p for p in (grant.pod_namespace, grant.pod_name, grant.container) if p) or "context"
    return ClientSpec(
        name=name,
        mem_limit_bytes=grant.mem_limit_bytes,
        mps_pct=pct if device.mode == "mps" else None,
        compute_share=pct / 100 if pct is not None and device.mode != "mps" else None,
        priority=int(grant.priority),
        labels={"namespace": grant.pod_namespace, "pod": grant.pod_name, "container": grant.container},
        quota_group=grant.model_dump_json() if grant.pod_name else None,
    )


class NodeRuntime:
    def __init__(self, node: EmulatedNode, *, secret: bytes, time_dilation: float = 1.0):
        if time_dilation <= 0:
            raise SimgpuError("must be > 0", field="timeDilation")
        self.node = node
        self.secret = secret
        self.dilation = float(time_dilation)
        self.contexts: dict[int, Context] = {}
        self._waiters: dict[int, list[asyncio.Future]] = {}
        self._watchers: set[asyncio.Queue] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        # one launch in progress per grant: a grant's many contexts get the daemon's time of one (fair queuing)
        self._grant_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._relaying: set[str] = set()  # GPUs whose MIG re-layout is in progress

    # --- clock -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Bind to the running loop; virtual time 0 is now."""
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time() - self.node.now * self.dilation

    def vnow(self) -> float:
        assert self._loop is not None, "NodeRuntime.start() first"
        return (self._loop.time() - self._t0) / self.dilation

    def catch_up(self) -> None:
        """Run the node up to the current virtual time and wake whoever waited for a drained stream."""
        drained = self.node.run_until(max(self.node.now, self.vnow()))
        for cids in drained.values():
            for cid in cids:
                self._resolve(cid)

    def _arm(self) -> None:
        """(Re)arm the single timer at the node's next event."""
        nxt = self.node.next_event()
        if nxt is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer, self._timer_at = None, None
            return
        when = self._t0 + nxt * self.dilation
        if self._timer is not None and self._timer_at is not None and abs(self._timer_at - when) < 1e-7:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._tick)

    def _tick(self) -> None:
        self._timer, self._timer_at = None, None
        try:
            self.catch_up()
        except Exception:  # never let the clock die: log and keep serving
            log.exception("clock step failed")
        self._arm()

    def _resolve(self, cid: int, error: BaseException | None = None) -> None:
        ctx = self.contexts.get(cid)
        client = ctx.device.clients.get(cid) if ctx else None
        if error is None and client is not None and client.stream:
            return
        for fut in self._waiters.pop(cid, []):
            if not fut.done():
                if error is not None:
                    fut.set_exception(error)
                else:
                    fut.set_result(None)

    # --- contexts ----------------------------------------------------------------------------------
    def open(self, token: str) -> Context:
        grant = verify_token(self.secret, token)
        device = self.node.device(grant.device_uuid)
        self.catch_up()
        cid = device.open(client_spec(grant, device))
        ctx = Context(cid, device, grant, dict(device.clients[cid].spec.labels))
        self.contexts[cid] = ctx
        return ctx

    def close(self, ctx: Context) -> int:
        """The client went away (exit, crash, disconnect): free everything it held."""
        self.catch_up()
        freed = ctx.device.close(ctx.cid)
        self.contexts.pop(ctx.cid, None)
        self._resolve(ctx.cid, ContextLostError("context closed"))
        self._arm()
        return freed

    def malloc(self, ctx: Context, nbytes: int):
        self.catch_up()
        alloc = ctx.device.malloc(ctx.cid, nbytes)
        self._arm()
        return alloc

    def free(self, ctx: Context, handle: int):
        self.catch_up()
        alloc = ctx.device.free(ctx.cid, handle)
        self._arm()
        return alloc

    async def launch(self, ctx: Context, ops: list[Any]) -> int:
        """Queue kernels (asynchronous, like cudaLaunchKernel); waits only while the grant's launch queue is
        full. Launches are queued per grant and yield the loop every LAUNCH_CHUNK kernels, so a grant flooding
        the daemon from many contexts delays its neighbours' requests no more than one context would."""
        group = ctx.spec.quota_group
        if group is None:
            return await self._launch(ctx, ops)
        lock = self._grant_locks.get(group)
        if lock is None:
            lock = self._grant_locks[group] = asyncio.Lock()
        async with lock:
            return await self._launch(ctx, ops)

    async def _launch(self, ctx: Context, ops: list[Any]) -> int:
        self.catch_up()
        done = 0
        room = ctx.device.room(ctx.cid)
        for op in ops:
            while room <= 0:
                self._arm()
                nxt = self.node.next_event()
                wait = MIN_SLEEP_S if nxt is None else max(MIN_SLEEP_S, (nxt - self.vnow()) * self.dilation)
                await asyncio.sleep(wait)
                self.catch_up()
                room = ctx.device.room(ctx.cid)
            ctx.device.launch(ctx.cid, op)
            done += 1
            room -= 1
            if done % LAUNCH_CHUNK == 0 and done < len(ops):
                self._arm()
                await asyncio.sleep(0)
                self.catch_up()
                room = ctx.device.room(ctx.cid)
        self._arm()
        return done

    async def synchronize(self, ctx: Context) -> float:
        """Wait until every kernel the context launched has completed (or the context dies); returns the
        virtual time the last one completed, as the device (like a CUDA event) saw it: the loop may notice
        later (a busy or descheduled host), and that lag must not count as GPU time."""
        self.catch_up()
        client = ctx.device.clients.get(ctx.cid)
        if client is None:
            raise SimgpuError("context is closed", field="context")
        if client.lost:
            raise ContextLostError(client.lost)
        if client.stream:
            fut = self._loop.create_future()
            self._waiters.setdefault(ctx.cid, []).append(fut)
            self._arm()
            await fut
        return client.drained_at

    def usage(self, ctx: Context) -> dict[str, Any]:
        self.catch_up()
        out = ctx.device.usage(ctx.cid)
        totals = ctx.device.clients[ctx.cid].totals
        out["progress_rate"] = totals.solo_work_s / totals.busy_s if totals.busy_s > 0 else 0.0
        out["virtual_time"] = ctx.device.now
        return out

    def inject_fault(self, ctx: Context, xid: int) -> list[int]:
        self.catch_up()
        killed = ctx.device.fault(ctx.cid, xid)
        self._killed(killed)
        return killed

    def _killed(self, cids: list[int]) -> None:
        for cid in cids:
            ctx = self.contexts.get(cid)
            reason = ctx.device.clients[cid].lost if ctx and cid in ctx.device.clients else "context lost"
            self._resolve(cid, ContextLostError(reason or "context lost"))
        self._arm()

    # --- health ------------------------------------------------------------------------------------
    def devices(self) -> list[dict[str, Any]]:
        return self.node.health()

    def set_fault(self, uuid: str, xid: int) -> list[dict[str, Any]]:
        self.catch_up()
        self._killed(self.node.set_fault(uuid, xid))
        self._publish()
        return self.devices()

    def clear_fault(self, uuid: str) -> list[dict[str, Any]]:
        self.node.clear_fault(uuid)
        self._publish()
        return self.devices()

    # --- dynamic MIG -------------------------------------------------------------------------------
    async def reconfigure(self, gpu_uuid: str, layout: list[tuple[str, int]], change_id: str = "") -> list[dict[str, Any]]:
        """Re-lay a dynamic-MIG GPU: the instances it drops are destroyed at once (refused if one has a live
        context), the new ones appear after the GPU's reconfiguration time (node config
        `mig.reconfigureSeconds`, wall seconds x timeDilation). One change per GPU at a time."""
        if gpu_uuid in self._relaying:
            raise RelayoutRefused(f"refused: a reconfiguration of GPU {gpu_uuid} is in progress", field="gpu")
        self.catch_up()
        gone, create = self.node.begin_relayout(gpu_uuid, layout)
        self._relaying.add(gpu_uuid)
        gpu = self.node.gpu(gpu_uuid)
        log.info("MIG change %s of GPU %s: destroyed %d instance(s), creating %s in %.1f s", change_id or "-",
                 gpu_uuid, len(gone), ", ".join(f"{p}@{s}" for p, s in create) or "none", gpu.reconfigure_s)
        self._publish()
        try:
            await asyncio.sleep(gpu.reconfigure_s * self.dilation)
            self.catch_up()
            self.node.finish_relayout(gpu_uuid, create, lambda index, p, s: mig_uuid(self.node.node_name, index, p, s))
        finally:
            self._relaying.discard(gpu_uuid)
            self._publish()
        return self.devices()

    def _publish(self) -> None:
        snapshot = self.devices()
        for queue in list(self._watchers):
            queue.put_nowait(snapshot)

    async def watch(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The device list now, then again after every health change."""
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.add(queue)
        try:
            yield self.devices()
            while True:
                yield await queue.get()
        finally:
            self._watchers.discard(queue)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for cid in list(self._waiters):
            self._resolve(cid, ContextLostError(DAEMON_SHUTDOWN))
        with contextlib.suppress(Exception):
            for queue in self._watchers:
                queue.put_nowait(self.devices())
