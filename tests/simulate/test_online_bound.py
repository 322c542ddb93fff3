"""The ceiling for schedulers that never refuse a pod that fits: valid against brute force over every such
schedule on tiny clusters, below the any-subset bound, above every policy's replay."""
import random

import pytest
from fgpu_operator.placement.model import MILLI, NodeSpec, Request
from fgpu_operator.placement.policies import POLICY_NAMES
from fgpu_operator.sim.ceiling import arrivals_until, ceiling
from fgpu_operator.sim.online_bound import dominates, online_bound, shape_of
from fgpu_operator.sim.replay import replay
from fgpu_operator.sim.trace import load_nodes, load_pods


def pod(i: int, milli: int, cpu: int = 1000, n: int = 1, mem: int = 0) -> Request:
    return Request(f"p{i}", cpu, mem, num_gpu=n, gpu_milli=milli)


def best_non_refusing(nodes: list[NodeSpec], pods: list[Request]) -> int:
    """Most GPU milli any schedule can allocate that fails a pod only when nothing can hold it."""
    start = tuple((n.cpu_milli, n.memory_mib, (MILLI,) * n.num_gpu) for n in nodes)

    def go(i: int, state: tuple) -> int:
        if i == len(pods):
            return 0
        p = pods[i]
        options = []
        for k, (cpu, mem, gpus) in enumerate(state):
            if cpu < p.cpu_milli or mem < p.memory_mib:
                continue
            rest = (cpu - p.cpu_milli, mem - p.memory_mib)
            if p.is_share:
                for g in sorted({g for g, left in enumerate(gpus) if left >= p.gpu_milli}):
                    new = list(gpus)
                    new[g] -= p.gpu_milli
                    options.append(state[:k] + ((*rest, tuple(new)),) + state[k + 1:])
            else:
                free = [g for g, left in enumerate(gpus) if left == MILLI]
                if len(free) >= p.num_gpu:
                    new = list(gpus)
                    for g in free[:p.num_gpu]:
                        new[g] = 0
                    options.append(state[:k] + ((*rest, tuple(new)),) + state[k + 1:])
        if not options:
            return go(i + 1, state)
        return p.total_gpu_milli + max(go(i + 1, s) for s in set(options))

    return go(0, start)


def test_a_pod_that_fits_cannot_be_refused_to_make_room():
    # three 0.6 pods, then a whole GPU: refusing one 0.6 pod would place 2.2 GPUs of 3; a non-refusing
    # scheduler places all three (each fits) and the whole-GPU pod, which dominates them, fails
    nodes = [NodeSpec("a", 64000, 65536, 3)]
    pods = [pod(0, 600), pod(1, 600), pod(2, 600), pod(3, MILLI, cpu=4000)]
    assert ceiling(pods, 3).alloc_any_subset_pct == pytest.approx(100 * 2.2 / 3)
    assert online_bound(pods, nodes).alloc_pct == pytest.approx(60.0)
    assert best_non_refusing(nodes, pods) == 1800
    # a whole-GPU pod asking for less CPU than the 0.81 pods is not dominated: it may still find a GPU
    assert not dominates(shape_of(pod(3, MILLI, cpu=500)), shape_of(pod(0, 810)))


@pytest.mark.parametrize("seed", range(25))
def test_bound_holds_against_every_non_refusing_schedule(seed):
    rng = random.Random(seed)
    nodes = [NodeSpec(f"n{k}", rng.choice([4000, 6000, 8000]), 65536, rng.choice([1, 2, 3])) for k in range(2)]
    total = sum(n.num_gpu for n in nodes)
    pods, demand = [], 0
    for i in range(8):
        milli, n = rng.choice([(810, 1), (650, 1), (470, 1), (320, 1), (160, 1), (MILLI, 1), (MILLI, 2)])
        p = pod(i, milli, cpu=rng.choice([500, 1000, 2000, 3000]), n=n)
        if demand + p.total_gpu_milli > total * MILLI:
            break
        demand += p.total_gpu_milli
        pods.append(p)
    best = best_non_refusing(nodes, pods)
    bound = online_bound(pods, nodes, boundaries_pct=(20, 40, 60, 80, 90))
    assert 100.0 * best / (total * MILLI) <= bound.alloc_pct + 1e-6
    assert bound.alloc_pct <= ceiling(pods, total).alloc_any_subset_pct + 1e-6


def test_no_policy_beats_the_non_refusing_bound(small_trace):
    nodes_csv, pods_csv = small_trace
    nodes, trace = load_nodes(nodes_csv), load_pods(pods_csv)
    arrived, total = arrivals_until(nodes, trace, 7)
    bound = online_bound(arrived, nodes)
    assert bound.alloc_pct <= ceiling(arrived, total).alloc_any_subset_pct + 1e-6
    k = len(arrived) - 1
    for policy in POLICY_NAMES:
        used = replay(nodes, trace, policy, 7).used[k]
        assert 100.0 * used / (total * MILLI) <= bound.alloc_pct + 1e-6, policy
