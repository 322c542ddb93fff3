"""One emulated device (a whole GPU or a MIG instance): contexts, memory, kernel streams, faults and an
event-driven virtual clock.

Each client (CUDA context) has one in-order stream of kernels and host gaps. Between events the set of
running kernels is fixed, so every kernel progresses at a constant rate (simgpu.device.sharing); the
clock jumps from one kernel completion to the next. Simulating a second of many small kernels therefore
costs one step per kernel, not per microsecond. Time is virtual: whoever owns the device (a test, the
node daemon) advances it explicitly.
"""
from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simgpu.counters import (
    ACTIVITY_FIELDS,
    Activity,
    ClientTotals,
    DeviceCounters,
    Totals,
    total_activity,
    window,
)
from simgpu.device.memory import Allocation, MemoryLedger
from simgpu.device.perfmodel import PerfModel
from simgpu.device.sharing import ENGINE_MODES, Runner, RunnerRate, share_concurrent, solo_rate, stalled
from simgpu.device.timeslice import Candidate, TimeSlicer
from simgpu.errors import SimgpuError

# XIDs after which no context on the GPU survives (NVIDIA XID catalog: 48 double-bit ECC error,
# 79 GPU has fallen off the bus, 95 uncontained ECC error). Other XIDs only mark the GPU unhealthy.
XID_DEVICE_LOST = frozenset({48, 79, 95})
CLIENT_FAULT_XID = 31  # a client's own fatal fault: GPU memory page fault (MMU fault)
MPS_MAX_CLIENTS = {"pascal": 16}  # gpu_specs.md 4a: 16 contexts before Volta, 48 from Volta on
MPS_MAX_CLIENTS_DEFAULT = 48
MAX_PENDING_LAUNCHES = 1024  # per stream, like the driver's launch queue: callers must wait for room (room():
# one queue's worth per grant, however many contexts it opens)

_DONE_EPS = 1e-9
_SEGMENT_CACHE = 4096


#: The reason every open context is lost when the node daemon stops (SIGTERM, e.g. its pod rolling): unlike a
#: fault, the grant still holds, and a workload may open a new context once a daemon answers again.
DAEMON_SHUTDOWN = "daemon shutting down"


class ContextLostError(SimgpuError):
    """The context died (its own fault, an MPS co-runner's fault, or the GPU was lost); only close() works."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"context lost: {reason}", field="context")


@dataclass(frozen=True)
class ClientSpec:
    """What a context asks for when it opens (from the device plugin's grant)."""

    name: str = "client"
    mem_limit_bytes: int | None = None
    mps_pct: float | None = None  # MPS active-thread percentage (MPS mode only)
    compute_share: float | None = None  # fraction of the device's compute, (0, 1]
    soft_cap: bool = False  # Gaia soft limit: may exceed compute_share while capacity is idle
    priority: int = 0  # 0 high, larger = lower (HAMi's CUDA_TASK_PRIORITY)
    labels: Mapping[str, str] = field(default_factory=dict)
    quota_group: str | None = None  # contexts of one grant share its memory quota (None: its own)


@dataclass
class _Kernel:
    """A run of `count` back-to-back launches of the same op (one event per run, not per kernel)."""

    op: Any
    count: int = 1
    remaining: float = 1.0  # fraction of the first kernel of the run still to do

    @property
    def work(self) -> float:
        return self.remaining + self.count - 1


@dataclass
class _HostGap:
    remaining: float  # seconds of host-side work before the next launch


@dataclass
class Client:
    id: int
    spec: ClientSpec
    lost: str | None = None
    stream: deque = field(default_factory=deque)
    launched: int = 0
    queued: int = 0  # kernels in the stream (launched, not completed)
    drained_at: float = 0.0  # virtual time its stream last ran empty (the device's account, not the host's)
    totals: ClientTotals = field(default_factory=ClientTotals)
    activity_s: list = field(default_factory=lambda: [0.0] * len(ACTIVITY_FIELDS))

    @property
    def alive(self) -> bool:
        return self.lost is None

    @property
    def pending(self) -> int:
        return self.queued


class EmulatedDevice:
    """A GPU or MIG instance shared by clients under one sharing mode: exclusive (one container; its
    contexts are time-sliced as in the default compute mode), timeslice, or mps."""

    _ids = itertools.count(1)  # client ids are unique per process, so MIG instances can be combined

    def __init__(self, spec: Any, *, uuid: str, mode: str = "exclusive", memory_mode: str = "hard",
                 perf: Any = None, host_spill_bytes: int | None = None, label: str | None = None,
                 priorities: bool = True):
        if mode not in ENGINE_MODES:
            raise SimgpuError(f"unknown sharing mode {mode!r}", field="sharing", allowed=ENGINE_MODES)
        self.spec = spec
        self.uuid = uuid
        self.label = label or uuid
        self.mode = mode
        # Enforce clients' priorities (the node config's qos.priorities): off, every context is scheduled
        # as one priority class, though each keeps the priority it declared (for metrics and QoS).
        self.priorities = bool(priorities)
        self.perf = perf if isinstance(perf, PerfModel) else PerfModel(spec, perf)
        self.memory = MemoryLedger(spec.mem_bytes, memory_mode, host_spill_bytes)
        self._idle_board = self.perf.board(0.0)
        self._board = self._idle_board  # (SM clock MHz, power W) of the current segment
        self.now = 0.0
        self.xid: int | None = None
        self.clients: dict[int, Client] = {}
        self._activity_s = [0.0] * len(ACTIVITY_FIELDS)  # integrals of the device's activity ratios
        self._energy_j = 0.0  # integral of the modelled board power (simgpu.perf.board_power)
        self._clock_mhz_s = 0.0  # integral of the SM clock
        # rates, device activity and (clock, power) per running set: alternating ops or co-runners recur, so
        # keep them all
        self._segments: dict[tuple, tuple[dict[int, RunnerRate], tuple[float, ...], tuple[float, float]]] = {}
        # "exclusive" means the device belongs to one container, whose contexts share it like a GPU in
        # the default compute mode: time-sliced.
        self._slicer = self._make_slicer() if mode in ("timeslice", "exclusive") else None
        self._cands: dict[int, Candidate] | None = None

    def _make_slicer(self) -> TimeSlicer:
        from simgpu.perf import params_for, timeslice_params

        slice_s, switch_s = timeslice_params(self.spec)
        params = params_for(self.spec)
        # Preemption saves and restores every SM's registers + shared memory through DRAM (as simgpu.perf).
        state_s = 2.0 * self.spec.sms * params.sm_state_bytes / (self.spec.mem_bw_bytes_per_s * params.dram_efficiency)
        return TimeSlicer(slice_s=slice_s, switch_s=switch_s, preempt_s=switch_s + state_s)

    # --- health ------------------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self.xid is None

    def set_fault(self, xid: int) -> list[int]:
        """Mark the device unhealthy (new contexts fail); device-lost XIDs also kill every context."""
        self.xid = int(xid)
        if self.xid in XID_DEVICE_LOST:
            return self._kill(list(self.clients), f"GPU {self.uuid} lost (XID {self.xid})")
        return []

    def clear_fault(self) -> None:
        self.xid = None

    @property
    def max_clients(self) -> int | None:
        if self.mode == "mps":
            return MPS_MAX_CLIENTS.get(self.spec.arch, MPS_MAX_CLIENTS_DEFAULT)
        return None

    # --- contexts ----------------------------------------------------------------------------------
    def open(self, spec: ClientSpec | None = None) -> int:
        spec = spec or ClientSpec()
        if not self.healthy:
            raise SimgpuError(f"GPU {self.uuid} is unhealthy (XID {self.xid}); no new contexts", field="gpu")
        limit = self.max_clients
        if limit is not None and len(self.clients) >= limit:
            raise SimgpuError(f"device busy: {self.mode} mode allows {limit} context(s) on {self.uuid}",
                              field="context")
        if spec.mps_pct is not None:
            if self.mode != "mps":
                raise SimgpuError("an active-thread percentage needs MPS mode", field="mps_pct",
                                  allowed=["unset outside MPS"])
            if not 1 <= spec.mps_pct <= 100:
                raise SimgpuError(f"{spec.mps_pct} out of range", field="mps_pct", allowed=["1..100"])
        if spec.compute_share is not None and not 0 < spec.compute_share <= 1:
            raise SimgpuError(f"{spec.compute_share} out of range", field="compute_share", allowed=["(0, 1]"])
        if not isinstance(spec.priority, int) or spec.priority < 0:
            raise SimgpuError(f"bad priority {spec.priority!r}", field="priority", allowed=[0, 1])
        cid = next(self._ids)
        self.memory.add_client(cid, spec.mem_limit_bytes, spec.quota_group)
        self.clients[cid] = Client(cid, spec)
        self._cands = None
        return cid

    def close(self, cid: int) -> int:
        """The client exits: everything it held is freed. Returns the bytes released."""
        if self.clients.pop(cid, None) is None:
            return 0
        if self._slicer is not None:
            self._slicer.forget(cid)
        self._segments.clear()
        self._cands = None
        return self.memory.release_client(cid)

    def _live(self, cid: int) -> Client:
        client = self.clients.get(cid)
        if client is None:
            raise SimgpuError(f"no such context {cid} on {self.uuid}", field="context")
        if client.lost:
            raise ContextLostError(client.lost)
        return client

    # --- memory ------------------------------------------------------------------------------------
    def malloc(self, cid: int, nbytes: int) -> Allocation:
        client = self._live(cid)
        alloc = self.memory.malloc(cid, nbytes, who=f"context {client.spec.name}")
        if alloc.host_bytes:
            self._segments.clear()  # the client's spill share changed its kernel times
        return alloc

    def free(self, cid: int, handle: int) -> Allocation:
        self._live(cid)
        alloc = self.memory.free(cid, handle)
        if alloc.host_bytes:
            self._segments.clear()
        return alloc

    # --- work --------------------------------------------------------------------------------------
    def room(self, cid: int) -> int:
        """Launches the context may queue before it must wait: what is left of its grant's one queue, so extra
        contexts on a grant buy it no more backlog (and no more of the daemon's time) than one."""
        client = self._live(cid)
        group = client.spec.quota_group
        if group is None:
            return MAX_PENDING_LAUNCHES - client.pending
        return MAX_PENDING_LAUNCHES - sum(c.pending for c in self.clients.values() if c.spec.quota_group == group)

    def launch(self, cid: int, op: Any) -> int:
        """Queue a kernel on the client's stream; returns how many it has launched. Bad ops fail here."""
        client = self._live(cid)
        if client.pending >= MAX_PENDING_LAUNCHES:
            raise SimgpuError(f"launch queue full ({MAX_PENDING_LAUNCHES} pending)", field="launch")
        self.perf.cost(op, self.perf.visible_sms(client.spec.mps_pct) if self.mode == "mps" else None)
        tail = client.stream[-1] if client.stream else None
        if type(tail) is _Kernel and tail.op == op:
            tail.count += 1
        else:
            client.stream.append(_Kernel(op))
        client.launched += 1
        client.queued += 1
        self._cands = None
        return client.launched

    def host_delay(self, cid: int, seconds: float) -> None:
        """Host-side work between launches (a data loader, a request gap): the stream waits, the GPU doesn't."""
        if seconds < 0:
            raise SimgpuError("host delay must be >= 0", field="seconds")
        self._live(cid).stream.append(_HostGap(float(seconds)))
        self._cands = None

    def fault(self, cid: int, xid: int = CLIENT_FAULT_XID) -> list[int]:
        """A fatal fault in one client. MPS merges clients into one server context, so all of them die;
        under time-slicing (separate contexts) and MIG (separate devices) only the faulting one does."""
        client = self._live(cid)
        if self.mode == "mps":
            others = [c for c in self.clients if c != cid]
            killed = self._kill([cid], f"fatal fault (XID {xid})")
            return killed + self._kill(others, f"MPS co-runner {client.spec.name} hit a fatal fault (XID {xid})")
        return self._kill([cid], f"fatal fault (XID {xid})")

    def _kill(self, cids: Iterable[int], reason: str) -> list[int]:
        killed = []
        for cid in cids:
            client = self.clients[cid]
            if client.alive:
                client.lost = reason
                client.stream.clear()
                client.queued = 0
                killed.append(cid)
                if self._slicer is not None:
                    self._slicer.forget(cid)
        self._segments.clear()
        self._cands = None
        return killed

    # --- clock -------------------------------------------------------------------------------------
    def _runners(self) -> list[Client]:
        return [c for c in self.clients.values() if c.stream and isinstance(c.stream[0], _Kernel)]

    def _priority(self, c: Client) -> int:
        """The priority the scheduler sees: the declared one, or one class for all with priorities off."""
        return c.spec.priority if self.priorities else 0

    def _runner(self, c: Client) -> Runner:
        """The context as the MPS rate model sees it: under its grant (quota group), which shares one share."""
        return Runner(key=c.id, op=c.stream[0].op, priority=self._priority(c), mps_pct=c.spec.mps_pct,
                      share=c.spec.compute_share, soft=c.spec.soft_cap, spill=self.memory.spill_fraction(c.id),
                      unit=c.spec.quota_group)

    def _candidates(self) -> dict[int, Candidate]:
        """Contexts as the time-slicer sees them (cached until a stream head or the client set changes): each
        under its grant (quota group), which takes turns and is charged its whole share as one."""
        if self._cands is None:
            self._cands = {c.id: Candidate(c.id, self._priority(c), c.spec.compute_share, c.spec.soft_cap,
                                           bool(c.stream) and type(c.stream[0]) is _Kernel, c.spec.quota_group)
                           for c in self.clients.values() if c.lost is None}
        return self._cands

    def _current(self, runners: list[Client]) -> tuple[dict[int, RunnerRate], tuple[float, ...], tuple[float, float]]:
        """Rates of every client with a kernel queued, the device's activity, and its (SM clock MHz, power W)
        until the next event."""
        slicer = self._slicer
        running = slicer.running(self._candidates()) if slicer is not None else None
        key = (tuple((c.id, c.stream[0].op) for c in runners), running, slicer is not None and slicer.switching)
        segment = self._segments.get(key)
        if segment is None:
            if slicer is None:
                rates = share_concurrent(self.perf, [self._runner(c) for c in runners])
                device = total_activity([r.activity for r in rates.values()])
            else:
                rates = {c.id: (solo_rate if c.id == running else stalled)(self.perf, self._runner(c))
                         for c in runners}
                device = total_activity([r.activity for r in rates.values()])
                if slicer.switching:
                    device = Activity(gr_engine_active=1.0)  # the engine is busy saving/restoring contexts
            if len(self._segments) > _SEGMENT_CACHE:
                self._segments.clear()
            segment = self._segments[key] = (rates, tuple(getattr(device, f) for f in ACTIVITY_FIELDS),
                                             self._board_state(runners, rates))
        return segment

    def _board_state(self, runners: list[Client], rates: dict[int, RunnerRate]) -> tuple[float, float]:
        """(SM clock MHz, power W) from the power demand of the kernels executing (simgpu.perf.power): each
        running kernel's sustained demand on its SMs, weighted by how busy it keeps them."""
        demand = 0.0
        for c in runners:
            rr = rates[c.id]
            if rr.busy > 0:
                sms = self.perf.visible_sms(c.spec.mps_pct) if self.mode == "mps" else None
                demand += self.perf.power_demand(c.stream[0].op, sms) * rr.busy
        return self.perf.board(demand)

    def next_event(self) -> float | None:
        """Virtual time of the next kernel completion, host-gap end or scheduling decision."""
        cands = None
        best = None
        if self._slicer is not None:
            cands = self._candidates()
            self._slicer.schedule(self.now, cands)
            best = self._slicer.next_event(self.now, cands)
        runners = self._runners()
        rates = self._current(runners)[0] if runners else {}
        for client in self.clients.values():
            if not client.stream:
                continue
            head = client.stream[0]
            if isinstance(head, _HostGap):
                t = self.now + head.remaining
            else:
                rate = rates[client.id].rate
                if rate <= 0:
                    continue
                t = self.now + head.work / rate
            best = t if best is None else min(best, t)
        return best

    def run_until(self, t: float) -> set[int]:
        """Advance virtual time to t; returns the clients whose streams drained on the way."""
        drained: set[int] = set()
        while True:
            nxt = self.next_event()
            stop = t if nxt is None or nxt > t else nxt
            self._step(stop - self.now, drained)
            self.now = max(self.now, stop)
            if stop >= t:
                if self._slicer is not None:
                    self._slicer.schedule(self.now, self._candidates())
                return drained

    def advance(self, dt: float) -> set[int]:
        return self.run_until(self.now + dt)

    def run_until_idle(self, cids: Iterable[int] | None = None, limit_s: float = 1e9) -> float:
        """Advance until the given clients (default all) have nothing queued; returns the virtual time."""
        watch = set(self.clients if cids is None else cids)
        deadline = self.now + limit_s
        drained: set[int] = set()
        while any(self.clients[c].stream for c in watch if c in self.clients):
            nxt = self.next_event()
            if nxt is None or nxt > deadline:
                raise SimgpuError("work did not finish within the time limit", field="limit_s")
            self._step(nxt - self.now, drained)
            self.now = max(self.now, nxt)
        if self._slicer is not None:
            self._slicer.schedule(self.now, self._candidates())
        return self.now

    def _step(self, dt: float, drained: set[int]) -> None:
        if dt < 0:
            return
        runners = self._runners()
        if runners or self._slicer is not None:
            rates, activity, board = self._current(runners)
        else:
            rates, activity, board = {}, (), self._idle_board
        self._board = board
        if dt > 0:
            if activity:
                acc = self._activity_s
                for k, value in enumerate(activity):
                    acc[k] += value * dt
            self._clock_mhz_s += board[0] * dt
            self._energy_j += board[1] * dt
        slicer = self._slicer
        capped = slicer.cooldown if slicer is not None else None
        if slicer is not None:
            slicer.advance(dt, self._candidates())
        for client in list(self.clients.values()):
            if not client.stream:
                continue
            head = client.stream[0]
            if isinstance(head, _HostGap):
                head.remaining -= dt
                if head.remaining <= 1e-12:
                    client.stream.popleft()
                    self._cands = None
            else:
                rr = rates[client.id]
                totals = client.totals
                if rr.rate <= 0.0:
                    # waiting: for its slice (interference: counts as busy, so it shows as slowdown), or
                    # out its own hard compute share's cool-down (alone it would wait the same: not busy)
                    unit = client.id if client.spec.quota_group is None else client.spec.quota_group
                    if client.spec.soft_cap or not (capped and capped.get(unit, 0.0) > self.now + 1e-12):
                        totals.busy_s += dt
                    continue
                totals.busy_s += dt
                totals.solo_work_s += rr.progress * dt
                acc = client.activity_s
                for k, value in enumerate(rr.activity_tuple):
                    acc[k] += value * dt
                left = head.work - rr.rate * dt
                if left <= _DONE_EPS:
                    done = head.count
                    client.stream.popleft()
                    if not client.stream or type(client.stream[0]) is not _Kernel:
                        self._cands = None
                else:
                    unfinished = math.ceil(left - _DONE_EPS)
                    done = head.count - unfinished
                    head.count, head.remaining = unfinished, left - (unfinished - 1)
                client.queued -= done
                totals.kernels_done += done
            if not client.stream:
                client.drained_at = self.now + dt
                drained.add(client.id)

    # --- views -------------------------------------------------------------------------------------
    def usage(self, cid: int) -> dict[str, Any]:
        client = self.clients.get(cid)
        if client is None:
            raise SimgpuError(f"no such context {cid} on {self.uuid}", field="context")
        mem = self.memory.usage(cid)
        return {"device_bytes": mem.device_bytes, "host_bytes": mem.host_bytes, "quota_bytes": mem.quota,
                "launched": client.launched, "completed": client.totals.kernels_done,
                "pending": client.pending, "alive": client.alive, "lost_reason": client.lost or ""}

    def totals(self) -> Totals:
        clients = {}
        for cid, c in self.clients.items():
            totals = c.totals.copy()
            totals.activity = Activity(*c.activity_s)
            clients[cid] = totals
        return Totals(at=self.now, activity=Activity(*self._activity_s), clients=clients,
                      energy_j=self._energy_j, clock_mhz_s=self._clock_mhz_s)

    def counters(self, since: Totals) -> DeviceCounters:
        """DCGM-style counters over [since.at, now]."""
        return window(since, self.totals(), fb_total=self.memory.total, fb_used=self.memory.device_used,
                      client_fb={cid: self.memory.usage(cid).device_bytes for cid in self.clients},
                      board=self._board)
