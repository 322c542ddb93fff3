"""The hand-off a decision becomes (`translate.assignment_for`): a high-priority pod's SLO rides along."""
import pytest
from fgpu_operator.controller.translate import assignment_for, core_request, guards_slo
from fgpu_operator.placement.live import Allocation

from fgpu_contracts.assignment import dump_assignment, parse_assignment
from fgpu_contracts.request import ContainerRequest, GpuRequest

GPU = "GPU-0"


def assign(priority, slo=None, **kw):
    request = GpuRequest(containers=(ContainerRequest(container="main", milli_gpu=500),), priority=priority,
                         slo_slowdown=slo)
    allocation = Allocation(uid="u", node="n1", request=None, gpus=(GPU,))
    return assignment_for(allocation, request, {GPU: 81920}, **kw)


@pytest.mark.parametrize(("priority", "slo", "kw", "expected"), [
    ("high", 1.5, {}, 1.5),  # the pod's own fgpu.io/slo-slowdown
    ("high", None, {}, 1.2),  # the SchedulingPolicy's default
    ("high", None, {"default_slo": 2.0}, 2.0),  # the cluster's value, as the scheduler passes it
    ("low", None, {}, None),  # best-effort work has no SLO
])
def test_high_priority_containers_carry_their_slowdown_bound(priority, slo, kw, expected):
    [container] = assign(priority, slo, **kw).containers
    assert container.priority == (0 if priority == "high" else 1)
    assert container.slo_slowdown == expected
    text = dump_assignment(assign(priority, slo, **kw))
    assert ("sloSlowdown" in text) == (expected is not None)  # absent otherwise: v1 readers see nothing new
    assert parse_assignment(text).containers[0].slo_slowdown == expected


def test_v1_assignment_without_the_field_still_parses():
    text = '{"version": "v1", "node": "n1", "containers": [{"name": "c", "devices": [{"uuid": "GPU-0"}]}]}'
    assert parse_assignment(text).containers[0].slo_slowdown is None


def test_a_bound_on_a_low_priority_request_is_refused():
    with pytest.raises(ValueError, match="protects a high-priority pod"):
        GpuRequest(containers=(ContainerRequest(container="main"),), priority="low", slo_slowdown=1.5)


POD = {"metadata": {"namespace": "ml", "name": "p"}, "spec": {"containers": [{"name": "main"}]}}


@pytest.mark.parametrize(("fields", "policy", "rule", "slo", "guard"), [
    ({}, "fgpu", "fgpu", 0.0, True),  # best-effort by default; fgpu keeps co-runners' SLOs
    ({"priority": "high"}, "binpack", "fgpu", 1.3, False),  # binpack keeps its meaning
    ({"priority": "high"}, "binpack", "all", 1.3, True),  # the cluster switch adds the filter
    ({"slo_filter": True}, "spread", "fgpu", 0.0, True),  # the pod's own switch
    ({"slo_filter": False}, "fgpu", "all", 0.0, False),
    ({"priority": "high", "slo_slowdown": 1.5, "duty_cycle": 0.2}, "fgpu", "fgpu", 1.5, True),
])
def test_core_request_carries_the_pods_qos(fields, policy, rule, slo, guard):
    request = GpuRequest(containers=(ContainerRequest(container="main", milli_gpu=300),), **fields)
    core = core_request(POD, request, default_slo=1.3, guard_slo=guards_slo(request, policy, rule))
    assert (core.slo, core.guard_slo, core.priority) == (slo, guard, 0 if slo else 1)
    assert core.duty == fields.get("duty_cycle", 0.0)
