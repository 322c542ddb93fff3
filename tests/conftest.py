"""Suite-wide policy for end-to-end tests (and Hypothesis' deadline, below).

Tests under tests/e2e/ are marked `e2e` even if their author forgot, so `make unit` (-m 'not e2e') never
starts a control plane. Without FGPU_TESTBIN, e2e tests skip with the reason (a plain checkout can still run
`pytest`); with FGPU_REQUIRE_E2E=1 (set by `make test` and so by CI) an e2e test that would be skipped fails
instead, so CI can never go green on skipped end-to-end tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

E2E_DIR = Path(__file__).parent / "e2e"

# Property tests judge correctness, not speed: Hypothesis' default 200 ms per example fails them at random on a
# busy 2-core CI machine (seen: 493 ms for a 0.4 ms example while the whole suite ran). Speed is the benches' job.
settings.register_profile("fgpu", deadline=None)
settings.load_profile("fgpu")


def require_e2e() -> bool:
    return os.environ.get("FGPU_REQUIRE_E2E") == "1"


def _is_e2e(item: pytest.Item) -> bool:
    return item.get_closest_marker("e2e") is not None or "k8s" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).parents and item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and require_e2e() and _is_e2e(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"FGPU_REQUIRE_E2E=1 forbids skipping an e2e test; it was skipped because: {reason}"
