"""The offline packing ceiling: checked against brute force on small cases, and against real replays."""
import itertools

import numpy as np
import pytest
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.fragmentation import TargetWorkload
from fgpu_operator.placement.framework import Framework, Unschedulable
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Request
from fgpu_operator.placement.policies import POLICY_NAMES, make_policy
from fgpu_operator.sim.ceiling import arrivals_until, ceiling
from fgpu_operator.sim.fillings import maximal_fillings
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.trace import load_nodes, load_pods
from hypothesis import given, settings
from hypothesis import strategies as st

SIZES = [810, 650, 470, 320, 230, 160, 50]


def share(milli: int, i: int = 0) -> Request:
    return Request(f"s{i}-{milli}", 1000, num_gpu=1, gpu_milli=milli)


def whole(i: int, n: int = 1) -> Request:
    return Request(f"w{i}", 1000, num_gpu=n, gpu_milli=MILLI)


def partitions(items):
    """All set partitions of a list (restricted growth strings)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def min_bins(items) -> int:
    return min((len(p) for p in partitions(list(items)) if all(sum(b) <= MILLI for b in p)), default=0)


def brute_idle(shares, whole_gpus, total):
    """Idle milli at the arrival point over every subset of sharing pods placed, from the definition."""
    best = None
    for keep in itertools.product([0, 1], repeat=len(shares)):
        placed = [s for s, k in zip(shares, keep, strict=True) if k]
        bins = min_bins(placed)
        if bins > total:
            continue
        used = sum(placed) + min(whole_gpus, total - bins) * MILLI
        idle = total * MILLI - used
        best = idle if best is None else min(best, idle)
    return best


def test_fillings_fit_are_maximal_and_cover_every_packing():
    sizes, limits = [650, 470, 320, 160], [2, 2, 3, 3]
    fillings = maximal_fillings(sizes, limits)
    for f in fillings:
        used = sum(k * s for k, s in zip(f, sizes, strict=True))
        assert used <= MILLI and all(k <= lim for k, lim in zip(f, limits, strict=True))
        assert all(s > MILLI - used or k == lim for s, k, lim in zip(sizes, f, limits, strict=True))
    for counts in itertools.product(*(range(lim + 1) for lim in limits)):
        if sum(k * s for k, s in zip(counts, sizes, strict=True)) <= MILLI:
            assert any(all(k <= m for k, m in zip(counts, f, strict=True)) for f in fillings), counts


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(SIZES), min_size=1, max_size=7), st.integers(0, 6))
def test_bounds_equal_brute_force(shares, whole_gpus):
    total = max(1, -(-(sum(shares) + whole_gpus * MILLI) // MILLI))  # arrivals fill the cluster
    requests = [share(s, i) for i, s in enumerate(shares)] + [whole(i) for i in range(whole_gpus)]
    c = ceiling(requests, total)
    assert c.exact and c.min_share_gpus == min_bins(shares)
    slack = total * MILLI - sum(shares) - whole_gpus * MILLI
    assert c.idle_all_placed * MILLI == pytest.approx(max(min_bins(shares) * MILLI - sum(shares), slack))
    assert c.idle_any_subset * MILLI == pytest.approx(brute_idle(shares, whole_gpus, total), abs=1e-6)
    assert c.idle_any_subset <= c.idle_all_placed + 1e-9


def test_refusing_large_fractions_helps_only_when_whole_pods_wait():
    # Six 0.81 pods and a whole pod on 6 GPUs: placing all six 0.81 pods fails the whole pod (idle 1.14);
    # refusing one of them lets the whole pod in (idle 0.81 + 5 x 0.19 = 1.76 - 0.81 = 0.95).
    larges = [share(810, i) for i in range(6)]
    c = ceiling(larges + [whole(0)], 6)
    assert c.idle_all_placed == pytest.approx(1.14) and c.idle_any_subset == pytest.approx(0.95)
    assert c.refused == {810: 1}
    # Without a whole pod waiting there is nothing to gain.
    c = ceiling(larges, 6)
    assert c.idle_any_subset == pytest.approx(c.idle_all_placed) == pytest.approx(1.14) and not c.refused


def test_more_arrivals_than_capacity_is_a_named_error():
    with pytest.raises(PlacementInputError) as err:
        ceiling([whole(0, 2)], 1)
    assert err.value.field == "pods"


def test_arrivals_follow_the_replay_and_no_policy_beats_the_any_subset_bound(small_trace):
    nodes_csv, pods_csv = small_trace
    nodes, trace = load_nodes(nodes_csv), load_pods(pods_csv)
    arrived, total = arrivals_until(nodes, trace, 7)
    c = ceiling(arrived, total)
    for policy in POLICY_NAMES:
        result = replay(nodes, trace, policy, 7)
        k = len(arrived) - 1  # the last record at or below 100% arrival
        assert result.arrived[k] == sum(r.total_gpu_milli for r in arrived) <= total * MILLI
        assert result.arrived[k + 1] > total * MILLI
        idle = total * MILLI - result.used[k]
        assert idle >= c.idle_any_subset * MILLI - 1e-6, policy


def test_admission_refusal_leaves_the_cluster_unchanged_and_sees_every_request():
    cluster = Cluster([NodeSpec("a", 8000, 65536, 2, "T4")])
    seen = []

    def refuse_large(cl, request, feasible):
        seen.append(request.name)
        return "kept for whole-GPU pods" if request.gpu_milli >= 800 else None

    requests = [share(810, 0), share(300, 1), whole(9, 4)]
    fw = Framework(cluster, make_policy("fgpu", TargetWorkload.from_requests(requests)),
                   np.random.default_rng(0), admission=refuse_large)
    before = cluster.gpu_left.copy()
    out = fw.schedule(requests[0])
    assert isinstance(out, Unschedulable) and "kept for whole-GPU pods" in str(out)
    assert (cluster.gpu_left == before).all()
    assert not isinstance(fw.schedule(requests[1]), Unschedulable)
    assert isinstance(fw.schedule(requests[2]), Unschedulable)  # 4 GPUs on a 2-GPU node: infeasible anyway
    assert seen == ["s0-810", "s1-300", "w9"]
