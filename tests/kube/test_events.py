"""EventRecorder: one Event per pod and reason, its count bumped, written at most once per interval."""
from __future__ import annotations

from fakeapi import status_body, until
from fgpu_operator.kube import EventRecorder, Result

EVENTS = "/api/v1/namespaces/ns/events"


async def test_a_hundred_retries_make_one_event_with_count_100(fake_api, api):
    recorder = EventRecorder(api, instance="test-1", interval_s=3600)
    outs = [await recorder.emit("ns", "p", "uid-1", "FailedScheduling", f"try {i}") for i in range(100)]
    assert outs[0].ok and outs[0].attempts == 1
    assert all(o.result is Result.OK and o.attempts == 0 for o in outs[1:])  # aggregated, no request
    (created,) = fake_api.seen("POST", EVENTS)
    assert created.body["count"] == 1 and created.body["reason"] == "FailedScheduling"
    assert created.body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p",
                                              "uid": "uid-1"}
    await recorder.aclose()
    (patched,) = fake_api.seen("PATCH")
    assert patched.path == f"{EVENTS}/{created.body['metadata']['name']}"
    assert patched.body["count"] == 100 and patched.body["message"] == "try 99"


async def test_pending_counts_are_written_after_the_interval(fake_api, api):
    recorder = EventRecorder(api, interval_s=0.05)
    for _ in range(5):
        await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    patches = await until(lambda: fake_api.seen("PATCH"))
    assert patches[-1].body["count"] == 5
    assert len(fake_api.seen("POST")) == 1
    await recorder.aclose()


async def test_reasons_and_pods_are_separate_series(fake_api, api):
    recorder = EventRecorder(api, interval_s=3600)
    await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    await recorder.emit("ns", "p", "uid-1", "Scheduled", "assigned ns/p to n1", type="Normal")
    await recorder.emit("ns", "q", "uid-2", "FailedScheduling", "no fit")
    assert [(s.body["involvedObject"]["name"], s.body["reason"], s.body["type"]) for s in fake_api.seen("POST")] == [
        ("p", "FailedScheduling", "Warning"), ("p", "Scheduled", "Normal"), ("q", "FailedScheduling", "Warning")]


async def test_an_expired_event_is_created_again(fake_api, api):
    recorder = EventRecorder(api, interval_s=0)
    await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    first = fake_api.seen("POST")[0].body["metadata"]["name"]
    fake_api.script("PATCH", f"{EVENTS}/{first}", (404, status_body(404)))
    out = await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    assert out.ok
    again = fake_api.seen("POST")[1].body
    assert again["count"] == 2 and again["metadata"]["name"] != first


async def test_forgotten_pods_write_nothing_more(fake_api, api):
    recorder = EventRecorder(api, interval_s=3600)
    await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    await recorder.emit("ns", "p", "uid-1", "FailedScheduling", "no fit")
    recorder.forget("uid-1")
    await recorder.aclose()
    assert fake_api.seen("PATCH") == []


async def test_series_are_bounded(fake_api, api):
    recorder = EventRecorder(api, interval_s=3600, max_series=3)
    for i in range(5):
        await recorder.emit("ns", f"p{i}", f"uid-{i}", "FailedScheduling", "no fit")
    assert len(recorder) == 3
    await recorder.aclose()


async def test_post_does_not_wait_and_drops_beyond_its_backlog(fake_api, api):
    told = []
    recorder = EventRecorder(api, interval_s=3600, max_backlog=2, on_drop=lambda: told.append(1))
    accepted = [recorder.post("ns", f"p{i}", f"uid-{i}", "Scheduled", "assigned", type="Normal") for i in range(4)]
    assert accepted == [True, True, False, False] and recorder.dropped == 2 and len(told) == 2
    assert fake_api.seen("POST", EVENTS) == []  # nothing written yet: post returned before any request
    await recorder.aclose()  # waits for the posted writes
    assert sorted(r.body["involvedObject"]["name"] for r in fake_api.seen("POST", EVENTS)) == ["p0", "p1"]


async def test_forget_drops_only_that_pods_series_whatever_their_reasons(fake_api, api):
    recorder = EventRecorder(api, interval_s=3600)
    for uid in ("a", "b"):
        for reason in ("FailedScheduling", "Scheduled"):
            await recorder.emit("ns", uid, uid, reason, "m")
    recorder.forget("a")
    assert len(recorder) == 2
    recorder.forget("a")  # idempotent
    recorder.forget("b")
    assert len(recorder) == 0
    await recorder.aclose()
