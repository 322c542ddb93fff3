"""Start the node daemon: load the node config, build the emulated node, serve gRPC on a unix socket,
export metrics, and stop cleanly on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import sys
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, start_http_server

from simgpu.daemon import simgpu_daemon_pb2_grpc as pb_grpc
from simgpu.daemon.metrics import Exporter, SnapshotCollector
from simgpu.daemon.runtime import NodeRuntime
from simgpu.daemon.service import NodeDaemonService
from simgpu.device import build_node
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import load_node_config, resolve_node_name
from simgpu.token import load_or_create_secret

METRICS_INTERVAL_S = 1.0


def _prepare_socket(path: str) -> None:
    """Make room for our socket: remove a stale one (nothing answers on it), but refuse a socket another
    process still answers on (a second daemon would silently steal it from the first) and any other file."""
    sock = Path(path)
    try:
        sock.parent.mkdir(parents=True, exist_ok=True)
        if not (sock.exists() or sock.is_symlink()):
            return
        if not stat.S_ISSOCK(sock.lstat().st_mode):
            raise SimgpuError(f"{path} exists and is not a socket", field="--socket",
                              allowed=["a new path", "the socket of a daemon that has stopped"])
        if _answers(path):
            raise SimgpuError(f"{path} is in use: a process (another simgpu daemon?) answers on it", field="--socket",
                              allowed=["a path no live process listens on"])
        sock.unlink()
    except OSError as err:
        raise SimgpuError(f"{path}: {err.strerror or err}", field="--socket") from None


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # stale: whoever made it is gone
        except OSError:
            return True  # e.g. a full backlog or no permission: someone is there; leave it alone
    return True


async def _metrics_loop(exporter: Exporter, collector: SnapshotCollector, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            collector.snapshot = exporter.step()
        except Exception:  # never let the exporter die: keep serving the last snapshot
            logging.getLogger("simgpu.daemon").exception("metrics step failed")


async def serve(config_path: str, socket_path: str, *, metrics_port: int | None = None,
                node_name: str | None = None, token_secret_file: str | None = None,
                metrics_interval: float = METRICS_INTERVAL_S) -> None:
    cfg = load_node_config(config_path)
    name = resolve_node_name(cfg, node_name)
    node = build_node(cfg, name)
    secret = load_or_create_secret(token_secret_file or cfg.token_secret_file)
    runtime = NodeRuntime(node, secret=secret, time_dilation=cfg.time_dilation)
    runtime.start()

    server = grpc.aio.server()
    pb_grpc.add_NodeDaemonServicer_to_server(NodeDaemonService(runtime), server)
    _prepare_socket(socket_path)
    try:
        server.add_insecure_port(f"unix://{os.path.abspath(socket_path)}")
    except RuntimeError as err:  # grpc's "Failed to bind": the directory is not writable, or the name too long
        runtime.stop()
        raise SimgpuError(f"cannot listen on {socket_path}: {err}", field="--socket") from None
    await server.start()

    tasks = []
    http = None
    if metrics_port is not None:
        collector = SnapshotCollector()
        registry = CollectorRegistry()
        registry.register(collector)
        exporter = Exporter(runtime, slo_slowdown=cfg.qos.slo_slowdown)
        collector.snapshot = exporter.snapshot()
        try:
            http, _ = start_http_server(metrics_port, registry=registry)
        except OSError as err:
            runtime.stop()
            await server.stop(grace=None)
            Path(socket_path).unlink(missing_ok=True)
            raise SimgpuError(f"cannot serve metrics on port {metrics_port}: {err.strerror or err}",
                              field="--metrics-port") from None
        print(f"simgpu daemon: metrics on http://127.0.0.1:{http.server_port}/metrics", file=sys.stderr, flush=True)
        tasks.append(asyncio.create_task(_metrics_loop(exporter, collector, metrics_interval)))
    devices = len(node.devices)
    print(f"simgpu daemon: node {name}: {devices} device(s) on unix://{socket_path} "
          f"(time dilation {cfg.time_dilation}, priorities {'on' if cfg.qos.priorities else 'off'})",
          file=sys.stderr, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # the socket first: the rest of the shutdown (every context ended, gRPC's grace, the metrics server) can
    # outlast a pod's grace period on a loaded host, and a SIGKILL then left the socket behind on the node
    with contextlib.suppress(FileNotFoundError):
        Path(socket_path).unlink()
    runtime.stop()
    for task in tasks:
        task.cancel()
    await server.stop(grace=1.0)
    if http is not None:
        http.shutdown()


def run(config_path: str, socket_path: str, **kwargs) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _prepare_socket(socket_path)  # refuse a live socket before loading anything
    asyncio.run(serve(config_path, socket_path, **kwargs))
    return 0
