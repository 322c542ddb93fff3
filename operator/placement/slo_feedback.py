"""Feedback from what the node daemons measure (docs/qos.md): a GPU whose protected pod has run slower than
its bound for a sustained window takes no new low-priority shares until it recovers.

The prediction can be wrong (other workloads than the model's, other GPUs); the daemons' `fgpu_pod_slowdown`
of each high-priority pod is what happened. `SloWatch` keeps, per (GPU, pod), since when every observation
was over the bound; a GPU is held once one pod has been over for `window_s`, and released as soon as no pod
of it is over (an observation at or below the bound, or the pod gone). Holding is pure bookkeeping on the
cluster (`set_hold`): the fit rule (`fit.gpu_fit`) reads it for low-priority shares, and a hold change bumps
the node's version, so every cache keyed on it sees the change.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .model import Cluster, Request

_HELD = "slo_held"


@dataclass(frozen=True, slots=True)
class Measured:
    """One observation of a protected pod's slowdown on a GPU (the daemon's fgpu_pod_slowdown and bound)."""

    uuid: str
    pod: str  # namespace/name
    slowdown: float
    bound: float


@dataclass(frozen=True, slots=True)
class Hold:
    """A GPU held: the pod that has been over its bound, since when, and the latest observation."""

    uuid: str
    pod: str
    since: float
    slowdown: float
    bound: float


class SloWatch:
    """Which GPUs to hold, from observations over time."""

    def __init__(self, window_s: float = 60.0):
        if not window_s >= 0:
            raise ValueError(f"window_s: {window_s} (allowed: seconds >= 0)")
        self.window_s = window_s
        self.over_since: dict[tuple[str, str], float] = {}
        self.latest: dict[tuple[str, str], Measured] = {}
        self.held: dict[str, Hold] = {}

    def observe(self, now: float, samples: Iterable[Measured]) -> tuple[list[Hold], list[str]]:
        """Take one round of observations (every protected pod seen now); (GPUs newly held, GPUs released)."""
        seen: set[tuple[str, str]] = set()
        for m in samples:
            key = (m.uuid, m.pod)
            seen.add(key)
            self.latest[key] = m
            if m.slowdown > m.bound + 1e-9:
                self.over_since.setdefault(key, now)
            else:
                self.over_since.pop(key, None)
        for key in [k for k in self.over_since if k not in seen]:
            del self.over_since[key]
        for key in [k for k in self.latest if k not in seen]:
            del self.latest[key]
        sustained: dict[str, Hold] = {}
        for (uuid, pod), since in sorted(self.over_since.items(), key=lambda kv: kv[1]):
            if now - since >= self.window_s and uuid not in sustained:
                m = self.latest[(uuid, pod)]
                sustained[uuid] = Hold(uuid, pod, since, m.slowdown, m.bound)
        started = [h for u, h in sustained.items() if u not in self.held]
        released = [u for u in self.held if u not in sustained]
        self.held = sustained
        return started, released


def set_hold(cluster: Cluster, uuid: str, held: bool) -> bool:
    """Hold or release one GPU of the cluster for low-priority shares; True if anything changed."""
    where = cluster.uuid_index.get(uuid)
    if where is None:
        return False
    mask = cluster.plugin_state.get(_HELD)
    if mask is None:
        if not held:
            return False
        mask = cluster.plugin_state[_HELD] = np.zeros(cluster.gpu_left.shape, dtype=bool)
    if bool(mask[where]) == held:
        return False
    mask[where] = held
    cluster.version[where[0]] += 1
    return True


def holds_apply(cluster: Cluster, request: Request) -> bool:
    """Holds keep out low-priority shares (whole GPUs have no co-runners; protected pods are judged by the
    filter's prediction)."""
    mask = cluster.plugin_state.get(_HELD)
    return mask is not None and request.is_share and request.priority != 0 and bool(mask.any())


def hold_mask(cluster: Cluster, request: Request, rows=slice(None)) -> np.ndarray | bool:
    """GPUs of `rows` not held against this request (True: nothing held applies)."""
    if not holds_apply(cluster, request):
        return True
    return ~cluster.plugin_state[_HELD][rows]
