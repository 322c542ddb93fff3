"""fgpu's device plugin as a real process for e2e tests, registered with the stub kubelet
(devcluster/stub_kubelet.py) and publishing to the test cluster as the plugin of one node."""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

from devcluster.stub_kubelet import StubKubelet  # noqa: E402
from simgpu.nodeconfig import parse_node_config  # noqa: E402


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds: a node-side process stopped as the kubelet stops a pod."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def running_plugin(k8s, node: str, config: str, secret: bytes, labels: dict[str, str] | None = None,
                   args: tuple[str, ...] = (), log_file: Path | None = None
                   ) -> Iterator[tuple[object, StubKubelet, object]]:
    """Create Node `node` (with `labels`), start the stub kubelet and `fgpu-device-plugin` for it with the
    simgpu node config `config` (and more command-line `args`), its output going to `log_file` (which a test
    may read while it runs); yield (CoreV1Api, kubelet, parsed config); stop both and delete the node."""
    from kubernetes import client

    workdir = tempfile.mkdtemp(prefix="dpe", dir="/tmp")  # short: unix socket paths are limited to 108 bytes
    log_path = log_file or Path(workdir) / "plugin.log"
    (Path(workdir) / "secret").write_bytes(secret)
    cfg_path = Path(workdir) / "node.yaml"
    cfg_path.write_text(config + f"tokenSecretFile: {workdir}/secret\n")
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        core.create_node({"metadata": {"name": node, "labels": labels or {}}})
        kubelet = StubKubelet(workdir)
        kubelet.start()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "deviceplugin.cli", "--config", str(cfg_path), "--node-name", node,
                 "--device-plugin-path", workdir, "--kubeconfig", k8s.kubeconfig, "--daemon-socket",
                 "/run/fgpu/daemon.sock", *args], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield core, kubelet, parse_node_config(yaml.safe_load(config))
        finally:
            stop_process(proc)
            kubelet.stop()
            core.delete_node(node)
            print(log_path.read_text()[-3000:])
            shutil.rmtree(workdir, ignore_errors=True)


def report_ready(core, node: str, gpu_slots: int, resource: str = "nvidia.com/gpu") -> None:
    """What the node's kubelet does once the plugin lists its devices: reports Ready, with capacity counting
    ListAndWatch's devices; and what the node lifecycle controller then does: lifts the not-ready taint."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", resource: str(gpu_slots)}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stub kubelet"}
    core.patch_node_status(node, {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}})
    core.patch_node(node, {"spec": {"taints": None}})


def ready_node(core, kubelet: StubKubelet, node: str, slots: int, resource: str = "nvidia.com/gpu") -> list:
    """Once the plugin has published `node`'s inventory and registered `slots` devices of `resource`, the node
    reported Ready (`report_ready`). The devices."""
    from polling import wait_for

    from fgpu_contracts import keys

    wait_for(lambda: keys.INVENTORY in (core.read_node(node).metadata.annotations or {}), 30,
             "the plugin to publish the inventory")
    devices = kubelet.wait_devices(resource, lambda d: len(d) == slots, timeout=20)
    report_ready(core, node, len(devices), resource)
    return devices
