"""Slowdown of GPU-sharing pods that share one physical GPU, priced by simgpu's performance model.

The trace says how much of a GPU each pod asked for (`gpu_milli`) but not what it runs, so the workload is
an assumption, held in `SharingWorkload` and passed in as a parameter:

* every sharing pod loops on one representative kernel (default: a 2048^3 GEMM in fp16, or fp32 on GPUs
  without fp16 tensor/FP16 support);
* a pod is *active* (looping on the GPU) a fraction `duty` of its time, independently of its co-runners;
  by default its duty cycle is its GPU share, gpu_milli / 1000 (a pod that asked for 0.3 GPU keeps the GPU
  busy 30% of the time when alone);
* co-runners time-slice the GPU (the default sharing mode of a GPU without MPS or MIG).

While pod i is active, the set of co-runners active with it is random (each j independently with
probability duty_j); its expected rate is the mean of simgpu's co-located rate over those sets, and its
slowdown for that stretch of time is solo rate / expected rate (>= 1, and exactly 1 alone on its GPU).
The timeline averages these factors over a pod's lifetime, weighted by time.

simgpu prices a set of co-runners in up to a few hundred milliseconds, so rates are memoised by (GPU, multiset
of active co-runners) -- with one representative op that multiset is just a count -- and factors by (GPU,
multiset of the co-runners' duty cycles).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from fgpu_operator.placement.model import MILLI

#: simgpu has no model for the trace's undisclosed GPUs; these stand in for them. The FGD simulator gives
#: G1/G2/G3 placeholder memory sizes of 10/20/30 GB (openb data README), so each gets the catalog GPU
#: nearest in memory class: G1 -> T4 (16 GB), G2 -> A10 (24 GB), G3 -> V100 32 GB.
STAND_INS: Mapping[str, str] = MappingProxyType({"G1": "T4", "G2": "A10", "G3": "V100M32"})


@dataclass(frozen=True)
class SharingWorkload:
    """What a sharing pod is assumed to run (the trace has no kernel mix)."""

    gemm: tuple[int, int, int] = (2048, 2048, 2048)
    dtype: str = "fp16"
    #: None: duty cycle = gpu_milli / 1000; a number in (0, 1]: the same duty cycle for every pod.
    duty: float | None = None
    mode: str = "timeslice"
    stand_ins: Mapping[str, str] = field(default_factory=lambda: dict(STAND_INS))

    def __post_init__(self) -> None:
        if self.duty is not None and not 0 < self.duty <= 1:
            raise ValueError(f"duty: {self.duty} is outside (0, 1] (allowed: a number in (0, 1], or None)")
        if len(self.gemm) != 3 or any(int(d) < 1 for d in self.gemm):
            raise ValueError(f"gemm: {self.gemm} (allowed: three positive integers m, n, k)")

    def duty_of(self, gpu_milli: int) -> float:
        return self.duty if self.duty is not None else gpu_milli / MILLI


class InterferenceModel:
    """Slowdown factors of co-located sharing pods; caches everything it asks simgpu."""

    def __init__(self, workload: SharingWorkload | None = None):
        self.workload = workload or SharingWorkload()
        self._specs: dict[str, object | None] = {}
        self._rates: dict[tuple[str, int], float] = {}
        self._factors: dict[tuple, float] = {}

    # --- GPUs ------------------------------------------------------------------------------------------
    def gpu_for(self, model: str):
        """simgpu's spec for a trace GPU model (via its stand-in), or None when simgpu has no such GPU."""
        if model not in self._specs:
            from simgpu.catalog import get_gpu
            from simgpu.errors import SimgpuError

            try:
                self._specs[model] = get_gpu(self.workload.stand_ins.get(model, model))
            except SimgpuError:
                self._specs[model] = None
        return self._specs[model]

    def modelled(self, model: str) -> bool:
        return self.gpu_for(model) is not None

    def _op(self, gpu):
        from simgpu.perf import GemmOp

        dtype = self.workload.dtype if self.workload.dtype in gpu.supported_dtypes() else "fp32"
        return GemmOp(*self.workload.gemm, dtype)

    def rate(self, model: str, clients: int) -> float:
        """Iterations/s of one of `clients` identical pods looping together on one GPU of `model`."""
        key = (model, clients)
        if key not in self._rates:
            from simgpu.perf import ClientLoad, colocate

            gpu = self.gpu_for(model)
            op = self._op(gpu)
            rates = colocate(gpu, self.workload.mode, [ClientLoad(op) for _ in range(clients)])
            self._rates[key] = sum(rates) / len(rates)  # identical clients: the mean is each one's rate
        return self._rates[key]

    # --- slowdown ----------------------------------------------------------------------------------------
    def factor(self, model: str, others: Sequence[float]) -> float:
        """Slowdown (>= 1) of a pod while active on a GPU of `model` whose co-runners have duty cycles
        `others`. 1.0 when alone or when simgpu has no model of this GPU (callers count those apart)."""
        if not others or not self.modelled(model):
            return 1.0
        key = (model, tuple(sorted(round(d, 6) for d in others)))
        hit = self._factors.get(key)
        if hit is None:
            active = active_count_distribution(key[1])
            expected = sum(p * self.rate(model, 1 + k) for k, p in enumerate(active) if p > 0)
            hit = self._factors[key] = max(1.0, self.rate(model, 1) / expected)
        return hit


def active_count_distribution(duties: Sequence[float]) -> list[float]:
    """P(k of the co-runners are active) when each is active independently with its duty cycle
    (the Poisson-binomial distribution, by dynamic programming)."""
    dist = [1.0]
    for d in duties:
        d = min(1.0, max(0.0, d))
        nxt = [0.0] * (len(dist) + 1)
        for k, p in enumerate(dist):
            nxt[k] += p * (1 - d)
            nxt[k + 1] += p * d
        dist = nxt
    return dist
