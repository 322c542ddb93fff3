"""One GPU node on real processes, for the fault engine (tests/e2e/faults.py): its simgpu node daemon, its
fgpu-device-plugin and its stub kubelet (`python -m devcluster.kubelets`), each of which can be SIGKILLed and
started again while workloads hold contexts on the daemon.

The Node object is an ordinary one, not KWOK's: KWOK would mark its pods Running at once, and the plugin's
Allocate matches only pending pods, as on a real node before the kubelet admits them. So its pods stay Pending
(Allocate'd by the stub kubelet), and a heartbeat keeps the node Ready should a controller-manager watch it.
`records()` and `scrape()` read back what the node handed out, for the invariant checker.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from devcluster import fgpu
from devcluster.kubeplane import ComponentError, free_port
from simgpu.token import load_or_create_secret

PROCS = ("daemon", "plugin", "kubelet")


class RealNode:
    def __init__(self, kubeconfig: Path, name: str, logs: Path, gpus: int = 2, model: str = "A100-80GB",
                 split: int = 10, handoff_key_file: Path | None = None):
        self.kubeconfig, self.name, self.logs = Path(kubeconfig), name, Path(logs)
        self.plugin_args = ["--handoff-key-file", str(handoff_key_file)] if handoff_key_file else []
        self.dir = Path(tempfile.mkdtemp(prefix="fgpu-rn-", dir="/tmp"))  # short: unix socket paths <= 107 bytes
        self.plugin_dir, self.socket = self.dir / "dp", self.dir / "run" / "daemon.sock"
        self.plugin_dir.mkdir()
        (self.dir / "run").mkdir()
        # as the plugin and daemon read it (random raw bytes could begin or end with whitespace, which they strip)
        self.secret = load_or_create_secret(self.dir / "secret")
        self.config = self.dir / "node.yaml"
        self.config.write_text(yaml.safe_dump({
            "version": "v1", "gpus": [{"model": model, "count": gpus, "sharing": "fractional"}],
            "fractional": {"splitCount": split}, "tokenSecretFile": str(self.dir / "secret")}, sort_keys=False))
        self.slots = gpus * split
        self.metrics_port = free_port()
        self.procs: dict[str, object] = {}
        self.starts = 0
        self._stop = threading.Event()

    def gpu_uuids(self) -> list[str]:
        """Its GPUs' UUIDs, as the plugin and daemon derive them from the config."""
        from simgpu.nodeconfig import parse_node_config

        return [g.uuid for g in parse_node_config(yaml.safe_load(self.config.read_text())).gpu_devices(self.name)]

    # --- the Node object --------------------------------------------------------------------------------
    def create(self, core) -> None:
        core.create_node({"metadata": {"name": self.name, "labels": {
            "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}})
        self._ready(core)
        core.patch_node(self.name, {"spec": {"taints": None}})  # the not-ready taint every new node gets
        threading.Thread(target=self._heartbeat, args=(core,), daemon=True).start()

    def _ready(self, core) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        core.patch_node_status(self.name, {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fgpu stub kubelet",
             "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    def _heartbeat(self, core) -> None:
        while not self._stop.wait(10.0):
            with contextlib.suppress(Exception):  # the apiserver restarting (a fault): the next beat will do
                self._ready(core)

    # --- the processes ----------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        for which in PROCS:
            self.start_one(which)
        self.wait_advertised(timeout)

    def start_one(self, which: str) -> None:
        self.starts += 1
        log = self.logs / f"{self.name}-{which}.{self.starts}.log"
        if which == "daemon":
            proc = fgpu.start_daemon(self.config, self.socket, self.name, log, "--metrics-port",
                                     str(self.metrics_port), "--metrics-interval", "0.5", wait=False)
        elif which == "plugin":
            proc = fgpu.start_plugin(self.config, self.name, self.plugin_dir, self.kubeconfig, self.socket, log,
                                     *self.plugin_args)
        else:
            proc = fgpu.spawn([sys.executable, "-m", "devcluster.kubelets", "--kubeconfig", str(self.kubeconfig),
                               f"--node={self.name}={self.plugin_dir}"], log)
        self.procs[which] = proc
        if which == "daemon":
            self.wait_daemon()

    def wait_daemon(self, timeout: float = 30.0) -> None:
        """Until the daemon answers (its socket file alone proves nothing: a killed daemon leaves it)."""
        from simgpu.client import DaemonClient

        proc, deadline = self.procs["daemon"], time.monotonic() + timeout
        while True:
            try:
                with DaemonClient(str(self.socket), timeout=2.0) as client:
                    client.devices()
                return
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ComponentError(f"simgpu daemon of {self.name} does not answer:\n{fgpu.log_tail(proc)}") \
                        from None
                time.sleep(0.1)

    def kill(self, which: str) -> None:
        """SIGKILL one process; a killed kubelet's successor wipes the plugin sockets as the kubelet does."""
        proc = self.procs.pop(which)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if which == "kubelet":
            for sock in self.plugin_dir.glob("*.sock"):
                sock.unlink(missing_ok=True)

    def restart(self, which: str) -> None:
        self.kill(which)
        self.start_one(which)

    def wait_advertised(self, timeout: float = 60.0) -> None:
        """Until the stub kubelet has the plugin's devices and the node shows them (and the inventory)."""
        from kubernetes import client

        from fgpu_contracts import keys

        deadline = time.monotonic() + timeout
        with self._api() as api:
            core = client.CoreV1Api(api)
            while True:
                node = core.read_node(self.name)
                if (node.status.allocatable or {}).get("nvidia.com/gpu") == str(self.slots) and \
                        keys.INVENTORY in (node.metadata.annotations or {}):
                    return
                if time.monotonic() > deadline:
                    tails = "\n".join(f"--- {w}:\n{fgpu.log_tail(p, 1500)}" for w, p in self.procs.items())
                    raise ComponentError(f"node {self.name}: devices not advertised in {timeout:.0f} s\n{tails}")
                time.sleep(0.3)

    def _api(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    # --- what the node handed out -----------------------------------------------------------------------
    def records(self) -> dict[str, dict]:
        """`namespace.pod.container` -> what Allocate answered that container (the stub kubelet's files)."""
        out = {}
        for path in self.plugin_dir.glob("pods/*.json"):
            try:
                out[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):  # being written or removed right now
                continue
        return out

    def allocated_since(self, since: float) -> float | None:
        """When (time.time()) the first record still here was written at or after `since` (None: none)."""
        times = []
        for path in self.plugin_dir.glob("pods/*.json"):
            with contextlib.suppress(OSError):
                if (mtime := path.stat().st_mtime) >= since:
                    times.append(mtime)
        return min(times, default=None)

    def scrape(self) -> str:
        """The daemon's Prometheus text (its open contexts are `fgpu_pod_gpu_memory_limit_bytes` series)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def stop(self) -> None:
        """Stop the processes and delete the Node (no pod could run on it once its kubelet is gone)."""
        from kubernetes import client

        self._stop.set()
        for which in ("kubelet", "plugin", "daemon"):
            if (proc := self.procs.pop(which, None)) is not None:
                fgpu.stop(proc)
        with contextlib.suppress(Exception), self._api() as api:
            client.CoreV1Api(api).delete_node(self.name)
        shutil.rmtree(self.dir, ignore_errors=True)
