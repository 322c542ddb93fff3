"""`simgpu daemon`: the node daemon that serves this node's emulated GPUs to workloads."""
from __future__ import annotations

import argparse

from fgpu_contracts.cli import number, port, unix_socket_path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("daemon", help="serve the node's emulated GPUs over a unix socket",
                              description="Serve the emulated GPUs of a node config to workloads (simgpu run, "
                                          "simgpu.client) over gRPC on a unix socket; see docs/daemon.md.")
    p.add_argument("--config", required=True, help="node config YAML (version: v1)")
    p.add_argument("--socket", required=True, type=unix_socket_path,
                   help="unix socket path to listen on (refused while another daemon answers on it)")
    p.add_argument("--metrics-port", type=port, default=None,
                   help="serve Prometheus metrics on this port (0 = any free port)")
    p.add_argument("--metrics-interval", type=number(float, lo=0, lo_open=True, hi=3600), default=1.0,
                   help="seconds (wall time) per metrics window: counters are averages over it (default 1)")
    p.add_argument("--node-name", default=None, help="node name for device UUIDs (default: config, $NODE_NAME, hostname)")
    p.add_argument("--token-secret-file", default=None, help="override the config's tokenSecretFile")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from simgpu.daemon.server import run

    return run(args.config, args.socket, metrics_port=args.metrics_port, node_name=args.node_name,
               token_secret_file=args.token_secret_file, metrics_interval=args.metrics_interval)
