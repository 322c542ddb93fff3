"""simgpu's command line under bad input (issue 14, part A) and the `simgpu predict` JSON surface fuzzed (part
D): a result, or one line naming the field, the value and what is allowed, with exit code 2."""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simgpu.cli import main
from simgpu.commands.predict import predict_all, read_cases
from simgpu.errors import SimgpuError


def simgpu(capsys, monkeypatch, *argv, stdin=""):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code, out, err):
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize(("cases", "needle"), [
    ('[{"gpu": "H100", "op": {}}]', "cases[0].op: unknown op {} (allowed: gemm, copy, elementwise, colocate)"),
    ('[{"gpu": "H100", "op": ["gemm"]}]', "cases[0].op: unknown op ['gemm']"),
    ('[{"gpu": "H100", "op": "gemm", "m": 1e308, "n": 4, "k": 4}]',
     "cases[0].m: got 1e+308 (allowed: an integer 1..2147483647)"),
    ('[{"gpu": "H100", "op": "copy", "bytes": 1e308}]', "cases[0].bytes: got 1e+308 (allowed: an integer 1..1125899906842624)"),
    ('[{"gpu": "H100", "op": "elementwise", "bytes": 8, "flops": 1e300}]', "cases[0].flops: got 1e+300"),
    ('[{"gpu": "H100", "op": "colocate", "mode": "mps", "clients": [{"op": {"op": {}}}]}]',
     "cases[0].clients[0].op.op: unknown op {}"),
    ("[" * 100_000, "cases: JSON nested too deeply"),
    ('[' + '{"a":' * 50_000 + '1' + '}' * 50_000 + ']', "cases: JSON nested too deeply"),
])
def test_predict_bad_cases_are_one_line(capsys, monkeypatch, cases, needle):
    err = one_line(*simgpu(capsys, monkeypatch, "predict", stdin=cases))
    assert err.startswith("simgpu predict: error: ") and needle in err, err


def test_predict_names_the_option_that_was_wrong(capsys, monkeypatch, tmp_path):
    err = one_line(*simgpu(capsys, monkeypatch, "predict", "--profile", str(tmp_path / "missing.yaml"), stdin="[]"))
    assert err.startswith("simgpu predict: error: --profile: ")
    err = one_line(*simgpu(capsys, monkeypatch, "predict", "--gpu", "H900", stdin="[]"))
    assert err.startswith("simgpu predict: error: --gpu: unknown GPU or unreadable profile 'H900' (allowed: P100")
    (tmp_path / "c.json").write_bytes(b'[{"gpu": "H\xe900"}]')
    err = one_line(*simgpu(capsys, monkeypatch, "predict", "--cases", str(tmp_path / "c.json")))
    assert err.endswith("c.json: byte 11 is not UTF-8 (allowed: a UTF-8 JSON file)")


def test_usage_errors_are_one_line(capsys, monkeypatch):
    err = one_line(*simgpu(capsys, monkeypatch, "mig", "profiles"))
    assert err == "simgpu mig profiles: error: the following arguments are required: --gpu"


def test_a_reader_that_goes_away_is_not_a_traceback():
    """`simgpu mig profiles --gpu H100 | head -1`: stdout's reader gone before the output is written."""
    read, write = os.pipe()
    os.close(read)  # every write now fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "simgpu.cli", "mig", "profiles", "--gpu", "H100"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


# --- fuzz: the predict JSON surface ----------------------------------------------------------------------
scalar = (st.none() | st.booleans() | st.sampled_from([0, 1, 2, 3, 8, 64, 100, 101, 4096, 4095, -1, 2**31, 2**50 + 1,
                                                        10**400, 0.5, 2.0, 1e308, -0.0])
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6))
anything = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def mostly(good):
    return st.integers(0, 7).flatmap(lambda i: good if i else anything)


size = mostly(st.sampled_from([1, 7, 64, 1000, 4096, 4095, 16384, 2**31 - 1, 2**20, 2**30, 2**50]))
op = st.one_of(
    st.fixed_dictionaries({"op": mostly(st.just("gemm")), "m": size, "n": size, "k": size},
                          optional={"dtype": mostly(st.sampled_from(["fp16", "bf16", "tf32", "fp32", "int8", "fp8",
                                                                     "fp64"]))}),
    st.fixed_dictionaries({"op": mostly(st.just("copy")), "bytes": size}),
    st.fixed_dictionaries({"op": mostly(st.just("elementwise")), "bytes": size},
                          optional={"flops": size, "inputs": mostly(st.sampled_from([1, 2, 3, 4, 5, 0, 2.0]))}))
gpu = mostly(st.sampled_from(["H100", "A100-80GB", "V100", "T4", "H200", "L4", "nope"]))
pct = mostly(st.sampled_from([1, 50, 100, 0, 101, 33.3]))
client = st.fixed_dictionaries({"op": op}, optional={"mps_pct": pct, "batch": mostly(st.sampled_from([1, 4, 0, 10001]))})
case = st.one_of(
    op.flatmap(lambda o: st.fixed_dictionaries({**{k: st.just(v) for k, v in o.items()}, "gpu": gpu},
                                               optional={"mps_pct": pct})),
    st.fixed_dictionaries({"gpu": gpu, "op": mostly(st.just("colocate")),
                           "mode": mostly(st.sampled_from(["timeslice", "mps", "mig"])),
                           "clients": mostly(st.lists(client, min_size=1, max_size=3))}),
    anything)
junk = st.sampled_from([""] * 12 + ["]", "[", ",", "{", "\x00", "NaN", "1e999"])


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(case, max_size=3), st.integers(0, 200), junk)
def test_fuzzed_predict_json_gives_results_or_one_line(cases, cut, noise):
    text = json.dumps(cases)
    text = text[:cut] + noise + text[cut:]
    try:
        results = predict_all(read_cases(text))
    except SimgpuError as err:
        assert "\n" not in str(err) and str(err)
        event(f"refused at {(err.field or '').split('.')[-1]}")
        return
    event("answered")
    json.dumps(results, allow_nan=False)  # what the CLI prints is JSON: no NaN or infinity
    for r in results:
        values = r.get("rates", []) + [v for k, v in r.items() if k != "rates"]
        assert all(math.isfinite(v) and v > 0 for v in values), r
