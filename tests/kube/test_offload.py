"""The API writer process against the fake apiserver: a RemoteSession answers as an ApiSession would, the child
keeps each session's limits, a dead child fails only the calls in flight and is replaced, and it never
outlives the operator's side."""
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
                      {"binds": quick, "events": Limits(qps=0, max_in_flight=2, retries=0)})
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
