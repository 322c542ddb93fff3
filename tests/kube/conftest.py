"""Fixtures for fgpu_operator.kube's unit tests: a fake apiserver (fakeapi.FakeApi) on 127.0.0.1 and an
ApiSession to it."""
from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fakeapi import FakeApi, credentials
from fgpu_operator.kube import ApiSession, Limits


@pytest.fixture
async def fake_api():
    fake = FakeApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    fake.url = str(server.make_url("")).rstrip("/")
    try:
        yield fake
    finally:
        await server.close()


@pytest.fixture
async def api(fake_api: FakeApi):
    """An ApiSession to the fake, with quick retries so retry tests stay fast."""
    async with ApiSession(credentials(fake_api.url), Limits(backoff_s=0.001, backoff_cap_s=0.01)) as session:
        yield session
