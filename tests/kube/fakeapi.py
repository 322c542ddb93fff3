"""A fake apiserver for fgpu_operator.kube's unit tests: a real aiohttp HTTP server on 127.0.0.1 that
answers scripted responses per (method, path), keeps Leases with resourceVersion checks, and records
every request."""
from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web
from fgpu_operator.kube import Credentials

LEASES = "/apis/coordination.k8s.io/v1/namespaces/"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    url: str = ""
    requests: list[Seen] = field(default_factory=list)
    scripted: dict[tuple[str, str], deque] = field(default_factory=lambda: defaultdict(deque))
    leases: dict[str, dict] = field(default_factory=dict)
    lease_status: int = 0  # non-zero: every lease request answers this status (an apiserver outage)
    delay_s: float = 0.0
    in_flight: int = 0
    max_in_flight: int = 0

    def script(self, method: str, path: str, *responses: int | tuple[int, dict] | tuple[int, dict, dict]):
        """Answer the next requests to (method, path) with these (status[, body[, headers]])."""
        for r in responses:
            status, body, headers = (r, None, None) if isinstance(r, int) else (r + (None,) * 3)[:3]
            self.scripted[(method, path)].append((status, body, headers))

    def seen(self, method: str, path: str | None = None) -> list[Seen]:
        return [r for r in self.requests if r.method == method and (path is None or r.path == path)]

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(Seen(request.method, request.path, dict(request.headers), body))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            queue = self.scripted.get((request.method, request.path))
            if queue:
                status, reply, headers = queue.popleft()
                return web.json_response(reply if reply is not None else status_body(status), status=status,
                                         headers=headers)
            if request.path.startswith(LEASES) and "/leases" in request.path:
                return self.lease(request.method, request.path, body)
            return web.json_response({"kind": "Status", "code": 200}, status=200)
        finally:
            self.in_flight -= 1

    def lease(self, method: str, path: str, body: dict | None) -> web.Response:
        """Leases as the apiserver keeps them: create once, replace only at the current resourceVersion."""
        if self.lease_status:
            return web.json_response(status_body(self.lease_status), status=self.lease_status)
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.leases:
                return web.json_response(status_body(409, "already exists"), status=409)
        elif path not in self.leases:
            return web.json_response(status_body(404, "not found"), status=404)
        elif method == "PUT" and body["metadata"].get("resourceVersion") != self.leases[path]["metadata"]["resourceVersion"]:
            return web.json_response(status_body(409, "the object has been modified"), status=409)
        if method in ("POST", "PUT"):
            body["metadata"]["resourceVersion"] = str(time.monotonic_ns())
            self.leases[path] = body
        return web.json_response(self.leases[path], status=201 if method == "POST" else 200)


def status_body(code: int, message: str = "") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure" if code >= 300 else "Success",
            "message": message or f"fake status {code}", "code": code}


def credentials(url: str, token: str = "secret-token") -> Credentials:
    return Credentials(kopf.ConnectionInfo(server=url, token=token))


async def until(check, timeout: float = 5.0, every: float = 0.01):
    """Poll check() until it is truthy (returning it) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(every)
