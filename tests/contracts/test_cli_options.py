"""fgpu_contracts.cli, the option types every fgpu command line uses: a value is finite and in range, or the
error names the value and what is allowed."""
import argparse
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgpu_contracts.cli import check_writable, number, port
from fgpu_contracts.errors import InputError

ratio = number(float, lo=0, hi=10)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=12) | st.floats().map(repr) | st.integers().map(str))
def test_a_number_option_is_finite_and_in_range_or_says_what_is_allowed(text):
    try:
        value = ratio(text)
    except argparse.ArgumentTypeError as err:
        assert str(err) == f"{text!r} is not allowed (allowed: a finite number, 0 <= N <= 10)"
    else:
        assert math.isfinite(value) and 0 <= value <= 10


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "-0.001", "10.0001"])
def test_nan_inf_and_out_of_range_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        ratio(text)


def test_ports_and_the_also_values():
    assert port("0") == 0 and port("65535") == 65535
    for bad in ("65536", "-1", "80.0", "0x50"):
        with pytest.raises(argparse.ArgumentTypeError, match="0 picks any free port"):
            port(bad)
    off_or_big = number(int, lo=10, hi=20, also=(0,))
    assert off_or_big("0") == 0 and off_or_big("15") == 15
    with pytest.raises(argparse.ArgumentTypeError, match=r"allowed: an integer, 0 or 10 <= N <= 20"):
        off_or_big("5")


def test_check_writable_writes_nothing(tmp_path):
    existing = tmp_path / "a.png"
    existing.write_bytes(b"old")
    before = existing.stat().st_mtime_ns
    check_writable(existing, "--plot")
    check_writable(tmp_path / "new" / "deeper" / "b.png", "--plot")
    assert existing.read_bytes() == b"old" and existing.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]
    with pytest.raises(InputError, match="is a directory"):
        check_writable(tmp_path, "--plot")
    existing_file_as_folder = existing / "c.png"
    with pytest.raises(InputError, match=r"^--plot: .* (is not a directory|cannot be written)"):
        check_writable(existing_file_as_folder, "--plot")
