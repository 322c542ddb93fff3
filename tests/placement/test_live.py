"""The live cluster model: catalog-backed GPU memory, every filter with its message, MIG slots, health,
restore, and (hypothesis) no sequence of node/pod/health events over-allocates or loses an allocation."""
import numpy as np
import pytest
from fgpu_operator.placement.framework import Unschedulable
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import (
    Constraints,
    GpuInfo,
    MigSlot,
    NodeSpec,
    Request,
    SelectorTerm,
    Taint,
    Toleration,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GIB_MIB = 1024


def node(name, model, count=2, sharing="fractional", **kw):
    gpus = tuple(GpuInfo(f"GPU-{name}-{i}", model, sharing=sharing) for i in range(count))
    return NodeSpec(name, 32000, 128 * GIB_MIB, count, model, gpus=gpus, max_pods=110, **kw)


def share(milli, mem_gib=0, **constraints):
    return Request("p", 1000, num_gpu=1, gpu_milli=milli, gpu_mem_mib=mem_gib * GIB_MIB,
                   constraints=Constraints(**constraints))


def live(*nodes):
    lc = LiveCluster(policy="binpack")
    for n in nodes:
        lc.upsert_node(n)
    return lc


def test_catalog_models_place_a_share_with_memory_and_refuse_too_much_memory_on_l4():
    for model in ("H100", "A100-40GB", "L4"):
        lc = live(node("n", model))
        assert not isinstance(lc.schedule("a", share(300, 8)), Unschedulable), model
    lc = live(node("l4", "L4"))
    outcome = lc.schedule("b", share(300, 30))
    assert isinstance(outcome, Unschedulable)
    assert str(outcome) == "0/1 nodes are available: 1 Insufficient GPU memory."
    lc = live(node("h100", "H100"), node("l4", "L4"))
    assert lc.schedule("c", share(300, 30)).node == "h100"


def test_memory_is_checked_once_any_pod_names_its_own():
    lc = live(node("n", "L4", count=1))  # 24 GiB
    assert lc.schedule("a", share(100, 20)).gpus == ("GPU-n-0",)
    outcome = lc.schedule("b", share(500))  # half the GPU's memory: 11.x GiB, only ~3.x left
    assert str(outcome) == "0/1 nodes are available: 1 Insufficient GPU memory."
    assert not lc.violations()


@pytest.mark.parametrize("request_, nodes, message", [
    (share(300), [node("n", "H100", unschedulable=True)], "1 node(s) were unschedulable"),
    (share(300), [node("n", "H100", taints=(Taint("gpu", "h100"),))], "1 node(s) had untolerated taint {gpu: h100}"),
    (share(300, node_selector=(("pool", "a"),)), [node("n", "H100", labels=(("pool", "b"),))],
     "1 node(s) didn't match Pod's node affinity/selector"),
    (share(300, affinity_terms=(SelectorTerm((("zone", "In", ("x",)),)),)), [node("n", "H100")],
     "1 node(s) didn't match Pod's node affinity/selector"),
    (Request("p", 64000, num_gpu=1, gpu_milli=300, constraints=Constraints()), [node("n", "H100")],
     "1 Insufficient cpu"),
    (share(300, extended=(("nvidia.com/gpu.shared", 1),)), [node("n", "H100")],
     "1 Insufficient nvidia.com/gpu.shared"),
    (Request("p", 100, num_gpu=1, gpu_milli=300, gpu_models=("A100-SXM4-80GB",), constraints=Constraints()),
     [node("n", "H100")], "1 node(s) had no GPU of the requested model"),
    (share(300), [NodeSpec("cpu", 32000, 1024, 0, max_pods=110)], "1 node(s) had no GPU"),
    (Request("p", 100, num_gpu=3, gpu_milli=1000, constraints=Constraints()), [node("n", "H100")],
     "1 node(s) had fewer than 3 GPUs the pod may use"),
    (Request("p", 100, num_gpu=2, gpu_milli=500, constraints=Constraints()), [node("n", "H100", count=1)],
     "1 node(s) had fewer than 2 GPUs the pod may use"),
    (share(300, uuids=("GPU-elsewhere",)), [node("n", "H100")],
     "1 node(s) had no GPU allowed by the pod's GPU UUID or sharing-group rules"),
    (Request("p", 100, num_gpu=1, gpu_milli=1000, mig_profile="3g.40gb", constraints=Constraints()),
     [node("n", "H100")], "1 Insufficient nvidia.com/mig-3g.40gb"),
])
def test_each_filter_says_why_in_kube_schedulers_words(request_, nodes, message):
    outcome = live(*nodes).schedule("x", request_)
    assert isinstance(outcome, Unschedulable)
    assert str(outcome) == f"0/{len(nodes)} nodes are available: {message}."


def test_tolerations_and_cordon_toleration_let_a_pod_in():
    tainted = node("n", "H100", taints=(Taint("gpu", "h100"),))
    assert not isinstance(live(tainted).schedule("a", share(300, tolerations=(Toleration("gpu", "Equal", "h100"),))),
                          Unschedulable)
    assert not isinstance(live(tainted).schedule("a", share(300, tolerations=(Toleration(operator="Exists"),))),
                          Unschedulable)
    prefer = node("n", "H100", taints=(Taint("gpu", "h100", "PreferNoSchedule"),))
    assert not isinstance(live(prefer).schedule("a", share(300)), Unschedulable)


def test_explanation_counts_each_node_under_its_first_failing_filter_sorted_like_kube():
    nodes = [node("a", "H100", unschedulable=True), node("b", "L4"), node("c", "L4"),
             node("d", "H100", taints=(Taint("k", "v"),))]
    outcome = live(*nodes).schedule("x", share(300, 30))
    assert str(outcome) == ("0/4 nodes are available: 1 node(s) had untolerated taint {k: v}, "
                            "1 node(s) were unschedulable, 2 Insufficient GPU memory.")


def test_exclusive_gpus_take_whole_requests_only_and_timesliced_gpus_neither():
    lc = live(node("e", "H100", sharing="exclusive"), node("t", "H100", sharing="timeSlicing"))
    assert str(lc.schedule("s", share(300))) == "0/2 nodes are available: 2 Insufficient GPU."
    whole = Request("w", 100, num_gpu=1, gpu_milli=1000, constraints=Constraints())
    assert lc.schedule("w", whole).node == "e"


def test_unhealthy_gpu_is_avoided_and_comes_back():
    lc = live(node("n", "H100", count=1))
    assert lc.set_gpu_health("n", "GPU-n-0", False) is False
    assert str(lc.schedule("a", share(300))) == "0/1 nodes are available: 1 Insufficient GPU."
    assert lc.set_gpu_health("n", "GPU-n-0", True) is True
    assert lc.schedule("a", share(300)).gpus == ("GPU-n-0",)


def test_largest_gpu_follows_nodes_coming_changing_and_going():
    lc = LiveCluster(policy="binpack")
    assert lc.largest_gpu_mib() == 0
    lc.upsert_node(node("l4", "L4"))  # memory from the catalog (the GPU lists none of its own)
    assert lc.largest_gpu_mib() == 23034
    lc.upsert_node(NodeSpec("big", 32000, 131072, 1, "H100", gpus=(GpuInfo("GPU-big", "H100", mem_mib=81920),)))
    assert lc.largest_gpu_mib() == 81920
    lc.set_gpu_health("big", "GPU-big", False)  # an unhealthy GPU is still the cluster's
    assert lc.largest_gpu_mib() == 81920
    lc.remove_node("big")
    assert lc.largest_gpu_mib() == 23034


def test_mig_instances_are_slots_packed_and_released():
    mig = tuple(MigSlot(f"MIG-{i}", "1g.10gb") for i in range(3))
    spec = NodeSpec("m", 32000, 131072, 1, "H100", gpus=(GpuInfo("GPU-m", "H100", mig=mig),), max_pods=110)
    lc = live(spec, node("n", "H100"))
    req = Request("p", 100, num_gpu=2, gpu_milli=1000, mig_profile="1g.10gb", constraints=Constraints())
    a = lc.schedule("a", req)
    assert (a.node, a.mig) == ("m", ("MIG-0", "MIG-1"))
    assert isinstance(lc.schedule("b", req), Unschedulable)
    assert str(lc.schedule("s", share(300, uuids=("GPU-m",)))) == (  # the MIG GPU takes no shares
        "0/2 nodes are available: 1 Insufficient GPU, "
        "1 node(s) had no GPU allowed by the pod's GPU UUID or sharing-group rules.")
    lc.release("a")
    assert lc.schedule("b", req).mig == ("MIG-0", "MIG-1")


def test_kubeshare_groups():
    lc = live(node("n", "H100", count=2))
    assert lc.schedule("a", share(200, anti_affinity_group="g")).gpus == ("GPU-n-0",)
    assert lc.schedule("b", share(200, anti_affinity_group="g")).gpus == ("GPU-n-1",)
    assert isinstance(lc.schedule("c", share(200, anti_affinity_group="g")), Unschedulable)
    lc = live(node("n", "H100", count=2))
    assert lc.schedule("a", share(200, exclusion_group="x")).gpus == ("GPU-n-0",)
    assert lc.schedule("b", share(200)).gpus == ("GPU-n-1",)  # not on x's GPU
    assert isinstance(lc.schedule("c", share(200, exclusion_group="y")), Unschedulable)
    assert lc.schedule("d", share(200, exclusion_group="x")).gpus == ("GPU-n-0",)
    lc = live(node("n", "H100", count=2))
    lc.schedule("a", share(200, affinity_group="t", gpu_policy="spread"))
    assert lc.schedule("b", share(200, affinity_group="t", gpu_policy="spread")).gpus == \
        lc.allocations["a"].gpus  # affinity beats spreading


def test_restore_is_idempotent_and_waits_for_its_node():
    lc = LiveCluster()
    req = share(500)
    lc.restore("a", req, "n", ("GPU-n-0",))
    assert "a" in lc.unplaced and lc.cluster is None
    lc.upsert_node(node("n", "H100", count=1))
    assert lc.allocations["a"].gpus == ("GPU-n-0",)
    lc.restore("a", req, "n", ("GPU-n-0",))
    c = lc.cluster
    assert int(c.gpu_left[0, 0]) == 500
    assert lc.release("a") is not None and lc.release("a") is None
    assert int(lc.cluster.gpu_left[0, 0]) == 1000


def test_removed_node_reports_its_allocations():
    lc = live(node("n", "H100"))
    lc.schedule("a", share(300))
    assert lc.remove_node("n") == ["a"]
    assert "a" in lc.unplaced and lc.problems[0].uid == "a"
    assert lc.release("a") is not None and not lc.unplaced


# --- property test: random event sequences keep the invariants ----------------------------------------------
NODES = [node(f"n{i}", model, count=c) for i, (model, c) in enumerate([("H100", 2), ("L4", 1), ("A100-40GB", 4)])]
events = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2)),
    st.tuples(st.just("remove"), st.integers(0, 2)),
    st.tuples(st.just("health"), st.integers(0, 2), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("cordon"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("schedule"), st.integers(0, 9), st.sampled_from([100, 250, 500, 1000]), st.integers(0, 30)),
    st.tuples(st.just("release"), st.integers(0, 9)),
    st.tuples(st.just("restart")),
), max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(events)
def test_no_event_sequence_over_allocates_or_loses_an_allocation(seq):
    lc = LiveCluster(policy="fgpu")
    held: dict[str, tuple] = {}  # what the API would say is bound: uid -> (request, node, gpus)
    for ev in seq:
        kind = ev[0]
        if kind == "add":
            lc.upsert_node(NODES[ev[1]])
        elif kind == "remove":
            name = NODES[ev[1]].name
            there = {u for u, a in lc.allocations.items() if a.node == name}
            assert set(lc.remove_node(name)) == there  # reported, never dropped
            assert there <= set(lc.unplaced)
        elif kind == "health":
            spec = NODES[ev[1]]
            if ev[2] < len(spec.gpus):
                lc.set_gpu_health(spec.name, spec.gpus[ev[2]].uuid, ev[3])
        elif kind == "cordon":
            if NODES[ev[1]].name in lc.specs:
                from dataclasses import replace
                lc.upsert_node(replace(lc.specs[NODES[ev[1]].name], unschedulable=ev[2]))
        elif kind == "schedule":
            uid = f"p{ev[1]}"
            outcome = lc.schedule(uid, share(ev[2], ev[3] if ev[3] <= 20 else 0))
            if not isinstance(outcome, Unschedulable):
                held.setdefault(uid, (outcome.request, outcome.node, outcome.gpus))
        elif kind == "release":
            lc.release(f"p{ev[1]}")
            held.pop(f"p{ev[1]}", None)
        elif kind == "restart":  # a new operator: rebuild from the nodes and the bound pods
            fresh = LiveCluster(policy="fgpu")
            for spec in lc.specs.values():
                fresh.upsert_node(spec)
            for uid, (req, n, gpus) in held.items():
                fresh.restore(uid, req, n, gpus)
            lc = fresh
        assert lc.violations() == []
        assert set(lc.allocations) | set(lc.unplaced) == set(held)
        c = lc.cluster
        if c is not None:  # every allocation is counted exactly once in the arrays
            used = np.zeros_like(c.gpu_left)
            for a in lc.allocations.values():
                for u in a.gpus:
                    used[c.uuid_index[u]] += a.request.gpu_milli
            assert (np.where(c.gpu_slots, 1000 - c.gpu_left, 0) == used).all()


def test_preempt_releases_the_victims_and_holds_their_room_for_the_preemptor():
    lc = live(node("a", "H100", count=1))
    lc.restore("low", share(500), "a", ("GPU-a-0",))
    lc.restore("peer", share(400), "a", ("GPU-a-0",))
    priority = {"low": 0, "peer": 1000}
    outcome = lc.preempt("high", share(600), 1000, priority)
    allocation, victims = outcome
    assert victims == ("low",) and allocation.gpus == ("GPU-a-0",) and "low" not in lc.allocations
    assert lc.violations() == []  # the held room is the victim's: never counted twice
    assert isinstance(lc.schedule("late-low", share(500)), Unschedulable)  # nobody takes the held room
    assert lc.preempt("high", share(600), 1000, priority) == (allocation, ())  # no second preemption
    assert "no pod of lower priority" in str(lc.preempt("peer2", share(600), 1000, priority))
    assert "preemptionPolicy is Never" in str(lc.preempt("polite", share(600), 2000, priority, policy="Never"))


def test_preempt_places_a_multi_gpu_preemptor_by_its_own_policy_not_the_cluster_default():
    """The CPU is what is short (a low-priority CPU-only pod holds it); once it goes, three GPUs could take
    the preemptor's two shares: binpack takes the fullest two, spread the emptiest two."""
    def scene():
        lc = live(NodeSpec("a", 4000, 128 * GIB_MIB, 3, "H100", max_pods=110,
                           gpus=tuple(GpuInfo(f"GPU-a-{i}", "H100") for i in range(3))))
        lc.restore("cpu", Request("cpu", 3500), "a")
        lc.restore("peer0", share(200), "a", ("GPU-a-0",))
        lc.restore("peer2", share(500), "a", ("GPU-a-2",))
        return lc
    two = Request("p", 1000, num_gpu=2, gpu_milli=300)
    priority = {"cpu": 0, "peer0": 1000, "peer2": 1000}
    assert isinstance(scene().schedule("high", two), Unschedulable)
    picked = {}
    for policy in ("binpack", "spread"):
        allocation, victims = scene().preempt("high", two, 1000, priority, node_policy=policy)
        assert victims == ("cpu",)
        picked[policy] = set(allocation.gpus)
    assert picked == {"binpack": {"GPU-a-0", "GPU-a-2"}, "spread": {"GPU-a-0", "GPU-a-1"}}
    assert scene().preempt("high", two, 1000, priority)[0].gpus == ("GPU-a-0", "GPU-a-2")  # cluster default
