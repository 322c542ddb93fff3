"""Policy scores follow the FGD simulator's formulas (hand-computed), and FGD prefers filling partial GPUs."""
import numpy as np
import pytest
from fgpu_operator.placement import Cluster, Framework, NodeSpec, PlacementInputError, Request, TargetWorkload
from fgpu_operator.placement.policies import POLICY_NAMES, make_policy
from hypothesis import given, settings
from hypothesis import strategies as st


def cluster():
    c = Cluster([NodeSpec("a", 96000, 393216, 8, "G2"), NodeSpec("b", 96000, 393216, 8, "G2")])
    c.reserve(Request("s", 8000, num_gpu=1, gpu_milli=500), 1, (0,))
    return c


def scored(name, request, workload=None):
    c = cluster()
    policy = make_policy(name, workload or TargetWorkload.from_requests([request]))
    policy.attach(c, np.random.default_rng(0))
    return policy.score(request, np.ones(c.size, dtype=bool))


def test_dotprod_scores_100_times_one_minus_half_the_normalised_dot_product():
    r = Request("p", 12000, num_gpu=1, gpu_milli=1000)
    dot_a = (96000 / 128000) * (12000 / 128000) + (8000 / 8000) * (1000 / 8000)
    dot_b = (88000 / 128000) * (12000 / 128000) + (7500 / 8000) * (1000 / 8000)
    assert scored("dotprod", r).tolist() == [int(100 * (1 - dot_a / 2)), int(100 * (1 - dot_b / 2))]


def test_packing_prefers_the_shared_gpu_then_free_gpus_on_used_nodes():
    share = Request("p", 1000, num_gpu=1, gpu_milli=300)
    assert scored("packing", share).tolist() == [25, 100 - 50 // 10]  # idle node: max(33-8, 8); shared GPU
    whole = Request("w", 1000, num_gpu=2, gpu_milli=1000)
    assert scored("packing", whole).tolist() == [25, 48]


def test_clustering_bands_by_gpu_shape_already_on_the_node():
    share = Request("p", 1000, num_gpu=1, gpu_milli=300)
    assert scored("clustering", share).tolist() == [25, 75 + 25 * 500 // 8000]
    whole = Request("w", 1000, num_gpu=1, gpu_milli=1000)
    assert scored("clustering", whole).tolist() == [25, 25 * 500 // 8000]  # other shapes: 0-25 band


def test_fgd_puts_a_shared_request_on_the_partial_gpu_it_fills():
    c = cluster()
    w = TargetWorkload.from_shapes([((1000, 1000, 1, ()), 0.5), ((1000, 500, 1, ()), 0.5)])
    fw = Framework(c, make_policy("fgd", w), np.random.default_rng(0))
    placed = fw.schedule(Request("p", 1000, num_gpu=1, gpu_milli=500))
    assert (placed.node, placed.gpus) == (1, (0,))


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(PlacementInputError) as err:
        make_policy("tetris", TargetWorkload.from_requests([Request("x", 1)]))
    assert all(name in str(err.value) for name in POLICY_NAMES)


def test_fgpu_sends_cpu_only_pods_where_no_whole_gpu_would_be_stranded():
    c = Cluster([NodeSpec("idle", 96000, 393216, 8, "G2"), NodeSpec("busy", 96000, 393216, 8, "G2")])
    c.reserve(Request("w", 8000, num_gpu=8, gpu_milli=1000), 1, tuple(range(8)))
    w = TargetWorkload.from_shapes([((8000, 1000, 1, ()), 1.0)])  # a 4-core pod flips nothing: FGD ties
    for order in ([0, 1], [1, 0]):
        fw = Framework(c, make_policy("fgpu", w), np.random.default_rng(0), node_order=np.array(order))
        placed = fw.schedule(Request("cpu", 4000))
        assert placed.node == 1
        fw.release(placed)
    fgd = Framework(c, make_policy("fgd", w), np.random.default_rng(0), node_order=np.array([0, 1]))
    assert fgd.schedule(Request("cpu", 4000)).node == 0  # FGD: first node in the tie order


@given(st.integers(1, 8).flatmap(lambda width: st.lists(
    st.lists(st.sampled_from([0, 100, 300, 500, 1000]), min_size=width, max_size=width), min_size=1, max_size=6)))
@settings(max_examples=200, deadline=None)
def test_fgd_tries_only_the_first_gpu_of_each_distinct_room(rows):
    """A GPU whose room repeats an earlier GPU's on its node is skipped; the first of each room is kept."""
    from fgpu_operator.placement.policies.fgd import _repeats_earlier

    left = np.array(rows, dtype=np.int32)
    expected = [[row[j] in row[:j] for j in range(len(row))] for row in rows]
    assert _repeats_earlier(left).tolist() == expected
