"""Pure cores: resource discovery, hand-off matching, preferred allocation, labels and inventory."""
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deviceplugin.allocate import AllocateError, AllocContext, allocate_assignment, preferred_allocation
from deviceplugin.handoff import PodView, find_assignment
from deviceplugin.labels import Health, inventory, inventory_annotation, node_labels
from deviceplugin.resources import discover, node_devices, node_level_resources
from fgpu_contracts.assignment import (
    Assignment,
    ContainerAssignment,
    DeviceShare,
    dump_assignment,
    parse_assignment,
)
from fgpu_contracts.errors import InputError
from fgpu_contracts.inventory import parse_inventory
from fgpu_contracts.keys import ALLOCATED, ASSIGNED_AT, ASSIGNMENT, INVENTORY
from simgpu.nodeconfig import parse_node_config
from simgpu.token import verify_token

SECRET = b"s" * 32
FRACTIONAL = parse_node_config({"version": "v1", "gpus": [{"model": "A100-80GB", "count": 2, "sharing": "fractional"}]})


def pod(name, containers, node="n1", at="2026-01-01T00:00:00Z", phase="Pending", allocated=None):
    a = Assignment(node=node, containers=[ContainerAssignment(name=c, devices=[DeviceShare(uuid=u, memBytes=m, smPct=s)])
                                          for c, u, m, s in containers])
    ann = {ASSIGNMENT: dump_assignment(a), ASSIGNED_AT: at}
    if allocated:
        ann[ALLOCATED] = json.dumps(allocated)
    return PodView("ns", name, f"uid-{name}", node, phase, ann)


def test_fractional_discovery_and_node_resources():
    [res] = discover(FRACTIONAL, "n1")
    assert res.name == "nvidia.com/gpu" and res.fractional and len(res.slots) == 20
    extra = node_level_resources(FRACTIONAL, "n1")
    assert extra["nvidia.com/gpucores"] == 200
    assert extra["nvidia.com/gpumem"] == 2 * (FRACTIONAL.gpu_devices("n1")[0].spec.mem_bytes >> 20)


def test_find_assignment_oldest_first_and_skips_allocated():
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    old = pod("old", [("a", gpu, 1 << 30, 10), ("b", gpu, 1 << 30, 10)], at="2026-01-01T00:00:01Z", allocated=["a"])
    new = pod("new", [("c", gpu, 2 << 30, 20)], at="2026-01-01T00:00:02Z")
    other_node = pod("x", [("d", gpu, 1, 1)], node="n2", at="2026-01-01T00:00:00Z")
    running = pod("r", [("e", gpu, 1, 1)], phase="Running", at="2026-01-01T00:00:00Z")
    match = find_assignment([new, other_node, running, old], "n1", 1)
    assert (match.pod.name, match.container.name) == ("old", "b")
    match = find_assignment([new, old], "n1", 1, taken={("uid-old", "b")})
    assert (match.pod.name, match.container.name) == ("new", "c")
    assert find_assignment([new, old], "n1", 2) is None


def test_find_assignment_ignores_garbage_annotation():
    bad = PodView("ns", "bad", "u", "n1", "Pending", {ASSIGNMENT: "{not json"})
    assert find_assignment([bad], "n1", 1) is None


def test_allocate_assignment_env():
    res = discover(FRACTIONAL, "n1")[0]
    gpu = FRACTIONAL.gpu_devices("n1")[1].uuid
    p = pod("p", [("c", gpu, 8 << 30, 30)])
    match = find_assignment([p], "n1", 1)
    ctx = AllocContext("n1", SECRET, daemon_socket="/run/fgpu/d.sock")
    alloc = allocate_assignment(res, [res.slots[0].id], match, ctx, node_devices(FRACTIONAL, "n1"))
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == gpu
    assert alloc.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert alloc.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert alloc.envs["CUDA_TASK_PRIORITY"] == "1"
    grant = verify_token(SECRET, alloc.envs["FGPU_CONTEXT_TOKEN_0"])
    assert (grant.pod_name, grant.container, grant.mem_limit_bytes) == ("p", "c", 8 << 30)


def test_allocate_assignment_carries_a_high_priority_pods_slo():
    res = discover(FRACTIONAL, "n1")[0]
    gpus = [d.uuid for d in FRACTIONAL.gpu_devices("n1")]
    container = ContainerAssignment(name="c", priority=0, slo_slowdown=1.5,
                                    devices=[DeviceShare(uuid=gpus[0]), DeviceShare(uuid=gpus[1])])
    p = PodView("ns", "p", "uid-p", "n1", "Pending", {
        ASSIGNMENT: dump_assignment(Assignment(node="n1", containers=[container])), ASSIGNED_AT: "2026-01-01T00:00:00Z"})
    alloc = allocate_assignment(res, [s.id for s in res.slots[:2]], find_assignment([p], "n1", 2),
                                AllocContext("n1", SECRET), node_devices(FRACTIONAL, "n1"))
    assert (alloc.envs["CUDA_TASK_PRIORITY"], alloc.envs["FGPU_SLO_SLOWDOWN"]) == ("0", "1.5")
    grants = [verify_token(SECRET, alloc.envs[f"FGPU_CONTEXT_TOKEN_{i}"]) for i in range(2)]
    assert [(g.vdevice_index, g.slo_slowdown, g.priority) for g in grants] == [(0, 1.5, 0), (1, 1.5, 0)]
    low = allocate_assignment(res, [res.slots[0].id], find_assignment([pod("q", [("c", gpus[0], None, None)])], "n1", 1),
                              AllocContext("n1", SECRET), node_devices(FRACTIONAL, "n1"))
    assert "FGPU_SLO_SLOWDOWN" not in low.envs  # no bound: no variable


def test_allocate_assignment_foreign_device_and_no_match():
    res = discover(FRACTIONAL, "n1")[0]
    ctx = AllocContext("n1", SECRET)
    match = find_assignment([pod("p", [("c", "GPU-elsewhere", None, None)])], "n1", 1)
    with pytest.raises(AllocateError, match="not a device of node n1"):
        allocate_assignment(res, [res.slots[0].id], match, ctx, node_devices(FRACTIONAL, "n1"))
    with pytest.raises(AllocateError, match="no pending pod"):
        allocate_assignment(res, [res.slots[0].id], None, ctx, node_devices(FRACTIONAL, "n1"))


@given(st.text(max_size=100))
def test_parse_assignment_garbage(text):
    with pytest.raises(InputError) as err:
        parse_assignment(text)
    assert err.value.field == ASSIGNMENT


def test_assignment_round_trip_uses_camel_case():
    a = Assignment(node="n", containers=[ContainerAssignment(name="c", devices=[DeviceShare(uuid="GPU-1", milliGpu=300)])])
    text = dump_assignment(a)
    assert '"milliGpu":300' in text and parse_assignment(text) == a


TS = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "count": 3}],
                        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}})


def test_preferred_allocation_best_fit_and_must_include():
    [res] = discover(TS, "n1")
    ids = [s.id for s in res.slots]
    g = [ids[0:4], ids[4:8], ids[8:12]]
    available = g[0][:1] + g[1][:3] + g[2]  # free: A 1, B 3, C 4
    assert set(preferred_allocation(res, available, [], 3)) == set(g[1][:3])  # best fit: B exactly
    got = preferred_allocation(res, available, [g[2][0]], 2)
    assert got[0] == g[2][0] and {i.split("::")[0] for i in got} == {g[2][0].split("::")[0]}


@given(st.data())
def test_preferred_allocation_properties(data):
    [res] = discover(TS, "n1")
    ids = [s.id for s in res.slots]
    available = data.draw(st.lists(st.sampled_from(ids), unique=True))
    must = data.draw(st.lists(st.sampled_from(available), unique=True, max_size=3)) if available else []
    size = data.draw(st.integers(len(must), len(available))) if available else 0
    got = preferred_allocation(res, available, must, size)
    assert len(got) == size and len(set(got)) == size
    assert set(got) <= set(available) and set(must) <= set(got)


def test_labels_timeslicing_shared_product():
    labels = node_labels(TS, TS.gpu_devices("n1"))
    assert labels["fgpu.io/emulated"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "3"


def test_labels_mig_mixed_counts():
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "count": 2, "mig": {"layout": "all-1g.10gb"}},
                                                     {"model": "H100", "mig": {"layout": ["7g.80gb"]}}]})
    labels = node_labels(cfg, cfg.gpu_devices("n1"))
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "14"
    assert labels["nvidia.com/mig-7g.80gb.count"] == "1"
    assert labels["nvidia.com/mig-1g.10gb.multiprocessors"] == "16"
    assert labels["nvidia.com/mig.capable"] == "true"


def test_inventory_reports_health_and_mig():
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "A100-40GB", "mig": {"layout": ["3g.20gb", "4g.20gb"]}}]})
    gpus = cfg.gpu_devices("n1")
    inv = inventory(cfg, "n1", gpus, discover(cfg, "n1"), {gpus[0].uuid: Health(False, 79)})
    g = inv.gpus[0]
    assert (g.healthy, g.xid, g.sms) == (False, 79, gpus[0].spec.sms)
    assert [m.profile for m in g.mig] == ["3g.20gb", "4g.20gb"] and not g.mig[0].healthy
    assert inv.resources == {"nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-4g.20gb": 1}
    assert inv.node_resources == {}
    assert parse_inventory(inventory_annotation(inv)[INVENTORY]) == inv


def test_media_extension_profile_gets_a_valid_resource_name():
    cfg = parse_node_config({"version": "v1", "gpus": [{"model": "H100", "mig": {"layout": ["1g.10gb+me", "3g.40gb"]}}]})
    names = [r.name for r in discover(cfg, "n1")]
    assert "nvidia.com/mig-1g.10gb.me" in names
    import re
    assert all(re.fullmatch(r"[a-z0-9.]+/[A-Za-z0-9][-A-Za-z0-9_.]*", n) for n in names)
    assert "nvidia.com/mig-1g.10gb.me.count" in node_labels(cfg, cfg.gpu_devices("n1"))


@given(st.lists(st.text(max_size=40), max_size=4))
def test_allocate_slots_fuzzed_ids_refused_cleanly(ids):
    from deviceplugin.allocate import allocate_slots

    [res] = discover(TS, "n1")
    known = {s.id for s in res.slots}
    if ids and set(ids) <= known and len(set(ids)) == len(ids):
        assert allocate_slots(res, ids, AllocContext("n1", SECRET)).envs["NVIDIA_VISIBLE_DEVICES"]
    else:
        with pytest.raises(AllocateError) as err:
            allocate_slots(res, ids, AllocContext("n1", SECRET))
        assert err.value.field == "devices_ids"


# --- the scheduler's signature (fgpu_contracts.signature) --------------------------------------------------
HANDOFF_KEY = b"h" * 32


def signed(p: PodView, key: bytes = HANDOFF_KEY) -> PodView:
    from fgpu_contracts.keys import ASSIGNMENT_SIGNATURE
    from fgpu_contracts.signature import sign

    sig = sign(key, p.uid, p.node_name, p.annotations[ASSIGNED_AT], p.annotations[ASSIGNMENT])
    return PodView(p.namespace, p.name, p.uid, p.node_name, p.phase, {**p.annotations, ASSIGNMENT_SIGNATURE: sig})


def handoff_verify(p: PodView, node: str):
    from fgpu_contracts.signature import problem

    return problem(HANDOFF_KEY, p.uid, node, p.annotations)


def arrived(p: PodView, seq: int) -> PodView:
    return dataclasses.replace(p, arrived=seq)


def test_the_kubelets_arrival_order_decides_not_the_claimed_assignment_time():
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    first = arrived(signed(pod("first", [("c", gpu, 2 << 30, 20)], at="2026-01-01T00:00:02Z")), 10)
    second = arrived(signed(pod("second", [("c", gpu, 4 << 30, 40)], at="2026-01-01T00:00:01Z")), 11)
    assert find_assignment([second, first], "n1", 1, verify=handoff_verify).pod.name == "first"
    leaving = dataclasses.replace(first, terminating=True)  # the kubelet admits no terminating pod
    assert find_assignment([second, leaving], "n1", 1).pod.name == "second"


def test_a_forged_pod_at_the_head_is_refused_then_passed_over_until_its_hand_off_changes():
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    forged = arrived(pod("forged", [("c", gpu, 80 << 30, 100)], at="2000-01-01T00:00:00Z"), 10)
    given = arrived(signed(pod("given", [("c", gpu, 2 << 30, 20)], at="2026-01-01T00:00:02Z")), 11)
    head = find_assignment([given, forged], "n1", 1, verify=handoff_verify)
    assert head.pod.name == "forged" and head.refused.startswith("no fgpu.io/assignment-signature")
    refused = {(forged.uid, "c"): forged.handoff()}
    assert find_assignment([given, forged], "n1", 1, verify=handoff_verify, refused=refused).pod.name == "given"
    restored = arrived(signed(forged), 10)  # its hand-off changed (the guard wrote the scheduler's back)
    match = find_assignment([given, restored], "n1", 1, verify=handoff_verify, refused=refused)
    assert (match.pod.name, match.refused) == ("forged", "")
    assert find_assignment([forged], "n1", 1).refused == ""  # no key: unverified, as before keys existed


def test_allocate_refuses_a_forged_or_unsigned_assignment_and_hands_out_the_signed_one():
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    [res] = discover(FRACTIONAL, "n1")
    devices = node_devices(FRACTIONAL, "n1")
    ctx = AllocContext("n1", SECRET, handoff_key=HANDOFF_KEY)
    given = signed(pod("p", [("main", gpu, 2 << 30, 20)]))
    grown = dump_assignment(Assignment(node="n1", containers=[ContainerAssignment(
        name="main", devices=[DeviceShare(uuid=gpu, memBytes=80 << 30, smPct=100, milliGpu=1000)])]))
    edited = PodView("ns", "p", given.uid, "n1", "Pending", {**given.annotations, ASSIGNMENT: grown})
    other = signed(pod("q", [("main", gpu, 2 << 30, 20)]))  # q's signature worn by p (another uid)
    copied = PodView("ns", "p", given.uid, "n1", "Pending", {**other.annotations})
    for forged, why in ((edited, "does not match"), (copied, "does not match"),
                        (pod("p", [("main", gpu, 2 << 30, 20)]), "no fgpu.io/assignment-signature")):
        match = find_assignment([forged], "n1", 1, verify=handoff_verify)
        with pytest.raises(AllocateError) as err:
            allocate_assignment(res, [res.slots[0].id], match, ctx, devices)
        assert err.value.field == ASSIGNMENT and "ns/p container main: not handed out" in str(err.value)
        assert why in str(err.value)
    alloc = allocate_assignment(res, [res.slots[0].id], find_assignment([given], "n1", 1, verify=handoff_verify),
                                ctx, devices)
    assert alloc.envs["CUDA_DEVICE_SM_LIMIT"] == "20" and alloc.grants[0].mem_limit_bytes == 2 << 30


def test_find_assignment_passes_over_a_pod_whose_device_another_resource_allocates():
    """A MIG pod's assignment is never consumed by a share's Allocate (its own comes through the MIG resource):
    the share's Allocate goes to the next pod, which the kubelet is admitting."""
    cfg = parse_node_config({"version": "v1", "migStrategy": "mixed", "gpus": [
        {"model": "A100-80GB", "sharing": "fractional"}, {"model": "H100", "mig": {"layout": "all-1g.10gb"}}]})
    res = next(r for r in discover(cfg, "n1") if r.fractional)
    gpu = cfg.gpu_devices("n1")[0].uuid
    mig = next(u for u in node_devices(cfg, "n1") if u.startswith("MIG-"))
    first = pod("mig", [("m", mig, None, None)], at="2026-01-01T00:00:01Z")
    second = pod("share", [("s", gpu, 1 << 30, 10)], at="2026-01-01T00:00:02Z")
    shared = frozenset(s.device_uuid for s in res.slots)
    assert find_assignment([first, second], "n1", 1).pod.name == "mig"  # without the check: the wrong pod
    match = find_assignment([first, second], "n1", 1, shared=shared)
    assert (match.pod.name, match.container.devices[0].uuid) == ("share", gpu)
    assert find_assignment([first], "n1", 1, shared=shared) is None


MIG = parse_node_config({"version": "v1", "migStrategy": "mixed",
                         "gpus": [{"model": "H100", "count": 2, "mig": {"layout": "all-1g.10gb"}}]})


def test_a_counted_mig_resource_prefers_the_instances_the_scheduler_assigned():
    from deviceplugin.handoff import assigned_devices

    [res] = [r for r in discover(MIG, "n1") if r.name == "nvidia.com/mig-1g.10gb"]
    slot_of = {s.device_uuid: s.id for s in res.slots}
    last, other = res.slots[-1], res.slots[3]
    first = pod("first", [("c", last.device_uuid, 10 << 30, 100)], at="2026-01-01T00:00:01Z")
    second = pod("second", [("c", other.device_uuid, 10 << 30, 100)], at="2026-01-01T00:00:02Z")
    available = [s.id for s in res.slots]
    # the kubelet's own pick would be any free one; the scheduler's is the last instance of the second GPU
    assert assigned_devices([second, first], "n1", slot_of, available, 1) == [last.id]
    # once the first's instance is taken (admitted), the next pending pod's assignment is preferred
    assert assigned_devices([second, first], "n1", slot_of, [i for i in available if i != last.id], 1) == [other.id]
    assert assigned_devices([first], "n1", slot_of, [other.id], 1) is None  # its instance is gone: no preference
    assert assigned_devices([first], "n2", slot_of, available, 1) is None  # another node's pod
