"""The host part of an event-timed op (`simgpu calibrate --host`): measured in a few seconds on any machine
with an NVIDIA GPU and PyTorch. Imports only the standard library and torch (so it runs on a bare GPU
image too); the CLI wraps it.

CUDA events around one op issued right after a synchronise (calibration/measure.py's protocol,
`calibrate_measure._timed`) measure

    event_timed = max(host_floor + kernel_min, host_latency + kernel)

* host_latency: from the start event to the kernel's start on the idle GPU -- the framework's dispatch
  of the op on the CPU up to the launch, and the driver's launch latency. Measured as the event time of
  a DRAM-bound GEMM whose kernel outlasts the host (16 x 12288 x 8192 in bf16/fp16, 16 x 6144 x 8192 in
  tf32/fp32: 192 MiB of B) minus its kernel alone (a CUDA graph of back-to-back copies: no host).
* host_floor: the end event is recorded only once the CPU has finished the whole call (PyTorch's work
  after the launch too), so a tiny op shows the CPU's whole call: the event time of a 64^3 GEMM minus its
  kernel. kernel_min is the GPU's own minimum per kernel (the model derives it from the clock).

Both per dtype path (bf16/fp16 go through cublasLt's half GEMM, tf32/fp32 through the float32 GEMM) and
for the elementwise path (a one-element add; a 128 MiB copy for the latency). Also measured:
`host_dispatch_s`, the CPU time to issue one op when ops are issued back to back (a loop's limit). The
host's state drifts within seconds (CPU clocks, other load), so each number is the median over
`rounds` rounds spread over the measurement.
"""
from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

PROBE_SIZE = 64  # a GEMM whose kernel is a few microseconds: the event time is the host's
PROBE_DTYPES = ("bf16", "fp16", "tf32", "fp32")


def event_samples(fn: Callable[[], object], reps: int, warm: int) -> list[float]:
    """Seconds of each of `reps` calls, CUDA events around one call after a sync (after `warm` untimed calls)."""
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return ts


def graph_kernel_seconds(fn: Callable[[], object], copies: int = 50, replays: int = 10) -> float:
    """GPU time of one call of `fn` with no host in between: a CUDA graph of `copies` calls, replayed,
    timed with events, divided by the calls (a median over `replays`)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3 / copies)
    del graph
    return statistics.median(times)


def issue_seconds(fn: Callable[[], object], ops: int = 200) -> float:
    """CPU time to issue one call when calls are issued back to back (a median of 5 bursts)."""
    import torch
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(ops):
            fn()
        times.append((time.perf_counter() - t0) / ops)
        torch.cuda.synchronize()
    return statistics.median(times)


def _torch_dtype(dtype: str):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]


def _matmul(a, b, dtype: str) -> Callable[[], object]:
    if dtype in ("tf32", "fp32"):
        # the flag is read when the op is dispatched: set it inside the call (the graph replays what was captured)
        def call():
            import torch
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            return a @ b
        return call
    return lambda: a @ b


def tiny_gemm(dtype: str, size: int = PROBE_SIZE) -> Callable[[], object]:
    import torch
    dt = _torch_dtype(dtype)
    return _matmul(torch.randn(size, size, device="cuda", dtype=dt), torch.randn(size, size, device="cuda", dtype=dt),
                   dtype)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict:
    import os

    import torch
    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "torch": str(torch.__version__), "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0)}


def skinny_gemm(dtype: str) -> Callable[[], object]:
    """A DRAM-bound GEMM (192 MiB of B) whose kernel outlasts the host's dispatch on any current GPU."""
    import torch
    dt = _torch_dtype(dtype)
    n = 12288 if dt.itemsize == 2 else 6144
    return _matmul(torch.randn(16, 8192, device="cuda", dtype=dt), torch.randn(8192, n, device="cuda", dtype=dt),
                   dtype)


def _probe(tiny: Callable[[], object], long: Callable[[], object], reps: int, rounds: int) -> dict:
    """Floor and latency of one path: `rounds` rounds of `reps` event-timed calls of each op."""
    tiny_kernel, long_kernel = graph_kernel_seconds(tiny), graph_kernel_seconds(long, copies=10)
    tiny_events, long_events = [], []
    for _ in range(rounds):
        tiny_events.append(statistics.median(event_samples(tiny, reps, warm=10)))
        long_events.append(statistics.median(event_samples(long, max(reps // 4, 10), warm=3)))
    tiny_event, long_event = statistics.median(tiny_events), statistics.median(long_events)
    return {"floor_s": max(tiny_event - tiny_kernel, 0.0), "latency_s": max(long_event - long_kernel, 0.0),
            "tiny_event_s": tiny_event, "tiny_kernel_s": tiny_kernel, "long_event_s": long_event,
            "long_kernel_s": long_kernel, "tiny_rounds_s": tiny_events, "long_rounds_s": long_events,
            "issue_s": issue_seconds(tiny)}


def measure_host(reps: int = 100, rounds: int = 5) -> dict:
    """This machine's host constants (seconds) and the samples behind them: per path (bf16, fp16, tf32,
    fp32 GEMMs; "copy" for elementwise ops) the floor and the latency; host_dispatch_s, the median CPU
    issue time of a GEMM back to back."""
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU visible to PyTorch")
    torch.cuda.init()
    t0 = time.perf_counter()
    paths: dict[str, dict] = {}
    for dtype in PROBE_DTYPES:
        paths[dtype] = _probe(tiny_gemm(dtype), skinny_gemm(dtype), reps, rounds)
        torch.cuda.empty_cache()
    x = torch.zeros(1, device="cuda")
    src = torch.empty(2**25, device="cuda")  # 128 MiB
    dst = torch.empty_like(src)
    paths["copy"] = _probe(lambda: x.add_(1.0), lambda: dst.copy_(src), reps, rounds)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.empty_cache()
    gemm = [paths[d] for d in PROBE_DTYPES]
    return {
        "host_floor_s": {"default": statistics.median(p["floor_s"] for p in gemm),
                         **{k: p["floor_s"] for k, p in paths.items()}},
        "host_latency_s": {"default": statistics.median(p["latency_s"] for p in gemm),
                           **{k: p["latency_s"] for k, p in paths.items()}},
        "host_dispatch_s": statistics.median(p["issue_s"] for p in gemm),
        "paths": paths,
        "probe": f"per path: {PROBE_SIZE}^3 GEMM (floor) and a 192 MiB-B skinny GEMM (latency); a 1-element add "
                 f"and a 128 MiB copy (copy path); {rounds} rounds of {reps} event-timed calls after a sync",
        "seconds": time.perf_counter() - t0,
        "info": host_info(),
    }
