"""Request parsing as the scheduler does it, fuzzed: a pod's `fgpu.io/request` and `fgpu.io/assignment` (valid
ones, near misses and garbage), resources with odd quantities, selectors and tolerations of odd types. Every pod
gets a request or None, a core request or a one-line InputError (the scheduler writes it on the pod), and a
readable assignment or None, never another exception: a bad pod can never stop the watch or the loop. And
whatever parses round-trips: what the scheduler reads is what was written."""
from __future__ import annotations

from fgpu_operator.controller import translate
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import dump_request

junk = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(), st.text(max_size=12),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
numbers = st.one_of(st.integers(-5, 2000), st.sampled_from([0, 1, 1000, 1001, 10**30, -1]), st.floats(), junk)
container = st.fixed_dictionaries({"container": st.sampled_from(["main", "side", "", "main"])}, optional={
    "count": numbers, "milliGpu": numbers, "memBytes": numbers, "memPct": numbers, "smPct": numbers,
    "migProfile": st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "9g.99gb", ""]), "extra": junk})
request = st.fixed_dictionaries({"containers": st.lists(container, max_size=3)}, optional={
    "version": st.sampled_from(["v1", "v2", ""]), "priority": st.sampled_from(["high", "low", "mid"]),
    "models": st.lists(st.sampled_from(["A100", "H100", "T4", "nope", ""]), max_size=2),
    "modelFilters": st.lists(st.fixed_dictionaries({"rule": st.sampled_from(["fgpu", "hami", "kubeshare", "x"])},
                                                   optional={"allow": st.lists(st.sampled_from(["A10", "", "T4"]),
                                                                               max_size=2), "deny": junk}),
                             max_size=2),
    "nodePolicy": st.sampled_from(["binpack", "spread", "fgd", "fgpu", "x"]),
    "gpuPolicy": st.sampled_from(["binpack", "spread", "x"]), "sloSlowdown": numbers, "source": junk})
device = st.fixed_dictionaries({"uuid": st.sampled_from(["GPU-0", "MIG-1", ""])}, optional={
    "milliGpu": numbers, "memBytes": numbers, "smPct": numbers, "migProfile": st.sampled_from(["1g.10gb", ""])})
assignment = st.fixed_dictionaries({"node": st.sampled_from(["n1", ""]), "containers": st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["main", "side"]), "devices": st.lists(device, max_size=2)},
                          optional={"priority": numbers, "sloSlowdown": numbers}), max_size=2)},
    optional={"version": st.sampled_from(["v1", "v0"])})


def as_text(strategy):
    """JSON of the structure, or that JSON cut short, or not JSON at all."""
    import json

    return st.one_of(strategy.map(json.dumps), strategy.map(lambda v: json.dumps(v)[:-3]), st.text(max_size=20))


quantity = st.one_of(st.sampled_from(["1", "500m", "2Gi", "1e3", "-1", "1e400", "NaN", "0.5", "3k", ""]), junk)
resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "fgpu.io/x", "kubernetes.io/y"]),
                            quantity, max_size=3)
pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.just("p"), "namespace": st.just("ns")}, optional={
        "annotations": st.fixed_dictionaries({}, optional={keys.REQUEST: as_text(request),
                                                           keys.ASSIGNMENT: as_text(assignment)})}),
    "spec": st.fixed_dictionaries({"containers": st.lists(st.fixed_dictionaries({"name": st.just("main")}, optional={
        "resources": st.fixed_dictionaries({}, optional={"limits": resources, "requests": resources})}),
        max_size=2)}, optional={
        "initContainers": st.lists(st.fixed_dictionaries({"resources": st.fixed_dictionaries(
            {}, optional={"requests": resources})}), max_size=1),
        "overhead": resources, "nodeSelector": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
        "tolerations": st.lists(st.fixed_dictionaries({}, optional={"key": st.text(max_size=4), "operator": st.sampled_from(
            ["Exists", "Equal", None]), "effect": st.sampled_from(["NoSchedule", "", None])}), max_size=2)})})


@settings(max_examples=2500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods, st.sampled_from(["binpack", "spread"]))
def test_every_pod_gets_a_request_or_none_and_a_core_request_or_one_line(pod, gpu_policy):
    request = translate.gpu_request(pod)
    if request is not None:
        assert translate.gpu_request({"metadata": {"annotations": {keys.REQUEST: dump_request(request)}}}) == request
    try:
        core = translate.core_request(pod, request, gpu_policy)
    except InputError as err:
        assert str(err) and "\n" not in str(err)
        event("refused with one line")
    else:
        assert core.num_gpu >= 0 and core.cpu_milli >= 0
        event("placed as a request" if request else "no GPU request")
    bound = translate.bound_devices(pod)
    if bound is not None:
        assert bound.node and all(bound.gpus + bound.mig)
        event("assignment read")
