"""Node daemon launch throughput: N client processes, each looping on small kernels (launch a batch,
synchronize), against a real `simgpu daemon` subprocess. Target (issue 5): >= 5,000 kernel launches per
second per node with 8 clients. Prints a table; exits 1 if a row misses the target.

    .venv/bin/python bench/daemon.py [--seconds 5] [--clients 8]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 5000
FRACTIONAL = "gpus:\n  - model: H100\n    sharing: fractional\n"
# case -> (node config body, GPUs to spread the clients over, alternate two ops so no launches merge)
CONFIGS = {
    "1 GPU fractional (time-slicing), same op": (FRACTIONAL, 1, False),
    "1 GPU fractional (time-slicing), 2 ops alternating": (FRACTIONAL, 1, True),
    "1 GPU MPS, same op": ("gpus:\n  - model: H100\n    sharing: mps\n    replicas: 8\n", 1, False),
    "8 GPUs exclusive, 2 ops alternating": ("gpus:\n  - model: H100\n    count: 8\n", 8, True),
}


def _client(socket_path: str, token: str, seconds: float, batch: int, start_at: float, mixed: bool, out) -> None:
    from simgpu.client import DaemonClient
    from simgpu.perf import ElementwiseOp

    # ~4 us kernels on an H100: launch-bound. Back-to-back launches of one op merge into one engine
    # event; alternating two ops costs an event per kernel.
    ops = [ElementwiseOp(bytes=64 << 10), ElementwiseOp(bytes=128 << 10)] if mixed else [ElementwiseOp(bytes=64 << 10)]
    with DaemonClient(socket_path) as client:
        ctx = client.open_context(token)
        while time.time() < start_at:
            time.sleep(0.001)
        done = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for i in range(batch):
                ctx.launch(ops[i % len(ops)])
            ctx.synchronize()
            done += batch
        out.put((done, time.monotonic() - t0))
        ctx.close()


def run_case(yaml_body: str, gpus: int, mixed: bool, clients: int, seconds: float, batch: int) -> tuple[int, float, float]:
    from simgpu.client import DaemonClient
    from simgpu.token import Grant, issue_token, load_or_create_secret

    with tempfile.TemporaryDirectory() as tmp:
        secret_file = Path(tmp, "secret")
        cfg = Path(tmp, "node.yaml")
        cfg.write_text(f"version: v1\nnodeName: bench\ntokenSecretFile: {secret_file}\n{yaml_body}")
        sock = str(Path(tmp, "d.sock"))
        daemon = subprocess.Popen([sys.executable, "-m", "simgpu.cli", "daemon", "--config", str(cfg),
                                   "--socket", sock], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 20
            while not os.path.exists(sock):
                if daemon.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"daemon did not start: {daemon.stderr.read()}")
                time.sleep(0.05)
            with DaemonClient(sock) as probe:
                devices = [d["uuid"] for d in probe.devices()]
            secret = load_or_create_secret(secret_file)
            tokens = [issue_token(secret, Grant(device_uuid=devices[i % gpus], pod_name=f"bench-{i}"))
                      for i in range(clients)]
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            start_at = time.time() + 3.0  # let every process import and connect first
            procs = [ctx.Process(target=_client, args=(sock, t, seconds, batch, start_at, mixed, out)) for t in tokens]
            for p in procs:
                p.start()
            results = [out.get(timeout=seconds + 60) for _ in procs]
            for p in procs:
                p.join()
            cpu = _cpu_seconds(daemon.pid)
        finally:
            daemon.terminate()
            daemon.wait(timeout=10)
    total = sum(n for n, _ in results)
    wall = max(t for _, t in results)
    return total, wall, cpu


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=100, help="launches between synchronizes")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; {args.clients} client processes, {args.batch} launches per "
          f"synchronize, {args.seconds:.0f} s per case; target >= {TARGET} launches/s per node")
    print(f"{'case (' + str(args.clients) + ' clients)':52s} {'launches':>9s} {'launches/s':>11s} {'daemon CPU s':>13s} "
          f"{'target':>7s}")
    ok = True
    for name, (body, gpus, mixed) in CONFIGS.items():
        total, wall, cpu = run_case(body, gpus, mixed, args.clients, args.seconds, args.batch)
        rate = total / wall
        ok &= rate >= TARGET
        print(f"{name:52s} {total:9d} {rate:11.0f} {cpu:13.1f} {'ok' if rate >= TARGET else 'MISS':>7s}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
