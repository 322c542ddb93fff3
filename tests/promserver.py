"""A real Prometheus server for tests (Debian package prometheus, `make prometheus`), scraping through the
shipped deploy/prometheus/scrape-configs.yaml with Kubernetes SD swapped for static targets
(devcluster.prometheus, shared with the demo)."""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.fgpu import log_tail, stop
from devcluster.kubeplane import ComponentError
from devcluster.prometheus import DEPLOY, JOBS, start_prometheus, static_scrape_configs  # noqa: F401 - tests' API


def prometheus_binary(name: str = "prometheus") -> str:
    """The Debian package's `prometheus` or `promtool`; skipped without it, unless CI requires it."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("FGPU_REQUIRE_E2E") == "1":
            pytest.fail(f"{name} not found: run `make prometheus`")
        pytest.skip(f"{name} not found (make prometheus)")
    return path


@contextlib.contextmanager
def running_prometheus(workdir: Path, scrape_configs: list[dict], port: int,
                       interval: str = "1s") -> Iterator[str]:
    """`prometheus` on 127.0.0.1:port with its TSDB in workdir, scraping every `interval`; yields its URL once
    ready, and prints its log's tail when stopped."""
    try:
        proc, url = start_prometheus(prometheus_binary(), workdir, scrape_configs, port, interval)
    except ComponentError as e:
        problem = str(e)
    else:
        problem = None
    if problem:
        pytest.fail(problem, pytrace=False)
    try:
        yield url
    finally:
        stop(proc)
        print(log_tail(proc, 2000))
