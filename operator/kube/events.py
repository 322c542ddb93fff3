"""Pod events (FailedScheduling, Scheduled) that stay one object per pod and reason however often a pod
is retried: a pod retried 100 times makes one Event with count 100, not 100 Events.

As client-go's event correlator does for core/v1 Events: the first occurrence is created, later ones with
the same pod and reason only bump `count` (and take the latest message), and that is written back at
most once per `interval_s` per pod and reason — so events cost the apiserver O(pods), not O(retries).
"""
from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..objects import timestamp
from .outcome import Outcome, Result
from .session import STRATEGIC_MERGE, ApiSession

AGGREGATED = Outcome(Result.OK, 0, "aggregated into the pod's existing event", attempts=0)


@dataclass
class _Series:
    namespace: str
    pod: str
    uid: str
    type: str
    reason: str
    message: str
    first: str = field(default_factory=timestamp)
    count: int = 1
    written: int = 0  # count last written to the apiserver
    event: str = ""  # the Event's name once created
    last_write: float = float("-inf")
    busy: bool = False
    timer: asyncio.TimerHandle | None = None

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class EventRecorder:
    """emit() returns at once with AGGREGATED when the occurrence only bumps a pending count; it awaits
    the write when one is due. Call aclose() (or flush()) at shutdown to write pending counts."""

    def __init__(self, api: ApiSession, component: str = "fgpu-scheduler", instance: str = "",
                 interval_s: float = 10.0, max_series: int = 10_000, max_backlog: int = 1000,
                 on_drop: Callable[[], None] | None = None):
        self.api = api
        self.max_backlog = max_backlog
        self.dropped = 0  # events `post` gave up on because the backlog was full
        self.on_drop = on_drop  # told of each (the operator counts them in a metric)
        self.component = component
        self.instance = instance
        self.interval_s = interval_s
        self.max_series = max_series
        self._series: OrderedDict[tuple[str, str], _Series] = OrderedDict()
        self._reasons: set[str] = set()  # every reason seen: forget() looks up each, never scans the series
        self._tasks: set[asyncio.Task] = set()

    async def emit(self, namespace: str, pod: str, uid: str, reason: str, message: str,
                   type: str = "Warning") -> Outcome:
        key = (uid or f"{namespace}/{pod}", reason)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(namespace, pod, uid, type, reason, message)
            self._reasons.add(reason)
            self._evict()
            return await self._write(series)
        self._series.move_to_end(key)
        series.count += 1
        series.message = message
        if series.busy or series.timer is not None:
            return AGGREGATED
        wait = series.last_write + self.interval_s - time.monotonic()
        if wait <= 0:
            return await self._write(series)
        self._schedule(series, wait)
        return AGGREGATED

    def post(self, namespace: str, pod: str, uid: str, reason: str, message: str, type: str = "Warning") -> bool:
        """emit() without waiting for it: a bind or a decision must not wait on the events' own rate limit.
        Like client-go's event broadcaster, a full backlog (`max_backlog` writes) drops the event: False."""
        if len(self._tasks) >= self.max_backlog:
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop()
            return False
        task = asyncio.create_task(self.emit(namespace, pod, uid, reason, message, type))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def __len__(self) -> int:
        """How many (pod, reason) series are tracked."""
        return len(self._series)

    def forget(self, uid: str) -> None:
        """Drop the series of a pod that is bound or deleted (pending counts are not written). O(reasons), not
        O(series): a burst of deletions calls it once a pod, with up to `max_series` series kept."""
        for reason in self._reasons:
            series = self._series.pop((uid, reason), None)
            if series is not None:
                series.stop_timer()

    async def flush(self) -> None:
        """Write every pending count now."""
        pending = [s for s in self._series.values() if s.count > s.written and not s.busy]
        for series in pending:
            series.stop_timer()
        await asyncio.gather(*(self._write(s) for s in pending), *self._tasks)

    async def aclose(self) -> None:
        await self.flush()
        for series in self._series.values():
            series.stop_timer()
        self._series.clear()

    def _evict(self) -> None:
        while len(self._series) > self.max_series:
            self._series.popitem(last=False)[1].stop_timer()

    def _schedule(self, series: _Series, wait: float) -> None:
        def fire() -> None:
            series.timer = None
            task = asyncio.create_task(self._write(series))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        series.timer = asyncio.get_running_loop().call_later(wait, fire)

    async def _write(self, series: _Series) -> Outcome:
        series.busy = True
        count = series.count
        try:
            out = await (self._update(series) if series.event else self._create(series))
            if out.result is Result.GONE and series.event:  # expired (events have a TTL): start anew
                series.event = ""
                out = await self._create(series)
        finally:
            series.busy = False
            series.last_write = time.monotonic()
        series.written = count  # also on failure: a failing write is not retried in a loop
        if series.count > series.written and series.timer is None:
            self._schedule(series, self.interval_s)
        return out

    async def _create(self, series: _Series) -> Outcome:
        name = f"{series.pod}.{secrets.token_hex(8)}"
        now = timestamp()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": series.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": series.namespace,
                               "name": series.pod, "uid": series.uid},
            "type": series.type, "reason": series.reason, "message": series.message,
            "count": series.count, "firstTimestamp": series.first, "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance,
        }
        out = await self.api.request("POST", f"/api/v1/namespaces/{series.namespace}/events", body=body)
        if out.ok:
            series.event = name
        return out

    async def _update(self, series: _Series) -> Outcome:
        body = {"count": series.count, "message": series.message, "lastTimestamp": timestamp()}
        return await self.api.request(
            "PATCH", f"/api/v1/namespaces/{series.namespace}/events/{series.event}",
            body=body, content_type=STRATEGIC_MERGE,
        )
