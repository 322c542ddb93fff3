"""The kube-dra allocator: kube-scheduler's node scores (LeastAllocated + BalancedAllocation on CPU and
memory, hand-computed), its percentageOfNodesToScore window, and the structured allocator's first fit in
device (GPU index) order."""
import numpy as np
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request
from fgpu_operator.placement.policies import make_policy
from fgpu_operator.placement.policies.kubedra import KubeDraPolicy, nodes_to_find


def _policy(cluster: Cluster) -> KubeDraPolicy:
    policy = make_policy("kube-dra", None)
    policy.attach(cluster, np.random.default_rng(0))
    return policy


def test_node_score_is_least_allocated_plus_balance_of_cpu_and_memory():
    c = Cluster([NodeSpec("a", 10000, 10000, 2, "G2"), NodeSpec("b", 10000, 10000, 2, "G2")])
    c.reserve(Request("x", 5000, 1000), 1, ())
    r = Request("p", 1000, 1000, num_gpu=1, gpu_milli=500)
    # a: cpu 10% and mem 10% used after: least (90+90)/2 = 90; balance 100 with and without: 50 + (50+0)/2 = 75
    # b: cpu 60%, mem 20% after: least (40+80)/2 = 60; balance with 80, without (50%,10%) 80: 75
    assert _policy(c).node_scores(r).tolist() == [165, 135]
    scores = _policy(c).score(r, np.ones(2, dtype=bool))
    assert np.floor(scores).tolist() == [165, 135]  # the tie-breaking fraction never reorders scores


def test_zero_requests_are_scored_as_kube_schedulers_defaults():
    c = Cluster([NodeSpec("a", 1000, 1000, 1, "G2")])
    r = Request("p", 0, 0, num_gpu=1, gpu_milli=100)
    # 100m of 1000 and 200Mi of 1000: least (90+80)/2 = 85; balance after 95, before 100: 50 + (50-5)//2 = 72
    assert _policy(c).node_scores(r).tolist() == [85 + 72]


def test_nodes_to_find_follows_the_adaptive_percentage():
    assert nodes_to_find(50) == 50
    assert nodes_to_find(150) == 100  # 49% of 150 is 73: at least 100
    assert nodes_to_find(1000) == 420  # 50 - 8 = 42%
    assert nodes_to_find(10000) == 500  # 50 - 80 < 5: 5%


def test_window_rotates_through_the_feasible_nodes():
    nodes = [NodeSpec(f"n{i}", 1000, 1000, 1, "G2") for i in range(300)]
    policy = _policy(Cluster(nodes))
    feasible = np.ones(300, dtype=bool)
    first = policy.score(Request("p", 1, 1), feasible) > -np.inf
    assert first.sum() == 144 and first[:144].all()  # 48% of 300
    feasible[150] = False  # the walk passes an infeasible node and goes one further
    second = policy.score(Request("q", 1, 1), feasible) > -np.inf
    assert second.sum() == 144 and second[144:289].sum() == 144 and not second[150]
    third = policy.score(Request("r", 1, 1), feasible) > -np.inf
    assert third[289:].all() and third[:133].all() and third.sum() == 144


def test_ties_are_broken_at_random_each_cycle():
    c = Cluster([NodeSpec(f"n{i}", 1000, 1000, 1, "G2") for i in range(8)])
    policy = _policy(c)
    picks = {int(np.argmax(policy.score(Request("p", 1, 1), np.ones(8, dtype=bool)))) for _ in range(40)}
    assert len(picks) > 4  # eight equal nodes: not one fixed favourite


def test_first_fit_in_gpu_index_order():
    c = Cluster([NodeSpec("a", 10000, 10000, 4, "G2")])
    c.reserve(Request("x", 1, num_gpu=1, gpu_milli=800), 0, (1,))
    policy = _policy(c)
    share = Request("s", 1, num_gpu=1, gpu_milli=200)
    assert policy.choose_gpus(share, 0) == (0,)  # the first GPU it fits on, not the fullest (best fit: 1)
    c.reserve(Request("y", 1, num_gpu=1, gpu_milli=900), 0, (0,))
    assert policy.choose_gpus(share, 0) == (1,)
    whole = Request("w", 1, num_gpu=2, gpu_milli=1000)
    assert policy.choose_gpus(whole, 0) == (2, 3)


def test_a_share_on_several_gpus_takes_the_first_that_fit():
    """Regression (Hypothesis, test_multi_share): a 2-GPU share got only its first GPU."""
    c = Cluster([NodeSpec("a", 10000, 10000, 2, "G2")])
    for g in (0, 1):
        c.reserve(Request(f"h{g}", 0, num_gpu=1, gpu_milli=800), 0, (g,))  # 200 milli free on each
    outcome = Framework(c, make_policy("kube-dra", None), np.random.default_rng(1)).schedule(
        Request("p", 1000, num_gpu=2, gpu_milli=200))
    assert outcome.gpus == (0, 1)
    c = Cluster([NodeSpec("b", 10000, 10000, 4, "G2")])
    c.reserve(Request("x", 1, num_gpu=1, gpu_milli=900), 0, (1,))
    assert _policy(c).choose_gpus(Request("s", 1, num_gpu=2, gpu_milli=500), 0) == (0, 2)  # GPU 1 is too full


def test_replays_through_the_framework():
    c = Cluster([NodeSpec(f"n{i}", 8000, 8000, 2, "G2") for i in range(4)])
    framework = Framework(c, make_policy("kube-dra", None), np.random.default_rng(1))
    placed = [framework.schedule(Request(f"p{i}", 1000, 1000, num_gpu=1, gpu_milli=300)) for i in range(8)]
    assert all(p.gpus == (0,) for p in placed)  # spread over nodes by CPU/memory, GPU 0 first on each
    assert sorted(p.node for p in placed) == [0, 0, 1, 1, 2, 2, 3, 3]
