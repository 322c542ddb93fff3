"""The QoS simulation (operator/sim/qos_timeline.py): who is marked protected, the naive rule, and grading
against the model's perturbed slowdown, not the model itself."""
import numpy as np
import pytest
from fgpu_operator.placement import Cluster, NodeSpec, Request
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import Placement
from fgpu_operator.placement.slo import Tenant, default_model
from fgpu_operator.sim.qos_timeline import Attainment, OneProtectedPerGpu, mark, parse_qos_policies, residuals
from fgpu_operator.sim.trace import PodRecord, Trace

pytest.importorskip("simgpu.perf")


def test_mark_protects_only_sharing_pods_at_the_filter_bound():
    pods = tuple(PodRecord(Request(f"p{i}", 1000, num_gpu=1, gpu_milli=300 if i % 2 else 1000)) for i in range(400))
    marked = mark(Trace("t", pods), 0.5, 1.2, seed=1, guard=True, margin=0.5)
    shares = [p.request for p in marked.pods if p.request.is_share]
    protected = [r for r in shares if r.priority == 0]
    assert 0.35 < len(protected) / len(shares) < 0.65
    assert all(r.slo == pytest.approx(1.1) for r in protected)
    assert all(r.priority == 1 and r.slo == 0 for p in marked.pods if not (r := p.request).is_share)
    assert all(p.request.guard_slo for p in marked.pods)


def test_the_naive_rule_refuses_a_second_protected_pod_only():
    m = OneProtectedPerGpu()
    assert m.slowdowns("H100", "fractional", [Tenant(0.3, True), Tenant(0.9, False)]) == (1.0, 1.0)
    assert m.slowdowns("H100", "fractional", [Tenant(0.3, True), Tenant(0.1, True)]) == (np.inf, np.inf)


def test_residuals_are_the_held_out_colocation_checks():
    e = residuals()
    assert e.size > 100 and -0.2 < e.min() < 0 < e.max() < 0.5


def test_attainment_grades_the_perturbed_slowdown():
    """A protected 0.3 share beside a 0.1 best-effort one: predicted under 1.2, so within bound unless the
    residual pushes it over; with every residual +30% the added slowdown grows by 30%."""
    c = Cluster([NodeSpec("n", 64000, 262144, 1, "H100")])
    serve = Request("serve", 1000, num_gpu=1, gpu_milli=300, priority=0, slo=1.2)
    train = Request("train", 1000, num_gpu=1, gpu_milli=100, priority=1)
    s = default_model().slowdowns("H100", "fractional", [Tenant(0.3, True), Tenant(0.1, False)])[0]
    for e, within in ((0.0, True), (0.3, 1 + (s - 1) * 1.3 <= 1.2), (3.0, False)):
        watch = Attainment(1.2, np.array([e]), seed=0)
        watch.attach(c)
        watch.join(Placement(serve, 0, (0,)), 0.0)
        watch.join(Placement(train, 0, (0,)), 10.0)
        watch.leave(Placement(train, 0, (0,)), 20.0)
        watch.leave(Placement(serve, 0, (0,)), 30.0)
        assert watch.running == 30.0
        assert watch.within == (30.0 if within else 20.0), e


def test_qos_policy_names():
    assert parse_qos_policies(None) == ["random", "bestfit", "fgd", "fgpu", "fgpu+qos", "naive"]
    assert parse_qos_policies(["fgd,fgpu+qos@0.5"]) == ["fgd", "fgpu+qos@0.5"]
    for bad in ("fgpu+qos@0", "fgpu+qos@x", "nope"):
        with pytest.raises(PlacementInputError, match="--policy"):
            parse_qos_policies([bad])
