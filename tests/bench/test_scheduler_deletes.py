"""bench/scheduler.py's wait between runs (bench/lib/metrics.py): it counts KWOK's late pod DELETEs in instead of trusting a quiet spell,
so a KWOK that starts late no longer lands its DELETEs inside the next run."""
import importlib
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """bench/lib/metrics.py, imported as bench/scheduler.py imports it (bench/ on sys.path)."""
    saved = list(sys.path)
    sys.path[:0] = [str(REPO), str(REPO / "bench")]
    try:
        return importlib.import_module("lib.metrics")
    finally:
        sys.path[:] = saved


class Plane:
    """The apiserver's DELETE counter as /metrics shows it: `deletes` arrive at the given times from now."""

    def __init__(self, start: float, arrivals: list[tuple[float, int]]):
        self.t0, self.start, self.arrivals = time.perf_counter(), start, arrivals

    def metrics_text(self) -> str:
        now = time.perf_counter() - self.t0
        count = self.start + sum(n for at, n in self.arrivals if at <= now)
        return ('apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",'
                f'subresource="",verb="DELETE",version="v1"}} {count}\n')


def test_a_kwok_that_starts_late_is_waited_for(bench):
    # the bench's 100 DELETEs are in; KWOK's 100 start after 0.6 s of silence, longer than the quiet spell
    plane = Plane(100, [(0.6, 40), (0.8, 60)])
    took, missing = bench.deletes_settled(plane, expect=200, quiet=0.3, give_up=5.0, step=0.1)
    assert missing == 0
    assert 0.6 <= took < 1.5


def test_deletes_that_never_come_end_the_wait_after_give_up_and_are_counted(bench):
    plane = Plane(100, [(0.2, 30)])
    start = time.perf_counter()
    took, missing = bench.deletes_settled(plane, expect=200, quiet=0.1, give_up=0.5, step=0.1)
    assert missing == 70
    assert 0.2 <= took < 0.6 and time.perf_counter() - start < 2.0
