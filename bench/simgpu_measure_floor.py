"""Measure one GPU machine for simgpu's cross-host fidelity check (runs where PyTorch sees an NVIDIA GPU;
needs only torch and the standard library, so it runs on a bare GPU image).

Writes one JSON file with
  info      the device (calibrate_measure.device_info) and the host (CPU, kernel, torch, CUDA);
  host      simgpu.calibrate_host.measure_host(): what `simgpu calibrate --host` measures (seconds),
            taken first; host_repeats: the same after the passes, the graphs and the profiler;
  gemm      the GEMM case list of `simgpu calibrate` (calibrate_measure.gemm_cases), event-timed exactly as
            calibration/measure.py does (median of 20 after 5 warm-ups; 8 for the largest) -- the
            fidelity metric -- in the same shape as the other measurement files, from the first pass;
  passes    every pass's event time per case (run-to-run spread on one machine);
  kernels   per case: the GPU time of one call with no host in between (CUDA graph replay) and the
            kernels cuBLAS ran (torch profiler: names, which carry tile shapes and the scheduler, and
            device times);
  diag      the same for a few diagnostic shapes outside the case list (just past the 16-byte alignment,
            small fp32 GEMMs), used to find causes, never as a check.

    python3 bench/simgpu_measure_floor.py --out $OUT/h100_floor.json [--passes 3] [--no-profile]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simgpu import calibrate_host as ch  # noqa: E402 - torch + stdlib only
from simgpu import calibrate_measure as cm  # noqa: E402

DIAG = ([(n, n, n, "fp16") for n in (4112, 4128, 4160, 4224, 4352, 4608)]
        + [(n, n, n, "bf16") for n in (4104, 64, 128)]
        + [(n, n, n, "fp32") for n in (128, 384, 640, 768, 1536, 3072)]
        + [(n, n, n, "tf32") for n in (384, 768, 1536)])


def _case_key(m: int, n: int, k: int, dt: str) -> str:
    return f"{m}x{n}x{k} {dt}"


def kernel_view(fn, event_s: float, profile: bool, graph: bool = True) -> dict:
    """GPU time per call (graph replay; enough copies for ~2 ms, at most 100) and the profiler's kernels."""
    out: dict = {}
    copies = max(1, min(100, int(2e-3 / max(event_s, 1e-6))))
    try:
        if not graph:
            raise LookupError("not asked")
        out["graph_s"] = ch.graph_kernel_seconds(fn, copies=copies, replays=5 if event_s > 1e-3 else 10)
        out["graph_copies"] = copies
    except LookupError:
        pass
    except Exception as err:  # e.g. an op that cannot be captured
        out["graph_error"] = f"{type(err).__name__}: {err}"[:300]
    if profile:
        try:
            import torch
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as prof
            torch.cuda.synchronize()
            with prof(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
            kernels = [(e.name, e.device_time_total) for e in p.events()
                       if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type)]
            names = sorted({n for n, _ in kernels})
            out["kernel_names"] = names
            out["kernel_us_per_call"] = sum(t for _, t in kernels) / 3
            out["kernels_per_call"] = len(kernels) / 3
        except Exception as err:
            out["profile_error"] = f"{type(err).__name__}: {err}"[:300]
    return out


def gemm_fn(m: int, n: int, k: int, dt: str):
    return cm._gemm_fn(m, n, k, dt)


def _clock() -> float | None:
    """The SM clock now (NVML through torch), None where it cannot be read."""
    try:
        import torch
        return float(torch.cuda.clock_rate())
    except Exception:
        return None


def event_pass(cases, result: dict) -> dict[str, float]:
    """One pass over `cases`: each event-timed as calibrate_measure.measure_gemm does."""
    out = {}
    for m, n, k, dt in cases:
        try:
            out[_case_key(m, n, k, dt)] = cm.measure_gemm(m, n, k, dt)["s"]
            result.setdefault("sm_mhz_after", {}).setdefault(_case_key(m, n, k, dt), []).append(_clock())
        except Exception as err:
            result.setdefault("skipped", []).append(f"{_case_key(m, n, k, dt)}: {type(err).__name__}: {err}"[:300])
    return out


def graph_pass(cases, events: dict[str, float]) -> dict[str, dict]:
    import torch
    out = {}
    for m, n, k, dt in cases:
        key = _case_key(m, n, k, dt)
        if key not in events:
            continue
        fn = gemm_fn(m, n, k, dt)
        out[key] = kernel_view(fn, events[key], profile=False)
        del fn
        torch.cuda.empty_cache()
    return out


def profile_pass(cases, views: dict[str, dict]) -> None:
    """Kernel names last: the profiler (CUPTI) slows every later launch on some hosts."""
    import torch
    for m, n, k, dt in cases:
        key = _case_key(m, n, k, dt)
        if key not in views:
            continue
        fn = gemm_fn(m, n, k, dt)
        for _ in range(3):
            fn()
        views[key].update(kernel_view(fn, 1.0, profile=True, graph=False))
        del fn
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--no-diag", action="store_true")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("simgpu_measure_floor: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 2
    t0 = time.time()
    result: dict = {"protocol": "bench/simgpu_measure_floor.py v2 (event timing as calibration/measure.py)",
                    "info": {**cm.device_info(), **ch.host_info()}}
    hosts = [ch.measure_host()]
    result["host"] = hosts[0]
    print(f"host: floor {hosts[0]['host_floor_s']['default'] * 1e6:.1f} us, latency "
          f"{hosts[0]['host_latency_s']['default'] * 1e6:.1f} us, dispatch {hosts[0]['host_dispatch_s'] * 1e6:.1f} us "
          f"({hosts[0]['seconds']:.1f} s)", flush=True)
    cases = cm.gemm_cases(quick=False)
    diag = [] if args.no_diag else list(DIAG)
    passes: dict[str, list[float]] = {}
    for p in range(args.passes):
        for key, t in event_pass(cases, result).items():
            passes.setdefault(key, []).append(t)
        print(f"pass {p + 1}/{args.passes} done ({time.time() - t0:.0f} s)", flush=True)
    hosts.append(ch.measure_host())
    first = {key: ts[0] for key, ts in passes.items()}
    result["gemm"] = [{"m": m, "n": n, "k": k, "dtype": dt, "s": first[key], "tflops": 2 * m * n * k / first[key] / 1e12}
                      for m, n, k, dt in cases if (key := _case_key(m, n, k, dt)) in first]
    result["passes"] = passes
    result["bandwidth"] = cm.measure_bandwidth()
    torch.cuda.empty_cache()
    diag_events = event_pass(diag, result)
    result["kernels"] = graph_pass(cases, first)
    diag_views = graph_pass(diag, diag_events)
    result["diag"] = {key: {"s": t, **diag_views.get(key, {})} for key, t in diag_events.items()}
    hosts.append(ch.measure_host())
    print(f"graphs done ({time.time() - t0:.0f} s)", flush=True)
    if not args.no_profile:
        profile_pass(cases, result["kernels"])
        profile_pass(diag, result["diag"])
        hosts.append(ch.measure_host())
    result["host_repeats"] = hosts
    result["seconds"] = time.time() - t0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("host floor / latency us (start, after passes, after graphs, after profiler): "
          + ", ".join(f"{h['host_floor_s']['default'] * 1e6:.1f}/{h['host_latency_s']['default'] * 1e6:.1f}" for h in hosts))
    print(f"{'case':26s} {'event us':>9s} {'spread':>7s} {'graph us':>9s} kernels")
    for m, n, k, dt in cases:
        key = _case_key(m, n, k, dt)
        if key not in passes:
            continue
        ts, view = passes[key], result["kernels"].get(key, {})
        spread = (max(ts) - min(ts)) / statistics.median(ts)
        names = ",".join(n.replace("void cutlass::Kernel2<", "")[:44] for n in view.get("kernel_names", []) if "Memset" not in n)
        print(f"{key:26s} {first[key] * 1e6:9.1f} {spread:7.1%} {view.get('graph_s', float('nan')) * 1e6:9.1f} {names}")
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
