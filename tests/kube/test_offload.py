"""The API writer process against the fake apiserver: a RemoteSession answers as an ApiSession would, the child
keeps each session's limits, its event recorder aggregates, flushes and reports drops, a dead child fails only
the calls in flight and is replaced, and it never outlives the operator's side."""
from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from fakeapi import until
from fgpu_operator.kube import Limits, Result
from fgpu_operator.kube.offload import WriterProcess

PATH = "/api/v1/namespaces/ns/pods/p/binding"


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: secret-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return str(path)


@pytest.fixture
async def writer(fake_api, tmp_path):
    quick = Limits(backoff_s=0.001, backoff_cap_s=0.01)
    w = WriterProcess(kubeconfig(tmp_path, fake_api.url),
                      {"binds": quick, "events": Limits(qps=0, max_in_flight=2, retries=0)},
                      events={"session": "events", "instance": "replica-a", "interval_s": 30.0, "max_backlog": 5})
    await w.start()
    try:
        yield w
    finally:
        await w.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


async def test_answer_body_and_request_come_through(fake_api, writer):
    fake_api.script("POST", PATH, (201, {"kind": "Status", "status": "Success"}))
    out = await writer.session("binds").request("POST", PATH, body={"x": 1})
    assert (out.result, out.status, out.attempts, out.body["status"]) == (Result.OK, 201, 1, "Success")
    seen = fake_api.seen("POST", PATH)[0]
    assert (seen.body, seen.headers["Authorization"]) == ({"x": 1}, "Bearer secret-token")


async def test_each_session_keeps_its_own_limits(fake_api, writer):
    fake_api.script("POST", PATH, 503, 503, 201, 503)
    retried = await writer.session("binds").request("POST", PATH, body={})
    assert (retried.result, retried.attempts) == (Result.OK, 3)
    once = await writer.session("events").request("POST", PATH, body={})  # retries=0
    assert (once.result, once.status, once.attempts) == (Result.UNAVAILABLE, 503, 1)
    fake_api.delay_s, fake_api.max_in_flight = 0.05, 0
    events = writer.session("events")
    outs = await asyncio.gather(*(events.request("GET", "/version") for _ in range(8)))
    assert all(o.ok for o in outs)
    assert fake_api.max_in_flight == 2  # the events session's cap, enforced in the child


async def test_many_calls_in_flight_each_get_their_own_answer(fake_api, writer):
    binds = writer.session("binds")
    for i in range(50):
        fake_api.script("POST", f"/p/{i}", (201 if i % 2 else 409, {"kind": "Status", "message": f"pod {i}"}))
    outs = await asyncio.gather(*(binds.request("POST", f"/p/{i}", body={"i": i}) for i in range(50)))
    assert [o.status for o in outs] == [201 if i % 2 else 409 for i in range(50)]
    assert [o.message for o in outs if not o.ok] == [f"pod {i}" for i in range(0, 50, 2)]


async def test_a_dead_child_fails_the_calls_in_flight_and_is_replaced(fake_api, writer):
    fake_api.delay_s = 5.0
    first = writer.pid
    call = asyncio.create_task(writer.session("binds").request("POST", PATH, body={}))
    await until(lambda: fake_api.seen("POST", PATH))
    os.kill(first, signal.SIGKILL)
    out = await asyncio.wait_for(call, 5.0)
    assert (out.result, out.status) == (Result.UNAVAILABLE, 0)
    assert "writer process exited" in out.message
    await until(lambda: writer.pid != first and writer.restarts == 1)
    fake_api.delay_s = 0.0
    fake_api.script("POST", PATH, 201)
    again = await asyncio.wait_for(writer.session("binds").request("POST", PATH, body={}), 10.0)
    assert again.ok


async def test_close_ends_the_child(writer):
    pid = writer.pid
    await writer.close()
    assert not alive(pid)


async def test_the_child_exits_when_its_pipe_closes(writer):
    """What happens when the operator is SIGKILLed: the pipe closes and the child goes too."""
    pid = writer.pid
    writer._closing = True  # no restart: this stands for the operator gone
    writer._transport.get_pipe_transport(0).close()
    await until(lambda: not alive(pid), timeout=10.0)


def test_an_unknown_session_is_refused(tmp_path):
    w = WriterProcess(None, {"binds": Limits()})
    with pytest.raises(KeyError, match="no session 'status'"):
        w.session("status")


EVENTS = "/api/v1/namespaces/ns/events"


async def test_posted_events_are_written_by_the_childs_recorder(fake_api, writer):
    recorder = writer.recorder()
    assert recorder.post("ns", "p", "uid-1", "Scheduled", "Successfully assigned ns/p to n1", type="Normal")
    await recorder.aclose()  # waits for that write, as EventRecorder.flush does
    body = fake_api.seen("POST", EVENTS)[0].body
    assert (body["involvedObject"]["uid"], body["reason"], body["type"], body["reportingInstance"], body["count"]) \
        == ("uid-1", "Scheduled", "Normal", "replica-a", 1)
    for _ in range(4):  # aggregated into the one Event (the next write is due in 30 s), its count written on flush
        recorder.post("ns", "p", "uid-1", "Scheduled", "again", type="Normal")
    await recorder.aclose()
    patch = fake_api.seen("PATCH")[-1]
    assert (patch.path, patch.body["count"], patch.body["message"]) == (f"{EVENTS}/{body['metadata']['name']}", 5,
                                                                        "again")


async def test_forget_drops_the_pods_pending_count(fake_api, writer):
    recorder = writer.recorder()
    recorder.post("ns", "p", "uid-1", "FailedScheduling", "0/1 nodes are available")
    await until(lambda: fake_api.seen("POST", EVENTS))
    recorder.post("ns", "p", "uid-1", "FailedScheduling", "0/1 nodes are available")  # pending, not yet due
    recorder.forget("uid-1")
    await recorder.aclose()  # would write the pending count, had it not been forgotten
    assert fake_api.seen("PATCH") == []


async def test_drops_in_the_child_are_counted_here(fake_api, writer):
    drops = []
    recorder = writer.recorder(on_drop=lambda: drops.append(1))
    fake_api.delay_s = 1.0  # every write waits, so the child's backlog of 5 fills
    for i in range(10):
        assert recorder.post("ns", f"p{i}", f"uid-{i}", "Scheduled", "m", type="Normal")  # queued to the child
    await until(lambda: recorder.dropped == 5)
    assert len(drops) == 5


async def test_events_posted_while_the_child_is_replaced_are_dropped(fake_api, writer):
    recorder = writer.recorder()
    first = writer.pid
    os.kill(first, signal.SIGKILL)
    await until(lambda: not writer._ready.is_set())
    assert recorder.post("ns", "p", "uid-1", "Scheduled", "m") is False and recorder.dropped == 1
    await until(lambda: writer.pid != first and writer._ready.is_set(), timeout=10.0)
    assert recorder.post("ns", "p", "uid-1", "Scheduled", "m")
    await until(lambda: fake_api.seen("POST", EVENTS))


def test_a_recorder_needs_its_session():
    with pytest.raises(KeyError, match="events: no session 'ev'"):
        WriterProcess(None, {"binds": Limits()}, events={"session": "ev"})
    with pytest.raises(KeyError, match="without an event recorder"):
        WriterProcess(None, {"binds": Limits()}).recorder()
