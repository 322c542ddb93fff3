"""Start the node daemon: load the node config, build the emulated node, serve gRPC on a unix socket,
export metrics, and stop cleanly on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
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
    sock = Path(path)
    sock.parent.mkdir(parents=True, exist_ok=True)
    if sock.exists() or sock.is_symlink():
        sock.unlink()


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
    server.add_insecure_port(f"unix://{os.path.abspath(socket_path)}")
    await server.start()

    tasks = []
    http = None
    if metrics_port is not None:
        collector = SnapshotCollector()
        registry = CollectorRegistry()
        registry.register(collector)
        exporter = Exporter(runtime, slo_slowdown=cfg.qos.slo_slowdown)
        collector.snapshot = exporter.snapshot()
        http, _ = start_http_server(metrics_port, registry=registry)
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
    runtime.stop()
    for task in tasks:
        task.cancel()
    await server.stop(grace=1.0)
    if http is not None:
        http.shutdown()
    with contextlib.suppress(FileNotFoundError):
        Path(socket_path).unlink()


def run(config_path: str, socket_path: str, **kwargs) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(serve(config_path, socket_path, **kwargs))
    except SimgpuError:
        raise
    except OSError as err:
        raise SimgpuError(f"cannot serve: {err}", field="--metrics-port" if "address" in str(err).lower()
                          else "--socket") from None
    return 0
