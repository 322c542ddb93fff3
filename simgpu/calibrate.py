"""Fit the performance model's per-GPU constants to measurements (`simgpu calibrate`).

The measurements have the shape of calibration/measure.py's output (and of what `measure()` in
simgpu/calibrate_measure.py writes): {"gemm": [{m, n, k, dtype, s}], "bandwidth": {copy_GBps_rw,
add_GBps_rw}, "timeslice": {"gemm_x1": [...], ...}, "mps": {"gemm_pct50": [...], ...}}.

Fitted on: the GEMM table, the copy/add bandwidths and the single-client loops (solo loops and MPS
percentage scaling). Multi-client co-location rates are *not* fitted: they are predicted from the
mechanism (slices, switches, FIFO SM sharing), which keeps them an honest check of the model.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from simgpu.errors import SimgpuError
from simgpu.perf.colocation import ClientLoad, colocate
from simgpu.perf.cost import op_cost
from simgpu.perf.ops import DTYPE_BYTES, CopyOp, ElementwiseOp, GemmOp
from simgpu.perf.params import PerfParams
from simgpu.profile import with_params

# The loops of calibration/measure.py's workers.
LOOP_OPS = {
    "gemm": GemmOp(8192, 8192, 8192, "bf16"),
    "gemm_small": GemmOp(1024, 1024, 1024, "bf16"),
    "stream": CopyOp(4 * 2**28),
}
COPY_BYTES = 4 * 2**30  # measure.py's bandwidth(): 1 Gi fp32 elements


@dataclass(frozen=True)
class Knob:
    """One fitted constant: how to read and write it in PerfParams, its bounds, and whether it is
    fitted in log space (positive scale constants)."""

    name: str
    get: Callable[[PerfParams], float]
    set: Callable[[dict, float], None]
    lo: float
    hi: float


def _field(name: str, lo: float, hi: float) -> Knob:
    def setter(d: dict, v: float) -> None:
        d[name] = v
    return Knob(name, lambda p: getattr(p, name), setter, lo, hi)


def _entry(field: str, keys: tuple, lo: float, hi: float) -> Knob:
    def setter(d: dict, v: float) -> None:
        d[field] = {**d[field], **{k: v for k in keys}}
    return Knob(f"{field}[{'/'.join(map(str, keys))}]", lambda p: getattr(p, field)[keys[0]], setter, lo, hi)


def knobs_for(measured_dtypes: set[str], host_measured: bool = False) -> list[Knob]:
    """The constants a calibration fits. Dtypes that were not measured keep their architecture values; the
    host's constants are fitted only where no measurement set carries its host's probe (`host`)."""
    tensor = tuple(d for d in ("fp16", "bf16", "tf32", "fp8") if d in measured_dtypes) or ("bf16",)
    knobs = [
        _entry("tc_efficiency", tensor + (("fp8",) if "fp8" not in tensor else ()), 0.3, 1.0),
        _field("tile_fill_ksteps", 0.0, 40.0),
        _field("small_tile_penalty", 0.1, 1.0),  # >= 0.1 keeps the tile order of NVIDIA's guide
        _entry("power_demand", ("bf16", "tf32", "int8", "fp8"), 0.5, 6.0),
        _field("burst_headroom", 1.0, 3.0),
        _field("burst_window_s", 1e-4, 0.5),
        _field("gemm_dram_efficiency", 0.2, 1.0),
        _field("dram_efficiency", 0.5, 1.0),
        _field("sm_bandwidth_bytes_per_s", 5e9, 500e9),
        _field("launch_cycles", 0.0, 40000.0),
    ]
    if not host_measured:
        knobs.append(_field("host_dispatch_s", 1e-6, 60e-6))
    if "fp16" in measured_dtypes:
        knobs.append(_entry("power_demand", ("fp16",), 0.5, 6.0))
    if "int8" in measured_dtypes:
        knobs.append(_entry("tc_efficiency", ("int8",), 0.1, 1.0))
    if "fp32" in measured_dtypes:
        knobs.append(_entry("tc_efficiency", ("fp32",), 0.1, 1.0))
    knobs.append(_entry("misaligned_efficiency", (8,), 0.02, 1.0))
    knobs.append(_entry("misaligned_efficiency", (4,), 0.02, 1.0))
    knobs.append(_entry("misaligned_efficiency", (2, 1), 0.02, 1.0))
    if not host_measured:
        knobs.append(_entry("host_floor_s", ("default",), 1e-6, 200e-6))
        knobs.append(_entry("host_latency_s", ("default",), 0.0, 100e-6))
    return knobs


def set_host(meas: dict) -> dict | None:
    """The host constants a measurement set carries (its `host` probe, simgpu/calibrate_host.py)."""
    host = meas.get("host")
    if isinstance(host, dict) and "host_floor_s" in host:
        from simgpu.profile import host_params
        return host_params(host)
    return None


def _apply(base: PerfParams, knobs: list[Knob], x: np.ndarray) -> PerfParams:
    data = base.model_dump()
    for knob, value in zip(knobs, x, strict=True):
        knob.set(data, float(value))
    return PerfParams.model_construct(**data)


def _rate(entries: list[dict]) -> float:
    return float(np.mean([e["rate_per_s"] for e in entries]))


def gemm_seconds(meas: dict) -> list[tuple[GemmOp, float]]:
    """Each GEMM of a set and its measured event time: the median over the set's passes where it has
    several (bench/simgpu_measure_floor.py), else its single median of 20."""
    passes = meas.get("passes", {})
    out = []
    for g in meas.get("gemm", []):
        op = GemmOp(int(g["m"]), int(g["n"]), int(g["k"]), g["dtype"])
        repeats = passes.get(f"{op.m}x{op.n}x{op.k} {op.dtype}")
        out.append((op, float(np.median(repeats)) if repeats else float(g["s"])))
    return out


def _cases(meas: dict) -> list[tuple[str, str, object, float]]:
    """(group, label, what to predict, measured value) for every fitted measurement."""
    cases: list[tuple[str, str, object, float]] = []
    for op, seconds in gemm_seconds(meas):
        cases.append(("gemm", f"{op.m}x{op.n}x{op.k} {op.dtype}", op, seconds))
    bw = meas.get("bandwidth", {})
    if "copy_GBps_rw" in bw:
        cases.append(("copy", "copy 4 GiB", CopyOp(COPY_BYTES), 2 * COPY_BYTES / (bw["copy_GBps_rw"] * 1e9)))
    if "add_GBps_rw" in bw:
        # measure.py's add is torch.add(x, y, out=z): two inputs read, one output written (3 x 4 GiB)
        cases.append(("copy", "add 3x4 GiB", ElementwiseOp(3 * COPY_BYTES, COPY_BYTES // 4, inputs=2),
                      3 * COPY_BYTES / (bw["add_GBps_rw"] * 1e9)))
    ts = meas.get("timeslice", {})
    for name, kind in (("gemm_x1", "gemm"), ("stream_x1", "stream"), ("small_x1", "gemm_small")):
        if ts.get(name):
            cases.append(("loop", name, ("timeslice", [ClientLoad(LOOP_OPS[kind])]), _rate(ts[name])))
    for name, entries in meas.get("mps", {}).items():
        if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
            continue
        kind, _, rest = name.partition("_pct")
        if kind in ("gemm", "stream") and rest.isdigit():
            load = ClientLoad(LOOP_OPS[kind], mps_pct=int(rest))
            cases.append(("mps", name, ("mps", [load]), _rate(entries)))
    return cases


def predict_case(gpu, what: object) -> float:
    """Predicted seconds (ops) or iterations/s (loops) for one fitted case."""
    if isinstance(what, tuple):
        mode, loads = what
        return colocate(gpu, mode, loads)[0]
    return op_cost(gpu, what).seconds


@dataclass(frozen=True)
class Fit:
    """A fit's result. `converged` is False when the evaluation budget ran out first: the constants are then
    wherever the optimiser stood, which depends on rounding (a BLAS kernel's, e.g. OPENBLAS_CORETYPE) and is
    not to be trusted; converged fits agree across kernels."""

    params: PerfParams
    report: dict
    converged: bool
    evaluations: int


def fit_params(meas: dict | list[dict], gpu, base: PerfParams, *, max_nfev: int = 400,
               starts: Sequence[PerfParams] = ()) -> tuple[PerfParams, dict]:
    """`fit(...)`'s params and report."""
    result = fit(meas, gpu, base, max_nfev=max_nfev, starts=starts)
    return result.params, result.report


def fit(meas: dict | list[dict], gpu, base: PerfParams, *, max_nfev: int = 400,
        starts: Sequence[PerfParams] = ()) -> Fit:
    """Least-squares fit (log errors, robust loss) of the constants in knobs_for() to `meas` (one
    measurement set, or several taken on the same GPU model), from `base` and from each of `starts`
    (e.g. a shipped profile of the same GPU): the objective has local minima (burst window vs DRAM
    efficiency), so the lowest-cost result wins. `max_nfev` bounds each start's evaluations (Jacobian
    steps not counted); the report is {group: median and max |error|, ...}."""
    from scipy.optimize import least_squares  # a heavy import, only needed here

    sets = meas if isinstance(meas, list) else [meas]
    cases = [(k, case) for k, one in enumerate(sets) for case in _cases(one)]
    hosts = [set_host(one) for one in sets]
    if len([c for _, c in cases if c[0] == "gemm"]) < 4:
        raise SimgpuError("need at least 4 GEMM measurements to fit", field="measurements.gemm")
    dtypes = {c[2].dtype for _, c in cases if isinstance(c[2], GemmOp)}
    missing = dtypes - set(DTYPE_BYTES)
    if missing:
        raise SimgpuError(f"unknown dtypes {sorted(missing)}", field="measurements.gemm.dtype", allowed=list(DTYPE_BYTES))
    knobs = knobs_for(dtypes, host_measured=all(h is not None for h in hosts))
    lo = np.array([k.lo for k in knobs])
    hi = np.array([k.hi for k in knobs])
    scale = hi - lo
    weights = {"gemm": 1.0, "copy": 2.0, "loop": 2.0, "mps": 2.0}

    def residuals(z: np.ndarray) -> np.ndarray:
        params = _apply(base, knobs, lo + z * scale)
        fitted = [with_params(gpu, params.model_copy(update=h) if h else params) for h in hosts]
        out = []
        for k, (group, _, what, measured) in cases:
            pred = predict_case(fitted[k], what)
            out.append(weights[group] * math.log(pred / measured))
        return np.array(out)

    best = None
    for start in (base, *starts):
        z0 = (np.clip(np.array([k.get(start) for k in knobs], dtype=float), lo, hi) - lo) / scale
        result = least_squares(residuals, z0, bounds=(0.0, 1.0), loss="soft_l1", f_scale=0.1,
                               diff_step=1e-3, max_nfev=max_nfev)
        if best is None or result.cost < best.cost:
            best = result
    params = _apply(base, knobs, lo + best.x * scale)
    if hosts[-1] is not None:  # the profile describes the machine of the last set measured
        params = params.model_copy(update=hosts[-1])
    params = PerfParams.model_validate(params.model_dump())
    report = evaluate(with_params(gpu, params), meas)
    return Fit(params, report, converged=best.status > 0, evaluations=int(best.nfev))


def evaluate(gpu, meas: dict | list[dict]) -> dict:
    """Per-group median and max |relative error| of the model on the fitted measurement kinds."""
    from simgpu.perf.params import params_for

    errors: dict[str, list[float]] = {}
    sets = meas if isinstance(meas, list) else [meas]
    for one in sets:
        host = set_host(one)
        on_host = with_params(gpu, params_for(gpu).model_copy(update=host)) if host else gpu
        for group, _, what, measured in _cases(one):
            pred = predict_case(on_host, what)
            errors.setdefault(group, []).append(abs(pred / measured - 1.0))
    return {g: {"n": len(e), "median_abs_error": float(np.median(e)), "max_abs_error": float(np.max(e))}
            for g, e in errors.items()}
