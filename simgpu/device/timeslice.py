"""Time-slicing, slice by slice: one context owns the device at a time.

The structure is simgpu.perf's time-slice model (and the measured H100 behaviour): a context keeps the
device until its slice ends (`timeslice_s`, ~2.09 ms) and is then preempted if another context has work
(cost: a context switch plus saving and restoring every SM's registers and shared memory through DRAM),
or until it runs out of work (a cheaper yield: the switch alone). Contexts with many small kernels
and host gaps therefore pay a switch per burst: the heavy loss measured for small kernels.

On top of the hardware:
- priorities (HAMi's CUDA_TASK_PRIORITY, AntMan's guarantee jobs): a lower-priority context only gets
  the device when no higher-priority one has work, and is preempted as soon as one has;
- compute shares (Gaia / HAMi-core's SM limit): after running for r seconds a capped context waits
  r * (1/share - 1) before it may run again, so it never exceeds its share over time. A soft cap waives
  the wait while no other context wants the device (Gaia's soft limit uses idle capacity).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

_EPS = 1e-12


class Candidate(NamedTuple):
    """A context as the slicer sees it at one instant."""

    cid: int
    priority: int
    share: float | None  # compute share in (0, 1], None = uncapped
    soft: bool
    has_work: bool  # a kernel at the head of its stream


@dataclass
class TimeSlicer:
    slice_s: float
    switch_s: float  # yield: a context switch
    preempt_s: float  # preemption: switch + SM state save/restore
    loaded: int | None = None  # the context resident on the device (the last one that ran)
    active: bool = False  # `loaded` is in its slice (not idle, not cooling down)
    slice_left: float = 0.0
    switching_to: int | None = None
    switch_left: float = 0.0
    ran_s: float = 0.0  # how long `loaded` has run since it last got the device
    cooldown: dict[int, float] = field(default_factory=dict)  # cid -> virtual time it may run again

    @property
    def switching(self) -> bool:
        return self.switching_to is not None

    def running(self, cands: dict[int, Candidate]) -> int | None:
        """The context whose kernel progresses right now (None during a switch or when idle)."""
        if self.switching or not self.active or self.loaded is None:
            return None
        cand = cands.get(self.loaded)
        return self.loaded if cand is not None and cand.has_work else None

    def advance(self, dt: float, cands: dict[int, Candidate]) -> None:
        if self.switching:
            self.switch_left -= dt
        elif self.running(cands) is not None:
            self.slice_left -= dt
            self.ran_s += dt

    def next_event(self, now: float, cands: dict[int, Candidate]) -> float | None:
        times = []
        if self.switching:
            times.append(now + max(0.0, self.switch_left))
        elif self.running(cands) is not None:
            times.append(now + max(0.0, self.slice_left))
        times += [t for cid, t in self.cooldown.items() if t > now and cid in cands and cands[cid].has_work]
        return min(times) if times else None

    def forget(self, cid: int) -> None:
        """A context closed or died."""
        self.cooldown.pop(cid, None)
        if self.loaded == cid:
            self.loaded, self.active = None, False
        if self.switching_to == cid:
            self.switching_to = None
            self.loaded, self.active = None, False

    # --- decisions ---------------------------------------------------------------------------------
    def _eligible(self, cand: Candidate, now: float, wanted: bool) -> bool:
        if not cand.has_work:
            return False
        if self.cooldown.get(cand.cid, 0.0) <= now + _EPS:
            return True
        return cand.soft and not wanted  # a soft cap may use capacity nobody else wants

    def _pick(self, now: float, cands: Sequence[Candidate], after: int | None,
              contested: bool = False) -> Candidate | None:
        """Next context to run; soft-capped ones past their share only if nobody (incl. the current
        owner, `contested`) wants the device."""
        strict = [c for c in cands if self._eligible(c, now, wanted=True)]
        pool = strict or ([] if contested else [c for c in cands if self._eligible(c, now, wanted=False)])
        if not pool:
            return None
        best = min(c.priority for c in pool)
        pool = sorted((c for c in pool if c.priority == best), key=lambda c: c.cid)
        later = [c for c in pool if after is not None and c.cid > after]
        return (later or pool)[0]  # round robin within the best priority

    def _release(self, now: float, cands: dict[int, Candidate]) -> None:
        """`loaded` stops running: charge a capped context its cool-down."""
        cand = cands.get(self.loaded) if self.loaded is not None else None
        if self.active and cand is not None and cand.share is not None and cand.share < 1 and self.ran_s > 0:
            self.cooldown[cand.cid] = now + self.ran_s * (1.0 / cand.share - 1.0)
        self.active, self.ran_s = False, 0.0

    def _start(self, target: int, now: float, cands: dict[int, Candidate]) -> None:
        """Give the device to `target`: free if it is already loaded (or nothing is), else a switch
        (a preemption if the loaded context still has work)."""
        loaded = cands.get(self.loaded) if self.loaded is not None else None
        preempt = self.active and loaded is not None and loaded.has_work
        self._release(now, cands)
        if self.loaded is None or target == self.loaded:
            self.loaded, self.active, self.slice_left = target, True, self.slice_s
            return
        self.switching_to = target
        self.switch_left = self.preempt_s if preempt else self.switch_s

    def schedule(self, now: float, cands: dict[int, Candidate]) -> None:
        """Decide who owns the device at `now` (call after every step and every new launch)."""
        if self.switching:
            if self.switch_left > _EPS:
                return
            self.loaded, self.switching_to, self.switch_left = self.switching_to, None, 0.0
            self.active, self.slice_left, self.ran_s = True, self.slice_s, 0.0
        cur = cands.get(self.loaded) if self.loaded is not None else None
        others = [c for c in cands.values() if c.cid != self.loaded]
        if self.active and cur is not None and cur.has_work:
            higher = [c for c in others if c.priority < cur.priority]
            pick = self._pick(now, higher, self.loaded) if higher else None
            if pick is not None and self._eligible(pick, now, wanted=True):
                self._start(pick.cid, now, cands)
                return
            if self.slice_left > _EPS:
                return
            rival = self._pick(now, [c for c in others if c.priority <= cur.priority], self.loaded, contested=True)
            if rival is not None:
                self._start(rival.cid, now, cands)
            elif cur.share is not None and cur.share < 1 and not (cur.soft and not any(c.has_work for c in others)):
                self._release(now, cands)  # share used up: the device idles until the cool-down ends
            else:
                self.slice_left = self.slice_s
            return
        if self.active:
            self._release(now, cands)  # the owner ran out of work
        nxt = self._pick(now, list(cands.values()), self.loaded)
        if nxt is not None:
            self._start(nxt.cid, now, cands)
