"""Client-side rate limit for the API: a token bucket with client-go's meaning of QPS and burst.

kube-scheduler's throughput ceiling at its defaults (50/100) is this limit, not its CPU; fgpu must be
benchmarked at the same setting and at 500/1000, so the limit is explicit and configurable.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """`burst` tokens at most, refilled at `qps` per second; each request takes one.

    Waiters reserve their token when they arrive (the bucket may go negative), so they are served in
    arrival order and a burst of callers is spread evenly instead of stampeding on every refill.
    `qps <= 0` means no limit.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be >= 1 when qps > 0, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def reserve(self) -> float:
        """Take a token; seconds the caller must wait before using it (0 when one was in the bucket)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def refund(self) -> None:
        """Give back a reserved token that was never used (its waiter was cancelled)."""
        if self.qps > 0:
            self._tokens = min(self.burst, self._tokens + 1)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay <= 0:
            return
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.refund()
            raise
