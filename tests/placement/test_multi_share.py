"""A share on several GPUs (HAMi's `nvidia.com/gpu: 2` at 50% each): N distinct GPUs of one node, each with the
per-device share, chosen by each policy's own rule, and explained per node when no node has N fitting GPUs."""
from itertools import combinations

import numpy as np
import pytest
from fgpu_operator.placement import (
    Cluster,
    FragMeter,
    Framework,
    NodeSpec,
    Request,
    TargetWorkload,
    Unschedulable,
)
from fgpu_operator.placement.filters import filter_nodes
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import MILLI, Constraints, GpuInfo
from fgpu_operator.placement.policies import LIVE_POLICIES, POLICIES, make_policy
from fgpu_operator.placement.policies.fgd import share_sets
from hypothesis import example, given, settings
from hypothesis import strategies as st

#: Only 0.2-GPU pods to come: a GPU left with less than 0.2 free is fragment.
SMALL_SHARES = TargetWorkload.from_shapes([((1000, 200, 1, ()), 1.0)])


def node_with_rooms(rooms, model="A100"):
    """One node whose GPUs have `rooms` milli-GPU free (the rest held by one-GPU pods)."""
    c = Cluster([NodeSpec("n", 96000, 393216, len(rooms), model)])
    for g, room in enumerate(rooms):
        if room < MILLI:
            c.reserve(Request(f"held-{g}", 0, num_gpu=1, gpu_milli=MILLI - room), 0, (g,))
    return c


def placed(policy, rooms, request, workload=SMALL_SHARES):
    c = node_with_rooms(rooms)
    outcome = Framework(c, make_policy(policy, workload), np.random.default_rng(0)).schedule(request)
    assert not isinstance(outcome, Unschedulable), str(outcome)
    return outcome.gpus


HALF_ON_TWO = Request("tp", 1000, num_gpu=2, gpu_milli=500)


@pytest.mark.parametrize(("policy", "gpus"), [
    ("binpack", (1, 2)),  # the fullest GPUs that fit: 600 and 700 milli left
    ("spread", (0, 3)),  # the emptiest
    ("fgd", (0, 1)),  # leaves no GPU below 0.2 free, the lowest such set (binpack's leaves 100 and 200 free)
    ("fgpu", (0, 1)),  # FGD's GPU choice
])
def test_each_live_policy_chooses_the_gpu_set_by_its_own_rule(policy, gpus):
    assert placed(policy, [1000, 700, 600, 1000], HALF_ON_TWO) == gpus


def test_fgd_takes_the_set_that_adds_least_fragmentation_over_every_pair():
    rooms = [1000, 700, 600, 1000]
    c = node_with_rooms(rooms)
    meter = FragMeter(c, SMALL_SHARES)

    def fragment_after(chosen):
        left = c.gpu_left.copy()
        left[0, list(chosen)] -= 500
        return float(meter.amount(c.cpu_left - 1000, left, c.model_idx)[0])

    best = min(fragment_after(s) for s in combinations(range(4), 2))
    assert fragment_after(placed("fgd", rooms, HALF_ON_TWO)) == best == 0.0
    assert fragment_after(placed("binpack", rooms, HALF_ON_TWO)) > best  # 100 milli left on GPU 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([0, 100, 300, 500, 600, 800, 1000]), min_size=1, max_size=8),
       st.integers(1, 5), st.sampled_from([100, 250, 500, 700]))
def test_fgd_share_sets_reach_every_node_state_a_set_can_leave(rooms, count, milli):
    """`share_sets` drops only sets that leave the same multiset of rooms as one it keeps (the measure cannot
    tell them apart), so the best set is never missed."""
    left, fits = np.array(rooms), np.array(rooms) >= milli
    every = {tuple(sorted(left[list(s)])) for s in combinations(np.flatnonzero(fits), count)}
    kept = share_sets(left, fits, count)
    assert {tuple(sorted(left[list(s)])) for s in kept} == every
    assert all(len(set(s)) == count and all(fits[g] for g in s) for s in kept)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 200, 400, 500, 700, 1000]), min_size=1, max_size=8),
                min_size=1, max_size=4),
       st.integers(2, 4), st.sampled_from([200, 500, 800, 1000]), st.sampled_from(sorted(POLICIES)))
@example([[200, 200]], 2, 200, "kube-dra")  # kube-dra gave a 2-GPU share one GPU (first-fit cut at one for shares)
def test_every_policy_places_n_distinct_fitting_gpus_or_none(node_rooms, count, milli, policy):
    c = Cluster([NodeSpec(f"n{i}", 96000, 393216, len(r), "A100") for i, r in enumerate(node_rooms)])
    for i, rooms in enumerate(node_rooms):
        for g, room in enumerate(rooms):
            if room < MILLI:
                c.reserve(Request(f"h{i}-{g}", 0, num_gpu=1, gpu_milli=MILLI - room), i, (g,))
    before = c.gpu_left.copy()
    request = Request("p", 1000, num_gpu=count, gpu_milli=milli)
    workload = TargetWorkload.from_shapes([((1000, 500, 1, ()), 0.5), ((1000, milli, count, ()), 0.5)])
    outcome = Framework(c, make_policy(policy, workload), np.random.default_rng(1)).schedule(request)
    feasible = [(np.array(r) >= milli).sum() >= count for r in node_rooms]
    if not any(feasible):
        assert isinstance(outcome, Unschedulable)
        return
    assert not isinstance(outcome, Unschedulable) and feasible[outcome.node]
    assert len(set(outcome.gpus)) == count
    assert all(before[outcome.node, g] >= milli for g in outcome.gpus)
    assert (c.gpu_left >= 0).all()
    c.release(outcome)
    assert (c.gpu_left == before).all()


def test_nodes_without_n_fitting_gpus_are_explained_apart():
    c = Cluster([NodeSpec("one-gpu", 96000, 393216, 1, "A100"), NodeSpec("busy", 96000, 393216, 2, "A100"),
                 NodeSpec("t4", 96000, 393216, 4, "T4")])
    c.reserve(Request("held", 0, num_gpu=1, gpu_milli=700), 1, (0,))
    request = Request("tp", 1000, num_gpu=2, gpu_milli=500, gpu_models=("A100",))
    outcome = Framework(c, make_policy("binpack", SMALL_SHARES), np.random.default_rng(0)).schedule(request)
    assert str(outcome) == ("0/3 nodes are available: 1 node(s) had fewer than 2 GPUs the pod may use, "
                            "1 node(s) had fewer than 2 GPUs with 500 milli-GPU free, "
                            "1 node(s) had no GPU of the requested model.")


def test_a_live_share_on_two_gpus_counts_each_gpus_memory_and_releases_both():
    gpus = tuple(GpuInfo(f"GPU-{i}", "H100") for i in range(2))
    lc = LiveCluster("binpack")
    lc.upsert_node(NodeSpec("n", 32000, 131072, 2, "H100", gpus=gpus, max_pods=110))
    half = Request("tp", 1000, num_gpu=2, gpu_milli=500, gpu_mem_pct=50, constraints=Constraints())
    a = lc.schedule("a", half)
    assert a.gpus == ("GPU-0", "GPU-1")
    cap = int(lc.cluster.gpu_mem_cap[0, 0])
    assert lc.cluster.gpu_mem_left[0].tolist() == [cap - cap * 50 // 100] * 2  # half of each GPU's memory
    assert lc.schedule("b", half).gpus == ("GPU-0", "GPU-1")
    assert str(lc.schedule("c", half)) == "0/1 nodes are available: 1 node(s) had fewer than 2 GPUs with 500 milli-GPU free."
    lc.release("a")
    assert lc.schedule("c", half).gpus == ("GPU-0", "GPU-1") and not lc.violations()


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_kubeshare_affinity_keeps_the_groups_gpu_and_the_policy_picks_the_rest(policy):
    c = node_with_rooms([1000, 1000, 1000, 1000])
    fw = Framework(c, make_policy(policy, SMALL_SHARES), np.random.default_rng(0))
    group = Constraints(affinity_group="team")
    first = fw.schedule(Request("a", 100, num_gpu=1, gpu_milli=300, constraints=group))
    second = fw.schedule(Request("b", 100, num_gpu=2, gpu_milli=300, constraints=group))
    assert set(first.gpus) < set(second.gpus) and len(set(second.gpus)) == 2


def test_a_share_on_several_gpus_is_not_placed_on_fewer_whatever_their_room():
    c = node_with_rooms([1000])  # one empty GPU could hold both halves, but they must be different GPUs
    assert not filter_nodes(c, HALF_ON_TWO).any()


def test_hamis_gpu_policy_spread_takes_the_emptiest_gpus_under_any_node_policy():
    spread = Request("tp", 1000, num_gpu=2, gpu_milli=500, constraints=Constraints(gpu_policy="spread"))
    assert {placed(p, [1000, 700, 600, 1000], spread) for p in LIVE_POLICIES} == {(0, 3)}


def test_fgd_share_sets_beyond_the_limit_still_offer_the_fullest_and_the_emptiest_set():
    left = np.array([100, 200, 300, 400, 500, 600, 700, 800, 900, 1000])
    kept = share_sets(left, left >= 100, 4, limit=5)
    assert 5 <= len(kept) <= 5 + 2  # C(10, 4) = 210 states, cut at the limit
    assert (0, 1, 2, 3) in kept and (6, 7, 8, 9) in kept  # least room (binpack's) and most room (spread's)
    assert all(len(set(s)) == 4 for s in kept)
