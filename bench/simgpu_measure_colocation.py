"""Extra co-location measurements on a real GPU (needs PyTorch + an NVIDIA GPU): mixes and MPS splits
that neither calibration/measure.py nor `simgpu calibrate` takes, so the sharing model can be checked
on cases it was never fitted or designed on. Writes JSON ($OUT/colocation_extra.json or --out) with, per
case, each client's kind, MPS percentage and measured iterations/s; bench/simgpu_fidelity.py reads
bench/data/<gpu>_colocation_extra.json.

    python bench/simgpu_measure_colocation.py --out h100_colocation_extra.json [--seconds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from simgpu.calibrate_measure import colocate_run, device_info

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "colocation_extra.json"))
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    try:
        import torch
        ready = torch.cuda.is_available()
    except ImportError:
        ready = False
    if not ready:  # `make bench` runs every script here; this one only means something on a real GPU
        print("simgpu_measure_colocation: needs PyTorch and an NVIDIA GPU; nothing measured")
        return 0
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
