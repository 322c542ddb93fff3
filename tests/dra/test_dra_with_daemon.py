"""fgpu-dra's CDI edits against the real simgpu node daemon (its own process; no kubelet, no runtime): the
env a prepared claim's container gets opens a context the daemon accepts, with the claim's memory enforced
(one past 8Gi is out of memory, its neighbour sharing the GPU keeps running), for a share, a MIG placement
served as a share of a fractional GPU, and a configured MIG instance; a daemon fault taints the slices."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml
from dra_support import SECRET, StubKubelet, allocated_claim
from polling import wait_for

from deviceplugin.allocate import AllocContext
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.plugin import DriverState, KubeletPlugin
from deviceplugin.dra.slices import resource_slices
from deviceplugin.dra.state import CHECKPOINT_NAME, Checkpoint, cdi_spec_path
from deviceplugin.health import start_health
from deviceplugin.server import HealthBoard
from simgpu import env
from simgpu.nodeconfig import parse_node_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = "node-1"
CONFIG = """version: v1
migStrategy: mixed
gpus:
  - {model: A100-80GB, sharing: fractional}
  - {model: H100, mig: {layout: [4g.40gb, 3g.40gb]}}
fractional: {resources: {gpu: fgpu.io/vgpu}}
memoryQuota: hard
"""


def _simgpu(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "simgpu.cli", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def daemon(short_dir):
    with open(f"{short_dir}/secret", "wb") as fh:
        fh.write(SECRET)
    cfg = f"{short_dir}/node.yaml"
    with open(cfg, "w") as fh:
        fh.write(CONFIG + f"tokenSecretFile: {short_dir}/secret\n")
    sock = f"{short_dir}/run/daemon.sock"
    os.makedirs(os.path.dirname(sock))
    proc = _simgpu("daemon", "--config", cfg, "--socket", sock, "--node-name", NODE)
    assert wait_for(lambda: os.path.exists(sock) or proc.poll() is not None, timeout=20) and proc.poll() is None, \
        proc.stdout.read() if proc.poll() is not None else "daemon socket did not appear"
    yield sock
    proc.terminate()
    proc.wait(timeout=10)


def _devices():
    return node_devices(parse_node_config(yaml.safe_load(CONFIG)), NODE)


class Claims(dict):
    def __call__(self, namespace, name):
        return self[(namespace, name)]


def _container_env(spec_path: str) -> dict[str, str]:
    """The container's env from the CDI spec, the socket path resolved through its mount (as the runtime's
    bind mount would)."""
    with open(spec_path) as fh:
        edits = json.load(fh)["devices"][0]["containerEdits"]
    out = dict(os.environ, **dict(e.split("=", 1) for e in edits["env"]))
    for mount in edits.get("mounts", []):
        sock = out[env.DAEMON_SOCKET]
        if sock.startswith(mount["containerPath"] + "/"):
            out[env.DAEMON_SOCKET] = mount["hostPath"] + sock[len(mount["containerPath"]):]
    return out


def test_prepared_claims_run_against_the_daemon_with_their_memory_enforced(short_dir, daemon):
    devices = _devices()
    claims = Claims()
    share = {"shareID": "s", "consumedCapacity": {"gpu.fgpu.io/memory": "8Gi", "gpu.fgpu.io/smShare": "30"}}
    wanted = {"greedy": [{"device": "gpu-0-shared", **share}],
              "neighbour": [{"device": "gpu-0-shared", **share, "shareID": "s2"}],
              "mig": [{"device": next(d.name for d in devices.devices if d.gpu.index == 1 and d.profile == "3g.40gb")}]}
    refs = []
    for name, results in wanted.items():
        claims[("default", name)] = allocated_claim(name, f"uid-{name}", results, node=NODE, pod=f"p-{name}")
        refs.append(("default", name, f"uid-{name}"))
    state = DriverState(NODE, devices, AllocContext(node_name=NODE, secret=SECRET, daemon_socket=daemon),
                        Checkpoint(f"{short_dir}/{CHECKPOINT_NAME}"), f"{short_dir}/cdi", claims)
    plugin = KubeletPlugin(state, f"{short_dir}/reg", f"{short_dir}/plugins")
    plugin.start()
    kubelet = StubKubelet(plugin.registration_socket)
    try:
        kubelet.register()
        out = kubelet.prepare(*refs).claims
        assert all(out[uid].error == "" for _, _, uid in refs), {u: out[u].error for _, _, u in refs}
    finally:
        kubelet.close()
        plugin.stop()
    envs = {name: _container_env(cdi_spec_path(f"{short_dir}/cdi", uid)) for _, name, uid in refs}
    quota_mib = env.parse_memory_limit(envs["greedy"][env.memory_limit_var(0)]) >> 20
    assert quota_mib == 8192
    neighbour = _simgpu("run", "--workload", "memory", "--duration", "10", "--report-every", "1", "--json",
                        "--mem", "1GiB", env=envs["neighbour"])
    time.sleep(1.0)
    greedy = _simgpu("run", "--workload", "memory", "--iterations", "1", "--mem", f"{quota_mib + 1024}MiB",
                     env=envs["greedy"])
    greedy_out = greedy.communicate(timeout=60)[0]
    assert greedy.returncode == 2 and "out of memory" in greedy_out.lower(), greedy_out
    fits = _simgpu("run", "--workload", "memory", "--iterations", "1", "--mem", "4GiB", env=envs["greedy"])
    fits_out = fits.communicate(timeout=60)[0]
    assert fits.returncode == 0, fits_out
    mig = _simgpu("run", "--workload", "memory", "--iterations", "1", "--mem", "8GiB", env=envs["mig"])
    mig_out = mig.communicate(timeout=60)[0]
    assert mig.returncode == 0, mig_out  # the configured 3g.40gb instance itself
    assert neighbour.poll() is None, "the neighbour stopped when the greedy workload hit its quota"
    out = neighbour.communicate(timeout=60)[0]
    assert neighbour.returncode == 0 and '"iterations"' in out, out


def test_a_daemon_fault_taints_every_device_over_the_gpu(daemon):
    devices = _devices()
    board, stop = HealthBoard(), threading.Event()
    start_health(daemon, board, stop)
    try:
        gpu = devices.by_name["gpu-0"].uuid
        wait_for(lambda: gpu in board.snapshot()[1], 10, "the daemon's health stream followed")
        fault = _simgpu("fault", "--socket", daemon, "--gpu", gpu, "--xid", "79")
        assert fault.wait(timeout=30) == 0, fault.stdout.read()
        wait_for(lambda: not board.snapshot()[1][gpu].healthy, 5, "the fault on the board")
        slices = resource_slices(NODE, devices, board.snapshot()[1], "default")
        tainted = {d["name"]: d["taints"] for s in slices for d in s["spec"].get("devices", []) if d.get("taints")}
        assert set(tainted) == {d.name for d in devices.devices if d.gpu.index == 0}
        assert all(t[0]["value"] == "xid-79" for t in tainted.values())
    finally:
        stop.set()
