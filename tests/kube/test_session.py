"""ApiSession against a fake apiserver: classification, bounded retries, concurrency cap, auth headers."""
from __future__ import annotations

import asyncio
import json

import pytest
from fakeapi import credentials, status_body
from fgpu_operator.kube import ApiSession, Credentials, Limits, Result, TokenFile, classify

PATH = "/api/v1/namespaces/ns/pods/p/binding"


@pytest.mark.parametrize(("status", "result"), [
    (200, Result.OK), (201, Result.OK), (409, Result.CONFLICT), (404, Result.GONE), (410, Result.GONE),
    (400, Result.INVALID), (422, Result.INVALID), (401, Result.DENIED), (403, Result.DENIED),
    (429, Result.UNAVAILABLE), (500, Result.UNAVAILABLE), (503, Result.UNAVAILABLE), (0, Result.UNAVAILABLE),
    (501, Result.FAILED), (405, Result.FAILED),
])
def test_classify(status, result):
    assert classify(status) is result


async def test_answer_and_body_come_back(fake_api, api):
    fake_api.script("POST", PATH, (201, {"kind": "Status", "status": "Success"}))
    out = await api.request("POST", PATH, body={"x": 1})
    assert (out.result, out.status, out.attempts, out.body["status"]) == (Result.OK, 201, 1, "Success")
    seen = fake_api.seen("POST", PATH)[0]
    assert seen.body == {"x": 1}
    assert seen.headers["Authorization"] == "Bearer secret-token"
    assert seen.headers["Content-Type"] == "application/json"


async def test_transient_failures_are_retried(fake_api, api):
    fake_api.script("POST", PATH, 500, (429, None, {"Retry-After": "0"}), 503, 201)
    out = await api.request("POST", PATH, body={})
    assert (out.result, out.attempts) == (Result.OK, 4)


async def test_retries_are_bounded(fake_api, api):
    fake_api.script("POST", PATH, *[503] * 10)
    out = await api.request("POST", PATH, body={}, retries=2)
    assert (out.result, out.status, out.attempts) == (Result.UNAVAILABLE, 503, 3)
    assert out.message == "fake status 503"


@pytest.mark.parametrize(("status", "result"), [
    (409, Result.CONFLICT), (404, Result.GONE), (422, Result.INVALID), (403, Result.DENIED)])
async def test_final_answers_are_not_retried(fake_api, api, status, result):
    fake_api.script("POST", PATH, (status, status_body(status, "why it failed")), 201)
    out = await api.request("POST", PATH, body={})
    assert (out.result, out.status, out.attempts, out.message) == (result, status, 1, "why it failed")


async def test_no_server_is_unavailable_not_an_exception(unused_tcp_port):
    limits = Limits(retries=1, backoff_s=0.001)
    async with ApiSession(credentials(f"http://127.0.0.1:{unused_tcp_port}"), limits) as api:
        out = await api.request("GET", "/version")
    assert (out.result, out.status, out.attempts) == (Result.UNAVAILABLE, 0, 2)
    assert "Connect" in out.message


async def test_slow_answer_times_out(fake_api, api):
    fake_api.delay_s = 1.0
    out = await api.request("GET", "/version", retries=0, timeout_s=0.05)
    assert (out.result, out.status) == (Result.UNAVAILABLE, 0)
    assert "Timeout" in out.message


async def test_requests_in_flight_are_capped(fake_api):
    fake_api.delay_s = 0.05
    async with ApiSession(credentials(fake_api.url), Limits(max_in_flight=4)) as api:
        outs = await asyncio.gather(*(api.request("GET", "/version") for _ in range(20)))
    assert all(o.ok for o in outs)
    assert fake_api.max_in_flight == 4


async def test_rotated_token_is_reread_after_a_401(fake_api, tmp_path):
    path = tmp_path / "token"
    path.write_text("old-token\n")
    token = TokenFile(path, reread_s=3600)
    assert token.token() == "old-token"
    path.write_text("new-token\n")  # rotated; the cache would keep the old one for an hour
    fake_api.script("GET", "/version", 401, 200)
    async with ApiSession(Credentials(credentials(fake_api.url).info, token)) as api:
        out = await api.request("GET", "/version")
    assert out.ok
    sent = [r.headers["Authorization"] for r in fake_api.seen("GET", "/version")]
    assert sent == ["Bearer old-token", "Bearer new-token"]


async def test_session_must_be_open():
    api = ApiSession(credentials("http://127.0.0.1:1"))
    with pytest.raises(RuntimeError, match="not open"):
        await api.request("GET", "/version")


async def test_watch_yields_events_split_across_chunks():
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}", "resourceVersion": str(i)}}}
              for i in range(3)]
    seen = {}

    async def stream(request: web.Request) -> web.StreamResponse:
        seen.update(request.query, auth=request.headers["Authorization"])
        resp = web.StreamResponse()
        await resp.prepare(request)
        raw = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        for i in range(0, len(raw), 7):  # lines cut mid-way, as TCP may deliver them
            await resp.write(raw[i:i + 7])
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/pods", stream)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with ApiSession(credentials(str(server.make_url("")).rstrip("/"))) as api:
            got = [e async for e in api.watch("/api/v1/pods", {"resourceVersion": "7"})]
    finally:
        await server.close()
    assert got == events
    assert seen == {"watch": "1", "resourceVersion": "7", "auth": "Bearer secret-token"}


async def test_watch_failure_is_one_error_event(fake_api, api, unused_tcp_port):
    fake_api.script("GET", "/api/v1/pods", (403, status_body(403, "forbidden: pods")))
    got = [e async for e in api.watch("/api/v1/pods")]
    assert got == [{"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 403,
                                                "message": "forbidden: pods"}}]
    async with ApiSession(credentials(f"http://127.0.0.1:{unused_tcp_port}")) as down:
        (event,) = [e async for e in down.watch("/api/v1/pods")]
    assert (event["type"], event["object"]["code"]) == ("ERROR", 0)
    assert "Connect" in event["object"]["message"]
