"""The real `helm` (built into the testbin by `make testbin`) on charts/fgpu: render, lint, install. Shared by
tests/chart (rendering) and tests/e2e/test_chart_cluster.py (against the real apiserver). A module at the
tests root, importable from every test folder."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "fgpu"
VALUES = ROOT / "deploy" / "values"
#: The documented example values files (each is linted and rendered).
EXAMPLE_VALUES = sorted(VALUES.glob("*.yaml"))


def _helm_path() -> Path | None:
    raw = os.environ.get("FGPU_TESTBIN")
    path = Path(raw).expanduser() / "helm" if raw else None
    return path if path is not None and os.access(path, os.X_OK) else None


def helm_available() -> bool:
    return _helm_path() is not None


def helm_binary() -> Path:
    """helm from FGPU_TESTBIN; skip (or, with FGPU_REQUIRE_E2E=1, fail: tests/conftest.py) without it."""
    path = _helm_path()
    if path is None:
        pytest.skip(f"no helm: FGPU_TESTBIN={os.environ.get('FGPU_TESTBIN') or '(unset)'} has none; run `make testbin`")
    return path


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/fgpu-helm/cache", "HELM_CONFIG_HOME": "/tmp/fgpu-helm/config",
           "HELM_DATA_HOME": "/tmp/fgpu-helm/data"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    out = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, env=env, timeout=120)
    if check and out.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-3000:]}", pytrace=False)
    return out


def render(*args: str, release: str = "fgpu", namespace: str = "fgpu-system") -> list[dict]:
    """`helm template` with `args` (e.g. -f FILE, --set K=V): the rendered objects."""
    out = helm("template", release, str(CHART), "--namespace", namespace, *args)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(objects, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} rendered, wanted one"
    return found[0]
