"""Waiting on a real system: poll until something is true, or raise saying what never happened and what was
seen last. (tests/polling.py turns the exception into a pytest failure.)"""
from __future__ import annotations

import time
from collections.abc import Callable


class WaitTimeout(Exception):
    """Something awaited did not happen in time; the message says what, and what was seen last."""


def wait_until(fn: Callable, timeout: float = 30.0, what: str = "condition", interval: float = 0.25,
               show: Callable | None = None):
    """Poll fn() until it returns something truthy and return that; on timeout raise WaitTimeout naming
    `what` and the last value seen (or `show()`, when fn's own value says too little)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {show() if show else last!r}")
