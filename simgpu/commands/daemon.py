"""`simgpu daemon`: the node daemon that serves this node's emulated GPUs to workloads."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("daemon", help="serve the node's emulated GPUs over a unix socket",
                              description="Serve the emulated GPUs of a node config to workloads (simgpu run, "
                                          "simgpu.client) over gRPC on a unix socket; see docs/daemon.md.")
    p.add_argument("--config", required=True, help="node config YAML (version: v1)")
    p.add_argument("--socket", required=True, help="unix socket path to listen on")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this port (0 = any free port)")
    p.add_argument("--node-name", default=None, help="node name for device UUIDs (default: config, $NODE_NAME, hostname)")
    p.add_argument("--token-secret-file", default=None, help="override the config's tokenSecretFile")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from simgpu.daemon.server import run

    return run(args.config, args.socket, metrics_port=args.metrics_port, node_name=args.node_name,
               token_secret_file=args.token_secret_file)
