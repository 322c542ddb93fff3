"""DCGM-style counters for emulated devices, clients and whole GPUs, averaged over a time window.

The engine integrates activity over virtual time (cumulative Totals); a window is the difference of
two Totals divided by its length, exactly how DCGM's profiling fields are ratios over a sample
period. Framebuffer figures are instantaneous, as DCGM_FI_DEV_FB_USED/FREE are. SM clock and power are
window averages of what simgpu.perf's power model gives the kernels that ran (DCGM samples them; an
average over the window is what a sample period of that length would show).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

ACTIVITY_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "gr_engine_active")


@dataclass(frozen=True)
class Activity:
    """Instantaneous activity ratios (or, in Totals, their integrals over seconds)."""

    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    gr_engine_active: float = 0.0

    def __add__(self, other: Activity) -> Activity:
        return Activity(*(getattr(self, f) + getattr(other, f) for f in ACTIVITY_FIELDS))

    def __sub__(self, other: Activity) -> Activity:
        return Activity(*(getattr(self, f) - getattr(other, f) for f in ACTIVITY_FIELDS))

    def scaled(self, k: float) -> Activity:
        return Activity(*(getattr(self, f) * k for f in ACTIVITY_FIELDS))

    def clipped(self) -> Activity:
        """Ratios can't exceed 1 even when co-runners' contributions add up past it."""
        return Activity(*(min(1.0, max(0.0, getattr(self, f))) for f in ACTIVITY_FIELDS))


def total_activity(parts: Sequence[Activity]) -> Activity:
    out = Activity()
    for part in parts:
        out = out + part
    return out.clipped()


@dataclass
class ClientTotals:
    """Cumulative per-client figures: time with a kernel in flight, solo-seconds of work done, kernels."""

    busy_s: float = 0.0
    solo_work_s: float = 0.0
    kernels_done: int = 0
    activity: Activity = field(default_factory=Activity)

    def copy(self) -> ClientTotals:
        return replace(self)


@dataclass(frozen=True)
class Totals:
    at: float
    activity: Activity
    clients: Mapping[int, ClientTotals]
    energy_j: float = 0.0  # integral of the modelled power (W x s)
    clock_mhz_s: float = 0.0  # integral of the SM clock (MHz x s)


@dataclass(frozen=True)
class ClientCounters:
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    gr_engine_active: float
    fb_used: int
    kernels_done: int
    kernels_per_s: float
    progress_rate: float | None  # fraction of its solo speed while it had work (None: no work in window)
    slowdown: float | None  # 1 / progress_rate: how much longer its kernels took than alone
    busy_s: float = 0.0  # time in the window with a kernel queued (the progress rate's denominator)
    solo_work_s: float = 0.0  # what that time would have taken alone


@dataclass(frozen=True)
class DeviceCounters:
    window_s: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    gr_engine_active: float
    fb_total: int
    fb_used: int
    clients: Mapping[int, ClientCounters] = field(default_factory=dict)
    sm_clock_mhz: float = 0.0  # average SM clock over the window
    power_w: float = 0.0  # average modelled power over the window

    @property
    def fb_free(self) -> int:
        return self.fb_total - self.fb_used


def _average(integral: Activity, seconds: float) -> Activity:
    return integral.scaled(1.0 / seconds).clipped() if seconds > 0 else Activity()


def window(before: Totals, after: Totals, *, fb_total: int, fb_used: int,
           client_fb: Mapping[int, int] | None = None, board: tuple[float, float] = (0.0, 0.0)) -> DeviceCounters:
    """Counters over [before.at, after.at]; clients that left during the window are dropped. `board` is the
    current (SM clock MHz, power W), reported for an empty window (a scrape right at startup)."""
    span = after.at - before.at
    device = _average(after.activity - before.activity, span)
    clients: dict[int, ClientCounters] = {}
    for cid, now in after.clients.items():
        then = before.clients.get(cid, ClientTotals())
        busy = now.busy_s - then.busy_s
        work = now.solo_work_s - then.solo_work_s
        act = _average(now.activity - then.activity, span)
        done = now.kernels_done - then.kernels_done
        rate = min(1.0, work / busy) if busy > 1e-12 else None
        clients[cid] = ClientCounters(
            **{f: getattr(act, f) for f in ACTIVITY_FIELDS},
            fb_used=(client_fb or {}).get(cid, 0),
            kernels_done=done,
            kernels_per_s=done / span if span > 0 else 0.0,
            progress_rate=rate,
            slowdown=(1.0 / rate) if rate else None,
            busy_s=max(0.0, busy),
            solo_work_s=max(0.0, min(work, busy)),
        )
    if span > 0:
        mhz = max(0.0, (after.clock_mhz_s - before.clock_mhz_s) / span)
        watts = max(0.0, (after.energy_j - before.energy_j) / span)
    else:
        mhz, watts = board
    return DeviceCounters(window_s=span, **{f: getattr(device, f) for f in ACTIVITY_FIELDS},
                          fb_total=fb_total, fb_used=fb_used, clients=clients, sm_clock_mhz=mhz, power_w=watts)


def combine(parts: Sequence[tuple[DeviceCounters, float]]) -> DeviceCounters:
    """A whole GPU from its MIG instances: activity and SM clock weighted by each instance's share of the
    SMs (weights), framebuffer and power summed. Client ids must be unique across parts."""
    weight = sum(w for _, w in parts) or 1.0
    avg = {f: sum(getattr(c, f) * w for c, w in parts) / weight for f in ACTIVITY_FIELDS}
    clients: dict[int, ClientCounters] = {}
    for c, _ in parts:
        clients.update(c.clients)
    return DeviceCounters(
        window_s=max((c.window_s for c, _ in parts), default=0.0),
        **{f: min(1.0, v) for f, v in avg.items()},
        fb_total=sum(c.fb_total for c, _ in parts),
        fb_used=sum(c.fb_used for c, _ in parts),
        clients=clients,
        sm_clock_mhz=sum(c.sm_clock_mhz * w for c, w in parts) / weight,
        power_w=sum(c.power_w for c, _ in parts),
    )


__all__ = [
    "ACTIVITY_FIELDS", "Activity", "ClientCounters", "ClientTotals", "DeviceCounters", "Totals",
    "combine", "total_activity", "window",
]
