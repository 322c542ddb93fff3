"""`fgpu-dra`: fgpu's DRA driver for a node's emulated GPUs (docs/dra.md).

    fgpu-dra --config FILE [--node-name NAME] [--pool NAME] [--allocator kube-scheduler|fgpu-scheduler]
             [--daemon-socket PATH] [--state-dir DIR] [--cdi-dir DIR] [--registry-dir DIR] [--plugins-dir DIR] [--kubeconfig FILE]

Reads the same node config as fgpu-device-plugin; publishes the node's ResourceSlices (again on every health
change), and serves the kubelet's DRA plugin API. Bad input is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import threading

from deviceplugin.allocate import AllocContext
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.plugin import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, DriverState, KubeletPlugin
from deviceplugin.dra.slices import resource_slices
from deviceplugin.dra.state import CHECKPOINT_NAME, DEFAULT_CDI_DIR, Checkpoint
from deviceplugin.health import start_health
from deviceplugin.process import serve_until_signalled
from deviceplugin.server import HealthBoard
from deviceplugin.statedir import DEFAULT_STATE_DIR, STATE_DIR_ENV, prepare_state_dir
from fgpu_contracts import dra as names
from fgpu_contracts.cli import OneLineParser
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import load_node_config, resolve_node_name
from simgpu.token import load_or_create_secret

log = logging.getLogger("fgpu.dra")
POOL_ENV = "FGPU_NODE_POOL"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fgpu-dra", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="node config YAML (see docs/deviceplugin.md)")
    p.add_argument("--node-name", help="this node's name (default: config nodeName, $NODE_NAME, hostname)")
    p.add_argument("--pool", default=os.environ.get(POOL_ENV, "default"),
                   help=f"fgpu node pool, published as each device's 'pool' attribute (default ${POOL_ENV} "
                        "or 'default')")
    p.add_argument("--allocator", default=names.ALLOCATOR_KUBE, choices=names.ALLOCATORS,
                   help="which scheduler allocates this node's devices (default kube-scheduler); fgpu-scheduler "
                        f"taints every device with {names.TAINT_ALLOCATOR} so kube-scheduler keeps off them "
                        "(docs/dra.md)")
    p.add_argument("--daemon-socket", help="the simgpu node daemon's socket (mounted into containers)")
    p.add_argument("--state-dir", metavar="DIR",
                   help=f"writable directory for the checkpoint of prepared claims (default: config stateDir, "
                        f"${STATE_DIR_ENV}, the tokenSecretFile's directory if writable, else {DEFAULT_STATE_DIR})")
    p.add_argument("--cdi-dir", default=DEFAULT_CDI_DIR, help=f"where CDI specs go (default {DEFAULT_CDI_DIR})")
    p.add_argument("--registry-dir", default=DEFAULT_REGISTRY_DIR,
                   help=f"the kubelet's plugin registration directory (default {DEFAULT_REGISTRY_DIR})")
    p.add_argument("--plugins-dir", default=DEFAULT_PLUGINS_DIR,
                   help=f"parent of the driver's own socket directory (default {DEFAULT_PLUGINS_DIR})")
    p.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


class Driver:
    """Everything one node runs, assembled from the config; start() returns once the sockets listen."""

    def __init__(self, args: argparse.Namespace) -> None:
        from deviceplugin.dra.kube import KubeClaims, SlicePublisher
        from deviceplugin.kube import load_api_client

        cfg = load_node_config(args.config)
        self.node = resolve_node_name(cfg, args.node_name)
        self.pool = args.pool
        self.allocator = args.allocator
        self.devices = node_devices(cfg, self.node)
        try:
            api = load_api_client(args.kubeconfig)
        except Exception as err:  # unreadable or invalid kubeconfig
            raise SimgpuError(f"cannot load: {err}", field="--kubeconfig") from None
        if api is None:
            raise SimgpuError("a DRA driver needs the Kubernetes API: no kubeconfig, $KUBECONFIG or in-cluster "
                              "service account", field="--kubeconfig")
        state_dir = prepare_state_dir(args.state_dir, cfg.state_dir, os.environ, cfg.token_secret_file)
        ctx = AllocContext(node_name=self.node, secret=load_or_create_secret(cfg.token_secret_file),
                           daemon_socket=args.daemon_socket, memory_quota=cfg.memory_quota)
        checkpoint = Checkpoint(os.path.join(state_dir, CHECKPOINT_NAME))
        problem = checkpoint.unknown_devices(set(self.devices.by_name))
        if problem:
            raise SimgpuError(problem, field="--config")
        self.state = DriverState(self.node, self.devices, ctx, checkpoint, args.cdi_dir, KubeClaims(api))
        self.plugin = KubeletPlugin(self.state, args.registry_dir, args.plugins_dir)
        self.publisher = SlicePublisher(api, self.node)
        self.board = HealthBoard()
        self.daemon_socket = args.daemon_socket

    def start(self) -> None:
        self.state.forget_gone_claims()  # before the kubelet can ask: they would count against new claims
        self.plugin.start()
        start_health(self.daemon_socket, self.board, self.plugin.stopping)
        threading.Thread(target=self._publish_loop, name="slices", daemon=True).start()
        log.info("node %s: %d DRA devices on %d GPUs", self.node, len(self.devices.devices),
                 len(self.devices.counter_sets))

    def _publish_loop(self) -> None:
        stop = self.plugin.stopping
        while not stop.is_set():
            version, health = self.board.snapshot()
            try:
                self.publisher.publish(functools.partial(resource_slices, self.node, self.devices, health, self.pool,
                                                         allocator=self.allocator))
            except Exception as err:  # the API unreachable: keep serving the kubelet, publish again soon
                log.warning("cannot publish ResourceSlices of node %s: %s", self.node, err)
                stop.wait(5.0)
                continue
            self.board.wait_change(version, timeout=60.0)  # every health change, and a minute's check

    def stop(self) -> None:
        self.plugin.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve_until_signalled("fgpu-dra", lambda: Driver(args))


if __name__ == "__main__":
    sys.exit(main())
