"""Allocate for a container holding a share on each of several GPUs: all its devices, each with its own memory
limit (HAMi's CUDA_DEVICE_MEMORY_LIMIT_<i>) and its own daemon token, in the hand-off's order, whichever
fractional slots the kubelet happened to pick; the node daemon honours each token on its own device."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from polling import wait_for

from deviceplugin.allocate import AllocContext, allocate_assignment
from deviceplugin.handoff import PodView, find_assignment
from deviceplugin.resources import discover, node_devices
from fgpu_contracts.assignment import (
    Assignment,
    ContainerAssignment,
    DeviceShare,
    dump_assignment,
    parse_assignment,
)
from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import ASSIGNED_AT, ASSIGNMENT
from simgpu.client import DaemonClient
from simgpu.env import read_container_env
from simgpu.errors import OutOfMemoryError
from simgpu.nodeconfig import parse_node_config
from simgpu.token import verify_token

SECRET = b"s" * 32
NODE = parse_node_config({"version": "v1", "gpus": [{"model": "A100-80GB", "count": 4, "sharing": "fractional"}]})
GIB = 1 << 30
REPO = Path(__file__).resolve().parents[2]


def two_halves(first: int, second: int) -> tuple[PodView, list[str]]:
    gpus = [g.uuid for g in NODE.gpu_devices("n1")]
    container = ContainerAssignment(name="tp", priority=0, slo_slowdown=1.5, devices=[
        DeviceShare(uuid=gpus[first], milli_gpu=500, mem_bytes=40 * GIB, sm_pct=50),
        DeviceShare(uuid=gpus[second], milli_gpu=500, mem_bytes=40 * GIB, sm_pct=50)])
    handoff = dump_assignment(Assignment(node="n1", containers=[container]))
    return PodView("ns", "tp-pod", "uid-tp", "n1", "Pending", {ASSIGNMENT: handoff, ASSIGNED_AT: "t"}), gpus


@pytest.mark.parametrize("slots", [(0, 1), (0, 35)], ids=["two slots of one GPU", "slots of two GPUs"])
def test_allocate_gives_the_container_every_assigned_gpu_with_its_own_limit_and_token(slots):
    pod, gpus = two_halves(3, 1)
    [res] = discover(NODE, "n1")
    ids = [res.slots[i].id for i in slots]
    match = find_assignment([pod], "n1", len(ids))
    assert match is not None and find_assignment([pod], "n1", 1) is None  # matched by its device count
    alloc = allocate_assignment(res, ids, match, AllocContext("n1", SECRET, daemon_socket="/run/fgpu/d.sock"),
                                node_devices(NODE, "n1"))
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpus[3]},{gpus[1]}"  # the hand-off's order, not the slots'
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "40960m"
    assert alloc.envs["CUDA_DEVICE_SM_LIMIT"] == "50" and alloc.envs["CUDA_TASK_PRIORITY"] == "0"
    seen = read_container_env(alloc.envs)  # as the workload's side reads it
    assert seen.visible_devices == [gpus[3], gpus[1]] and seen.memory_limits == [40 * GIB, 40 * GIB]
    grants = [verify_token(SECRET, token) for token in seen.tokens]
    assert [(g.device_uuid, g.vdevice_index, g.mem_limit_bytes, g.sm_limit_pct) for g in grants] == [
        (gpus[3], 0, 40 * GIB, 50), (gpus[1], 1, 40 * GIB, 50)]
    assert {(g.pod_name, g.container, g.priority, g.slo_slowdown) for g in grants} == {("tp-pod", "tp", 0, 1.5)}


def test_a_hand_off_naming_one_gpu_twice_for_a_container_is_not_one():
    pod, gpus = two_halves(2, 1)
    forged = pod.annotations[ASSIGNMENT].replace(gpus[1], gpus[2])  # as a hand edit would write it
    with pytest.raises(InputError, match="devices must be different GPUs or MIG instances"):
        parse_assignment(forged)
    twice = PodView("ns", "tp-pod", "uid-tp", "n1", "Pending", {ASSIGNMENT: forged, ASSIGNED_AT: "t"})
    assert find_assignment([twice], "n1", 2) is None  # never handed out


def test_a_single_gpu_hand_off_of_an_earlier_fgpu_still_reads():
    text = ('{"version": "v1", "node": "n1", "containers": [{"name": "c", "priority": 1, "devices": '
            '[{"uuid": "GPU-0", "milliGpu": 300, "memBytes": 8589934592, "smPct": 30}]}]}')
    [device] = parse_assignment(text).containers[0].devices
    assert (device.uuid, device.milli_gpu, device.mem_bytes, device.sm_pct) == ("GPU-0", 300, 8 * GIB, 30)


def test_the_node_daemon_opens_each_device_of_the_container_with_its_token_and_quota(plugin_dir, secret_file):
    """simgpu's node daemon (its own process, the same node config and secret) takes each device's token for
    that device only, with half of its memory as the quota."""
    config = os.path.join(plugin_dir, "node.yaml")
    with open(config, "w") as fh:
        fh.write("version: v1\ngpus: [{model: A100-80GB, count: 4, sharing: fractional}]\nmemoryQuota: hard\n"
                 f"tokenSecretFile: {secret_file}\n")
    sock = os.path.join(plugin_dir, "daemon.sock")
    daemon = subprocess.Popen([sys.executable, "-m", "simgpu.cli", "daemon", "--config", config, "--socket", sock,
                               "--node-name", "n1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: os.path.exists(sock) or daemon.poll() is not None, timeout=20)
        assert daemon.poll() is None
        pod, gpus = two_halves(3, 1)
        [res] = discover(NODE, "n1")
        alloc = allocate_assignment(res, [res.slots[0].id, res.slots[1].id], find_assignment([pod], "n1", 2),
                                    AllocContext("n1", Path(secret_file).read_bytes()), node_devices(NODE, "n1"))
        seen = read_container_env(alloc.envs)
        with DaemonClient(sock) as client:
            contexts = [client.open_context(token) for token in seen.tokens]
            assert [(c.info.device_uuid, c.info.mem_limit) for c in contexts] == [(gpus[3], 40 * GIB),
                                                                                 (gpus[1], 40 * GIB)]
            contexts[1].malloc(39 * GIB)
            with pytest.raises(OutOfMemoryError):
                contexts[1].malloc(2 * GIB)  # its quota on GPU 1, whatever GPU 3 has left
            contexts[0].malloc(39 * GIB)
            for c in contexts:
                c.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
