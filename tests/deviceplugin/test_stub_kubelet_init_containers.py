"""The stub kubelet (devcluster.kubelets) allocates devices as the kubelet's device manager does: init
containers first, each in order, then the app containers; an init container's devices are reused by the
containers after it (the kubelet's devicesToReuse), a restartable sidecar init container keeps its own, and
every container's devices, reused or new, reach the plugin's Allocate for that container."""
from types import SimpleNamespace

from devcluster.kubelets import Node
from deviceplugin.api import api_pb2

GPU = "nvidia.com/gpu"


class FakePlugin:
    def __init__(self):
        self.allocated: list[list[str]] = []

    def GetPreferredAllocation(self, request, timeout):
        r = request.container_requests[0]
        rest = [d for d in r.available_deviceIDs if d not in r.must_include_deviceIDs]
        picked = [*r.must_include_deviceIDs, *rest][:r.allocation_size]
        return api_pb2.PreferredAllocationResponse(container_responses=[
            api_pb2.ContainerPreferredAllocationResponse(deviceIDs=picked)])

    def Allocate(self, request, timeout):
        ids = list(request.container_requests[0].devices_ids)
        self.allocated.append(ids)
        return api_pb2.AllocateResponse(container_responses=[
            api_pb2.ContainerAllocateResponse(envs={"VISIBLE": ",".join(ids)})])


class FakeNode(Node):
    def __init__(self, tmp_path, devices):
        patches = []
        core = SimpleNamespace(patch_namespaced_pod=lambda name, ns, body: patches.append(body))
        super().__init__("n", tmp_path, core)
        self.devices, self.fake, self.patches = devices, FakePlugin(), patches
        self.reported = {GPU: len(devices)}

    def resources(self):
        return {GPU: list(self.devices)}

    def plugin(self, resource):
        return self.fake


def container(name, gpus=0, **extra):
    limits = {GPU: str(gpus)} if gpus else {}
    return {"name": name, "resources": {"limits": limits}, **extra}


def pod(uid, init, app):
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
            "spec": {"initContainers": init, "containers": app}}


def records(node, uid):
    import json

    return {p.name.split(".")[2]: json.loads(p.read_text())["devices"] for p in node.files[uid]}


def test_init_containers_go_first_and_hand_their_devices_on(tmp_path):
    node = FakeNode(tmp_path, ["d0", "d1", "d2", "d3"])
    p = pod("p", [container("fetch", 1), container("warm", 2)], [container("main", 1), container("side", 1)])
    assert node.admit(p)
    # fetch: d0; warm reuses d0 and takes d1; main reuses d0; side reuses d1 (no app container shares one)
    assert node.fake.allocated == [["d0"], ["d0", "d1"], ["d0"], ["d1"]]
    assert records(node, "p") == {"fetch": {GPU: ["d0"]}, "warm": {GPU: ["d0", "d1"]}, "main": {GPU: ["d0"]},
                                  "side": {GPU: ["d1"]}}
    assert sorted(node.held["p"][GPU]) == ["d0", "d1"]  # the pod holds two devices, not five
    assert node.free(GPU) == ["d2", "d3"]


def test_a_sidecar_init_container_keeps_its_device(tmp_path):
    node = FakeNode(tmp_path, ["d0", "d1"])
    p = pod("p", [container("proxy", 1, restartPolicy="Always")], [container("main", 1)])
    assert node.admit(p)
    assert node.fake.allocated == [["d0"], ["d1"]]


def test_an_init_container_alone_gets_the_share_and_the_app_container_nothing(tmp_path):
    node = FakeNode(tmp_path, ["slot0", "slot1"])
    assert node.admit(pod("kai", [container("prep", 1)], [container("main")]))
    assert node.fake.allocated == [["slot0"]]
    assert records(node, "kai") == {"prep": {GPU: ["slot0"]}, "main": {}}
