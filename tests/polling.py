"""Waiting on a real system in tests: poll until something is true, or fail saying what never happened and
what was seen last. (A module at the tests root, importable from every test folder; the polling itself is
devcluster.polling's, shared with the demo.)"""
from __future__ import annotations

from collections.abc import Callable

import pytest

from devcluster.polling import WaitTimeout, wait_until


def wait_for(fn: Callable, timeout: float = 30.0, what: str = "condition", interval: float = 0.25,
             show: Callable | None = None):
    """Poll fn() until it returns something truthy and return that; on timeout fail naming `what` and the
    last value seen (or `show()`, when fn's own value says too little)."""
    try:
        return wait_until(fn, timeout, what, interval, show)
    except WaitTimeout as e:
        problem = str(e)
    pytest.fail(problem, pytrace=False)  # outside the except block: one message, no chained traceback
