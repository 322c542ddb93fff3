"""The performance model's fitted constants, one set per GPU architecture (simgpu/data/arch.yaml), or
per GPU when a profile written by `simgpu calibrate` carries its own (simgpu.profile).

Everything else the model uses comes from the GPU's spec sheet (simgpu.catalog.GPUSpec)."""
from __future__ import annotations

from functools import cache
from importlib import resources

import pydantic
import yaml

from simgpu.errors import SimgpuError

LEGACY_CLOCK_HZ = 1.98e9  # the clock v1 profiles' launch_s was fitted at (Hopper boost)


class PerfParams(pydantic.BaseModel, frozen=True):
    """Constants of the model; simgpu/README.md gives the equation each one appears in."""

    model_config = pydantic.ConfigDict(extra="forbid")

    # GEMM kernel quality: fraction of the per-clock peak reached by the best (128x256) tile in steady
    # state, per dtype (library-dependent: e.g. cuBLAS int8 on Hopper uses the legacy mma path).
    tc_efficiency: dict[str, float]
    # Per-tile prologue + epilogue (pipeline fill, C write-back), in main-loop k-steps.
    tile_fill_ksteps: float = pydantic.Field(ge=0)
    # Efficiency loss of smaller CTA tiles: eff = 1 / (1 + penalty * (128/Tm + 128/Tn - 1.5)).
    small_tile_penalty: float = pydantic.Field(ge=0)
    # Slow-path efficiency when the contiguous dims (K, N) are only this many bytes aligned (< 16).
    misaligned_efficiency: dict[int, float]
    # Dynamic power a whole-GPU compute-bound kernel would draw at the datasheet peak clock (peak_mhz),
    # relative to what the power limit sustains: f = min(f_max, f_peak * demand**(-1/3)).
    power_demand: dict[str, float]
    # Short kernels may draw more than the sustained budget: headroom = 1 + (burst - 1) * w / (w + t).
    burst_headroom: float = pydantic.Field(ge=1)
    burst_window_s: float = pydantic.Field(gt=0)
    # DRAM: achievable fraction of the datasheet bandwidth for a copy; for GEMM operand streaming;
    # and what one SM can pull on its own (Little's law), combined as a soft minimum (p = 3).
    dram_efficiency: float = pydantic.Field(gt=0, le=1)
    gemm_dram_efficiency: float = pydantic.Field(gt=0, le=1)
    sm_bandwidth_bytes_per_s: float = pydantic.Field(gt=0)
    # Share of a streaming kernel's unloaded memory latency spent in the SM/L2 clock domain (so a
    # streamer next to a GEMM that pulls the clock down under the power limit streams less per SM).
    stream_latency_on_chip: float = pydantic.Field(default=0.0, ge=0, le=1)
    # GPU side: the fixed cost of one kernel (launch, CTA rasterisation, ramp), in SM clock cycles, so
    # that a kernel's own minimum time follows the GPU's clock.
    launch_cycles: float = pydantic.Field(ge=0)
    # Host side (a property of the machine's CPU, driver and framework, not of the GPU; measured per host
    # by `simgpu calibrate --host`, simgpu/calibrate_host.py), per path ("default", a dtype, "copy"):
    # an op timed with CUDA events right after a synchronise takes
    #   max(host_floor + launch_cycles / f, host_latency + kernel)
    # -- the end event waits for the CPU's whole call (floor); the kernel starts after the dispatch and
    # the launch latency (latency). host_dispatch_s: CPU time to issue one op back to back (loops).
    host_floor_s: dict[str, float]
    host_latency_s: dict[str, float]
    host_dispatch_s: float = pydantic.Field(ge=0)
    # Time-slicing: slice length and context-switch cost (measured), and the per-SM state a preempted
    # kernel saves and restores through DRAM (register file + shared memory: an architecture fact).
    timeslice_s: float = pydantic.Field(gt=0)
    context_switch_s: float = pydantic.Field(ge=0)
    sm_state_bytes: int = pydantic.Field(ge=0)
    # MPS: SMs are granted in units of `mps_sm_granularity` (a TPC), at least `mps_min_sms`.
    mps_sm_granularity: int = pydantic.Field(ge=1)
    mps_min_sms: int = pydantic.Field(ge=1)
    # Where each constant came from (fitted on which GPU and data, measured, spec).
    sources: dict[str, str] = {}

    def efficiency(self, dtype: str) -> float:
        return self.tc_efficiency.get(dtype, self.tc_efficiency.get("bf16", 0.85))

    def power(self, dtype: str) -> float:
        return self.power_demand.get(dtype, self.power_demand.get("bf16", 1.0))

    def floor(self, key: str) -> float:
        """Host floor of an event-timed op on path `key` (a dtype, or "copy")."""
        return self.host_floor_s.get(key, self.host_floor_s.get("default", 0.0))

    def latency(self, key: str) -> float:
        """Host latency (start event to kernel start) of an op on path `key`."""
        return self.host_latency_s.get(key, self.host_latency_s.get("default", 0.0))

    def launch_seconds(self, mhz: float) -> float:
        """A kernel's fixed GPU-side cost at SM clock `mhz`."""
        return self.launch_cycles / (mhz * 1e6)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _from_v1_constants(cls, data: object) -> object:
        """Profiles written before the host/GPU split carry `launch_s` (seconds) and `timing_floor_s` (the
        event time of a tiny op, host and kernel together, fitted on their own host): read them as
        cycles at the Hopper boost clock and as floors with the same latency for every path."""
        if not isinstance(data, dict) or "launch_s" not in data and "timing_floor_s" not in data:
            return data
        data = dict(data)
        launch = data.pop("launch_s", 2.5e-6)
        floors = data.pop("timing_floor_s", {"default": 30e-6})
        data.setdefault("launch_cycles", launch * LEGACY_CLOCK_HZ)
        data.setdefault("host_floor_s", {k: max(v - launch, 0.0) for k, v in floors.items()})
        data.setdefault("host_latency_s", {"default": data.get("host_dispatch_s", 13.3e-6)})
        return data


@cache
def _arch_table() -> dict[str, PerfParams]:
    doc = yaml.safe_load(resources.files("simgpu").joinpath("data", "arch.yaml").read_text())
    base = doc["base"]
    table: dict[str, PerfParams] = {}
    for arch, override in doc["arch"].items():
        merged = {**base, **(override or {})}
        try:
            table[arch] = PerfParams.model_validate(merged)
        except pydantic.ValidationError as err:
            raise SimgpuError(f"arch.yaml: {arch}: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}",
                              field="arch") from None
    return table


def arch_params(arch: str) -> PerfParams:
    table = _arch_table()
    if arch not in table:
        raise SimgpuError(f"no performance constants for architecture {arch!r}", field="arch",
                          allowed=sorted(table))
    return table[arch]


def params_for(gpu) -> PerfParams:
    """A fitted profile's own constants when it has them, else its architecture's."""
    own = getattr(gpu, "perf_params", None)
    if isinstance(own, PerfParams):
        return own
    return arch_params(gpu.arch)
