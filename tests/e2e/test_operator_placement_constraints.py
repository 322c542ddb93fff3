"""Every placement constraint through the running operator on the real apiserver (webhook, scheduler, bind),
each on a test's own KWOK nodes and each set up so that ignoring the constraint would put the pod somewhere
else: GPU models chosen and avoided, GPU UUIDs, KubeShare affinity / anti-affinity / exclusion groups, MIG
instances, unhealthy GPUs (and a waiting pod placed once one recovers), cordoned and tainted nodes, per-pod
node and GPU policies, whole-GPU counts, and high priority taking freed room first. The operator packs
(`--policy binpack`): left alone, a share goes to the fullest node and the GPU with the least room (lowest
index on ties)."""
from __future__ import annotations

import pytest
from inventories import fractional_inventory, mig_inventory
from placement_util import GIB, Pods, inventory_node, operator_with_webhook, pod
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e
GROUP_RULES = "node(s) had no GPU allowed by the pod's GPU UUID or sharing-group rules"
HAMI_SHARE = {keys.GPU_RESOURCE: "1", keys.GPU_CORES_RESOURCE: "20"}  # 0.2 of a GPU, HAMi's way


@pytest.fixture(scope="module")
def op(k8s, kwok, tmp_path_factory):
    yield from operator_with_webhook(k8s, tmp_path_factory.mktemp("constraints"), lambda core: [])


@pytest.fixture
def pods(op, make_kwok_node):  # after make_kwok_node: its pods go before its nodes
    made = Pods(op.core, op.namespace)
    yield made
    made.cleanup()


@pytest.fixture
def gpu_node(pods, make_kwok_node):
    """gpu_node(name, inventory) -> name, once the operator has the node and its inventory."""
    def publish(name, inventory):
        pods.sync(name, annotations={keys.INVENTORY: inventory})
    return lambda name, inventory: inventory_node(make_kwok_node, name, inventory, publish)


def share(name: str, on, fraction: str = "0.2", **annotations) -> dict:
    return pod(name, on, annotations={keys.FGPU_FRACTION: fraction, **annotations})


def kubeshare(name: str, on, request: str = "0.2", **labels) -> dict:
    return pod(name, on, scheduler="kubeshare-scheduler",
               labels={keys.KUBESHARE_REQUEST: request, keys.KUBESHARE_LIMIT: request, **labels})


def test_gpu_model_chosen_and_avoided_in_each_spelling(pods, gpu_node):
    h100 = gpu_node("mdl-h100", fractional_inventory("mdl-h100", 1))
    a100 = gpu_node("mdl-a100", fractional_inventory("mdl-a100", 1, model="A100-SXM4-40GB", mem_bytes=40 * GIB))
    on = (h100, a100)
    cases = {  # in this order: packing pulls an unconstrained share to the fuller node (a100 on a tie)
        "fgpu-a100": (share("fgpu-a100", on, **{keys.FGPU_MODEL: "A100"}), a100),
        "hami-use-h100": (pod("hami-use-h100", on, annotations={keys.HAMI_USE_TYPE: "H100"}, limits=HAMI_SHARE),
                          h100),
        "kubeshare-h100": (kubeshare("kubeshare-h100", on, **{keys.KUBESHARE_MODEL: "H100"}), h100),
        "hami-nouse-h100": (pod("hami-nouse-h100", on, annotations={keys.HAMI_NOUSE_TYPE: "H100"},
                                limits=HAMI_SHARE), a100),
        # HAMi's substring rule: A10 is part of "NVIDIA-NVIDIA A100-SXM4-40GB" (fgpu's own rule would say no)
        "hami-use-a10": (pod("hami-use-a10", on, annotations={keys.HAMI_USE_TYPE: "a10"}, limits=HAMI_SHARE), a100),
        "fgpu-not-a100": (share("fgpu-not-a100", on, **{keys.FGPU_MODEL_EXCLUDE: "A100"}), h100),
    }
    for name, (body, node) in cases.items():
        pods.create(body)
        assert pods.placed(name).node == node, name
    # a deny-list naming a model fgpu does not know excludes nothing: admitted and placed
    pods.create(pod("hami-nouse-b200", on, annotations={keys.HAMI_NOUSE_TYPE: "B200"}, limits=HAMI_SHARE))
    assert pods.placed("hami-nouse-b200").node in on
    # an allow-list naming a model no node has: Pending, the reason naming it (a node may join with one)
    pods.create(share("fgpu-l4", on, **{keys.FGPU_MODEL: "L4"}))
    pods.pending("fgpu-l4", {"GPU model not in [L4]": 2})
    pods.create(pod("hami-b200", on, annotations={keys.HAMI_USE_TYPE: "B200"}, limits=HAMI_SHARE))
    pods.pending("hami-b200", {"GPU model not in [B200]": 2})


def test_gpu_uuid_chosen_and_avoided(pods, gpu_node):
    n = gpu_node("uuid-n", fractional_inventory("uuid-n", 2))
    pods.create(pod("use-1", [n], annotations={keys.HAMI_USE_UUID: "GPU-uuid-n-1"}, limits=HAMI_SHARE))
    assert pods.placed("use-1").one().uuid == "GPU-uuid-n-1"  # packing alone takes GPU 0 of two empty ones
    pods.create(pod("nouse-1", [n], annotations={keys.HAMI_NOUSE_UUID: "GPU-uuid-n-1"}, limits=HAMI_SHARE))
    assert pods.placed("nouse-1").one().uuid == "GPU-uuid-n-0"  # packing alone joins use-1 on GPU 1
    pods.create(pod("use-gone", [n], annotations={keys.HAMI_USE_UUID: "GPU-elsewhere"}, limits=HAMI_SHARE))
    pods.pending("use-gone", {GROUP_RULES: 1})


def test_a_pod_pinned_to_a_uuid_the_node_config_gives_lands_on_that_gpu(pods, gpu_node):
    """The inventory is the device plugin's own, from a node config that mirrors a real node's GPUs."""
    from deviceplugin.labels import inventory
    from deviceplugin.resources import discover
    from fgpu_contracts.inventory import dump_inventory
    from simgpu.nodeconfig import parse_node_config

    real = ["GPU-8d2f6b1e-3c4a-4b7e-9f10-1a2b3c4d5e6f", "GPU-77a1c0de-0000-4e11-8a22-abcdefabcdef"]
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "count": 2, "sharing": "fractional",
                                                       "uuids": real, "pciBusIds": ["0000:3b:00.0", "0000:86:00.0"]}]})
    name = "real-uuids"
    devices = cfg.gpu_devices(name)
    n = gpu_node(name, dump_inventory(inventory(cfg, name, devices, discover(cfg, name), {})))
    pods.create(pod("pinned", [n], annotations={keys.HAMI_USE_UUID: real[1]}, limits=HAMI_SHARE))
    assert pods.placed("pinned").one().uuid == real[1]  # packing alone takes GPU 0 of two empty ones
    pods.create(pod("avoid", [n], annotations={keys.HAMI_NOUSE_UUID: real[1]}, limits=HAMI_SHARE))
    assert pods.placed("avoid").one().uuid == real[0]  # packing alone joins "pinned" on the fuller GPU


def test_affinity_group_shares_a_gpu_that_spreading_would_not(pods, gpu_node):
    n = gpu_node("aff-n", fractional_inventory("aff-n", 2))
    spread = {keys.HAMI_GPU_POLICY: "spread"}
    pods.create(share("first", [n], **{keys.FGPU_AFFINITY: "team"}, **spread))
    first = pods.placed("first").one().uuid
    second = kubeshare("second", [n], **{keys.KUBESHARE_AFFINITY: "team"})  # KubeShare's spelling of the group
    second["metadata"]["annotations"] = spread
    pods.create(second)
    assert pods.placed("second").one().uuid == first
    pods.create(share("loner", [n], **spread))  # the same policy without the group: the emptier GPU
    assert pods.placed("loner").one().uuid != first


def test_anti_affinity_group_never_shares_a_gpu(pods, gpu_node):
    n = gpu_node("anti-n", fractional_inventory("anti-n", 2))
    pods.create(share("one", [n], **{keys.FGPU_ANTI_AFFINITY: "replicas"}))
    pods.create(kubeshare("two", [n], **{keys.KUBESHARE_ANTI_AFFINITY: "replicas"}))
    one, two = pods.placed("one").one().uuid, pods.placed("two").one().uuid
    assert one != two  # packing alone puts both on one GPU
    pods.create(share("three", [n], **{keys.FGPU_ANTI_AFFINITY: "replicas"}))
    pods.pending("three", {GROUP_RULES: 1})
    pods.create(share("outsider", [n]))  # the group binds its members only
    assert pods.placed("outsider").one().uuid in {one, two}


def test_exclusion_group_keeps_a_gpu_to_itself_until_it_leaves(pods, gpu_node):
    n = gpu_node("excl-n", fractional_inventory("excl-n", 2))
    pods.create(share("a1", [n], **{keys.FGPU_EXCLUSION: "a"}))
    a1 = pods.placed("a1").one().uuid
    pods.create(share("b1", [n], **{keys.FGPU_EXCLUSION: "b"}))
    b1 = pods.placed("b1").one().uuid
    assert b1 != a1  # packing alone joins a1
    pods.create(share("a2", [n], **{keys.FGPU_EXCLUSION: "a"}))
    assert pods.placed("a2").one().uuid == a1
    pods.create(share("plain", [n]))  # no group: neither exclusive GPU takes it
    pods.pending("plain", {GROUP_RULES: 1})
    pods.delete("b1")
    assert pods.placed("plain").one().uuid == b1  # retried once b's GPU is free of its group


def test_mig_instances_by_profile_unhealthy_one_avoided_then_used(pods, gpu_node):
    sick = "MIG-mig-n-1g.10gb-4"  # the first 1g.10gb instance in UUID order
    layout = ["3g.40gb", "1g.10gb", "1g.10gb"]
    n = gpu_node("mig-n", mig_inventory("mig-n", layout, unhealthy={sick: 79}))
    pods.create(pod("small", [n], limits={"nvidia.com/mig-1g.10gb": "1"}))
    small = pods.placed("small").one()
    assert (small.uuid, small.mig) == ("MIG-mig-n-1g.10gb-5", "1g.10gb")
    pods.create(pod("small2", [n], annotations={keys.FGPU_MIG_PROFILE: "1g.10gb"}))
    pods.pending("small2", {"Insufficient nvidia.com/mig-1g.10gb": 1})
    pods.create(pod("big", [n], limits={"nvidia.com/mig-3g.40gb": "1"}))
    assert pods.placed("big").one().uuid == "MIG-mig-n-3g.40gb-0"
    pods.create(pod("absent", [n], limits={"nvidia.com/mig-2g.20gb": "1"}))  # a profile this layout lacks
    pods.pending("absent", {"Insufficient nvidia.com/mig-2g.20gb": 1})
    pods.create(pod("whole", [n], limits={keys.GPU_RESOURCE: "1"}))  # a MIG-enabled GPU is not given whole
    pods.pending("whole", {"Insufficient nvidia.com/gpu": 1})
    pods.sync(n, annotations={keys.INVENTORY: mig_inventory("mig-n", layout)})  # the instance recovers
    assert pods.placed("small2").one().uuid == sick


def test_unhealthy_gpu_avoided_and_a_waiting_pod_placed_when_one_recovers(pods, gpu_node):
    n = gpu_node("sick-n", fractional_inventory("sick-n", 2, unhealthy={0: 79}))
    pods.create(share("a", [n], "0.5"))
    assert pods.placed("a").one().uuid == "GPU-sick-n-1"  # packing alone takes GPU 0
    pods.create(share("b", [n], "0.6"))
    pods.pending("b", {"Insufficient GPU": 1})
    pods.sync(n, annotations={keys.INVENTORY: fractional_inventory(n, 2)})  # GPU 0 recovers
    assert pods.placed("b").one().uuid == "GPU-sick-n-0"
    pods.sync(n, annotations={keys.INVENTORY: fractional_inventory(n, 2, unhealthy={1: 48})})  # GPU 1 fails
    pods.create(share("c", [n], "0.5"))  # would fit GPU 1's free half
    pods.pending("c", {"Insufficient GPU": 1})
    pods.sync(n, annotations={keys.INVENTORY: fractional_inventory(n, 2)})
    assert pods.placed("c").one().uuid == "GPU-sick-n-1"
    assert pods.placed("a").one().uuid == "GPU-sick-n-1"  # a kept its share throughout


def test_cordoned_node_avoided_until_uncordoned(pods, gpu_node):
    a = gpu_node("cord-a", fractional_inventory("cord-a", 1))
    b = gpu_node("cord-b", fractional_inventory("cord-b", 1))
    pods.create(share("filler", [a]))
    pods.placed("filler")
    pods.sync(a, spec={"unschedulable": True})
    pods.create(share("x", [a, b]))
    assert pods.placed("x").node == b  # packing alone joins filler on cord-a
    pods.create(share("y", [a]))
    pods.pending("y", {"node(s) were unschedulable": 1})
    pods.sync(a, spec={"unschedulable": False})
    assert pods.placed("y").node == a


def test_tainted_node_avoided_unless_tolerated(pods, gpu_node):
    a = gpu_node("taint-a", fractional_inventory("taint-a", 1))
    b = gpu_node("taint-b", fractional_inventory("taint-b", 1))
    tolerate = [{"key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}]
    pods.create(pod("filler", [a], annotations={keys.FGPU_FRACTION: "0.2"}, tolerations=tolerate))
    pods.placed("filler")
    pods.sync(a, spec={"taints": [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]})
    pods.create(share("x", [a, b]))
    assert pods.placed("x").node == b  # packing alone joins filler on taint-a
    pods.create(share("y", [a]))
    pods.pending("y", {"node(s) had untolerated taint {gpu: reserved}": 1})
    pods.create(pod("z", [a], annotations={keys.FGPU_FRACTION: "0.2"}, tolerations=tolerate))
    assert pods.placed("z").node == a


def test_whole_gpu_counts_take_whole_gpus_of_one_node(pods, gpu_node):
    a = gpu_node("whole-a", fractional_inventory("whole-a", 2))
    b = gpu_node("whole-b", fractional_inventory("whole-b", 2))
    pods.create(share("small", [a], "0.1"))
    pods.placed("small")
    pods.create(pod("two", [a, b], limits={keys.GPU_RESOURCE: "2"}))
    two = pods.placed("two")  # whole-a, the fuller node, has one whole GPU left
    assert two.node == b
    assert sorted(d.uuid for d in two.devices["main"]) == ["GPU-whole-b-0", "GPU-whole-b-1"]
    assert {(d.milli, d.mem, d.sm) for d in two.devices["main"]} == {(1000, 80 * GIB, 100)}
    pods.create(kubeshare("ks-two", [a, b], request="2"))
    pods.pending("ks-two", {"node(s) had fewer than 2 free GPUs": 2})
    pods.delete("small")
    placed = pods.placed("ks-two")
    assert placed.node == a and sorted(d.uuid for d in placed.devices["main"]) == ["GPU-whole-a-0", "GPU-whole-a-1"]


def test_per_pod_node_and_gpu_policies(pods, gpu_node):
    nodes = (gpu_node("pol-a", fractional_inventory("pol-a", 2)), gpu_node("pol-b", fractional_inventory("pol-b", 2)))
    pods.create(share("p1", nodes))
    p1 = pods.placed("p1")
    other = next(n for n in nodes if n != p1.node)
    pods.create(share("p2", nodes))  # the cluster's binpack: the same node, the same GPU
    p2 = pods.placed("p2")
    assert (p2.node, p2.one().uuid) == (p1.node, p1.one().uuid)
    pods.create(share("p3", nodes, **{keys.FGPU_POLICY: "spread"}))
    assert pods.placed("p3").node == other
    pods.create(share("p4", nodes, **{keys.HAMI_NODE_POLICY: "spread"}))  # p1's node is fuller still
    assert pods.placed("p4").node == other
    pods.create(share("p5", [p1.node], **{keys.HAMI_GPU_POLICY: "spread"}))
    assert pods.placed("p5").one().uuid != p1.one().uuid  # the emptier GPU of the node


def test_high_priority_pod_gets_freed_room_before_an_earlier_low_priority_one(pods, gpu_node):
    n = gpu_node("prio-n", fractional_inventory("prio-n", 1))
    pods.create(share("filler", [n], "0.8"))
    pods.placed("filler")
    pods.create(share("low", [n], "0.6", **{keys.FGPU_PRIORITY: "low"}))
    pods.pending("low", {"Insufficient GPU": 1})
    pods.create(pod("high", [n], limits={keys.GPU_RESOURCE: "1", keys.GPU_CORES_RESOURCE: "60",
                                          keys.GPU_PRIORITY_RESOURCE: "0"}))  # HAMi's spelling of high
    pods.pending("high", {"Insufficient GPU": 1})
    pods.delete("filler")  # room for one of them: first come, first served would give it to low
    first = wait_for(lambda: next((p for p in ("low", "high") if pods.read(p).spec.node_name), None),
                     what="one of the waiting pods bound")
    assert first == "high"
    assert pods.placed("high").priority == {"main": 0}
    pods.pending("low", {"Insufficient GPU": 1})
    pods.delete("high")
    assert pods.placed("low").priority == {"main": 1}
