"""Predicted slowdown of the pods that share one GPU, for the QoS filter (docs/qos.md).

A pod's slowdown is its speed alone *with its own share and cap* over its speed beside its co-runners: a pod
that asked for 0.3 GPU and keeps it busy 30% of the time alone is not "3.3x slower than a whole GPU"; it is
slowed only while its co-runners keep the GPU from it when it has work. The node daemon measures the same
ratio (its busy time over the time the same work takes alone, its own cap's waits not counted busy:
`fgpu_pod_slowdown`), and the timeline simulator scores with it.

Each pod is a `Tenant`: its duty cycle (busy fraction alone: `fgpu.io/duty-cycle`, else its share, the most
its cap lets it use) and whether it is high priority. simgpu runs high-priority work first (HAMi's
CUDA_TASK_PRIORITY), so a pod is slowed

* by co-runners of its own or a higher priority as equals: simgpu's co-location model for the GPU and
  sharing mode (`interference.InterferenceModel`: time-slicing round robin, or MPS running kernels
  concurrently), over the random set of them active at once;
* by lower-priority co-runners only through preemption: when it gets work while one of them holds the GPU,
  time-slicing pays a context switch and the SMs' state through DRAM (simgpu's own switch cost) before its
  burst runs; MPS runs it at once, losing simgpu's priority-interference fraction while they run.

MIG instances are isolated (no co-runner slows a pod on its own instance); whole GPUs have no co-runners.
Prices are memoised by (GPU model, sharing mode, tenant multiset): trace shares and live pods repeat a few
shapes, so a decision mostly reads the memo.

The model is wrong by up to `MODEL_ERROR` on what co-location adds (simgpu's held-out co-location checks), so
the filter prefers GPUs where a bound holds even with that error (`slo_guard.margin_first`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .interference import InterferenceModel, SharingWorkload
from .model import MILLI, Request

#: Engine modes of a GPU's sharing mode (simgpu.device.node.ENGINE_MODE): fractional shares time-slice.
ENGINE_OF = {"fractional": "timeslice", "timeSlicing": "timeslice", "mps": "mps"}
#: simgpu's cost to a high-priority MPS client of lower-priority blocks draining (sharing.PRIORITY_INTERFERENCE).
_MPS_PRIORITY_LOSS = 0.03
_BATCH = 4  # ops per burst of the representative loop (interference.ClientLoad's default)
#: The largest under-prediction of a co-located rate in simgpu's co-location checks it was not fitted on
#: (predicted / measured - 1 over 132 H100 and H200 time-slicing and MPS cases: the max of
#: bench/data/colocation_residuals.json, which bench/simgpu_fidelity.py --json writes; a test keeps them equal).
#: A slowdown s is then at worst 1 + (s - 1)(1 + MODEL_ERROR): what co-location adds, that much larger.
MODEL_ERROR = 0.35341


@dataclass(frozen=True, slots=True, order=True)
class Tenant:
    """One pod on a GPU as the model sees it."""

    duty: float
    high: bool


def tenant_of(request: Request) -> Tenant:
    """A request as a co-runner: its duty cycle (its own, else its share) and priority class (0 = high)."""
    return Tenant(round(request.duty or request.gpu_milli / MILLI, 6), request.priority == 0)


class SloModel:
    """Slowdowns of co-located pods from simgpu's co-location model, memoised."""

    def __init__(self, workload: SharingWorkload | None = None, error: float = MODEL_ERROR):
        base = workload or SharingWorkload()
        self.error = error  # the allowance margin_first keeps for the model's error (0: trust it blindly)
        self.models = {mode: InterferenceModel(SharingWorkload(base.gemm, base.dtype, None, mode, base.stand_ins))
                       for mode in ("timeslice", "mps")}
        self._memo: dict[tuple, tuple[float, ...]] = {}
        self._preempt: dict[str, float] = {}

    def modelled(self, gpu_model: str) -> bool:
        return self.models["timeslice"].modelled(gpu_model)

    def slowdowns(self, gpu_model: str, sharing: str, tenants: Sequence[Tenant]) -> tuple[float, ...]:
        """Each tenant's predicted slowdown (>= 1), in the order given; all 1.0 on a MIG instance, alone, or on
        a GPU simgpu does not model."""
        order = sorted(range(len(tenants)), key=lambda i: tenants[i])
        key = (gpu_model, sharing, tuple(tenants[i] for i in order))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self.price(gpu_model, sharing, key[2])
        out = [0.0] * len(tenants)
        for rank, i in enumerate(order):
            out[i] = hit[rank]
        return tuple(out)

    def price(self, gpu_model: str, sharing: str, tenants: Sequence[Tenant]) -> tuple[float, ...]:
        """The uncached model (the memo's ground truth)."""
        mode = ENGINE_OF.get(sharing)
        if mode is None or len(tenants) < 2 or not self.modelled(gpu_model):
            return (1.0,) * len(tenants)
        interference = self.models[mode]
        out = []
        for i, me in enumerate(tenants):
            others = [t for j, t in enumerate(tenants) if j != i]
            equal = [t.duty for t in others if t.high or not me.high]
            lower = [t.duty for t in others if me.high and not t.high]
            factor = interference.factor(gpu_model, equal)
            if lower:
                busy = 1.0
                for d in lower:
                    busy *= 1.0 - min(1.0, d)
                p_lower = 1.0 - busy  # a lower-priority co-runner holds the GPU when my burst begins
                cost = self.preempt_fraction(gpu_model) if mode == "timeslice" else _MPS_PRIORITY_LOSS / (
                    1 - _MPS_PRIORITY_LOSS)
                factor *= 1.0 + p_lower * cost
            out.append(max(1.0, factor))
        return tuple(out)

    def preempt_fraction(self, gpu_model: str) -> float:
        """Time-slicing: a preemption's cost (simgpu's context switch plus saving and restoring every SM's
        state through DRAM) as a fraction of one burst of the representative loop alone."""
        hit = self._preempt.get(gpu_model)
        if hit is None:
            from simgpu.perf.params import params_for

            interference = self.models["timeslice"]
            gpu = interference.gpu_for(gpu_model)
            params = params_for(gpu)
            state = 2.0 * gpu.sms * params.sm_state_bytes / (gpu.mem_bw_bytes_per_s * params.dram_efficiency)
            burst = _BATCH / interference.rate(gpu_model, 1)
            hit = self._preempt[gpu_model] = (params.context_switch_s + state) / burst
        return hit


_DEFAULT: SloModel | None = None


def default_model() -> SloModel:
    """One model per process: its memo is shared by every decision (pure: prices depend on arguments only)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = SloModel()
    return _DEFAULT
