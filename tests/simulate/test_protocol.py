"""The replay protocol: tuning, determinism per seed, binning; and a pinned one-seed reproduction."""
import numpy as np
import pytest
from fgpu_operator.placement.model import MILLI
from fgpu_operator.sim.replay import replay, tune_workload
from fgpu_operator.sim.report import PAPER_ALLOC_AT_100
from fgpu_operator.sim.trace import load_nodes, load_pods


@pytest.fixture(scope="module")
def default():
    return load_nodes(None), load_pods(None)


def test_tuning_reaches_the_target_and_is_seeded(default):
    nodes, trace = default
    capacity = 6212 * MILLI
    tuned = tune_workload(trace.requests, capacity, 1.3, np.random.default_rng(42))
    demand = sum(r.total_gpu_milli for r in tuned)
    assert 1.3 * capacity - MILLI < demand <= 1.3 * capacity
    assert tuned[: len(trace.pods)] != sorted(trace.requests, key=lambda r: r.name)  # shuffled
    again = tune_workload(trace.requests, capacity, 1.3, np.random.default_rng(42))
    assert [r.name for r in tuned] == [r.name for r in again]
    down = tune_workload(trace.requests, capacity, 0.5, np.random.default_rng(1))
    assert sum(r.total_gpu_milli for r in down) <= 0.5 * capacity


def test_binned_curve_covers_0_to_130_and_only_grows(small_trace):
    from fgpu_operator.sim.trace import load_nodes as ln
    from fgpu_operator.sim.trace import load_pods as lp

    nodes, pods = small_trace
    result = replay(ln(nodes), lp(pods), "fgd", 7)
    alloc, frag = result.binned()
    assert min(alloc) == 0 and max(alloc) == 130
    values = [alloc[k] for k in sorted(alloc)]
    assert values == sorted(values) and values[-1] <= 100  # pods never depart: allocation only grows
    assert all(0 <= v <= 100 for v in frag.values())


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(PAPER_ALLOC_AT_100))
def test_one_seed_reproduces_the_paper_within_one_point(default, policy):
    """Seed 42 only (the paper averages seeds 42-51, so a single seed gets a wider band than the ±0.5 goal)."""
    nodes, trace = default
    alloc = replay(nodes, trace, policy, 42).binned()[0][100]
    assert alloc == pytest.approx(PAPER_ALLOC_AT_100[policy], abs=1.0)
