"""Extra co-location measurements on a real GPU (needs PyTorch + an NVIDIA GPU): mixes and MPS splits
that neither calibration/measure.py nor `simgpu calibrate` takes, so the sharing model can be checked
on cases it was never fitted or designed on. Writes JSON ($OUT/colocation_extra.json or --out) with, per
case, each client's kind, MPS percentage and measured iterations/s; bench/simgpu_fidelity.py reads
bench/data/<gpu>_colocation_extra.json.

`--grid mps_bw` instead measures MPS mixes of compute-bound GEMMs with bandwidth-bound kernels (copies
of several sizes, an elementwise add, an L2-resident copy as a diagnostic) at several SM splits, plus
each op alone at each percentage (bench/data/<gpu>_colocation_mps_bw.json; ~3-4 minutes on an H100).
Each client entry carries its op as simgpu.perf.ops.op_to_dict (null for the L2-resident diagnostic,
which the model does not describe; files measured before elementwise ops had an input count lack
"inputs", and bench/simgpu_fidelity.py takes it from `sim_op` here), and an nvidia-smi sample (SM clock, power, DRAM utilisation) is
taken half-way through each case.

    python bench/simgpu_measure_colocation.py --out h100_colocation_extra.json [--seconds 3]
    python bench/simgpu_measure_colocation.py --grid mps_bw --out h100_colocation_mps_bw.json

Where simgpu is not installed, make only it importable: PYTHONPATH=<repo root> would let the folder
operator/ shadow the standard library's `operator` (e.g. mkdir /tmp/pp; ln -s $PWD/simgpu /tmp/pp/;
PYTHONPATH=/tmp/pp python3 bench/simgpu_measure_colocation.py ...).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

TIMESLICE = {
    "gemm+gemm_mid": ["gemm", "gemm_mid"],
    "gemm_x3": ["gemm"] * 3,
    "mid_x2": ["gemm_mid"] * 2,
    "stream+small": ["stream", "gemm_small"],
    "mid+stream": ["gemm_mid", "stream"],
}
MPS = {  # name: [(kind, pct or None)]
    "gemm25+gemm75": [("gemm", 25), ("gemm", 75)],
    "gemm_x3_pct33": [("gemm", 33)] * 3,
    "gemm+small": [("gemm", None), ("gemm_small", None)],
    "stream_x2_pct50": [("stream", 50)] * 2,
    "gemm50+stream50": [("gemm", 50), ("stream", 50)],
    "mid_x2": [("gemm_mid", None)] * 2,
}


# ---------------------------------------------------------------- grid mps_bw
# Ops by name: bf16 cube GEMMs, copies of a float32 tensor (`floats` elements: the copy moves 8 x floats
# bytes), an elementwise add z = x + y (12 x floats bytes; `inputs`: the tensors it reads, which sets
# its loads in flight per thread in the model), and a CUDA graph of `reps` copies of a tensor small
# enough to stay in L2 (its traffic never reaches DRAM: a diagnostic only).
BW_OPS = {
    "g8k": {"op": "gemm", "n": 8192}, "g6k": {"op": "gemm", "n": 6144}, "g4k": {"op": "gemm", "n": 4096},
    "c1G": {"op": "copy", "floats": 2**28}, "c256M": {"op": "copy", "floats": 2**26},
    "add": {"op": "add", "floats": 2**28, "inputs": 2}, "l2c": {"op": "l2copy", "floats": 2**21, "reps": 200},
}
# Each op alone at the percentages the mixes use (None = no limit), then the mixes.
BW_SOLO = [("g8k", p) for p in (25, 50, 75, 90, None)] + [("g4k", 50), ("g4k", 75), ("g4k", None), ("g6k", 50)] \
    + [("c1G", p) for p in (10, 25, 50, 75, None)] + [("c256M", 50), ("add", 50), ("l2c", 50)]
BW_MIXES = {
    "g8k50+c1G50": [("g8k", 50), ("c1G", 50)],
    "g8k25+c1G75": [("g8k", 25), ("c1G", 75)],
    "g8k75+c1G25": [("g8k", 75), ("c1G", 25)],
    "g8k90+c1G10": [("g8k", 90), ("c1G", 10)],
    "g8k100+c1G100": [("g8k", None), ("c1G", None)],
    "g8k50+c1G100": [("g8k", 50), ("c1G", None)],
    "g8k75+c1G75": [("g8k", 75), ("c1G", 75)],
    "g4k50+c1G50": [("g4k", 50), ("c1G", 50)],
    "g4k75+c1G25": [("g4k", 75), ("c1G", 25)],
    "g6k50+c1G50": [("g6k", 50), ("c1G", 50)],
    "g8k50+c256M50": [("g8k", 50), ("c256M", 50)],
    "g8k50+add50": [("g8k", 50), ("add", 50)],
    "g4k50+add50": [("g4k", 50), ("add", 50)],
    "g8k50+l2c50": [("g8k", 50), ("l2c", 50)],
    "g8k50+g8k50": [("g8k", 50), ("g8k", 50)],
}


def sim_op(name: str) -> dict | None:
    """The op as simgpu.perf.ops.parse_op takes it (None: not something the model describes)."""
    spec = BW_OPS[name]
    if spec["op"] == "gemm":
        return {"op": "gemm", "m": spec["n"], "n": spec["n"], "k": spec["n"], "dtype": "bf16"}
    if spec["op"] == "copy":
        return {"op": "copy", "bytes": 4 * spec["floats"]}
    if spec["op"] == "add":
        return {"op": "elementwise", "bytes": 4 * (spec["inputs"] + 1) * spec["floats"], "flops": spec["floats"],
                "inputs": spec["inputs"]}
    return None


def _bw_worker(name: str, seconds: float, barrier, queue, env: dict) -> None:
    os.environ.update(env)
    import torch

    from simgpu.calibrate_measure import timed_loop
    torch.cuda.init()
    spec = BW_OPS[name]
    if spec["op"] == "gemm":
        n = spec["n"]
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)

        def op():
            return a @ b
    elif spec["op"] in ("copy", "add"):
        x = torch.randn(spec["floats"], device="cuda")
        y = torch.randn_like(x)
        z = torch.empty_like(x)
        assert spec["op"] == "copy" or spec["inputs"] == 2  # torch.add(x, y) reads the two tensors sim_op declares

        def op():
            return y.copy_(x) if spec["op"] == "copy" else torch.add(x, y, out=z)
    else:
        x = torch.randn(spec["floats"], device="cuda")
        y = torch.empty_like(x)
        for _ in range(3):
            y.copy_(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(spec["reps"]):
                y.copy_(x)

        def op():
            return graph.replay()
    it, dt = timed_loop(op, torch.cuda.synchronize, barrier, seconds)
    pct = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    queue.put({"kind": name, "op": sim_op(name), "iters": it, "s": dt, "rate_per_s": it / dt,
               "mps_pct": int(pct) if pct else None})


def _smi_sample() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,utilization.gpu,utilization.memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        mhz, watts, gpu_util, mem_util = (float(f) for f in out.splitlines()[0].split(","))
        return {"sm_mhz": mhz, "power_w": watts, "gpu_util_pct": gpu_util, "mem_util_pct": mem_util}
    except Exception as err:
        return {"error": repr(err)[:200]}


def _bw_run(clients: list[tuple[str, int | None]], seconds: float, base_env: dict) -> dict:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(len(clients)), ctx.Queue()
    envs = [dict(base_env, **({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(p)} if p else {})) for _, p in clients]
    procs = [ctx.Process(target=_bw_worker, args=(k, seconds, barrier, queue, e))
             for (k, _), e in zip(clients, envs, strict=True)]
    for p in procs:
        p.start()
    samples = []
    results = []
    deadline = time.time() + 120
    while len(results) < len(procs) and time.time() < deadline:
        try:
            results.append(queue.get(timeout=seconds / 2))
        except Exception:
            if not results:
                samples.append(_smi_sample())
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return {"clients": results, "smi": samples}


def measure_mps_bw(args) -> dict:
    from simgpu.calibrate_measure import device_info
    result: dict = {"info": device_info(), "grid": "mps_bw", "seconds": args.seconds, "solo": {}, "mps": {}}
    ctl = shutil.which("nvidia-cuda-mps-control")
    if not ctl:
        result["error"] = "nvidia-cuda-mps-control not found"
        return result
    pipe, log = tempfile.mkdtemp(prefix="mps_pipe"), tempfile.mkdtemp(prefix="mps_log")
    base = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}
    env = dict(os.environ, **base)
    subprocess.run([ctl, "-d"], env=env, check=False)
    time.sleep(2)
    start = time.time()

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    try:
        for name, pct in BW_SOLO:
            label = f"{name}{pct or 100}"
            print("solo", label, f"{time.time() - start:.0f}s", flush=True)
            result["solo"][label] = _bw_run([(name, pct)], args.seconds, base)
            save()
        for label, clients in BW_MIXES.items():
            print("mix", label, f"{time.time() - start:.0f}s", flush=True)
            result["mps"][label] = _bw_run(clients, args.seconds, base)
            save()
    finally:
        subprocess.run([ctl], input="quit\n", env=env, capture_output=True, text=True, check=False)
    result["wall_s"] = time.time() - start
    return result


def _print_bw(result: dict) -> None:
    for section in ("solo", "mps"):
        for label, case in result.get(section, {}).items():
            rates = " ".join(f"{c['kind']}@{c['mps_pct'] or 100}={c['rate_per_s']:.1f}" for c in case["clients"])
            smi = next((s for s in case["smi"] if "sm_mhz" in s), {})
            print(f"{section:4} {label:16} {rates:44} {smi.get('sm_mhz', '-')} MHz {smi.get('power_w', '-')} W "
                  f"mem {smi.get('mem_util_pct', '-')}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--grid", choices=("extra", "mps_bw"), default="extra")
    args = ap.parse_args()
    if args.out is None:
        args.out = os.path.join(os.environ.get("OUT", "."), f"colocation_{args.grid}.json")
    try:
        import torch
        ready = torch.cuda.is_available()
    except ImportError:
        ready = False
    if not ready:  # `make bench` runs every script here; this one only means something on a real GPU
        print("simgpu_measure_colocation: needs PyTorch and an NVIDIA GPU; nothing measured")
        return 0
    if args.grid == "mps_bw":
        result = measure_mps_bw(args)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        _print_bw(result)
        print("wrote", args.out)
        return 0
    from simgpu.calibrate_measure import colocate_run, device_info
    result: dict = {"info": device_info(), "timeslice": {}, "mps": {}}
    for kind in ("gemm", "gemm_mid", "gemm_small", "stream"):
        print("solo", kind, flush=True)
        result["timeslice"][f"{kind}_x1"] = colocate_run([kind], args.seconds)
    for name, kinds in TIMESLICE.items():
        print("timeslice", name, flush=True)
        result["timeslice"][name] = colocate_run(kinds, args.seconds)
    ctl = shutil.which("nvidia-cuda-mps-control")
    if ctl:
        pipe, log = tempfile.mkdtemp(prefix="mps_pipe"), tempfile.mkdtemp(prefix="mps_log")
        base = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}
        env = dict(os.environ, **base)
        subprocess.run([ctl, "-d"], env=env, check=False)
        time.sleep(2)
        try:
            for name, clients in MPS.items():
                print("mps", name, flush=True)
                envs = [dict(base, **({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(p)} if p else {})) for _, p in clients]
                result["mps"][name] = colocate_run([k for k, _ in clients], args.seconds, envs)
        finally:
            subprocess.run([ctl], input="quit\n", env=env, capture_output=True, text=True, check=False)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
