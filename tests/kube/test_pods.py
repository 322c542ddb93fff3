"""bind() and set_unschedulable(): the bodies they send and how answers are classified."""
from __future__ import annotations

from fakeapi import status_body
from fgpu_operator.kube import Result, bind, set_unschedulable

BINDING = "/api/v1/namespaces/ns/pods/p/binding"
STATUS = "/api/v1/namespaces/ns/pods/p/status"


async def test_bind_sends_one_binding_with_node_annotations_and_uid(fake_api, api):
    fake_api.script("POST", BINDING, (201, {"kind": "Status", "status": "Success"}))
    out = await bind(api, "ns", "p", "uid-1", "node-a", {"fgpu.io/assignment": "{}"})
    assert out.result is Result.OK
    (seen,) = fake_api.seen("POST", BINDING)
    assert seen.body == {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "annotations": {"fgpu.io/assignment": "{}"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }


async def test_bind_to_a_pod_bound_elsewhere_is_a_conflict(fake_api, api):
    fake_api.script("POST", BINDING, (409, status_body(409, 'pod p is already assigned to node "node-b"')))
    out = await bind(api, "ns", "p", "uid-1", "node-a")
    assert (out.result, out.status, out.attempts) == (Result.CONFLICT, 409, 1)


async def test_retried_bind_that_had_landed_is_ok(fake_api, api):
    """A 503 whose bind went through: the retry finds the pod on our node, which is success."""
    fake_api.script("POST", BINDING, 503, (409, status_body(409, 'pod p is already assigned to node "node-a"')))
    out = await bind(api, "ns", "p", "uid-1", "node-a")
    assert (out.result, out.attempts) == (Result.OK, 2)


async def test_bind_to_a_recreated_pod_is_gone(fake_api, api):
    message = "Precondition failed: UID in precondition: uid-1, UID in object meta: uid-2"
    fake_api.script("POST", BINDING, (409, status_body(409, message)))
    assert (await bind(api, "ns", "p", "uid-1", "node-a")).result is Result.GONE


async def test_bind_to_a_deleted_pod_is_gone(fake_api, api):
    fake_api.script("POST", BINDING, (404, status_body(404, 'pods "p" not found')))
    assert (await bind(api, "ns", "p", "uid-1", "node-a")).result is Result.GONE


async def test_set_unschedulable_patches_the_condition(fake_api, api):
    out = await set_unschedulable(api, "ns", "p", "0/3 nodes are available: 3 Insufficient GPU memory.")
    assert out.ok
    (seen,) = fake_api.seen("PATCH", STATUS)
    assert seen.headers["Content-Type"] == "application/strategic-merge-patch+json"
    (cond,) = seen.body["status"]["conditions"]
    assert cond["type"] == "PodScheduled" and cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("0/3 nodes") and cond["lastTransitionTime"].endswith("Z")


def _pod(status: str, message: str, since: str = "2026-01-01T00:00:00Z") -> dict:
    return {"status": {"conditions": [{"type": "PodScheduled", "status": status, "reason": "Unschedulable",
                                       "message": message, "lastTransitionTime": since}]}}


async def test_set_unschedulable_skips_a_condition_that_already_says_so(fake_api, api):
    out = await set_unschedulable(api, "ns", "p", "same", pod=_pod("False", "same"))
    assert (out.result, out.attempts) == (Result.OK, 0)
    assert fake_api.seen("PATCH") == []


async def test_set_unschedulable_keeps_the_transition_time_while_false(fake_api, api):
    await set_unschedulable(api, "ns", "p", "new reason", pod=_pod("False", "old reason"))
    await set_unschedulable(api, "ns", "p", "new reason", pod=_pod("True", ""))
    kept, fresh = (s.body["status"]["conditions"][0]["lastTransitionTime"] for s in fake_api.seen("PATCH"))
    assert kept == "2026-01-01T00:00:00Z" and fresh != kept
