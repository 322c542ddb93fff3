"""TokenBucket: client-go's QPS/burst semantics, on a fake clock (and one real-time check)."""
from __future__ import annotations

import asyncio
import time

import pytest
from fgpu_operator.kube import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_is_free_then_requests_are_spaced_by_one_over_qps():
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert [round(bucket.reserve(), 6) for _ in range(3)] == [0.1, 0.2, 0.3]


def test_tokens_refill_at_qps_up_to_burst():
    clock = Clock()
    bucket = TokenBucket(qps=4, burst=2, clock=clock)
    bucket.reserve(), bucket.reserve()
    clock.now += 0.25
    assert bucket.reserve() == 0  # one token came back
    assert bucket.reserve() == 0.25
    clock.now += 60  # long idle: the bucket holds `burst`, not 240
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0.25]


def test_qps_zero_means_unlimited():
    bucket = TokenBucket(qps=0, burst=0)
    assert all(bucket.reserve() == 0 for _ in range(10_000))


def test_refund_returns_an_unused_token():
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)
    bucket.refund()
    assert bucket.reserve() == pytest.approx(0.1)


def test_burst_below_one_is_refused():
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(qps=5, burst=0)


async def test_acquire_paces_real_callers():
    bucket = TokenBucket(qps=200, burst=5)
    start = time.monotonic()
    await asyncio.gather(*(bucket.acquire() for _ in range(25)))  # 5 free + 20 at 200/s = 0.1 s
    assert 0.09 <= time.monotonic() - start < 1.0


async def test_cancelled_waiter_gives_its_token_back():
    clock = Clock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    await bucket.acquire()
    waiter = asyncio.create_task(bucket.acquire())  # would wait 1 s
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert bucket.reserve() == pytest.approx(1.0)  # not 2.0: the cancelled reservation was refunded
