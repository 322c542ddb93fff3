"""parse_op: validation of ops given as plain dicts (CLI, daemon wire format), fuzzed."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu.errors import SimgpuError
from simgpu.perf import DTYPES, CopyOp, ElementwiseOp, GemmOp, op_to_dict, parse_op

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(["op", "m", "n", "k", "dtype", "bytes", "flops", "inputs", "x"]), json_values,
                      max_size=8))
def test_any_dict_parses_or_raises_a_field_error(d):
    try:
        op = parse_op(d)
    except SimgpuError as err:
        assert err.field
        return
    assert isinstance(op, GemmOp | CopyOp | ElementwiseOp)
    assert parse_op(op_to_dict(op)) == op


@settings(deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 10**6), st.sampled_from(DTYPES))
def test_valid_gemms_round_trip(m, n, k, dtype):
    op = parse_op({"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype.upper()})
    assert op == GemmOp(m, n, k, dtype) and parse_op(op_to_dict(op)) == op


@pytest.mark.parametrize("d, field", [
    ({"op": "gemm", "m": 0, "n": 1, "k": 1}, "m"),
    ({"op": "gemm", "m": 1, "n": -5, "k": 1}, "n"),
    ({"op": "gemm", "m": 1, "n": 1}, "k"),
    ({"op": "gemm", "m": 1.5, "n": 1, "k": 1}, "m"),
    ({"op": "gemm", "m": True, "n": 1, "k": 1}, "m"),
    ({"op": "gemm", "m": 1, "n": 1, "k": 1, "dtype": "fp64"}, "dtype"),
    ({"op": "copy", "bytes": 0}, "bytes"),
    ({"op": "elementwise", "bytes": 8, "flops": -1}, "flops"),
    ({"op": "elementwise", "bytes": 8, "inputs": 0}, "inputs"),
    ({"op": "elementwise", "bytes": 8, "inputs": 9}, "inputs"),
    ({"op": "conv"}, "op"),
    ({}, "op"),
])
def test_bad_ops_name_the_field(d, field):
    with pytest.raises(SimgpuError) as err:
        parse_op(d, "clients[2].op.")
    assert err.value.field == f"clients[2].op.{field}"
    assert err.value.allowed


def test_integral_floats_are_accepted():
    assert parse_op({"op": "copy", "bytes": 1e9}) == CopyOp(10**9)
    assert parse_op({"op": "elementwise", "bytes": 8, "inputs": 2.0}) == ElementwiseOp(8, 0, inputs=2)
