"""The suite-wide rule in tests/conftest.py: with FGPU_REQUIRE_E2E=1 a skipped e2e test fails; without it,
it skips. Checked on a throwaway suite run in a subprocess with a copy of that conftest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TESTS = Path(__file__).resolve().parents[1]

SUITE = '''
import pytest

@pytest.mark.e2e
def test_marked_skips():
    pytest.skip("no control plane here")

def test_unmarked_in_e2e_dir_skips():
    pytest.skip("no control plane here either")

@pytest.mark.e2e
@pytest.mark.xfail(reason="known bug")
def test_xfail_is_left_alone():
    raise AssertionError
'''


def run_suite(tmp_path: Path, require: bool) -> subprocess.CompletedProcess:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "test_skips.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k not in ("FGPU_REQUIRE_E2E", "PYTEST_ADDOPTS")}
    if require:
        env["FGPU_REQUIRE_E2E"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:asyncio", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_skips_fail_when_e2e_is_required(tmp_path):
    out = run_suite(tmp_path, require=True)
    assert out.returncode == 1, out.stdout
    assert "2 failed" in out.stdout and "1 xfailed" in out.stdout, out.stdout
    assert "FGPU_REQUIRE_E2E=1 forbids skipping an e2e test" in out.stdout
    assert "no control plane here" in out.stdout  # the original reason is kept


def test_skips_stay_skips_otherwise(tmp_path):
    out = run_suite(tmp_path, require=False)
    assert out.returncode == 0, out.stdout
    assert "2 skipped" in out.stdout and "1 xfailed" in out.stdout, out.stdout
