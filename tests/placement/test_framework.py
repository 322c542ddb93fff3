"""Framework phases on small hand-made clusters: filter reasons, GPU choice, reserve/release invariants."""
import numpy as np
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request, TargetWorkload, Unschedulable
from fgpu_operator.placement.framework import best_fit_gpus, filter_nodes
from fgpu_operator.placement.policies import make_policy
from hypothesis import given, settings
from hypothesis import strategies as st


def two_nodes():
    return Cluster([NodeSpec("a", 32000, 65536, 2, "T4"), NodeSpec("b", 96000, 393216, 8, "G2")])


def test_failed_placement_names_a_reason_per_node():
    c = two_nodes()
    fw = Framework(c, make_policy("bestfit", TargetWorkload.from_requests([Request("x", 1000)])),
                   np.random.default_rng(0))
    outcome = fw.schedule(Request("big", 4000, num_gpu=4, gpu_milli=1000, gpu_models=("G2",)))
    assert not isinstance(outcome, Unschedulable)  # 8 G2 GPUs on b
    outcome = fw.schedule(Request("p", 1000, num_gpu=8, gpu_milli=1000, gpu_models=("G2",)))
    assert isinstance(outcome, Unschedulable)
    assert str(outcome) == ("0/2 nodes are available: 1 node(s) had fewer than 8 free GPUs, "
                            "1 node(s) had no GPU of the requested model.")


def test_shared_request_goes_to_tightest_gpu_and_whole_gpus_take_first_free():
    c = two_nodes()
    c.reserve(Request("s1", 100, num_gpu=1, gpu_milli=300), 1, (2,))
    c.reserve(Request("s2", 100, num_gpu=1, gpu_milli=600), 1, (5,))
    assert best_fit_gpus(c, Request("s", 100, num_gpu=1, gpu_milli=350), 1) == (5,)  # 400 left beats 700
    assert best_fit_gpus(c, Request("s", 100, num_gpu=1, gpu_milli=500), 1) == (2,)
    assert best_fit_gpus(c, Request("w", 100, num_gpu=3, gpu_milli=1000), 1) == (0, 1, 3)


def test_filter_checks_cpu_memory_model_and_gpu_room():
    c = two_nodes()
    assert filter_nodes(c, Request("cpu", 40000)).tolist() == [False, True]
    assert filter_nodes(c, Request("mem", 1000, memory_mib=100000)).tolist() == [False, True]
    assert filter_nodes(c, Request("t4", 1000, num_gpu=1, gpu_milli=500, gpu_models=("T4",))).tolist() == [True, False]
    assert filter_nodes(c, Request("two", 1000, num_gpu=4, gpu_milli=1000)).tolist() == [False, True]


requests = st.builds(
    lambda cpu, kind, milli, n: Request("r", cpu, 1024, *((0, 0) if kind == 0 else (1, milli) if kind == 1 else (n, 1000))),
    st.integers(0, 40000), st.integers(0, 2), st.integers(1, 999), st.sampled_from([1, 2, 4, 8]))


@settings(max_examples=40, deadline=None)
@given(st.lists(requests, max_size=40), st.sampled_from(["random", "dotprod", "clustering", "packing",
                                                          "bestfit", "fgd", "fgpu"]))
def test_never_overallocates_and_release_restores_everything(reqs, policy):
    c = two_nodes()
    start = (c.cpu_left.copy(), c.mem_left.copy(), c.gpu_left.copy(), c.affinity.copy())
    fw = Framework(c, make_policy(policy, TargetWorkload.from_requests(reqs or [Request("x", 1)])),
                   np.random.default_rng(1))
    placed = [o for o in (fw.schedule(r) for r in reqs) if not isinstance(o, Unschedulable)]
    assert (c.gpu_left >= 0).all() and (c.cpu_left >= 0).all() and (c.mem_left >= 0).all()
    assert (c.gpu_left_total == c.gpu_left.sum(axis=1)).all()
    for p in placed:
        assert len(p.gpus) == (p.request.num_gpu if p.request.wants_gpu else 0)
    for p in reversed(placed):
        fw.release(p)
    for before, after in zip(start, (c.cpu_left, c.mem_left, c.gpu_left, c.affinity), strict=True):
        assert (before == after).all()
