"""The apiserver's JSON through orjson reads and writes as the standard library's does."""
import json
import math

import pytest
from fgpu_operator.kube import wirejson
from hypothesis import given
from hypothesis import strategies as st

#: What apiserver objects hold: strings (any Unicode), int64 numbers, finite floats, booleans, null, nesting.
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(VALUES)
def test_reads_and_writes_what_json_does(value):
    text = json.dumps(value)
    assert wirejson.loads(text) == json.loads(text)
    assert wirejson.loads(text.encode()) == json.loads(text)
    assert json.loads(wirejson.dumps(value)) == value


def test_what_orjson_refuses_is_read_by_json():
    assert math.isnan(wirejson.loads(b'{"x": NaN}')["x"])
    assert wirejson.loads('"\\ud800"') == "\ud800"  # a lone surrogate escape: json reads it, orjson does not


def test_not_json_is_a_value_error():
    with pytest.raises(ValueError):
        wirejson.loads(b"<html>502 Bad Gateway</html>")


def test_written_compact_in_utf8():
    assert wirejson.dumps({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'.encode()
    assert wirejson.dumps({1: 2**70}) == b'{"1":1180591620717411303424}'  # what orjson refuses: json writes it
