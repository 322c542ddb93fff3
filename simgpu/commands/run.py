"""`simgpu run`: a synthetic training/inference loop against the node daemon, using the env that the
device plugin's Allocate gave the container (socket, token, limits); prints throughput."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from simgpu.errors import SimgpuError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
DEFAULT_SOCKET = "/var/run/fgpu/daemon.sock"


def parse_bytes(text: str) -> int:
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1] if raw and raw[-1] in _UNITS else ""
    try:
        value = int(float(raw[: len(raw) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise SimgpuError(f"bad size {text!r}", field="--mem", allowed=["<N>", "<N>k", "<N>m", "<N>g"]) from None
    if value < 0:
        raise SimgpuError(f"bad size {text!r}", field="--mem", allowed=["a non-negative size"])
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    from simgpu.workloads import WORKLOADS

    p = subparsers.add_parser("run", help="run a synthetic training/inference loop on an emulated GPU",
                              description="Run a synthetic loop against the simgpu node daemon. Socket and token "
                                          "come from FGPU_DAEMON_SOCKET / FGPU_CONTEXT_TOKEN (set by the device "
                                          "plugin's Allocate) unless given here.")
    p.add_argument("--workload", default="transformer", choices=sorted(WORKLOADS))
    p.add_argument("--iterations", type=int, default=None, help="stop after N iterations")
    p.add_argument("--duration", type=float, default=None, help="stop after S seconds of wall time")
    p.add_argument("--dtype", default="auto",
                   help="GEMM dtype (auto: bf16 for transformer, fp16 for resnet, whatever the GPU supports)")
    p.add_argument("--mem", default=None, help="device memory to allocate first (default: the workload's own)")
    p.add_argument("--socket", default=None)
    p.add_argument("--token", default=None)
    p.add_argument("--sync-every", type=int, default=1,
                   help="synchronize every N iterations (1: like a training step that reads its loss)")
    p.add_argument("--report-every", type=float, default=5.0, help="seconds between progress lines")
    p.add_argument("--json", action="store_true", help="one JSON object per report line")
    p.add_argument("--no-reconnect", action="store_true",
                   help="exit when the node daemon goes away, instead of waiting for it and opening a new context")
    p.set_defaults(func=_run)


def _report(args, stats: dict) -> None:
    if args.json:
        print(json.dumps(stats), flush=True)
    else:
        print(f"{stats['workload']}: {stats['iterations']} it, {stats['it_per_s']:.2f} it/s emulated "
              f"({stats['tflops']:.1f} TFLOPS), {stats['real_it_per_s']:.2f} it/s wall, "
              f"{stats['kernels_per_s_wall']:.0f} kernels/s wall, mem {stats['device_bytes'] >> 20} MiB"
              + (f" (+{stats['host_bytes'] >> 20} MiB spilled)" if stats["host_bytes"] else ""), flush=True)


RECONNECT_S = 120.0  # how long a workload waits for its node daemon to come back (a DaemonSet roll takes ~30 s)


class _Progress:
    """Iterations and emulated time across the contexts a run opens (a reconnect opens a new one)."""

    def __init__(self) -> None:
        self.iterations, self.virtual_done, self.start_wall = 0, 0.0, time.monotonic()
        self.reported = 0  # iterations whose emulated time is in virtual_done (a lost context loses the rest)


def _run(args: argparse.Namespace) -> int:
    from simgpu.env import CONTEXT_TOKEN, read_container_env
    from simgpu.workloads import get_workload

    env = read_container_env(os.environ)
    socket_path = args.socket or env.daemon_socket or DEFAULT_SOCKET
    token = args.token or (env.tokens[0] if env.tokens else None) or os.environ.get(CONTEXT_TOKEN)
    if not token:
        raise SimgpuError("no context token: run inside a pod that got a GPU from fgpu, or pass --token",
                          field=CONTEXT_TOKEN)
    for name in ("iterations", "duration", "sync_every"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise SimgpuError(f"got {value}", field=f"--{name.replace('_', '-')}", allowed=["> 0"])
    get_workload(args.workload)  # a bad name fails before connecting
    progress = _Progress()
    while True:
        try:
            return _session(args, socket_path, token, progress)
        except SimgpuError as e:
            # the daemon went away (its pod restarted, e.g. a DaemonSet roll): every context it held is gone;
            # the signed grant still holds, so wait for the daemon and open a new context with it
            from simgpu.device.engine import DAEMON_SHUTDOWN

            gone = e.field == "socket" or (e.field == "context" and DAEMON_SHUTDOWN in str(e))
            if not gone or args.no_reconnect:
                raise
            progress.iterations = progress.reported
            print(f"simgpu run: lost the node daemon ({e}); reconnecting (up to {RECONNECT_S:.0f} s)",
                  file=sys.stderr, flush=True)
            waited = _wait_for_daemon(socket_path)
            print(f"simgpu run: reconnected after {waited:.1f} s; a new context, same grant", file=sys.stderr,
                  flush=True)


def _wait_for_daemon(socket_path: str) -> float:
    from simgpu.client import DaemonClient

    t0 = time.monotonic()
    while True:
        try:
            with DaemonClient(socket_path, timeout=2.0) as client:
                client.devices()
            return time.monotonic() - t0
        except SimgpuError:
            if time.monotonic() - t0 > RECONNECT_S:
                raise SimgpuError(f"the node daemon at {socket_path} did not come back in {RECONNECT_S:.0f} s",
                                  field="socket") from None
            time.sleep(0.5)


def _session(args: argparse.Namespace, socket_path: str, token: str, progress: _Progress) -> int:
    """One context: allocate, then loop until done; raises SimgpuError(field='socket') if the daemon goes."""
    from simgpu.client import DaemonClient
    from simgpu.workloads import get_workload, pick_dtype

    with DaemonClient(socket_path) as client:
        ctx = client.open_context(token)
        supported = list(ctx.info.dtypes)
        if args.dtype == "auto":
            dtype = pick_dtype(supported, ("fp16", "bf16") if args.workload == "resnet" else ("bf16", "fp16"))
        elif args.dtype not in supported:
            raise SimgpuError(f"{args.dtype} does not run on {ctx.info.model}", field="--dtype", allowed=supported)
        else:
            dtype = args.dtype
        work = get_workload(args.workload, dtype)
        mem = parse_bytes(args.mem) if args.mem is not None else work.memory_bytes
        print(f"simgpu run: {work.name} ({dtype}) on {ctx.info.model} {ctx.info.device_uuid} ({ctx.info.sharing}, "
              f"{ctx.info.visible_sms}/{ctx.info.sms} SMs, quota {ctx.info.mem_limit >> 20} MiB)", file=sys.stderr)
        chunk = 1 << 30
        left = mem
        while left > 0:
            ctx.malloc(min(chunk, left))
            left -= min(chunk, left)
        start_virtual = ctx.synchronize().virtual_time
        last_report = time.monotonic()
        while True:
            for op in work.ops:
                ctx.launch(op)
            progress.iterations += 1
            iterations = progress.iterations
            now = time.monotonic()
            finished = (args.iterations is not None and iterations >= args.iterations) or \
                (args.duration is not None and now - progress.start_wall >= args.duration)
            if iterations % args.sync_every and not finished:
                continue
            done = ctx.synchronize()
            now = time.monotonic()
            if finished or now - last_report >= args.report_every:
                virtual = max(1e-12, progress.virtual_done + done.virtual_time - start_virtual)
                wall = max(1e-9, now - progress.start_wall)
                usage = ctx.usage()
                stats = {"workload": work.name, "iterations": iterations, "it_per_s": iterations / virtual,
                         "tflops": iterations * work.flops / virtual / 1e12, "real_it_per_s": iterations / wall,
                         "kernels_per_s_wall": iterations * len(work.ops) / wall,
                         "virtual_s": virtual, "wall_s": wall, "device_bytes": usage["device_bytes"],
                         "host_bytes": usage["host_bytes"], "progress_rate": usage["progress_rate"]}
                _report(args, stats)
                last_report = now
                progress.virtual_done, start_virtual = virtual, done.virtual_time
                progress.reported = iterations
            if finished:
                break
        ctx.close()
    return 0
