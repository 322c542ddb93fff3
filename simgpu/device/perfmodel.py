"""A cached view of simgpu.perf for one device spec.

The sharing engine asks the same few questions thousands of times (cost of op X on N SMs, rates of a
set of co-runners), so answers are memoised per device. The perf module is injectable so the engine
can be tested against a tiny fake model.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_CACHE_LIMIT = 20_000


class PerfModel:
    def __init__(self, spec: Any, perf: ModuleType | Any | None = None):
        self.spec = spec
        self.perf = perf if perf is not None else importlib.import_module("simgpu.perf")
        self._costs: dict[tuple, Any] = {}
        self._colocated: dict[tuple, tuple[float, ...]] = {}
        self._power: dict[tuple, float] = {}

    def visible_sms(self, pct: float | None) -> int:
        """SMs a client sees under an MPS active-thread percentage (None or 100 = all of them)."""
        if pct is None or pct >= 100:
            return self.spec.sms
        return int(self.perf.mps_visible_sms(self.spec, pct))

    def cost(self, op: Any, sms: int | None = None) -> Any:
        """OpCost of op alone on the device (or on `sms` of its SMs)."""
        key = (op, sms)
        hit = self._costs.get(key)
        if hit is None:
            if len(self._costs) > _CACHE_LIMIT:
                self._costs.clear()
            limit = None if sms is None or sms >= self.spec.sms else sms
            hit = self._costs[key] = self.perf.op_cost(self.spec, op, sm_count=limit)
        return hit

    def power_demand(self, op: Any, sms: int | None = None) -> float:
        """Sustained power demand of op on the device (or `sms` of its SMs), simgpu.perf.power's units."""
        key = (op, sms)
        hit = self._power.get(key)
        if hit is None:
            fn = getattr(self.perf, "power_demand", None)  # a fake perf module may not model power
            if len(self._power) > _CACHE_LIMIT:
                self._power.clear()
            limit = None if sms is None or sms >= self.spec.sms else sms
            hit = self._power[key] = float(fn(self.spec, op, limit)) if fn is not None else 0.0
        return hit

    def board(self, demand: float) -> tuple[float, float]:
        """(SM clock MHz, dynamic power W) for a total power demand (simgpu.perf.board_power)."""
        fn = getattr(self.perf, "board_power", None)
        if fn is None:
            return float(getattr(self.spec, "boost_mhz", 0.0)), 0.0
        mhz, watts = fn(self.spec, demand)
        return float(mhz), float(watts)

    def colocate(self, mode: str, loads: tuple[tuple[Any, float | None], ...]) -> tuple[float, ...]:
        """Iterations/s of each co-runner looping on its op, from the perf model's sharing model."""
        hit = self._colocated.get((mode, loads))
        if hit is None:
            if len(self._colocated) > _CACHE_LIMIT:
                self._colocated.clear()
            clients = [self.perf.ClientLoad(op=op, mps_pct=pct) for op, pct in loads]
            hit = tuple(float(r) for r in self.perf.colocate(self.spec, mode, clients))
            self._colocated[(mode, loads)] = hit
        return hit
