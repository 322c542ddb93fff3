"""The active queue: pods waiting for a decision, highest priority first, then first come first served
(kube-scheduler's PrioritySort). Priority is the pod's `spec.priority` (from its PriorityClass), then fgpu's
own `high`/`low`, so a high-priority pod takes the room a deletion freed before a low one that waited longer.

A heap with lazy removal: a pod removed or re-added leaves a stale heap entry that `pop` skips.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def sort_key(pod: dict, high: bool) -> tuple[int, int]:
    """Smaller sorts first: kube priority descending, then fgpu `high` before `low`."""
    priority = (pod.get("spec") or {}).get("priority")
    return (-priority if isinstance(priority, int) else 0, 0 if high else 1)


class ActiveQueue(Generic[T]):
    """uid -> entry, popped by (key, arrival)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, T]] = {}  # uid -> (sequence number, entry)
        self._heap: list[tuple[tuple[int, int], int, str]] = []
        self._seq = itertools.count()

    def push(self, uid: str, entry: T, key: tuple[int, int]) -> None:
        """Add or replace; a replaced pod keeps its place only if its key is unchanged."""
        seq = next(self._seq)
        self._entries[uid] = (seq, entry)
        heapq.heappush(self._heap, (key, seq, uid))
        if len(self._heap) > 4 * len(self._entries) + 64:  # mostly stale: rebuild from the live entries
            self._heap = [e for e in self._heap if self._entries.get(e[2], (None,))[0] == e[1]]
            heapq.heapify(self._heap)

    def pop(self) -> tuple[str, T]:
        while self._heap:
            _, seq, uid = heapq.heappop(self._heap)
            held = self._entries.get(uid)
            if held is not None and held[0] == seq:
                del self._entries[uid]
                return uid, held[1]
        raise KeyError("pop from an empty queue")

    def remove(self, uid: str) -> T | None:
        held = self._entries.pop(uid, None)
        if not self._entries:
            self._heap.clear()  # nothing live: drop the stale entries at once
        return held[1] if held else None

    def get(self, uid: str) -> T | None:
        held = self._entries.get(uid)
        return held[1] if held else None

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
