"""`fgpu operator --slo-feedback-prometheus URL`: the shell of the measured-SLO feedback (docs/qos.md).

Every `every_s` it asks Prometheus for the daemons' high-priority slowdowns and bounds (`fgpu_pod_slowdown`,
`fgpu_qos_slo_slowdown_bound`, the series `fgpu report`'s QoS panels draw), feeds them to the pure
`placement.slo_feedback.SloWatch`, and applies what it decides: a GPU held takes no new low-priority shares
(an Event on the protected pod says why, and `fgpu_scheduler_slo_holds_total{change="held"}` counts it); a
GPU released takes them again and the waiting pods are retried. Prometheus unreachable: a warning, and the
holds stay as they are until it answers again (a scrape gap is not a recovery).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from ..observe.prom import PromError, Prometheus, Series
from ..placement.slo_feedback import Hold, Measured, SloWatch

log = logging.getLogger(__name__)
SLOWDOWN = 'fgpu_pod_slowdown{priority="high"}'
BOUND = "fgpu_qos_slo_slowdown_bound"
_KEY = ("UUID", "namespace", "pod", "container")


def measured(slowdowns: Iterable[Series], bounds: Iterable[Series]) -> list[Measured]:
    """Join each high-priority pod's slowdown with its bound by GPU and container (a series without its
    bound, or without a pod, is skipped: nothing to compare it with)."""
    bound = {tuple(s.labels.get(k, "") for k in _KEY): s.points[-1][1] for s in bounds if s.points}
    out = []
    for s in slowdowns:
        key = tuple(s.labels.get(k, "") for k in _KEY)
        if s.points and key in bound and key[0] and key[2]:
            out.append(Measured(key[0], f"{key[1]}/{key[2]}", s.points[-1][1], bound[key]))
    return out


def hold_message(h: Hold, window_s: float) -> str:
    return (f"GPU {h.uuid} takes no new low-priority pods: {h.pod} measured {h.slowdown:.2f}x slower than alone, "
            f"over its {h.bound:g}x SLO for at least {window_s:g} s")


class SloFeedback:
    """The polling task: Prometheus -> SloWatch -> the scheduler's model, Events and metrics."""

    def __init__(self, url: str, scheduler, window_s: float = 60.0, every_s: float = 15.0):
        self.prom = Prometheus(url)
        self.scheduler = scheduler
        self.watch = SloWatch(window_s)
        self.every_s = every_s

    def apply(self, now: float, samples: list[Measured]) -> None:
        started, released = self.watch.observe(now, samples)
        live, metrics = self.scheduler.live, self.scheduler.metrics
        uids = {a.request.name: uid for uid, a in live.allocations.items()}
        for h in started:
            live.set_slo_hold(h.uuid, True)
            metrics.slo_hold("held")
            namespace, _, name = h.pod.partition("/")
            message = hold_message(h, self.watch.window_s)
            log.warning("%s", message)
            self.scheduler.events.post(namespace, name, uids.get(h.pod, ""), "SloHold", message)
        freed = False
        for uuid in released:
            freed |= live.set_slo_hold(uuid, False)
            metrics.slo_hold("released")
            log.info("GPU %s takes low-priority pods again: no protected pod there is over its SLO", uuid)
        if freed:
            self.scheduler.retry_waiting()

    async def run(self) -> None:
        while True:
            try:
                slowdowns, bounds = await asyncio.to_thread(
                    lambda: (self.prom.query(SLOWDOWN), self.prom.query(BOUND)))
            except PromError as err:
                log.warning("SLO feedback: %s; holds unchanged", err)
            else:
                self.apply(time.monotonic(), measured(slowdowns, bounds))
            await asyncio.sleep(self.every_s)
