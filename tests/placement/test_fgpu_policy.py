"""`fgpu`: FGD's score, minus a charge for GPUs stranded behind exhausted CPUs (hand-built clusters)."""
import numpy as np
import pytest
from fgpu_operator.placement import Cluster, Framework, NodeSpec, Request, TargetWorkload
from fgpu_operator.placement.policies import make_policy
from fgpu_operator.placement.policies.fgpu import cpu_demand_per_gpu, cpu_per_gpu, stranded_gpu_milli

#: One GPU pod shape asking 10 cores per GPU: FGD only asks "does one such pod still fit?".
GPU_SHAPE = ((10_000, 1000, 1, ()), 1.0)


def two_nodes() -> Cluster:
    """`lean` (24 cores) comes first in the tie order; `rich` (80 cores) second; 4 idle GPUs each."""
    return Cluster([NodeSpec("lean", 24_000, 262_144, 4, "T4"), NodeSpec("rich", 80_000, 262_144, 4, "T4")])


def place(policy: str, workload: TargetWorkload, request: Request) -> int:
    fw = Framework(two_nodes(), make_policy(policy, workload), np.random.default_rng(0), node_order=np.array([0, 1]))
    return fw.schedule(request).node


def test_gpu_pod_goes_where_it_strands_no_gpu_while_fgd_takes_the_first_tied_node():
    # 14 cores for one GPU: on `lean` 10 cores are left for 3 idle GPUs (one pod of the shape still fits, so
    # FGD's fragment does not change: a tie), which at 10 cores per GPU strands 2 of them.
    w = TargetWorkload.from_shapes([GPU_SHAPE])
    pod = Request("p", 14_000, num_gpu=1, gpu_milli=1000)
    assert place("fgd", w, pod) == 0
    assert place("fgpu", w, pod) == 1


def test_gpu_pod_with_little_cpu_keeps_fgds_node_order():
    w = TargetWorkload.from_shapes([GPU_SHAPE])
    assert place("fgpu", w, Request("p", 4_000, num_gpu=1, gpu_milli=1000)) == 0  # strands nothing anywhere


def test_no_gpu_protection_when_the_workload_needs_more_cpu_than_the_cluster_has():
    # CPU-only pods of 200 cores: 210 cores asked per GPU, 13 in the cluster -> the CPU runs out first anyway.
    w = TargetWorkload.from_shapes([((10_000, 1000, 1, ()), 0.5), ((200_000, 0, 0, ()), 0.5)])
    policy = make_policy("fgpu", w)
    policy.attach(two_nodes(), np.random.default_rng(0))
    assert not policy.protect_gpus
    assert place("fgpu", w, Request("p", 14_000, num_gpu=1, gpu_milli=1000)) == 0


def test_with_nothing_stranded_fgds_score_decides():
    # Sharing a half-used GPU on `lean` beats a fresh GPU on `rich` for FGD (fragment falls); fgpu agrees even
    # though `lean` is the node with less CPU, because the pod strands nothing on either.
    c = two_nodes()
    c.reserve(Request("half", 2_000, num_gpu=1, gpu_milli=500), 0, (0,))
    w = TargetWorkload.from_shapes([((2_000, 500, 1, ()), 0.5), ((10_000, 1000, 1, ()), 0.5)])
    fw = Framework(c, make_policy("fgpu", w), np.random.default_rng(0), node_order=np.array([1, 0]))
    placed = fw.schedule(Request("p", 2_000, num_gpu=1, gpu_milli=500))
    assert (placed.node, placed.gpus) == (0, (0,))


def test_cpu_per_gpu_weighs_shapes_by_frequency_and_gpus():
    w = TargetWorkload.from_shapes([((8_000, 1000, 2, ()), 0.5), ((6_000, 500, 1, ()), 0.25), ((99_000, 0, 0, ()), 0.25)])
    # GPU shapes only: (0.5*8 + 0.25*6) cores / (0.5*2 + 0.25*0.5) GPUs
    assert cpu_per_gpu(w) == pytest.approx((4_000 + 1_500) / 1.125)
    # all shapes: CPU-only pods' cores count too
    assert cpu_demand_per_gpu(w) == pytest.approx((4_000 + 1_500 + 24_750) / 1.125)
    assert cpu_per_gpu(TargetWorkload.from_shapes([((4_000, 0, 0, ()), 1.0)])) == float("inf")


def test_stranded_capacity_is_idle_gpu_the_remaining_cpu_cannot_feed():
    out = stranded_gpu_milli(np.array([24_000, 10_000, -5, 0]), np.array([3000, 3000, 500, 0]), 10_000)
    assert out.tolist() == [600.0, 2000.0, 500.0, 0.0]
