"""find_assignment (one pass, for Allocate's latency) picks exactly what its specification says: sort the
assigned, pending, not terminating pods of the node in the kubelet's order (arrival, then assignment time,
creation, name), take the first whose next unallocated container asks for as many devices as the request and
was not refused with the hand-off it carries now. Checked against that specification written out literally,
on random pod sets."""
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.handoff import PodView, find_assignment
from fgpu_contracts.assignment import (
    Assignment,
    ContainerAssignment,
    DeviceShare,
    dump_assignment,
    parse_assignment,
)
from fgpu_contracts.keys import ALLOCATED, ASSIGNED_AT, ASSIGNMENT


def reference(pods, node, device_count, taken, refused):
    candidates = []
    for p in pods:
        if p.node_name != node or p.phase != "Pending" or p.terminating or ASSIGNMENT not in p.annotations:
            continue
        try:
            a = parse_assignment(p.annotations[ASSIGNMENT])
        except Exception:
            continue
        if a.node == node:
            candidates.append(((p.arrived, p.annotations.get(ASSIGNED_AT, ""), p.created, p.namespace, p.name),
                               p, a))
    candidates.sort(key=lambda c: c[0])
    for _, p, a in candidates:
        done = p.allocated_containers() | {c for uid, c in taken if uid == p.uid}
        pending = [c for c in a.containers if c.name not in done]
        if pending and len(pending[0].devices) == device_count \
                and refused.get((p.uid, pending[0].name)) != (p.annotations[ASSIGNMENT], ""):
            return p.uid, pending[0].name
    return None


NAMES = ["a", "b", "c"]


@st.composite
def pods(draw):
    out = []
    for i in range(draw(st.integers(0, 12))):
        node = draw(st.sampled_from(["n1", "n1", "n1", "n2"]))
        containers = [ContainerAssignment(name=n, devices=[DeviceShare(uuid=f"GPU-{k}") for k in
                                                           range(draw(st.integers(1, 2)))])
                      for n in NAMES[:draw(st.integers(1, 3))]]
        ann = {ASSIGNED_AT: f"2026-01-01T00:00:0{draw(st.integers(0, 3))}Z"}
        if draw(st.integers(0, 4)):  # mostly assigned
            ann[ASSIGNMENT] = draw(st.sampled_from([dump_assignment(Assignment(node=node, containers=containers)),
                                                    "{not json"]))
        if draw(st.booleans()):
            ann[ALLOCATED] = json.dumps(draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)))
        out.append(PodView(draw(st.sampled_from(["ns1", "ns2"])), f"p{draw(st.integers(0, 4))}", f"uid-{i}",
                           node, draw(st.sampled_from(["Pending", "Pending", "Running"])), ann,
                           created=f"2026-01-01T00:00:0{draw(st.integers(0, 2))}Z",
                           arrived=draw(st.integers(0, 3)), terminating=draw(st.integers(0, 5)) == 0))
    return out


PAIRS = st.tuples(st.sampled_from([f"uid-{i}" for i in range(12)]), st.sampled_from(NAMES))


@settings(max_examples=300, deadline=None)
@given(pods(), st.integers(1, 2), st.sets(PAIRS, max_size=6), st.data())
def test_matches_the_specification(pod_list, count, taken, data):
    # refusals recorded against the hand-off a pod carries (some since changed, which frees the pod again)
    refused = {pair: (data.draw(st.sampled_from([p.annotations.get(ASSIGNMENT, "") for p in pod_list] or [""])), "")
               for pair in data.draw(st.sets(PAIRS, max_size=4))}
    match = find_assignment(pod_list, "n1", count, taken, refused=refused)
    got = (match.pod.uid, match.container.name) if match else None
    assert got == reference(pod_list, "n1", count, taken, refused)
