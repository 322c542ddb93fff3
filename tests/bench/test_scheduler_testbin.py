"""bench/scheduler.py without a control plane to start: one line naming FGPU_TESTBIN and exit 2, before any
cluster or operator is started (a newcomer's first run, not a traceback)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [None, "/nonexistent/fgpu-testbin"])
def test_no_testbin_is_one_line_and_exit_2(value):
    env = {k: v for k, v in os.environ.items() if k != "FGPU_TESTBIN"}
    if value is not None:
        env["FGPU_TESTBIN"] = value
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scheduler.py"), "--quick"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "FGPU_TESTBIN" in lines[0] and "Traceback" not in done.stderr
    if value is not None:
        assert value in lines[0]
