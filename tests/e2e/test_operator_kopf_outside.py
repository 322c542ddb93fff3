"""The operator on a Kopf release outside the range its speed-ups were tested on (operator/kopf_patches.py):
Kopf 1.43, whose internals they do not fit (no `ResourceMemory.remaining_patch`: patched anyway, every watch
event failed). The operator says so in one WARNING line, runs Kopf as shipped and binds pods as on any Kopf.

Kopf 1.43 (pure Python, its dependencies the same as the installed Kopf's) is installed once into
$FGPU_CACHE/kopf/1.43.0 and put first on the operator's PYTHONPATH."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from operator_proc import gpu_node, share_pod, start_operator, stop
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e
OUTSIDE = "1.43.0"


@pytest.fixture(scope="module")
def outside_kopf() -> Path:
    cache = Path(os.environ.get("FGPU_CACHE") or Path.home() / ".cache" / "fgpu") / "kopf" / OUTSIDE
    if not (cache / "kopf" / "__init__.py").is_file():
        staging = cache.with_name(f"{OUTSIDE}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(staging),
                               f"kopf=={OUTSIDE}"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"could not install kopf {OUTSIDE}: {done.stderr.strip()[-300:]}")
        staging.replace(cache)
    return cache


def test_pods_are_bound_on_a_kopf_outside_the_tested_range(k8s, kubeconfig_env, tmp_path, make_kwok_node,
                                                              namespace, outside_kopf, monkeypatch):
    from kubernetes import client

    gpu_node(make_kwok_node, k8s, "kopf-old-h100")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(outside_kopf), os.environ.get("PYTHONPATH")))))
    proc = start_operator(k8s, tmp_path)
    try:
        with k8s.api() as api:
            core = client.CoreV1Api(api)
            for i in range(4):
                core.create_namespaced_pod(namespace, share_pod(f"old-kopf-{i}", 500, 8))

            def bound():
                pods = core.list_namespaced_pod(namespace).items
                return pods if len(pods) == 4 and all(p.spec.node_name for p in pods) else None

            pods = wait_for(bound, what="4 pods bound")
        for p in pods:
            (device,) = json.loads(p.metadata.annotations[keys.ASSIGNMENT])["containers"][0]["devices"]
            assert device["milliGpu"] == 500 and p.spec.node_name == "kopf-old-h100"
    finally:
        stop(proc)
    log = (tmp_path / "operator.log").read_text()
    warnings = [line for line in log.splitlines() if " WARNING fgpu.operator: " in line]
    assert len(warnings) == 1 and f"Kopf {OUTSIDE}:" in warnings[0] and "running Kopf as shipped" in warnings[0], \
        warnings
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
