"""The plugin's servers in this process (so tests can drive health and the pod source directly), the stub
kubelet still speaking real gRPC over unix sockets."""
import time

import grpc
import pytest
from test_cores import FRACTIONAL, HANDOFF_KEY, pod, signed

from deviceplugin.allocate import AllocContext
from deviceplugin.api import api_pb2
from deviceplugin.labels import Health
from deviceplugin.resources import discover, node_devices
from deviceplugin.server import PluginManager, make_shared
from simgpu.nodeconfig import parse_node_config

SECRET = b"s" * 32
TWO = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "count": 2}]})


class StubPods:
    def __init__(self, pods):
        self.pods = list(pods)
        self.marked = []
        self.fresh_calls = 0

    def pending_pods(self, node, fresh=False):
        self.fresh_calls += fresh
        return list(self.pods)

    def confirm(self, p):  # the API's answer is the list as it stands
        return next((q for q in self.pods if q.uid == p.uid), None)

    def mark_allocated(self, p, container):
        self.marked.append((p.name, container))


@pytest.fixture
def start_manager(kubelet, plugin_dir):
    managers = []

    def start(cfg, pods=None, handoff_key=None):
        shared = make_shared(AllocContext("n1", SECRET, handoff_key=handoff_key), node_devices(cfg, "n1"), pods)
        manager = PluginManager(discover(cfg, "n1"), shared, plugin_dir)
        manager.start()
        managers.append(manager)
        return manager

    yield start
    for m in managers:
        m.stop()


def test_health_change_pushed_within_1s(kubelet, start_manager):
    manager = start_manager(TWO)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    bad = devices[0].ID
    t0 = time.monotonic()
    manager.shared.board.update({bad: Health(False, 79)})
    got = kubelet.wait_devices("nvidia.com/gpu", lambda d: any(x.health == "Unhealthy" for x in d), timeout=1.0)
    assert time.monotonic() - t0 < 1.0
    assert {x.ID: x.health for x in got} == {bad: "Unhealthy", devices[1].ID: "Healthy"}
    manager.shared.board.update({})
    kubelet.wait_devices("nvidia.com/gpu", lambda d: all(x.health == "Healthy" for x in d), timeout=1.0)


def test_mig_instance_unhealthy_when_parent_gpu_faults(kubelet, start_manager):
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "A100-40GB", "mig": {"layout": "all-1g.5gb"}}]})
    manager = start_manager(cfg)
    kubelet.wait_devices("nvidia.com/mig-1g.5gb", lambda d: len(d) == 7)
    manager.shared.board.update({cfg.gpu_devices("n1")[0].uuid: Health(False, 48)})
    kubelet.wait_devices("nvidia.com/mig-1g.5gb", lambda d: all(x.health == "Unhealthy" for x in d), timeout=1.0)


def _allocate(stub, ids):
    return stub.Allocate(api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=ids)]), timeout=5).container_responses[0]


def test_fractional_allocate_reads_assignment(kubelet, start_manager):
    gpu = FRACTIONAL.gpu_devices("n1")[1].uuid
    pods = StubPods([pod("p", [("main", gpu, 4 << 30, 25), ("side", gpu, 1 << 30, 5)])])
    start_manager(FRACTIONAL, pods)
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 20)
    stub = kubelet.plugin("nvidia.com/gpu")
    first = dict(_allocate(stub, [slots[0].ID]).envs)
    second = dict(_allocate(stub, [slots[1].ID]).envs)
    assert (first["CUDA_DEVICE_MEMORY_LIMIT_0"], first["CUDA_DEVICE_SM_LIMIT"]) == ("4096m", "25")
    assert (second["CUDA_DEVICE_MEMORY_LIMIT_0"], second["CUDA_DEVICE_SM_LIMIT"]) == ("1024m", "5")
    assert first["NVIDIA_VISIBLE_DEVICES"] == gpu
    assert pods.marked == [("p", "main"), ("p", "side")]
    with pytest.raises(grpc.RpcError) as err:  # both containers handed out: a third Allocate has no match
        _allocate(stub, [slots[2].ID])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pending pod on node n1 has an fgpu.io/assignment" in err.value.details()
    assert pods.fresh_calls >= 1  # a miss re-reads the API before giving up


class RestoredPods(StubPods):
    """The watch cache still shows the forged edit; a fresh read sees the guard's write-back."""

    def __init__(self, cached, fresh):
        super().__init__(cached)
        self.fresh = list(fresh)

    def pending_pods(self, node, fresh=False):
        self.fresh_calls += fresh
        if fresh:
            self.pods = list(self.fresh)
        return list(self.pods)

    def confirm(self, p):  # a quorum read: the API's current pod, which the cache takes in
        current = next((q for q in self.fresh if q.uid == p.uid), None)
        self.pods = [current if q.uid == p.uid else q for q in self.pods if current is not None or q.uid != p.uid]
        return current


def test_with_a_key_a_forged_assignment_is_refused_over_grpc_and_the_restored_one_handed_out(kubelet, start_manager):
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    given = signed(pod("p", [("main", gpu, 2 << 30, 20)]))
    forged_text = given.annotations["fgpu.io/assignment"].replace('"smPct":20', '"smPct":100')
    forged = type(given)("ns", "p", given.uid, "n1", "Pending", {**given.annotations, "fgpu.io/assignment": forged_text})
    pods = RestoredPods([forged], [forged])
    manager = start_manager(FRACTIONAL, pods, handoff_key=HANDOFF_KEY)
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 20)
    stub = kubelet.plugin("nvidia.com/gpu")
    with pytest.raises(grpc.RpcError) as err:  # forged in the cache and in a fresh read: never handed out
        _allocate(stub, [slots[0].ID])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ns/p container main: not handed out: fgpu.io/assignment-signature does not match" in err.value.details()
    assert pods.marked == [] and manager.shared.taken == set()
    assert manager.shared.refused == {(given.uid, "main"): forged.handoff()}  # passed over while unchanged

    pods.fresh = [given]  # the guard wrote the scheduler's value back; the cache has not caught up
    env = dict(_allocate(stub, [slots[0].ID]).envs)
    assert env["CUDA_DEVICE_SM_LIMIT"] == "20" and env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    assert pods.marked == [("p", "main")]
