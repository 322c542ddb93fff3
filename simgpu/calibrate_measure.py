"""The measurement set of `simgpu calibrate` (needs an NVIDIA GPU and PyTorch; imported only there).

Same protocol as calibration/measure.py (CUDA-event-timed GEMMs and copies; looping worker processes
for time-slicing and MPS), so its output can be fitted and compared with the H100 reference file, plus
a few probes the reference lacks: which GEMM dims need alignment, fp8, and a wave-quantisation pair.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

CUBE_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
ALIGN_CUBES = (4088, 4095, 4096, 4097, 4104, 4100, 8191, 8193)
SKINNY_M = (1, 8, 32, 128, 512, 2048)
# Which dimension's alignment matters (A is m x k, B is k x n, row-major), and bf16/tf32 cliffs.
ALIGN_PROBES = ((4096, 4096, 4095, "fp16"), (4096, 4095, 4096, "fp16"), (4095, 4096, 4096, "fp16"),
                (4096, 4096, 4100, "fp16"), (4096, 4100, 4096, "fp16"), (4095, 4095, 4095, "bf16"),
                (4095, 4095, 4095, "tf32"))
# NVIDIA's wave-quantisation example (DL performance guide): 2304 x N x 4096.
WAVE_PROBES = ((2304, 1536, 4096, "fp16"), (2304, 1664, 4096, "fp16"), (2304, 3072, 4096, "fp16"),
               (2304, 3200, 4096, "fp16"))
EXTRA = ((512, 1024, 4096, "fp16"), (128, 4096, 4096, "fp16"), (128, 1000, 4096, "fp16"))
# The looping workers' ops: bf16 cube GEMMs of these sizes, or a 1 GiB copy ("stream").
LOOP_GEMM_SIZES = {"gemm": 8192, "gemm_mid": 4096, "gemm_small": 1024}
TIMESLICE_CASES = (("gemm_x1", ["gemm"]), ("gemm_x2", ["gemm", "gemm"]), ("gemm_x4", ["gemm"] * 4),
                   ("stream_x1", ["stream"]), ("stream_x2", ["stream", "stream"]),
                   ("gemm+stream", ["gemm", "stream"]), ("small_x1", ["gemm_small"]),
                   ("small_x2", ["gemm_small"] * 2), ("gemm+small", ["gemm", "gemm_small"]))


def gemm_cases(quick: bool = False) -> list[tuple[int, int, int, str]]:
    cases = []
    for dt in ("bf16", "fp16", "tf32", "fp32"):
        for n in CUBE_SIZES:
            if (dt == "fp32" and n == 16384) or (quick and n == 16384):
                continue
            cases.append((n, n, n, dt))
    cases += [(n, n, n, "fp16") for n in ALIGN_CUBES]
    cases += [(m, 8192, 8192, "bf16") for m in SKINNY_M]
    cases += list(EXTRA) + list(ALIGN_PROBES) + list(WAVE_PROBES)
    cases += [(n, n, n, "int8") for n in (4096, 8192)] + [(n, n, n, "fp8") for n in (4096, 8192)]
    return cases


def _timed(fn: Callable[[], object], reps: int = 20, warm: int = 5) -> float:
    from simgpu.calibrate_host import event_samples
    ts = sorted(event_samples(fn, reps, warm))
    return ts[len(ts) // 2]


def _gemm_fn(m: int, n: int, k: int, dtype: str) -> Callable[[], object]:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    if dtype == "int8":
        a = torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8)
        b = torch.randint(-8, 8, (n, k), device="cuda", dtype=torch.int8).t()
        return lambda: torch._int_mm(a, b)
    if dtype == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    return lambda: a @ b


def measure_gemm(m: int, n: int, k: int, dtype: str) -> dict:
    import torch
    fn = _gemm_fn(m, n, k, dtype)
    reps = 20 if m * n * k < 2**36 else 8
    t = _timed(fn, reps=reps)
    del fn
    torch.cuda.empty_cache()
    return {"m": m, "n": n, "k": k, "dtype": dtype, "s": t, "tflops": 2 * m * n * k / t / 1e12}


def measure_bandwidth() -> dict:
    import torch
    n = 2**30
    x = torch.empty(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    t = _timed(lambda: y.copy_(x), reps=10)
    z = torch.empty_like(x)
    t2 = _timed(lambda: torch.add(x, y, out=z), reps=10)
    return {"copy_GBps_rw": 2 * 4 * n / t / 1e9, "add_GBps_rw": 3 * 4 * n / t2 / 1e9}


def timed_loop(op: Callable[[], object], synchronize: Callable[[], None], barrier, seconds: float,
               batch: int = 4) -> tuple[int, float]:
    """A co-location client's loop: warm up, wait for the other clients, then issue `batch` ops and
    synchronise, for `seconds`. Returns (iterations, elapsed seconds)."""
    for _ in range(5):
        op()
    synchronize()
    barrier.wait()
    t0, it = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            op()
        synchronize()
        it += batch
    return it, time.perf_counter() - t0


def _worker(kind: str, seconds: float, barrier, queue, env: dict) -> None:
    os.environ.update(env)
    import torch
    torch.cuda.init()
    if kind in LOOP_GEMM_SIZES:
        size = LOOP_GEMM_SIZES[kind]
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        work = 2 * size**3

        def op():
            return a @ b
    else:
        x = torch.empty(2**28, device="cuda")
        y = torch.empty_like(x)
        work = 2 * 4 * 2**28

        def op():
            return y.copy_(x)
    it, dt = timed_loop(op, torch.cuda.synchronize, barrier, seconds)
    pct = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    queue.put({"kind": kind, "iters": it, "s": dt, "rate_per_s": it / dt, "work_per_s": work * it / dt,
               "mps_pct": int(pct) if pct else None})


def colocate_run(kinds: list[str], seconds: float, envs: list[dict] | None = None) -> list[dict]:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(len(kinds)), ctx.Queue()
    envs = envs or [{}] * len(kinds)
    procs = [ctx.Process(target=_worker, args=(k, seconds, barrier, queue, e)) for k, e in zip(kinds, envs, strict=True)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join()
    return results


def device_info() -> dict:
    import torch
    props = torch.cuda.get_device_properties(0)
    info = {"device": torch.cuda.get_device_name(0), "sms": props.multi_processor_count,
            "mem_bytes": props.total_memory, "l2_bytes": getattr(props, "L2_cache_size", 0),
            "torch": str(torch.__version__)}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total,"
                              "mig.mode.current,compute_mode,power.limit,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
        fields = [f.strip() for f in out.splitlines()[0].split(",")]
        info.update({"max_sm_mhz": float(fields[1]), "max_mem_mhz": float(fields[2]), "power_limit_w": float(fields[6]),
                     "driver": fields[7], "compute_mode": fields[5], "mig_mode": fields[4]})
    except Exception as err:  # nvidia-smi is optional: the profile then keeps catalog clocks/power
        info["nvidia_smi_error"] = repr(err)
    return info


def measure(progress=None, *, quick: bool = False, loop_seconds: float = 3.0, mps: bool = True) -> dict:
    """Run the whole set; `progress(label)` is called before each step (the CLI drives a progress bar)."""
    tick = progress or (lambda label: None)
    from simgpu.calibrate_host import measure_host

    result: dict = {"info": device_info(), "protocol": "simgpu.calibrate_measure v1 (measure.py-compatible)"}
    tick("host")
    result["host"] = measure_host()  # the fit takes the host part from here instead of fitting it
    gemms = []
    for m, n, k, dt in gemm_cases(quick):
        tick(f"gemm {m}x{n}x{k} {dt}")
        try:
            gemms.append(measure_gemm(m, n, k, dt))
        except Exception as err:  # e.g. fp8 on a GPU without it: skipped, recorded
            result.setdefault("skipped", []).append(f"gemm {m}x{n}x{k} {dt}: {type(err).__name__}: {err}"[:300])
    result["gemm"] = gemms
    tick("bandwidth")
    result["bandwidth"] = measure_bandwidth()
    import torch
    torch.cuda.empty_cache()
    ts = {}
    for name, kinds in TIMESLICE_CASES:
        tick(f"time-slicing {name}")
        ts[name] = colocate_run(kinds, loop_seconds)
    result["timeslice"] = ts
    ctl = shutil.which("nvidia-cuda-mps-control")
    if mps and ctl:
        result["mps"] = _measure_mps(ctl, tick, loop_seconds)
    return result


def _measure_mps(ctl: str, tick, seconds: float) -> dict:
    pipe, log = tempfile.mkdtemp(prefix="mps_pipe"), tempfile.mkdtemp(prefix="mps_log")
    base = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}
    env = dict(os.environ, **base)
    out: dict = {}
    start = subprocess.run([ctl, "-d"], env=env, capture_output=True, text=True)
    out["start"] = [start.returncode, start.stdout, start.stderr]
    time.sleep(2)
    try:
        for pct in (10, 25, 50, 75, 100):
            tick(f"MPS gemm {pct}%")
            out[f"gemm_pct{pct}"] = colocate_run(["gemm"], seconds, [dict(base, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(pct))])
        for pct in (25, 50):
            tick(f"MPS stream {pct}%")
            out[f"stream_pct{pct}"] = colocate_run(["stream"], seconds, [dict(base, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(pct))])
        tick("MPS gemm x2 50%")
        out["gemm_x2_pct50"] = colocate_run(["gemm", "gemm"], seconds, [dict(base, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")] * 2)
        tick("MPS gemm x2 100%")
        out["gemm_x2_pct100"] = colocate_run(["gemm", "gemm"], seconds, [dict(base)] * 2)
        tick("MPS gemm+stream 100%")
        out["gemm+stream_pct100"] = colocate_run(["gemm", "stream"], seconds, [dict(base)] * 2)
    except Exception as err:
        out["error"] = repr(err)
    finally:
        stop = subprocess.run([ctl], input="quit\n", env=env, capture_output=True, text=True)
        out["stop"] = [stop.returncode, stop.stdout, stop.stderr]
    return out


def step_count(quick: bool = False, mps: bool = True) -> int:
    """How many progress ticks measure() makes (for the progress bar's total)."""
    return 1 + len(gemm_cases(quick)) + 1 + len(TIMESLICE_CASES) + (10 if mps and shutil.which("nvidia-cuda-mps-control") else 0)
