"""Preemption through the running operator on the real apiserver and a KWOK node: PriorityClasses give the
pods their spec.priority; a high-priority 0.6 share evicts the low 0.5 share (not the same-priority 0.4
beside it), the victim carries DisruptionTarget and a Preempted Event naming the preemptor, and the
preemptor binds to the freed room once the victim is gone; a Never-policy pod evicts nobody. With
kube-controller-manager counting a PodDisruptionBudget that has no disruption left, the planner turns to the
other victim (kube-scheduler's first rule: fewest PDB violations)."""
from __future__ import annotations

import contextlib
import json
import uuid

import pytest
from fgpu_operator.inspect.audit import check
from inventories import fractional_inventory
from kubernetes import client
from kubernetes.client.rest import ApiException
from placement_util import Pods, inventory_node, operator_with_webhook, pod, set_inventory
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e

NODE = "pre-frac"
SUFFIX = uuid.uuid4().hex[:6]
LOW, MID, HIGH, POLITE = (f"fgpu-{p}-{SUFFIX}" for p in ("low", "mid", "high", "polite"))


@pytest.fixture(scope="module")
def op(k8s, kwok, controller_manager, tmp_path_factory):
    sched = client.SchedulingV1Api(k8s.api())
    for name, value, policy in ((LOW, 0, None), (MID, 500, None), (HIGH, 1000, None), (POLITE, 1000, "Never")):
        body = {"metadata": {"name": name}, "value": value}
        if policy:
            body["preemptionPolicy"] = policy
        sched.create_priority_class(body)

    def base(core):
        return [inventory_node(kwok.make_kwok_node, NODE, fractional_inventory(NODE, 1),
                               lambda n, inv: set_inventory(core, n, inv))]
    try:
        yield from operator_with_webhook(k8s, tmp_path_factory.mktemp("preempt"), base)
    finally:
        for name in (LOW, MID, HIGH, POLITE):
            with contextlib.suppress(ApiException):
                sched.delete_priority_class(name)


@pytest.fixture
def pods(op):
    made = Pods(op.core, op.namespace)
    yield made
    made.cleanup()


def share(name: str, fraction: str, priority_class: str) -> dict:
    body = pod(name, [NODE], annotations={keys.FGPU_FRACTION: fraction})
    body["spec"]["priorityClassName"] = priority_class
    return body


def gone(pods: Pods, name: str) -> bool:
    try:
        pods.read(name)
    except ApiException as e:
        return e.status == 404
    return False


def test_high_priority_share_evicts_the_low_one_and_binds_to_its_room(op, pods):
    pods.create(share("low", "0.5", LOW))
    pods.create(share("peer", "0.4", HIGH))
    assert pods.placed("low").one().milli == 500 and pods.placed("peer").one().milli == 400
    pods.create(share("polite", "0.6", POLITE))
    pods.create(share("high", "0.6", HIGH))
    placed = pods.placed("high", timeout=60)
    assert placed.node == NODE and placed.one().milli == 600
    wait_for(lambda: gone(pods, "low"), what="the victim deleted")
    assert pods.read("peer").spec.node_name == NODE  # same priority: never a victim
    pods.still_pending("polite")  # Never: it waits and evicts nobody
    events = op.core.list_namespaced_event(op.namespace, field_selector="involvedObject.name=low").items
    preempted = [e for e in events if e.reason == "Preempted"]
    assert preempted and "/high" in preempted[0].message and f"on node {NODE}" in preempted[0].message
    status = op.core.read_namespaced_pod_status("high", op.namespace).status
    assert status.nominated_node_name in (None, NODE)  # set while it waited; kube clears it once bound
    nodes = json.loads(op.core.list_node(_preload_content=False).data)["items"]
    bound = json.loads(op.core.list_namespaced_pod(op.namespace, _preload_content=False).data)["items"]
    assert not check([n for n in nodes if n["metadata"]["name"] == NODE], bound).violations  # the invariant checker


def test_a_budget_with_no_disruption_left_makes_the_planner_evict_the_other_pod(op, pods):
    """Both 0.4 shares are of lower priority than the 0.5 preemptor and either's room suffices; without a
    budget the lowest priority (`guarded`) would go (the other is reprieved first). Its PDB (minAvailable 1,
    so 0 disruptions allowed as the disruption controller counts) makes the planner evict `middle`."""
    policy = client.PolicyV1Api(op.core.api_client)
    guarded = share("guarded", "0.4", LOW)
    guarded["metadata"]["labels"] = {"app": "guarded"}
    pods.create(guarded)
    pods.create(share("middle", "0.4", MID))
    assert pods.placed("guarded").node == NODE and pods.placed("middle").node == NODE
    policy.create_namespaced_pod_disruption_budget(op.namespace, {
        "metadata": {"name": "guarded"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    try:
        def counted():
            st = policy.read_namespaced_pod_disruption_budget("guarded", op.namespace).status
            return st is not None and st.current_healthy == 1 and st.disruptions_allowed == 0
        wait_for(counted, what="the disruption controller counting the budget (1 healthy, 0 allowed)")
        pods.create(share("high", "0.5", HIGH))
        assert pods.placed("high", timeout=60).node == NODE
        wait_for(lambda: gone(pods, "middle"), what="the pod without a budget preempted")
        assert pods.read("guarded").spec.node_name == NODE and pods.read("guarded").metadata.deletion_timestamp is None
    finally:
        with contextlib.suppress(ApiException):
            policy.delete_namespaced_pod_disruption_budget("guarded", op.namespace)
