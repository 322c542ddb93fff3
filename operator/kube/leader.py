"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules and defaults.

Only the leader may bind: two schedulers would each reserve the same GPU share in their own cache. The
leader renews every `retry_s` with the Lease's resourceVersion (optimistic concurrency) and stops leading
on its own once it has gone `renew_deadline_s` without a successful renew — before the lease, which runs
`lease_s`, expires for the others. A standby wakes at the lease's expiry (renewTime +
leaseDurationSeconds, as the holder wrote it) rather than on its next poll, so it takes over within
`lease_s` of the leader's last renew. A clean shutdown releases the lease (no holder, 1 s) and a standby
takes over on its next poll. Lease requests skip the session's QPS bucket: a renew queued behind a burst
of events would cost the leadership.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..objects import parse_time, timestamp
from .outcome import Result
from .session import ApiSession

log = logging.getLogger(__name__)


class _Try(enum.Enum):
    HELD = "held"  # we hold the lease now
    TAKEN = "taken"  # someone else holds a valid lease
    FAILED = "failed"  # no answer, a conflict, an error: try again


def default_identity() -> str:
    """The pod's name (POD_NAME, else the hostname) and a random suffix, so a restarted pod that reuses
    its name does not mistake the old holder's lease for its own."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}"


class LeaderElector:
    """`async with elector.running(): await elector.became_leader.wait(); ...`

    is_leader is True only while the last successful renew is younger than the renew deadline, so a
    leader whose apiserver went away stops believing it leads before anyone else can take over.
    """

    def __init__(
        self,
        api: ApiSession,
        name: str = "fgpu-scheduler",
        namespace: str = "kube-system",
        identity: str | None = None,
        *,
        lease_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_s: float = 2.0,
        release_on_cancel: bool = True,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ):
        if not retry_s < renew_deadline_s < lease_s:
            raise ValueError(f"need retry_s < renew_deadline_s < lease_s, got {retry_s}, {renew_deadline_s}, {lease_s}")
        self.api = api
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_s, self.renew_deadline_s, self.retry_s = lease_s, renew_deadline_s, retry_s
        self.release_on_cancel = release_on_cancel
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self.became_leader = asyncio.Event()
        self.lost_leadership = asyncio.Event()
        self._leading = False
        self._valid_until = 0.0  # monotonic: last successful renew's start + renew deadline
        self._lease: dict[str, Any] = {}  # last observed Lease object

    # ---- what callers read ------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self._leading and time.monotonic() < self._valid_until

    @property
    def holder(self) -> str:
        """holderIdentity as last observed ('' when free or never read)."""
        return self._spec().get("holderIdentity") or ""

    @property
    def transitions(self) -> int:
        """leaseTransitions as last observed: how many times the lease changed hands."""
        return int(self._spec().get("leaseTransitions") or 0)

    # ---- running ------------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LeaderElector]:
        """Campaign in a background task for the duration of the block; on exit stop, and release the
        lease if we hold it and release_on_cancel is set."""
        task = asyncio.create_task(self.run(), name=f"leader-election:{self.identity}")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """Acquire, renew, and after a loss campaign again, until cancelled."""
        try:
            while True:
                started = time.monotonic()
                if self._leading and started >= self._valid_until:
                    self._set_leading(False)  # no successful renew within the renew deadline
                budget = self._valid_until - started if self._leading else self.renew_deadline_s
                try:
                    result = await asyncio.wait_for(self._try_acquire_or_renew(), budget)
                except TimeoutError:
                    result = _Try.FAILED
                if result is _Try.HELD:
                    self._valid_until = started + self.renew_deadline_s
                    self._set_leading(True)
                elif result is _Try.TAKEN:
                    self._set_leading(False)
                await asyncio.sleep(self._pause())
        except asyncio.CancelledError:
            leading = self._leading
            self._set_leading(False)
            if leading and self.release_on_cancel:
                await self._release()
            raise

    # ---- internals ----------------------------------------------------------------------------------
    def _path(self, named: bool = True) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        return f"{base}/{self.name}" if named else base

    def _spec(self) -> dict[str, Any]:
        return self._lease.get("spec") or {}

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        log.info("%s %s leadership of lease %s/%s", self.identity, "acquired" if leading else "lost",
                 self.namespace, self.name)
        event, other, callback = ((self.became_leader, self.lost_leadership, self.on_started_leading) if leading
                                  else (self.lost_leadership, self.became_leader, self.on_stopped_leading))
        other.clear()
        event.set()
        if callback is not None:
            try:
                callback()
            except Exception:  # a caller's bug must not stop the election (or the step-down)
                log.exception("%s: leadership callback failed", self.identity)

    def _expires_in(self, now: dt.datetime) -> float:
        """Seconds until the observed lease expires (<= 0: expired or free)."""
        spec = self._spec()
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        if not spec.get("holderIdentity") or renewed is None:
            return 0.0
        return (renewed - now).total_seconds() + float(spec.get("leaseDurationSeconds") or 0)

    def _pause(self) -> float:
        if self._leading:  # wake by the renew deadline at the latest, to step down on time
            return max(0.0, min(self.retry_s, self._valid_until - time.monotonic()))
        if self.holder in ("", self.identity):
            return self.retry_s
        until_expiry = self._expires_in(dt.datetime.now(dt.UTC))
        # already expired when last seen means we just tried and failed: poll, do not spin
        return min(self.retry_s, until_expiry + 0.05) if until_expiry > 0 else self.retry_s

    async def _try_acquire_or_renew(self) -> _Try:
        now = dt.datetime.now(dt.UTC)
        got = await self.api.request("GET", self._path(), retries=0, rate_limited=False)
        if got.result is Result.GONE:
            written = await self._write("POST", None, self._record(now, None))
        elif not got.ok:
            return _Try.FAILED
        else:
            self._lease = got.body
            if self.holder not in ("", self.identity) and self._expires_in(now) > 0:
                return _Try.TAKEN
            written = await self._write("PUT", got.body, self._record(now, self._spec()))
        return _Try.HELD if written else _Try.FAILED

    def _record(self, now: dt.datetime, old: dict[str, Any] | None) -> dict[str, Any]:
        """The spec we write: renewing keeps acquireTime and leaseTransitions, taking over counts one."""
        stamp = timestamp(micro=True, at=now)
        ours = old is not None and old.get("holderIdentity") == self.identity
        transitions = int((old or {}).get("leaseTransitions") or 0) + (0 if ours or old is None else 1)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_s)),
            "acquireTime": old.get("acquireTime") if ours else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    async def _write(self, method: str, lease: dict[str, Any] | None, spec: dict[str, Any],
                     timeout_s: float | None = None) -> bool:
        """Create or replace the Lease (PUT carries the resourceVersion read: a lost race is a 409)."""
        metadata = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
        out = await self.api.request(method, self._path(named=method == "PUT"), body=body, retries=0,
                                     timeout_s=timeout_s, rate_limited=False)
        if out.ok:
            self._lease = out.body
        return out.ok

    async def _release(self) -> None:
        """Hand the lease back at once (no holder, 1 s), if it is still the version we last wrote."""
        spec = self._spec()
        if spec.get("holderIdentity") != self.identity:
            return
        stamp = timestamp(micro=True)
        released = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp,
                    "leaseTransitions": spec.get("leaseTransitions") or 0}
        if not await self._write("PUT", self._lease, released, timeout_s=self.retry_s):
            log.warning("%s could not release lease %s/%s; it expires in %s s", self.identity,
                        self.namespace, self.name, self.lease_s)
