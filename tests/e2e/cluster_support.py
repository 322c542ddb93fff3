"""The cluster the chart's real-node tests install onto (devcluster.cluster: control plane, kube-proxy, the real
node, KWOK nodes), as one module-scoped fixture body: up once, torn down after, nothing left on the machine."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from devcluster.cluster import Cluster
from devcluster.kubeplane import ComponentError
from devcluster.node import NodeSetupError, node_dir


def require(raw: str | None, what: str) -> str:
    """An environment value the test needs; a skip without it, a failure under FGPU_REQUIRE_E2E=1."""
    if raw:
        return raw
    problem = f"{what} is not set (`make test` sets it)"
    if os.environ.get("FGPU_REQUIRE_E2E") == "1":
        pytest.fail(problem + " (FGPU_REQUIRE_E2E=1: e2e tests may not skip)", pytrace=False)
    pytest.skip(problem)


def chart_cluster(testbin, tmp_path_factory, kwok_nodes: int, host_dirs: tuple[Path, ...], timings: dict):
    """Yield a Cluster with FGPU_IMAGE imported into its node; afterwards stop it, check that it left nothing,
    and remove the chart's host dirs (DaemonSet hostPath DirectoryOrCreate) that did not exist before."""
    archive = Path(require(os.environ.get("FGPU_IMAGE"), "FGPU_IMAGE (hack/image-nodocker.sh's archive)"))
    try:
        directory = node_dir(require(os.environ.get("FGPU_NODE"), "FGPU_NODE"))
    except NodeSetupError as e:
        pytest.fail(str(e), pytrace=False)
    made = {p: p.exists() for p in host_dirs}
    c = Cluster(testbin, directory, tmp_path_factory.mktemp("cluster"), kwok_nodes=kwok_nodes)
    t = time.monotonic()
    try:
        c.up(archive)
    except ComponentError as e:
        tails = c.node.log_tails() if c.node.components else ""
        c.stop()
        pytest.fail(f"the cluster did not come up: {e}\n{tails}", pytrace=False)
    timings["cluster_up_s"] = round(time.monotonic() - t, 1)
    timings.update(c.timings)
    yield c
    c.stop()
    assert c.node.leftovers() == []
    for path, existed in made.items():
        if not existed:
            shutil.rmtree(path, ignore_errors=True)
    print("timings:", json.dumps(timings))
