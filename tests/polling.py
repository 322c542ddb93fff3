"""Waiting on a real system in tests: poll until something is true, or fail saying what never happened and
what was seen last. (A module at the tests root, importable from every test folder.)"""
from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(fn: Callable, timeout: float = 30.0, what: str = "condition", interval: float = 0.25,
             show: Callable | None = None):
    """Poll fn() until it returns something truthy and return that; on timeout fail naming `what` and the
    last value seen (or `show()`, when fn's own value says too little)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {show() if show else last!r}",
                pytrace=False)
