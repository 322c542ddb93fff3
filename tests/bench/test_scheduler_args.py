"""bench/scheduler.py's --cpu-burner and the burner itself: a bad share gets one line and exit 2, before any cluster
is started; so does a missing or wrong FGPU_TESTBIN."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script, flag", [("scheduler.py", "--cpu-burner"), ("helpers/cpu_burner.py", "--share")])
@pytest.mark.parametrize("value", ["1.5", "0", "-0.2", "abc", "nan"])
def test_a_bad_share_of_a_core_is_one_line_and_exit_2(script, flag, value):
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), f"{flag}={value}"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert flag in last and repr(value) in last and "Traceback" not in done.stderr


@pytest.mark.parametrize("testbin", [None, "", "/nonexistent/testbin"])
def test_no_testbin_is_one_line_and_exit_2(testbin, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FGPU_TESTBIN"} | ({} if testbin is None else {"FGPU_TESTBIN": testbin})
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scheduler.py"), "--quick", "--plot", str(tmp_path / "p.png")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "FGPU_TESTBIN" in lines[0] and "make testbin" in lines[0]
    assert not (tmp_path / "p.png").exists()
