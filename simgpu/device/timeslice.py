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

The unit that takes turns, is charged its share and waits out its cool-down is the grant (`Candidate.unit`:
one pod's container), not the context: HAMi-core's SM limit is one token bucket per container, whatever
number of contexts its processes open. A grant's contexts take its turns in rotation (one that runs dry
mid-turn hands the rest to the next; that switch is the grant's own time), so a workload that
opens N contexts on one grant (or on a stolen token) gets the one turn and the one share that grant has,
and its neighbour waits exactly as long as next to a single context. Had each context its own turn and
its own split share, the grant's contexts ran back to back and then all cooled down at once: the
neighbour waited through N turns and, hard-capped itself, could not use the idle gap (~66% of its
throughput with 5 contexts on the other grant).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
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
    unit: Hashable = None  # the grant it belongs to (None: a unit of its own); `share` is the grant's


def unit_of(cand: Candidate) -> Hashable:
    """The key a context is scheduled and charged under: its grant, or itself."""
    return cand.cid if cand.unit is None else cand.unit


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
    handoff: bool = False  # the switch passes the unit's turn to its next context (rest of the slice)
    ran_s: float = 0.0  # how long `loaded`'s unit has run since it last got the device
    cooldown: dict[Hashable, float] = field(default_factory=dict)  # unit -> virtual time it may run again
    last: dict[Hashable, int] = field(default_factory=dict)  # unit -> its context that ran last (rotation)

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
            if self.handoff:  # a switch between a unit's own contexts is its own time
                self.slice_left -= dt
                self.ran_s += dt
        elif self.running(cands) is not None:
            self.slice_left -= dt
            self.ran_s += dt

    def next_event(self, now: float, cands: dict[int, Candidate]) -> float | None:
        times = []
        if self.switching:
            times.append(now + max(0.0, self.switch_left))
        elif self.running(cands) is not None:
            times.append(now + max(0.0, self.slice_left))
        if self.cooldown:
            waiting = {unit_of(c) for c in cands.values() if c.has_work}
            times += [t for unit, t in self.cooldown.items() if t > now and unit in waiting]
        return min(times) if times else None

    def forget(self, cid: int) -> None:
        """A context closed or died (its grant's cool-down stays with the grant's other contexts)."""
        self.cooldown.pop(cid, None)
        for unit in [u for u, c in self.last.items() if c == cid]:
            del self.last[unit]
        if self.loaded == cid:
            self.loaded, self.active = None, False
        if self.switching_to == cid:
            self.switching_to, self.handoff = None, False
            self.loaded, self.active = None, False

    # --- decisions ---------------------------------------------------------------------------------
    def _eligible(self, cand: Candidate, now: float, wanted: bool) -> bool:
        if not cand.has_work:
            return False
        if self.cooldown.get(unit_of(cand), 0.0) <= now + _EPS:
            return True
        return cand.soft and not wanted  # a soft cap may use capacity nobody else wants

    def _pick(self, now: float, cands: Sequence[Candidate], after: Candidate | None,
              contested: bool = False) -> Candidate | None:
        """Next context to run: round robin over the units of the best priority (each ranked by its lowest
        context id), then over that unit's contexts; soft-capped units past their share only if nobody
        (incl. the current owner, `contested`) wants the device."""
        strict = [c for c in cands if self._eligible(c, now, wanted=True)]
        pool = strict or ([] if contested else [c for c in cands if self._eligible(c, now, wanted=False)])
        if not pool:
            return None
        best = min(c.priority for c in pool)
        units: dict[Hashable, list[Candidate]] = {}
        for c in sorted((c for c in pool if c.priority == best), key=lambda c: c.cid):
            units.setdefault(unit_of(c), []).append(c)
        order = sorted(units.values(), key=lambda members: members[0].cid)
        later = [m for m in order if after is not None and m[0].cid > after.cid]
        members = (later or order)[0]
        prev = self.last.get(unit_of(members[0]))
        return next((c for c in members if prev is not None and c.cid > prev), members[0])

    def _unit_head(self, cands: dict[int, Candidate]) -> Candidate | None:
        """The loaded unit's lowest-id context (where the round robin over units resumes after it)."""
        cur = cands.get(self.loaded) if self.loaded is not None else None
        if cur is None:
            return None
        return min((c for c in cands.values() if unit_of(c) == unit_of(cur)), key=lambda c: c.cid)

    def _release(self, now: float, cands: dict[int, Candidate]) -> None:
        """`loaded` stops running: charge a capped unit its cool-down."""
        cand = cands.get(self.loaded) if self.loaded is not None else None
        if self.active and cand is not None and cand.share is not None and cand.share < 1 and self.ran_s > 0:
            if len(self.cooldown) > 64:  # grants come and go: keep only cool-downs still running
                self.cooldown = {u: t for u, t in self.cooldown.items() if t > now}
            self.cooldown[unit_of(cand)] = now + self.ran_s * (1.0 / cand.share - 1.0)
        self.active, self.ran_s = False, 0.0

    def _start(self, target: int, now: float, cands: dict[int, Candidate]) -> None:
        """Give the device to `target`: free if it is already loaded (or nothing is), else a switch
        (a preemption if the loaded context still has work)."""
        loaded = cands.get(self.loaded) if self.loaded is not None else None
        preempt = self.active and loaded is not None and loaded.has_work
        self._release(now, cands)
        if target in cands:
            self.last[unit_of(cands[target])] = target
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
            if self.handoff:  # the unit's turn goes on with the rest of its slice
                self.active, self.handoff = True, False
            else:
                self.active, self.slice_left, self.ran_s = True, self.slice_s, 0.0
        cur = cands.get(self.loaded) if self.loaded is not None else None
        head = self._unit_head(cands)
        if self.active and cur is not None and cur.has_work:
            others = [c for c in cands.values() if unit_of(c) != unit_of(cur)]
            higher = [c for c in others if c.priority < cur.priority]
            pick = self._pick(now, higher, head) if higher else None
            if pick is not None and self._eligible(pick, now, wanted=True):
                self._start(pick.cid, now, cands)
                return
            if self.slice_left > _EPS:
                return
            rival = self._pick(now, [c for c in others if c.priority <= cur.priority], head, contested=True)
            sibling = self._pick(now, [c for c in cands.values() if unit_of(c) == unit_of(cur)], None)
            if rival is not None:
                self._start(rival.cid, now, cands)
            elif cur.share is not None and cur.share < 1 and not (cur.soft and not any(c.has_work for c in others)):
                self._release(now, cands)  # share used up: the device idles until the cool-down ends
            elif sibling is not None and sibling.cid != cur.cid:
                self._start(sibling.cid, now, cands)  # the unit's next context takes its next turn
            else:
                self.slice_left = self.slice_s
            return
        if self.active and cur is not None and self.slice_left > _EPS:
            sibling = self._pick(now, [c for c in cands.values() if unit_of(c) == unit_of(cur)], None)
            if sibling is not None:  # the owner ran out of work: its unit's next context has the rest of the turn
                self.last[unit_of(sibling)] = sibling.cid
                self.switching_to, self.switch_left, self.handoff, self.active = sibling.cid, self.switch_s, True, False
                return
        if self.active:
            self._release(now, cands)  # the owner ran out of work
        nxt = self._pick(now, list(cands.values()), head)
        if nxt is not None:
            self._start(nxt.cid, now, cands)
