"""Device plugin + the simgpu node daemon, each its own process, with the stub kubelet: a workload started
with Allocate's env that exceeds its memory quota gets out-of-memory while its neighbour on the same GPU
keeps running; a fault injected into the daemon reaches ListAndWatch within 1 s."""
import os
import subprocess
import sys
import time

import pytest
from polling import wait_for

from devcluster.fgpu import REPO
from deviceplugin.api import api_pb2

MPS = """version: v1
gpus: [{model: L4, count: 1}]
memoryQuota: hard
sharing:
  mps:
    resources: [{name: nvidia.com/gpu, replicas: 2}]
"""


def _simgpu(*args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "simgpu.cli", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


@pytest.fixture
def daemon(plugin_dir, secret_file):
    cfg = os.path.join(plugin_dir, "node.yaml")
    with open(cfg, "w") as fh:
        fh.write(MPS + f"tokenSecretFile: {secret_file}\n")
    sock = os.path.join(plugin_dir, "run", "daemon.sock")
    os.makedirs(os.path.dirname(sock))
    proc = _simgpu("daemon", "--config", cfg, "--socket", sock, "--node-name", "node-1")
    assert wait_for(lambda: os.path.exists(sock) or proc.poll() is not None, timeout=20) and proc.poll() is None, \
        proc.stdout.read() if proc.poll() is not None else "daemon socket did not appear"
    yield sock
    proc.terminate()
    proc.wait(timeout=10)


def container_env(resp) -> dict:
    """What the container sees: Allocate's env, with the socket path resolved through Allocate's mount (as
    the container runtime would, here without a container)."""
    env = dict(os.environ, **resp.envs)
    for mount in resp.mounts:
        sock = env["FGPU_DAEMON_SOCKET"]
        if sock.startswith(mount.container_path + "/"):
            env["FGPU_DAEMON_SOCKET"] = mount.host_path + sock[len(mount.container_path):]
    return env


def test_over_quota_workload_ooms_neighbour_keeps_running(kubelet, run_plugin, daemon):
    run_plugin(MPS, "--daemon-socket", daemon)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    stub = kubelet.plugin("nvidia.com/gpu")
    envs = [container_env(stub.Allocate(api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=[d.ID])]), timeout=5).container_responses[0]) for d in devices]
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] == envs[1]["NVIDIA_VISIBLE_DEVICES"]  # same GPU, two replicas
    quota_mib = int(envs[0]["CUDA_DEVICE_MEMORY_LIMIT_0"].removesuffix("m"))

    # long enough to outlive the greedy one's start-up and refusal on a loaded machine (4 s left ~3 s of slack)
    neighbour = _simgpu("run", "--workload", "memory", "--duration", "10", "--report-every", "1", "--json",
                        "--mem", "1GiB", env=envs[1])
    time.sleep(1.0)
    greedy = _simgpu("run", "--workload", "memory", "--iterations", "1", "--mem", f"{quota_mib + 1024}MiB",
                     env=envs[0])
    greedy_out = greedy.communicate(timeout=60)[0]
    assert greedy.returncode == 2, greedy_out
    assert "out of memory" in greedy_out.lower()
    assert neighbour.poll() is None, "the neighbour stopped when the greedy workload hit its quota"
    out = neighbour.communicate(timeout=60)[0]
    assert neighbour.returncode == 0, out
    assert '"iterations"' in out


def test_daemon_fault_reaches_list_and_watch(kubelet, run_plugin, daemon):
    run_plugin(MPS, "--daemon-socket", daemon)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    gpu = devices[0].ID.split("::")[0]
    fault = _simgpu("fault", "--socket", daemon, "--gpu", gpu, "--xid", "79")
    assert fault.wait(timeout=30) == 0, fault.stdout.read()
    t0 = time.monotonic()  # the daemon has the fault now: the plugin must push it within 1 s
    kubelet.wait_devices("nvidia.com/gpu", lambda d: all(x.health == "Unhealthy" for x in d), timeout=5)
    assert time.monotonic() - t0 <= 1.0
    clear = _simgpu("fault", "--socket", daemon, "--gpu", gpu, "--clear")
    assert clear.wait(timeout=30) == 0
    t0 = time.monotonic()
    kubelet.wait_devices("nvidia.com/gpu", lambda d: all(x.health == "Healthy" for x in d), timeout=5)
    assert time.monotonic() - t0 <= 1.0
