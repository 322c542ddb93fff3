"""`fgpu-device-plugin`: advertise a node's emulated GPUs to the kubelet.

    fgpu-device-plugin --config FILE --node-name NAME [--device-plugin-path DIR] [--daemon-socket PATH]
                       [--state-dir DIR] [--kubeconfig FILE | --standalone] [--metrics-port PORT]
                       [--handoff-key-file PATH]

Bad input (an invalid config, a missing directory) is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading

from deviceplugin.allocate import AllocContext
from deviceplugin.health import start_health
from deviceplugin.labels import inventory, inventory_annotation, node_labels
from deviceplugin.process import serve_until_signalled
from deviceplugin.resources import discover, node_devices, node_level_resources
from deviceplugin.server import HealthBoard, PluginManager, make_shared
from deviceplugin.statedir import DEFAULT_STATE_DIR, STATE_DIR_ENV, explicit_state_dir, prepare_state_dir
from fgpu_contracts.cli import OneLineParser, port
from fgpu_contracts.signature import load_key
from simgpu.errors import SimgpuError
from simgpu.nodeconfig import load_node_config, resolve_node_name
from simgpu.token import load_or_create_secret

log = logging.getLogger("fgpu.deviceplugin")
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
JOURNAL_NAME = "fgpu-allocations.journal"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fgpu-device-plugin", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="node config YAML (see docs/deviceplugin.md)")
    p.add_argument("--node-name", help="this node's name (default: config nodeName, $NODE_NAME, hostname)")
    p.add_argument("--device-plugin-path", default=DEFAULT_PLUGIN_DIR,
                   help=f"directory holding kubelet.sock (default {DEFAULT_PLUGIN_DIR})")
    p.add_argument("--daemon-socket", help="the simgpu node daemon's socket (mounted into containers)")
    p.add_argument("--state-dir", metavar="DIR",
                   help="writable directory for state that must outlive the plugin (the allocation journal); "
                        f"default: config stateDir, ${STATE_DIR_ENV}, the tokenSecretFile's directory if "
                        f"writable, else {DEFAULT_STATE_DIR}")
    p.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster, else standalone)")
    p.add_argument("--standalone", action="store_true", help="never talk to the Kubernetes API")
    p.add_argument("--metrics-port", type=port, default=0,
                   help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (0: off; see docs/metrics.md)")
    p.add_argument("--handoff-key-file", default="", metavar="PATH",
                   help="the operator's hand-off key: hand out only assignments it signed (default: unverified)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


class Plugin:
    """Everything one node runs, assembled from the config; start() returns once servers are up."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.cfg = load_node_config(args.config)
        self.node = resolve_node_name(self.cfg, args.node_name)
        self.resources = discover(self.cfg, self.node)
        self.gpus = self.cfg.gpu_devices(self.node)
        secret = load_or_create_secret(self.cfg.token_secret_file)
        handoff_key = load_key(args.handoff_key_file) if args.handoff_key_file else None
        ctx = AllocContext(node_name=self.node, secret=secret, daemon_socket=args.daemon_socket,
                           memory_quota=self.cfg.memory_quota, handoff_key=handoff_key)
        self.api = None
        if not args.standalone:
            from deviceplugin.kube import load_api_client

            try:
                self.api = load_api_client(args.kubeconfig)
            except Exception as err:  # unreadable or invalid kubeconfig
                raise SimgpuError(f"cannot load: {err}", field="--kubeconfig") from None
        pods = None
        needs_journal = self.api is not None and any(r.fractional for r in self.resources)
        self.state_dir = None
        if needs_journal or explicit_state_dir(args.state_dir, self.cfg.state_dir, os.environ):
            # checked even when unused if set explicitly: a typo should not wait for the first fractional GPU
            self.state_dir = prepare_state_dir(args.state_dir, self.cfg.state_dir, os.environ,
                                               self.cfg.token_secret_file)
        if needs_journal and handoff_key is None:
            log.warning("no --handoff-key-file: fractional hand-offs are unverified; any fgpu.io/assignment a pod "
                        "carries at Allocate is handed out (run with the operator's key to refuse forged ones)")
        if needs_journal:
            from deviceplugin.kube import KubePods
            from deviceplugin.records import JournalBusy

            journal = os.path.join(self.state_dir, JOURNAL_NAME)
            try:
                pods = KubePods(self.api, self.node, journal_path=journal)
            except JournalBusy as err:
                raise SimgpuError(f"{err}; give each plugin its own state directory", field="--state-dir") from None
        self.board = HealthBoard()
        self.shared = make_shared(ctx, node_devices(self.cfg, self.node), pods, self.board)
        if pods is not None:  # allocated before a crash, maybe not on the pod yet: never hand out twice
            self.shared.taken |= pods.recorder.journaled()
        self.manager = PluginManager(self.resources, self.shared, args.device_plugin_path)
        self.daemon_socket = args.daemon_socket
        self.metrics_port = args.metrics_port
        self.metrics_server = None
        self.mig_sync = None  # dynamic MIG: applies the GPUNode's desired layouts through the daemon
        if self.api is not None and args.daemon_socket and any(g.mig_dynamic for g in self.gpus):
            from deviceplugin.migsync import MigSync

            self.mig_sync = MigSync(self.api, self.node, args.daemon_socket, self.gpus, self._relaid, self.board.bump,
                                    self.shared.stop)

    def start(self) -> None:
        if self.metrics_port:
            import prometheus_client

            prometheus_client.disable_created_metrics()  # no `_created` gauge beside each counter / histogram
            try:
                self.metrics_server = self.shared.metrics.serve(self.metrics_port)
            except OSError as err:
                raise SimgpuError(f"{self.metrics_port}: cannot serve metrics: {err.strerror or err}",
                                  field="--metrics-port") from None
        try:
            self.manager.start()
        except OSError as err:  # kubelet.sock's directory missing or not ours to write
            raise SimgpuError(f"{self.manager.plugin_dir}: {err.strerror or err}",
                              field="--device-plugin-path") from None
        start_health(self.daemon_socket, self.board, self.shared.stop)
        if self.api is not None:
            threading.Thread(target=self._publish_loop, name="publish", daemon=True).start()
        if self.mig_sync is not None:
            self.mig_sync.start()
        log.info("node %s: %s (%s)", self.node, ", ".join(f"{r.name}={len(r.slots)}" for r in self.resources),
                 "with Kubernetes API" if self.api is not None else "standalone")

    def _relaid(self, gpus) -> None:
        """A dynamic-MIG GPU's instances changed: advertise the node's devices as they are now."""
        self.gpus = gpus
        self.resources = discover(self.cfg, self.node, gpus)
        self.shared.devices = node_devices(self.cfg, self.node, gpus)
        added = self.manager.update(self.resources)
        log.info("MIG layout changed: %s%s", ", ".join(f"{r.name}={len(r.slots)}" for r in self.resources),
                 f" (new: {', '.join(added)})" if added else "")
        self.board.bump()

    def _publish_loop(self) -> None:
        from deviceplugin.kube import KubeNode

        node = KubeNode(self.api, self.node)
        version = -1
        while not self.shared.stop.is_set():
            current, health = self.board.snapshot()
            try:
                reports = dict(self.mig_sync.reports) if self.mig_sync is not None else {}
                inv = inventory(self.cfg, self.node, self.gpus, self.resources, health, reports)
                node.publish(node_labels(self.cfg, self.gpus), inventory_annotation(inv))
                node.publish_capacity(node_level_resources(self.cfg, self.node))
            except Exception as err:
                log.warning("cannot publish labels/inventory on node %s: %s", self.node, err)
                self.shared.stop.wait(5.0)
                continue
            try:  # the scheduler still reads the annotation: a GPUNode failure waits for the next round
                node.publish_gpunode(inv)
            except Exception as err:
                log.warning("cannot publish GPUNode %s: %s", self.node, err)
            version = current
            # republish on every health change, and every 60 s (a kubelet restart may reset capacity)
            self.board.wait_change(version, timeout=60.0)

    def stop(self) -> None:
        self.manager.stop()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        pods = self.shared.pods
        if pods is not None and hasattr(pods, "close"):
            pods.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve_until_signalled("fgpu-device-plugin", lambda: Plugin(args))


if __name__ == "__main__":
    sys.exit(main())
