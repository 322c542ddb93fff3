"""FGD's fragmentation measure and target workload, checked against hand-computed values."""
import numpy as np
from fgpu_operator.placement import Cluster, FragMeter, NodeSpec, Request, TargetWorkload


def test_target_workload_keeps_most_frequent_shapes_up_to_95_percent_and_renormalises():
    reqs = ([Request(f"a{i}", 1000, num_gpu=1, gpu_milli=500) for i in range(60)]
            + [Request(f"b{i}", 2000, num_gpu=1, gpu_milli=1000) for i in range(36)]
            + [Request(f"c{i}", 4000) for i in range(4)])
    w = TargetWorkload.from_requests(reqs)
    assert [s for s, _ in w.shapes] == [(1000, 500, 1, ()), (2000, 1000, 1, ())]
    assert np.allclose([f for _, f in w.shapes], [60 / 96, 36 / 96])
    assert w.cpu_freq == 0.0


def test_node_fragment_counts_small_gpus_when_shape_fits_and_all_idle_when_not():
    c = Cluster([NodeSpec("n", 4000, 1024, 2, "T4")])
    c.reserve(Request("x", 2000, num_gpu=1, gpu_milli=700), 0, (1,))  # GPUs left [1000, 300], CPU 2000
    w = TargetWorkload.from_shapes([((1000, 500, 1, ()), 0.5), ((3000, 1000, 1, ()), 0.25), ((500, 0, 0, ()), 0.25)])
    meter = FragMeter(c, w)
    # 500m shape fits: only the 300m GPU is fragment; 3-core shape lacks CPU: all 1300 idle; CPU-only: all idle.
    assert meter.node_amounts(c)[0] == 0.5 * 300 + 0.25 * 1300 + 0.25 * 1300


def test_model_constraint_makes_the_whole_node_fragment_for_that_shape():
    c = Cluster([NodeSpec("n", 4000, 1024, 1, "T4")])
    w = TargetWorkload.from_shapes([((1000, 500, 1, ("V100M32",)), 1.0)])
    assert FragMeter(c, w).node_amounts(c)[0] == 1000
