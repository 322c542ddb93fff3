"""`simgpu mig check|profiles`: JSON answers, exit codes 0/1/2, one-line errors."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_valid_layout(capsys):
    code, out, err = run(capsys, "mig", "check", "--gpu", "A100-40GB", "4g.20gb", "MIG 3g.20gb")
    assert code == 0 and not err
    assert json.loads(out) == {"valid": True, "placements": [
        {"profile": "4g.20gb", "start": 0, "size": 4}, {"profile": "3g.20gb", "start": 4, "size": 4}]}


@pytest.mark.parametrize("layout", [["4g.20gb", "4g.20gb"], ["7g.40gb", "1g.5gb"], ["2g.10gb"] * 4])
def test_check_invalid_layout(capsys, layout):
    code, out, err = run(capsys, "mig", "check", "--gpu", "a100-40gb", *layout)
    assert code == 1 and not err
    answer = json.loads(out)
    assert answer["valid"] is False and answer["reason"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--gpu", "B200", "1g.10gb"], "gpu"),
    (["--gpu", "T4", "1g.5gb"], "does not support MIG"),
    (["--gpu", "H100", "1g.5gb"], "1g.10gb"),  # lists the H100's profiles
])
def test_check_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, "mig", "check", *argv)
    assert code == 2 and not out
    assert err.count("\n") == 1 and needle in err
    assert "Traceback" not in err


def test_check_needs_a_profile(capsys):
    with pytest.raises(SystemExit) as info:
        main(["mig", "check", "--gpu", "H100"])
    assert info.value.code == 2


def test_profiles_table(capsys):
    code, out, _ = run(capsys, "mig", "profiles", "--gpu", "A100-40GB")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("A100-SXM4-40GB: 7 compute slices, 8 memory slices")
    row = next(line for line in lines if line.startswith("3g.20gb"))
    assert row.split()[:6] == ["3g.20gb", "9", "3/4", "42", "19.62", "2"]
    assert row.endswith("0:4 4:4")


def test_profiles_json(capsys):
    code, out, _ = run(capsys, "mig", "profiles", "--gpu", "A30", "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["gpu"], doc["compute_slices"], doc["memory_slices"]) == ("A30", 4, 4)
    assert [p["name"] for p in doc["profiles"]][0] == "1g.6gb"
    assert doc["profiles"][-1]["placements"] == [[0, 4]]


@settings(max_examples=60, deadline=None)
@given(gpu=st.text(max_size=12), prof=st.text(max_size=12))
def test_fuzz_bad_names_never_traceback(gpu, prof):
    if prof.startswith("-") or gpu.startswith("-"):
        return  # argparse options, not names
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["mig", "check", "--gpu", gpu, prof])
    out, err = stdout.getvalue(), stderr.getvalue()
    assert code in (0, 1, 2)
    if code == 2:
        assert not out and err.count("\n") == 1
    else:
        assert json.loads(out)["valid"] is (code == 0)
