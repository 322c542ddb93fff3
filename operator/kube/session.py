"""One aiohttp session to the apiserver for the scheduler's writes: raw JSON, rate limited, bounded.

Measured (docs/architecture.md, "Decisions"): the official client in threads caps a do-nothing Python binder
at 0.38x kube-scheduler, asyncio + aiohttp on raw dicts at ~2x. So the hot path talks HTTP itself, with a
client-side QPS/burst limit (as client-go's) and a cap on requests in flight, and retries the transient
failures (429, 5xx, timeouts, dropped connections) a bounded number of times with jittered backoff.
Give binds their own ApiSession, so that events cannot slow them; leader election skips the QPS bucket.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from . import wirejson
from .config import Credentials
from .outcome import RETRYABLE, Outcome, classify
from .ratelimit import TokenBucket

STRATEGIC_MERGE = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Limits:
    """Client-side limits. QPS/burst default to 500/1000 (kube-scheduler's own defaults are 50/100)."""

    qps: float = 500.0
    burst: int = 1000
    max_in_flight: int = 64
    timeout_s: float = 30.0  # one attempt, connect to last byte
    retries: int = 4  # after the first attempt, for 429/5xx/timeouts only
    backoff_s: float = 0.05  # first retry's ceiling; doubles per retry (full jitter)
    backoff_cap_s: float = 2.0


class ApiSession:
    """`async with ApiSession(creds) as api: await api.request("GET", "/version")` -> Outcome.

    Never raises on API or network errors: the Outcome carries them.
    """

    def __init__(self, creds: Credentials, limits: Limits | None = None, user_agent: str = "fgpu-operator"):
        self.creds = creds
        self.limits = limits or Limits()
        self.bucket = TokenBucket(self.limits.qps, self.limits.burst)
        self._slots = asyncio.Semaphore(self.limits.max_in_flight)
        self._user_agent = user_agent
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiSession:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def open(self) -> None:
        info = self.creds.info
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if self.creds.token_file is None:
            headers.update(info.as_http_headers())  # static token or basic auth
        ssl = info.as_ssl_context() if self.creds.server.startswith("https:") else None
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.limits.max_in_flight, ssl=ssl),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.limits.timeout_s),
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
        rate_limited: bool = True,
    ) -> Outcome:
        """One API call with bounded retries of transient failures; the Outcome of the last attempt.

        rate_limited=False skips the QPS bucket (not the in-flight cap): for the Lease's rare requests,
        which must not queue behind a burst of others on a shared session."""
        if self._http is None:
            raise RuntimeError("ApiSession is not open: use `async with ApiSession(...)`")
        retries = self.limits.retries if retries is None else retries
        url = self.creds.server + path
        attempt, reauth = 0, self.creds.token_file is not None
        while True:
            attempt += 1
            if rate_limited:
                await self.bucket.acquire()
            async with self._slots:
                status, data, retry_after, transient = await self._attempt(
                    method, url, body, content_type, params, timeout_s)
            if status == 401 and reauth:  # a rotated token: re-read the file once, then try again
                reauth = False
                self.creds.token_file.token(force=True)
                continue
            if not transient or attempt > retries:
                return _outcome(status, data, attempt)
            await asyncio.sleep(max(retry_after, self._backoff(attempt)))

    async def watch(self, path: str, params: dict[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch stream (`watch=1` is added to `params`), decoded, until the server ends it.

        One attempt, outside the QPS bucket and with no overall timeout (it holds an in-flight slot while it
        lasts); the caller watches again from the last resourceVersion it saw. As the apiserver does, a
        failure comes as one `{"type": "ERROR", "object": <Status>}` event (code 0 when no answer came)."""
        if self._http is None:
            raise RuntimeError("ApiSession is not open: use `async with ApiSession(...)`")
        headers = {}
        if self.creds.token_file is not None:
            headers["Authorization"] = f"Bearer {self.creds.token_file.token()}"
        no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        try:
            async with self._slots, self._http.get(self.creds.server + path, params={**(params or {}), "watch": "1"},
                                                   headers=headers, timeout=no_timeout) as resp:
                if resp.status != 200:
                    data = _loads(await resp.read())
                    yield _error_event(resp.status, data.get("message", "") if isinstance(data, dict) else data)
                    return
                buf = b""
                async for chunk in resp.content.iter_any():
                    *lines, buf = (buf + chunk).split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield wirejson.loads(line)
        except (aiohttp.ClientError, TimeoutError) as e:
            yield _error_event(0, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)

    async def _attempt(self, method, url, body, content_type, params, timeout_s) -> tuple[int, Any, float, bool]:
        """(status, decoded body or error text, Retry-After seconds, worth retrying); status 0 when no answer
        came. A server certificate we do not trust is final: retrying cannot change it."""
        headers = {}
        if self.creds.token_file is not None:
            headers["Authorization"] = f"Bearer {self.creds.token_file.token()}"
        if body is not None:
            headers["Content-Type"] = content_type
        extra = {"timeout": aiohttp.ClientTimeout(total=timeout_s)} if timeout_s else {}
        try:
            async with self._http.request(
                method, url, data=None if body is None else wirejson.dumps(body), headers=headers, params=params, **extra
            ) as resp:
                raw = await resp.read()
                return (resp.status, _loads(raw), _retry_after(resp.headers.get("Retry-After")),
                        resp.status in RETRYABLE)
        except (aiohttp.ClientError, TimeoutError) as e:
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            return 0, text, 0.0, not isinstance(e, aiohttp.ClientConnectorCertificateError)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.limits.backoff_cap_s, self.limits.backoff_s * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


def _outcome(status: int, data: Any, attempts: int) -> Outcome:
    body = data if isinstance(data, dict) else {}
    message = body.get("message", "") if not (200 <= status < 300) else ""
    if not message and isinstance(data, str):
        message = data
    return Outcome(classify(status), status, message, attempts, body)


def _error_event(code: int, message: str) -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": code, "message": message}}


def _loads(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return wirejson.loads(raw)
    except ValueError:
        return raw[:500].decode(errors="replace")


def _retry_after(value: str | None, cap_s: float = 10.0) -> float:
    try:
        return min(cap_s, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0  # an HTTP date; the apiserver only ever sends seconds
