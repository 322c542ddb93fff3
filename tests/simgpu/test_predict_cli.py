"""`simgpu predict`: JSON cases in, JSON results out, in order; bad input -> one line naming the field, exit 2."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.cli import main
from simgpu.perf import ElementwiseOp, op_cost

GEMM = {"gpu": "H100", "op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "fp16"}
COPY = {"gpu": "h100", "op": "copy", "bytes": 2**30}
ADD = {"gpu": "H100", "op": "elementwise", "bytes": 3 * 2**30, "flops": 2**28, "inputs": 2}
COLOCATE = {"gpu": "H100", "op": "colocate", "mode": "mps", "clients": [
    {"op": {"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}, "mps_pct": 50},
    {"op": {"op": "copy", "bytes": 2**30}}]}


def predict(capsys, monkeypatch, cases, *args) -> tuple[int, object, str]:
    text = cases if isinstance(cases, str) else json.dumps(cases)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(["predict", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def test_results_in_order_with_the_documented_keys(capsys, monkeypatch):
    code, res, err = predict(capsys, monkeypatch, [GEMM, COPY, COLOCATE, dict(GEMM, mps_pct=50)])
    assert code == 0 and err == ""
    assert set(res[0]) == {"seconds", "tflops"}
    assert res[0]["tflops"] == pytest.approx(2 * 4096**3 / res[0]["seconds"] / 1e12)
    assert set(res[1]) == {"seconds", "gbps"}
    assert res[1]["gbps"] == pytest.approx(2 * 2**30 / res[1]["seconds"] / 1e9)  # read + write
    assert len(res[2]["rates"]) == 2 and all(r > 0 for r in res[2]["rates"])
    assert res[3]["seconds"] > res[0]["seconds"]  # a 50% MPS client is slower than the whole GPU


def test_elementwise_inputs_is_the_models_input_count(capsys, monkeypatch):
    unary = {k: v for k, v in ADD.items() if k != "inputs"}
    code, res, err = predict(capsys, monkeypatch, [ADD, unary, dict(ADD, inputs=1)])
    assert code == 0 and err == ""
    assert res[0]["seconds"] == op_cost(get_gpu("H100"), ElementwiseOp(3 * 2**30, 2**28, inputs=2)).seconds
    assert res[1] == res[2] and res[0]["gbps"] > res[1]["gbps"]  # absent = 1; two inputs keep more in flight


def test_an_add_takes_more_dram_from_an_mps_neighbour_than_a_unary_op(capsys, monkeypatch):
    gemm = {"op": {"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}, "mps_pct": 50}
    mix = [dict(COLOCATE, clients=[gemm, {"op": {k: v for k, v in ADD.items() if k != "gpu"} | {"inputs": k},
                                          "mps_pct": 50}]) for k in (1, 2)]
    code, res, _ = predict(capsys, monkeypatch, mix)
    assert code == 0 and res[1]["rates"][0] < res[0]["rates"][0]  # the GEMM next to the 2-input add


def test_cases_file_and_default_gpu(tmp_path, capsys):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{k: v for k, v in GEMM.items() if k != "gpu"}]))
    assert main(["predict", "--cases", str(path), "--gpu", "A100-80GB"]) == 0
    a100 = json.loads(capsys.readouterr().out)[0]["tflops"]
    assert main(["predict", "--cases", str(path), "--gpu", "H100"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tflops"] > 1.5 * a100


def test_empty_array_gives_empty_array(capsys, monkeypatch):
    assert predict(capsys, monkeypatch, [])[:2] == (0, [])


@pytest.mark.parametrize("cases, needle", [
    ("[{", "cases: malformed JSON"),
    ('{"op": "gemm"}', "cases: expected a JSON array"),
    ([GEMM, dict(GEMM, gpu="H900")], "cases[1].gpu"),
    ([dict(GEMM, dtype="fp64")], "cases[0].dtype"),
    ([dict(GEMM, gpu="V100", dtype="bf16")], "cases[0].dtype"),
    ([dict(GEMM, op="conv")], "cases[0].op"),
    ([dict(GEMM, m=0)], "cases[0].m"),
    ([COPY, dict(COPY, bytes=-1)], "cases[1].bytes"),
    ([dict(GEMM, mps_pct=0)], "cases[0].mps_pct"),
    ([dict(GEMM, mps_pct=101)], "cases[0].mps_pct"),
    ([dict(GEMM, mk=1)], "cases[0].mk"),
    ([dict(COLOCATE, mode="mig")], "cases[0].mode"),
    ([dict(COLOCATE, clients=[])], "cases[0].clients"),
    ([dict(COLOCATE, clients=[{"op": {"op": "gemm", "m": 1, "n": 1, "k": 0}}])], "cases[0].clients[0].op.k"),
    ([dict(COLOCATE, mode="timeslice")], "cases[0].clients[0].mps_pct"),
    ([dict(COLOCATE, clients=[{"op": {"op": "copy", "bytes": 8}, "mps_pct": 200}])], "cases[0].clients[0].mps_pct"),
    ([dict(ADD, inputs=0)], "cases[0].inputs"),
    ([dict(ADD, inputs=5)], "cases[0].inputs"),
    ([dict(ADD, inputs="2")], "cases[0].inputs"),
    ([dict(ADD, inputs=True)], "cases[0].inputs"),
    ([dict(ADD, inputs=1.5)], "cases[0].inputs"),
    ([dict(COPY, inputs=2)], "cases[0].inputs"),
    ([dict(COLOCATE, clients=[{"op": {"op": "elementwise", "bytes": 8, "inputs": 9}}])],
     "cases[0].clients[0].op.inputs"),
    (["gemm"], "cases[0]"),
    ([{k: v for k, v in GEMM.items() if k != "gpu"}], "cases[0].gpu"),
])
def test_bad_input_is_one_line_naming_the_field(capsys, monkeypatch, cases, needle):
    code, out, err = predict(capsys, monkeypatch, cases)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert "allowed" in err or "malformed" in err


def test_unknown_gpu_lists_the_allowed_names(capsys, monkeypatch):
    _, _, err = predict(capsys, monkeypatch, [dict(GEMM, gpu="H900")])
    assert "H100" in err and "A100-80GB" in err


def test_bad_profile_option(capsys, monkeypatch, tmp_path):
    code, _, err = predict(capsys, monkeypatch, [GEMM], "--profile", str(tmp_path / "missing.yaml"))
    assert code == 2 and err.count("\n") == 1 and "gpu" in err


json_scalars = st.none() | st.booleans() | st.integers(-3, 10**5) | st.floats(allow_nan=True) | st.text(max_size=5)
json_any = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=10)
case_keys = st.sampled_from(["gpu", "op", "m", "n", "k", "dtype", "bytes", "mps_pct", "mode", "clients", "flops",
                             "inputs"])
fields = {"gpu": st.sampled_from(["H100", "V100", "T4", "nope"]) | json_scalars,
          "op": st.sampled_from(["gemm", "copy", "colocate", "elementwise", "x"]) | json_scalars,
          "dtype": st.sampled_from(["fp16", "bf16", "tf32", "int8", "fp8", "fp32", "fp64"]),
          "mode": st.sampled_from(["timeslice", "mps", "mig"]),
          "inputs": st.integers(-1, 6) | json_scalars}
cases = st.lists(st.dictionaries(case_keys, json_any, max_size=8).flatmap(
    lambda d: st.fixed_dictionaries({k: fields.get(k, st.integers(-2, 5000) | json_scalars) for k in d})), max_size=4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(cases, json_any, st.text(max_size=20)))
def test_fuzzed_input_never_tracebacks(capsys, monkeypatch, data):
    text = data if isinstance(data, str) else json.dumps(data)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(["predict"])
    out, err = capsys.readouterr()
    if code == 0:
        assert isinstance(json.loads(out), list) and err == ""
    else:
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("simgpu predict: error: ")
